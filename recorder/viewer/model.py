"""The view model of one recorded session: what a person looks at, in the order they read it.

Contract: `build_view(session, exchanges, summary=None)` is pure (records in, plain values
out; nothing is read or stored) and never raises on odd records: a call without a request
or a response simply shows less. It runs forge_record.lineage.analyze and returns a `View`:

- `threads` depth first: each root thread, then the threads it spawned or forked, with a
  `depth`; the side thread last. Each thread holds its calls in order and a timeline.
- each call holds only the messages that are NEW relative to the call it continues
  (lineage `Call.parent`; all of them for the first call of a thread), then its reply,
  thinking, tool calls with arguments, tool results (named after the call they answer),
  usage and timing. Leading system/developer messages of a thread's first call are left out
  when they are the system prompt: the fingerprint shows those.
- `fingerprints`: the system prompt and tool schemas once per fingerprint, taken from the
  first call that has it.

Every piece of recorded content ends up in a `Part.text` (plain str); renderers escape it.
Long parts are marked `folded` (forge_record.viewer.parts) so every renderer folds the same
ones.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

import orjson

from forge_record.exporters.tokens import drift
from forge_record.lineage import Call, Lineage, Thread, analyze, tokens_in
from forge_record.lineage.fingerprint import BILLING_PREFIX
from forge_record.lineage.signals import message_hash
from forge_record.records import Block, Exchange, Message, Session, Text, session_to_dict
from forge_record.viewer.parts import Part, part_of, to_json, tool_names

_SYSTEM_ROLES = ("system", "developer")
_FOLDED_ROLES = ("retry", "side")  # calls shown as one line unless opened


@dataclass(kw_only=True, slots=True)
class MessageView:
    role: str
    parts: list[Part]


@dataclass(kw_only=True, slots=True)
class CallView:
    seq: int
    thread: str
    role: str  # lineage role: main, subagent, side, retry
    side_kind: str | None
    retry_of: int | None
    parent: int | None
    segment: int
    fingerprint: str
    kind: str  # exchange kind: model, side
    model: str | None
    status: str
    http_status: int | None
    flags: list[str]
    start: float  # seconds after the session started
    duration: float | None
    ttfb: float | None  # time to first byte
    usage: dict[str, int | None]
    stop_reason: str | None
    error: str | None
    messages: list[MessageView]  # new in this call's request
    reply: list[Part]
    spawns: list[str] = field(default_factory=list)  # threads started by this call's tools
    folded: bool = False  # retries and side calls: one line unless opened
    said: str = ""  # a folded call's reply text on one line


@dataclass(kw_only=True, slots=True)
class Bar:
    """One call on a thread's timeline (seconds after the session started)."""

    seq: int
    start: float
    end: float
    role: str
    status: str


@dataclass(kw_only=True, slots=True)
class ThreadView:
    id: str
    role: str
    depth: int
    parent_thread: str | None
    spawned_by: tuple[int, str] | None
    usage: dict[str, Any]
    calls: list[CallView]
    timeline: list[Bar]
    # (first seq of each segment after the first, the compaction call that began it or None)
    segments: list[tuple[int, int | None]]


@dataclass(kw_only=True, slots=True)
class ToolView:
    name: str
    kind: str
    description: str
    schema: str  # the parameters as pretty JSON


@dataclass(kw_only=True, slots=True)
class FingerprintView:
    id: str
    harness: str | None
    version: str | None
    model: str | None
    system_hash: str | None
    tools_hash: str | None
    betas: list[str]
    calls: int
    system: list[Part]
    tools: list[ToolView]


@dataclass(kw_only=True, slots=True)
class View:
    session: dict[str, Any]
    summary: dict[str, Any]
    usage: dict[str, Any]  # lineage usage: conversation spend, retries, side calls apart
    threads: list[ThreadView]
    fingerprints: list[FingerprintView]
    # engine calls: with tokens, merged, prefix breaks, flags (exporters.tokens.drift)
    engine: dict[str, int] | None = None


def build_view(session: Session, exchanges: list[Exchange],
               summary: dict[str, Any] | None = None) -> View:
    exchanges = sorted(exchanges, key=lambda e: e.seq)
    lineage = analyze(exchanges, session.harness)
    by_seq = {e.seq: e for e in exchanges}
    origin = session.started_at or min((e.started_at for e in exchanges), default=0.0)
    names = tool_names(exchanges)
    spawns = _spawned(lineage)
    calls = {e.seq: _call_view(e, lineage.calls[e.seq], by_seq, origin, names, spawns)
             for e in exchanges}
    return View(
        session=session_to_dict(session) | {"command": shlex.join(session.argv)},
        summary=dict(summary or {}),
        usage=lineage.usage,
        threads=[_thread_view(t, depth, calls) for t, depth in _tree(lineage.threads)],
        fingerprints=_fingerprints(lineage, by_seq, names),
        engine=drift(exchanges, lineage),
    )


# --- threads -----------------------------------------------------------------------------


def _tree(threads: list[Thread]) -> list[tuple[Thread, int]]:
    """Depth first: a thread, then the threads its calls spawned. A fork is a root of its
    own (its `parent_thread` says where it left from), as `forge-record show` prints it."""
    children: dict[str, list[Thread]] = {}
    owner = {seq: t.id for t in threads for seq in t.calls}
    roots = []
    for t in threads:
        parent = owner.get(t.spawned_by[0]) if t.spawned_by else None
        if t.role == "side" or parent is None or parent == t.id:
            roots.append(t)
        else:
            children.setdefault(parent, []).append(t)
    out: list[tuple[Thread, int]] = []
    seen: set[str] = set()

    def visit(t: Thread, depth: int) -> None:
        if t.id in seen:
            return
        seen.add(t.id)
        out.append((t, depth))
        for child in children.get(t.id, []):
            visit(child, depth + 1)

    for t in sorted(roots, key=lambda t: t.role == "side"):
        visit(t, 0)
    for t in threads:  # a thread whose parent was never reached still shows
        visit(t, 0)
    return out


