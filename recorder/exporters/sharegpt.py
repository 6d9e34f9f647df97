"""`sharegpt`: ShareGPT JSONL as LLaMA-Factory's `sharegpt` formatting reads it (and axolotl
with a roles mapping), one line per conversation (thread segment).

A line is `{"conversations": [{"from", "value"}...], "system": str, "tools": str}`. Turns
alternate strictly, as LLaMA-Factory's converter checks: `human` or `observation` on odd
positions, `gpt` or `function_call` on even ones, ending on the model's side. So:
- an assistant turn with tool calls is one `function_call` turn whose value is the JSON of
  `{"name", "arguments"}` (a JSON list of them for parallel calls); text said beside the
  calls has no place there and is dropped and counted ("text beside tool calls");
- an assistant turn without calls is a `gpt` turn with its text;
- a run of user-side turns is one turn: `observation` (the tool outputs, joined by a blank
  line) when it holds tool results, with any user text that came along appended after a
  blank line (counted as "user text merged into observations"); `human` otherwise.
`tools` is a JSON string of `[{"name", "description", "parameters"}]`, as LLaMA-Factory's
tool formatter parses it. Reasoning, images and other blocks are dropped and counted, and so
is a tool result's error flag ("tool error flags", x_extras with --keep-extras). `system` is
the system prompt, with the system/developer messages the history opens with; one later in
the history joins the user turn it is in (counted as "... turns merged into user turns").
A conversation that still cannot alternate (it opens on the model's side) is skipped.
"""

from __future__ import annotations

from typing import Any

from forge_record.exporters.base import Tally, dumps
from forge_record.exporters.convert import (
    EXTRAS_KEY,
    META_KEY,
    Loss,
    arguments_object,
    function_tools,
    join_text,
    meta,
    tool_kinds,
)
from forge_record.exporters.units import Conversation, ConversationExporter
from forge_record.records import Message, Text, ToolCall, ToolResult

USER_SIDE = ("human", "observation")
MODEL_SIDE = ("gpt", "function_call")


class Exporter(ConversationExporter):
    skip_reason = "conversations that cannot alternate"

    def to_line(self, conversation: Conversation) -> dict[str, Any] | None:
        return to_line(conversation, self.options.keep_extras, self.tally)


def to_line(conversation: Conversation, keep: bool, tally: Tally) -> dict[str, Any] | None:
    loss = Loss(tally, keep)
    system = join_text(conversation.system, loss)
    kinds = tool_kinds(conversation.tools)
    turns: list[dict[str, Any]] = []
    for run in _runs(conversation.messages):
        turn = _model_turn(run, kinds, keep, tally) if run[0].role == "assistant" \
            else _user_turn(run, keep, tally)
        if turn:
            turns.append(turn)
    if not alternates(turns):
        return None
    line: dict[str, Any] = {"conversations": turns, "system": system}
    tools = function_tools(conversation.tools, tally)
    line["tools"] = dumps([_tool(t) for t in tools]) if tools else ""
    if keep:
        line[META_KEY] = meta(conversation)
        if loss.kept:
            line[EXTRAS_KEY] = loss.kept
    return line


def alternates(turns: list[dict[str, Any]]) -> bool:
    """LLaMA-Factory's rule: user side on odd positions, model side on even, an even count."""
    sides = (USER_SIDE, MODEL_SIDE)
    return bool(turns) and len(turns) % 2 == 0 and all(
        t["from"] in sides[i % 2] for i, t in enumerate(turns))


def _runs(messages: list[Message]) -> list[list[Message]]:
    """Consecutive messages of one side (assistant, or everything else) grouped."""
    runs: list[list[Message]] = []
    for message in messages:
        if runs and (runs[-1][0].role == "assistant") == (message.role == "assistant"):
            runs[-1].append(message)
        else:
            runs.append([message])
    return runs


def _model_turn(run: list[Message], kinds, keep: bool, tally: Tally) -> dict[str, Any] | None:
    loss = Loss(tally, keep)
    blocks = [b for m in run for b in m.content]
    calls = [b for b in blocks if isinstance(b, ToolCall) and not b.server]
    texts = [b.text for b in blocks if isinstance(b, Text) and b.text.strip()]
    for block in blocks:
        if not isinstance(block, Text | ToolCall) or (isinstance(block, ToolCall) and block.server):
            loss.drop(block)
    if calls:
        if texts:
            tally.dropped["text beside tool calls"] += len(texts)
        values = [{"name": c.name, "arguments": arguments_object(c, kinds, tally)} for c in calls]
        value = dumps(values[0] if len(values) == 1 else values)
        return loss.attach({"from": "function_call", "value": value})
    if not texts:
        return None
    return loss.attach({"from": "gpt", "value": "".join(texts)})


def _user_turn(run: list[Message], keep: bool, tally: Tally) -> dict[str, Any] | None:
    loss = Loss(tally, keep)
    results = [b for m in run for b in m.content if isinstance(b, ToolResult)]
    rest = [b for m in run for b in m.content if not isinstance(b, ToolResult)]
    text = join_text(rest, loss)
    for m in run:  # ShareGPT has one system prompt; a system turn later on is user text
        if m.role in ("system", "developer") and m.content:
            tally.converted[f"{m.role} turns merged into user turns"] += 1
    for r in results:
        if r.is_error:  # an observation has no field for it
            loss.lose("tool error flags", {"type": "tool_result", "is_error": True})
    if results:
        outputs = [join_text(r.content, loss, sep="\n") for r in results]
        if text:
            tally.converted["user text merged into observations"] += 1
            outputs.append(text)
        return loss.attach({"from": "observation", "value": "\n\n".join(outputs)})
    if not text:
        return None
    return loss.attach({"from": "human", "value": text})


def _tool(tool) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description or "",
            "parameters": tool.parameters or {"type": "object", "properties": {}}}
