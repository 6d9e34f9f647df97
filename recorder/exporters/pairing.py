"""Tool calls and their results, made consistent; and which assistant turns are the model's.

Every chat format a trainer reads wants each tool call answered by a result with its id, and
no result without a call (OpenAI rejects the file otherwise; Anthropic rejects the request).
A recorded history can break that: an agent that was interrupted mid-call, a context cut by
compaction just after a call, a server tool the API ran itself. `pair_tool_results` repairs
the normalized messages before any format sees them: a client tool call with no result before
the next assistant turn is dropped ("unanswered tool calls"), a result whose call is not in
the turn before is dropped ("orphan tool results"), and a message left empty goes. The last
message is the training target and keeps its calls (OpenAI's own examples end on one).

`message_key` names an assistant turn by what it says and calls (not its reasoning, which
harnesses may strip from history); `trained_keys` are the keys of what the session's model
calls actually answered. An assistant turn in the history whose key is not among them was written
by someone else (a harness that injected or rewrote it) and gets weight 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from forge_record.exporters.base import Tally
from forge_record.records import Block, Exchange, Message, Text, ToolCall, ToolResult

Key = tuple[Any, ...]


def message_key(blocks: Iterable[Block]) -> Key:
    """What a turn says (its text, however it was split into blocks) and what it calls."""
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    for b in blocks:
        if isinstance(b, Text):
            texts.append(b.text)
        elif isinstance(b, ToolCall):
            calls.append((b.name, canonical_arguments(b)))
    text = "".join(texts).strip()
    return (text, tuple(calls)) if text or calls else ()


def canonical_arguments(call: ToolCall) -> str:
    if call.arguments is None:
        return call.arguments_raw
    return orjson.dumps(call.arguments, option=orjson.OPT_SORT_KEYS).decode()


def trained_keys(exchanges: Iterable[Exchange]) -> set[Key]:
    return {message_key(ex.response.content) for ex in exchanges if ex.response}


def _is_client_call(message: Message, block: Block) -> bool:
    return message.role == "assistant" and isinstance(block, ToolCall) and not block.server


def _results(message: Message) -> list[ToolResult]:
    if message.role == "assistant":  # server tool results ride in the assistant turn
        return []
    return [b for b in message.content if isinstance(b, ToolResult)]


def pair_tool_results(messages: list[Message], tally: Tally) -> list[Message]:
    answered = _answered_ids(messages)
    out: list[Message] = []
    pending: set[str] = set()
    last = len(messages) - 1
    for i, message in enumerate(messages):
        keep: list[Block] = []
        for block in message.content:
            if _is_client_call(message, block) and i != last and block.id not in answered[i]:
                tally.dropped["unanswered tool calls"] += 1
                continue
            if isinstance(block, ToolResult) and message.role != "assistant":
                if block.tool_call_id not in pending:
                    tally.dropped["orphan tool results"] += 1
                    continue
                pending.discard(block.tool_call_id)
            keep.append(block)
        if message.role == "assistant":
            pending = {b.id for b in keep if isinstance(b, ToolCall) and not b.server}
        if keep:
            out.append(Message(role=message.role, content=keep))
    return out


def _answered_ids(messages: list[Message]) -> dict[int, set[str]]:
    """For each assistant message, the result ids that follow it before the next one."""
    answered: dict[int, set[str]] = {}
    current: set[str] | None = None
    for i, message in enumerate(messages):
        if message.role == "assistant":
            current = answered.setdefault(i, set())
        elif current is not None:
            current.update(r.tool_call_id for r in _results(message))
    for i in range(len(messages)):
        answered.setdefault(i, set())
    return answered
