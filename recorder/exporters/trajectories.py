"""`trajectories`: one JSON line per thread, its calls as ordered steps, for an RL trainer.

A step is one model call: `context` (what the model was shown that the trajectory has not
already shown), `action` (what it answered, as record blocks), `observation` (the results
of the action's tool calls, taken from the next call's request), and `loss_mask` (1 when the
action is the model's own complete answer, 0 for an error, a cut-off stream or an empty
reply). The context is a delta: the first step, a step in a new segment (compaction replaced
the context) and a step whose history no longer extends the previous one carry the whole
context (`"reset": true`, with system and tools); any other step carries only the messages
that came after the previous action, without the tool results already given as that action's
observation. So the full conversation reads back as: context, action, observation, context...
A step that resends the previous step's request (a retry after an error or a cut-off stream)
has an empty context with `"retry_of": <that step's seq>`: it replaces that step, whose
action is then not part of the history.
The line ends with the thread's `reward` (the session label's, null unless labelled).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import IO, Any

from forge_record.exporters.base import JsonLines, Options, Tally
from forge_record.exporters.calls import USAGE_FIELDS
from forge_record.exporters.units import SessionData, ThreadInfo, model_of, threads
from forge_record.records import (
    COMPLETE,
    Block,
    Exchange,
    Message,
    Request,
    ToolCall,
    ToolResult,
    block_to_dict,
)


class Exporter:
    def __init__(self, out: IO[bytes], options: Options, tally: Tally) -> None:
        self.lines = JsonLines(out)
        self.options = options
        self.tally = tally

    def write_session(self, data: SessionData) -> None:
        for thread, kept in threads(data, self.options, self.tally):
            self.lines.write(trajectory(data, thread, kept))
            self.tally.exported += 1

    def close(self) -> None:
        pass


def trajectory(data: SessionData, thread: ThreadInfo, kept: list[Exchange]) -> dict[str, Any]:
    steps = []
    previous: Exchange | None = None
    for ex in kept:
        step = _step(data, ex, previous, steps[-1] if steps else None)
        steps.append(step)
        previous = ex if ex.request else previous
    first = kept[0]
    return {
        "session_id": data.session.id,
        "thread_id": thread.id,
        "role": thread.role,
        "parent_thread": thread.parent_thread,
        "spawned_by": {"seq": thread.spawned_by[0], "tool_call_id": thread.spawned_by[1]}
        if thread.spawned_by else None,
        "harness": data.session.harness,
        "harness_version": data.session.harness_version,
        "model": model_of(first),
        "fingerprint": data.calls[first.seq].fingerprint,
        "steps": steps,
        "usage": {f: sum(s["usage"][f] or 0 for s in steps) for f in USAGE_FIELDS},
        "reward": data.reward,
    }


def _step(data, ex: Exchange, previous: Exchange | None, before: dict | None) -> dict[str, Any]:
    segment = data.calls[ex.seq].segment
    context, observation = _context(ex.request, previous, before, segment)
    if before is not None and observation:
        before["observation"] = [block_to_dict(b) for b in observation]
    action = ex.response.content if ex.response else []
    usage = ex.response.usage if ex.response else None
    return {
        "seq": ex.seq,
        "segment": segment,
        "context": context,
        "action": [block_to_dict(b) for b in action],
        "observation": [],
        "loss_mask": int(ex.status == COMPLETE and bool(action)),
        "status": ex.status,
        "stop_reason": ex.response.stop_reason if ex.response else None,
        "usage": {f: getattr(usage, f) if usage else None for f in USAGE_FIELDS},
    }


def _context(request: Request | None, previous: Exchange | None, before: dict | None,
             segment: int) -> tuple[dict[str, Any], list[Block]]:
    """(this step's context, the previous action's observation)."""
    if request is None:
        return {"reset": False, "messages": []}, []
    shown = previous.request.messages if previous and previous.request else None
    if shown is not None and before["segment"] == segment and request.messages == shown:
        return {"reset": False, "messages": [], "retry_of": before["seq"]}, []
    extends = (
        shown is not None and before is not None and before["segment"] == segment
        and len(request.messages) > len(shown) and request.messages[: len(shown)] == shown
    )
    if not extends:
        return _whole(request), []
    new = request.messages[len(shown) + 1:]  # past the echo of the previous action
    called = {b.id for b in previous.response.content if isinstance(b, ToolCall)} \
        if previous.response else set()
    observation = [b for m in new for b in m.content
                   if isinstance(b, ToolResult) and b.tool_call_id in called]
    rest = [Message(role=m.role, content=[b for b in m.content if not _is(b, observation)])
            for m in new]
    return {"reset": False, "messages": [_message(m) for m in rest if m.content]}, observation


def _is(block: Block, chosen: list[Block]) -> bool:
    return any(block is c for c in chosen)


def _whole(request: Request) -> dict[str, Any]:
    return {
        "reset": True,
        "system": [block_to_dict(b) for b in request.system],
        "tools": [asdict(t) for t in request.tools],
        "messages": [_message(m) for m in request.messages],
    }


def _message(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": [block_to_dict(b) for b in message.content]}