def _thread_view(t: Thread, depth: int, calls: dict[int, CallView]) -> ThreadView:
    mine = [calls[s] for s in t.calls if s in calls]
    bars = [Bar(seq=c.seq, start=c.start, end=c.start + (c.duration or 0.0), role=c.role,
                status=c.status) for c in mine]
    starts = [(first, link) for i, (first, link) in enumerate(t.segments) if i or link]
    return ThreadView(id=t.id, role=t.role, depth=depth, parent_thread=t.parent_thread,
                      spawned_by=t.spawned_by, usage=t.usage, calls=mine, timeline=bars,
                      segments=starts)


def _spawned(lineage: Lineage) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for t in lineage.threads:
        if t.spawned_by:
            out.setdefault(t.spawned_by[0], []).append(t.id)
    return out


# --- calls -------------------------------------------------------------------------------


def _call_view(ex: Exchange, call: Call, by_seq: dict[int, Exchange], origin: float,
               names: dict[str, str], spawns: dict[int, list[str]]) -> CallView:
    response = ex.response
    reply = [part_of(b, "assistant", names) for b in (response.content if response else [])]
    usage = response.usage if response else None
    folded = call.role in _FOLDED_ROLES
    return CallView(
        seq=ex.seq, thread=call.thread, role=call.role, side_kind=call.side_kind,
        retry_of=call.retry_of, parent=call.parent, segment=call.segment,
        fingerprint=call.fingerprint, kind=ex.kind,
        model=(response and response.model) or (ex.request and ex.request.model) or None,
        status=ex.status, http_status=ex.http_status, flags=list(ex.flags),
        start=ex.started_at - origin if ex.started_at else 0.0,
        duration=_seconds(ex.started_at, ex.ended_at),
        ttfb=_seconds(ex.started_at, ex.first_byte_at),
        usage={"input": usage.input_tokens, "output": usage.output_tokens,
               "cache_read": usage.cache_read_tokens, "cache_write": usage.cache_write_tokens,
               "reasoning": usage.reasoning_tokens, "tokens_in": tokens_in(usage)}
        if usage else {},
        stop_reason=response.stop_reason if response else None,
        error=_error(response.error) if response and response.error else None,
        messages=[MessageView(role=m.role, parts=[part_of(b, m.role, names) for b in m.content])
                  for m in new_messages(by_seq.get(call.parent or -1), ex)],
        reply=reply, spawns=spawns.get(ex.seq, []), folded=folded,
        said=_one_line(reply) if folded else "",
    )


def new_messages(parent: Exchange | None, ex: Exchange) -> list[Message]:
    """The request's messages after those it shares with its parent call's request and reply;
    for the first call of a thread all of them but a leading system prompt."""
    request = ex.request
    messages = request.messages if request else []
    if parent is None or parent.request is None:
        if request and not request.system:  # Codex sends its instructions as messages
            while messages and messages[0].role in _SYSTEM_ROLES:
                messages = messages[1:]
        return messages
    seen = list(parent.request.messages)
    if parent.response is not None:
        seen.append(Message(role="assistant", content=parent.response.content))
    shared = 0
    while shared < min(len(seen), len(messages)) and _same(messages[shared], seen[shared]):
        shared += 1
    return messages[shared:] or messages[-1:]


def _same(a: Message, b: Message) -> bool:
    # Equal records are the common case and cost no hashing; the hash also forgives what
    # lineage forgives (empty text blocks a client dropped when it resent the history).
    return a == b or message_hash(a) == message_hash(b)


def _one_line(parts: list[Part]) -> str:
    return " ".join(" ".join(p.text for p in parts if p.kind == "text").split())


def _seconds(start: float, end: float | None) -> float | None:
    return end - start if end and start else None


def _error(error: dict[str, Any]) -> str:
    kind, message = error.get("type"), error.get("message")
    return f"{kind}: {message}" if kind and message else orjson.dumps(error).decode()


# --- fingerprints --------------------------------------------------------------------------


def _fingerprints(lineage: Lineage, by_seq: dict[int, Exchange],
                  names: dict[str, str]) -> list[FingerprintView]:
    first: dict[str, int] = {}
    counts: dict[str, int] = {}
    for seq in sorted(lineage.calls):
        fp = lineage.calls[seq].fingerprint
        first.setdefault(fp, seq)
        counts[fp] = counts.get(fp, 0) + 1
    out = []
    for fp_id, seq in first.items():
        fp, request = lineage.fingerprints[fp_id], by_seq[seq].request
        out.append(FingerprintView(
            id=fp_id, harness=fp.harness, version=fp.version, model=fp.model,
            system_hash=fp.system_hash, tools_hash=fp.tools_hash,
            betas=list(fp.betas), calls=counts[fp_id],
            system=[part_of(b, "system", names) for b in _system_blocks(request)],
            tools=[ToolView(name=t.name, kind=t.kind, description=t.description or "",
                            schema=to_json(t.parameters))
                   for t in (request.tools if request else [])],
        ))
    return out


def _system_blocks(request) -> list[Block]:
    """The system prompt as the fingerprint hashes it: Claude Code's per-call billing block
    left out, Codex's leading developer messages taken when `system` is empty."""
    if request is None:
        return []
    blocks = [b for b in request.system
              if not (isinstance(b, Text) and b.text.lstrip().startswith(BILLING_PREFIX))]
    if not blocks:
        for m in request.messages:
            if m.role not in _SYSTEM_ROLES:
                break
            blocks += m.content
    return blocks
