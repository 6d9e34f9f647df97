"""A session as the exporters see it, and the units they cut from it.

`load_session` reads one session through the Store API (exchanges streamed in seq order, held
for this one session only, because lineage needs them all) and asks `forge_record.lineage`
which thread, segment and role each call has. The exporters then take one of three units:

- a call (`calls`): one exchange, with its lineage;
- a conversation (`conversations`): one thread segment as a chat, for the SFT formats. The
  agent resends its whole history on every call, so the segment's last usable call holds the
  conversation: its request messages, then its response as the final assistant message. A
  segment ends where the context was replaced (compaction), so each segment is its own chat.
  Side calls are unrelated one-off requests: each one is a chat of its own. The system or
  developer messages a history opens with are the chat's system prompt; a conversation
  whose turns all open another of the session (a thread lineage could not join to it) is
  left out, so each turn is in one line only; an assistant turn is trained on only when a
  call of its own segment answered it;
- a thread (`threads`): every call of one thread, in order, for trajectories.

Which units are wanted is decided by `Options` (main thread only or subagents too, side
calls, complete calls only, a model glob); every unit left out is counted by reason.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from forge_record import lineage
from forge_record.exporters.base import JsonLines, Options, Tally
from forge_record.exporters.pairing import message_key, pair_tool_results, trained_keys
from forge_record.lineage.signals import message_hash
from forge_record.records import COMPLETE, Block, Exchange, Message, Session, Tool


@dataclass
class CallInfo:
    seq: int
    thread: str
    thread_role: str  # "main", "subagent" or "side": the role of the call's thread
    role: str  # the call's own role: "main", "subagent", "side" or "retry"
    segment: int = 0
    parent: int | None = None
    retry_of: int | None = None
    fingerprint_id: str | None = None
    fingerprint: dict[str, Any] | None = None


@dataclass
class ThreadInfo:
    id: str
    role: str
    parent_thread: str | None = None
    spawned_by: tuple[int, str] | None = None  # (seq, tool_call_id) of the call that spawned it
    seqs: list[int] = field(default_factory=list)


@dataclass
class SessionData:
    session: Session
    label: dict[str, Any] | None
    exchanges: dict[int, Exchange]  # by seq, in seq order
    calls: dict[int, CallInfo]
    threads: list[ThreadInfo]

    @property
    def reward(self) -> float | None:
        return self.label.get("reward") if self.label else None


@dataclass
class Conversation:
    data: SessionData
    thread: ThreadInfo
    segment: int
    final: Exchange
    system: list[Block]
    tools: list[Tool]
    messages: list[Message]  # the final request's messages, then the response
    trained: list[bool]  # per message: an assistant turn a call of the session answered


def load_session(store: Any, session_id: str, fingerprints: bool = True) -> SessionData:
    """The session with its lineage; without `fingerprints`, its calls name none (for formats
    that do not write them: lineage makes them at a cost)."""
    session = store.get_session(session_id)
    exchanges = list(store.iter_exchanges(session_id))
    found = lineage.analyze(exchanges, harness=session.harness, fingerprints=fingerprints)
    threads = {t.id: _thread(t) for t in found.threads}
    # A session's calls name a few fingerprints: each made a dict once, shared by its calls.
    printed = {i: _as_dict(f) for i, f in found.fingerprints.items()}
    calls = {ex.seq: _call(ex, found, threads, printed) for ex in exchanges}
    placed = {s for t in threads.values() for s in t.seqs}
    for info in calls.values():
        if info.thread not in threads:  # a call lineage did not place gets a thread of its own
            threads[info.thread] = ThreadInfo(info.thread, info.thread_role)
        if info.seq not in placed:
            threads[info.thread].seqs.append(info.seq)
    return SessionData(
        session=session,
        label=store.get_label(session_id),
        exchanges={ex.seq: ex for ex in exchanges},
        calls=calls,
        threads=list(threads.values()),
    )


def _thread(t: Any) -> ThreadInfo:
    spawned = tuple(t.spawned_by) if t.spawned_by else None
    return ThreadInfo(t.id, t.role, t.parent_thread, spawned, sorted(t.calls))


def _call(ex: Exchange, found: Any, threads: dict[str, ThreadInfo],
          printed: dict[str, dict[str, Any] | None]) -> CallInfo:
    c = found.calls.get(ex.seq)
    if c is None:
        role = "main" if ex.kind == "model" else "side"
        return CallInfo(ex.seq, f"{role}-unplaced", role, role)
    thread = threads.get(c.thread)
    return CallInfo(
        seq=ex.seq,
        thread=str(c.thread),
        thread_role=thread.role if thread else c.role,
        role=c.role,
        segment=c.segment or 0,
        parent=c.parent,
        retry_of=c.retry_of,
        fingerprint_id=str(c.fingerprint) if c.fingerprint else None,
        fingerprint=printed.get(c.fingerprint) if c.fingerprint else None,
    )


def _as_dict(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return dict(value) if isinstance(value, dict) else dict(vars(value))


# --- which units are wanted --------------------------------------------------------------


def thread_skip(thread: ThreadInfo, options: Options) -> str | None:
    if thread.role == "side":
        return None if options.include_side_calls else "side calls"
    if thread.role != "main" and options.thread == "main":
        return "subagent calls"
    return None


def call_skip(ex: Exchange, info: CallInfo, options: Options) -> str | None:
    """Why this call is left out, or None to keep it."""
    side = ex.kind != "model" or info.thread_role == "side" or info.role == "side"
    if side and not options.include_side_calls:
        return "side calls"
    if not side and info.thread_role != "main" and options.thread == "main":
        return "subagent calls"
    if options.only_complete and ex.status != COMPLETE:
        return "not complete"
    if options.model and not fnmatch.fnmatchcase(model_of(ex) or "", options.model):
        return "other model"
    return None


def model_of(ex: Exchange) -> str | None:
    return (ex.response and ex.response.model) or (ex.request and ex.request.model)


# --- units -------------------------------------------------------------------------------


def calls(data: SessionData, options: Options, tally: Tally) -> Iterator[tuple[Exchange, CallInfo]]:
    for seq, ex in data.exchanges.items():
        info = data.calls[seq]
        if reason := call_skip(ex, info, options):
            tally.skipped[reason] += 1
            continue
        yield ex, info


def threads(
    data: SessionData, options: Options, tally: Tally
) -> Iterator[tuple[ThreadInfo, list[Exchange]]]:
    """Each wanted thread with its kept calls, in seq order."""
    for thread in data.threads:
        if reason := thread_skip(thread, options):
            tally.skipped[f"{reason} (threads)"] += 1
            continue
        kept = [data.exchanges[s] for s in thread.seqs
                if call_skip(data.exchanges[s], data.calls[s], options) is None]
        if not kept:
            tally.skipped["threads with no call kept"] += 1
            continue
        yield thread, kept


def conversations(data: SessionData, options: Options, tally: Tally) -> Iterator[Conversation]:
    """One conversation per wanted thread segment; see the module docstring. A conversation
    whose turns all open another one of the session is that one's beginning, not a line of
    its own."""
    made = list(_segment_conversations(data, options, tally))
    keys = [_turn_keys(c) for c in made]
    for i, conversation in enumerate(made):
        if any(j != i and _opens(keys[i], keys[j], i < j) for j in range(len(made))):
            tally.skipped["conversations contained in a longer one"] += 1
            continue
        yield conversation


def _segment_conversations(data: SessionData, options: Options, tally: Tally
                           ) -> Iterator[Conversation]:
    for thread, kept in threads(data, options, tally):
        for segment, calls_in in _chats(data, thread, kept):
            final = _final_call(calls_in)
            if final is None:
                tally.skipped["segments with no response"] += 1
                continue
            # What this segment's own calls answered: a turn the harness wrote or copied in
            # (after a compaction, the last turn of the segment before) matches none of them.
            keys = trained_keys(data.exchanges[s] for s in thread.seqs
                                if data.calls[s].segment == segment
                                and data.exchanges[s].status == COMPLETE)
            conversation = _conversation(data, thread, segment, final, keys, tally)
            if not any(conversation.trained):
                tally.skipped["segments with nothing to train on"] += 1
                continue
            yield conversation


def _turn_keys(conversation: Conversation) -> list[str]:
    """The turns as lineage tells them apart (what the model saw, tool ids and reasoning
    aside), the system prompt first."""
    system = Message(role="system", content=conversation.system)
    return [message_hash(m) for m in (system, *conversation.messages)]


def _opens(short: list[str], long: list[str], earlier: bool) -> bool:
    """Whether `short` is the beginning of `long` (for two equal ones, the later is kept)."""
    if len(short) > len(long) or (len(short) == len(long) and not earlier):
        return False
    return long[:len(short)] == short


def _chats(data: SessionData, thread: ThreadInfo, kept: list[Exchange]):
    """(segment, calls) per chat: a segment's calls; but side calls (titles, summaries,
    token counts) are unrelated one-off requests, so each is a chat of its own."""
    if thread.role == "side":
        return [(data.calls[ex.seq].segment, [ex]) for ex in kept]
    segments = sorted({data.calls[ex.seq].segment for ex in kept})
    return [(s, [ex for ex in kept if data.calls[ex.seq].segment == s]) for s in segments]


def _final_call(calls_in: list[Exchange]) -> Exchange | None:
    """The segment's last call with a completed response, else its last with any content."""
    answered = [ex for ex in calls_in if ex.request and ex.response and ex.response.content]
    complete = [ex for ex in answered if ex.status == COMPLETE]
    return (complete or answered or [None])[-1]


def _conversation(data, thread, segment, final: Exchange, keys, tally: Tally) -> Conversation:
    reply = Message(role="assistant", content=list(final.response.content))
    system, history = _lift_system(final.request.system, final.request.messages)
    messages = pair_tool_results([*history, reply], tally)
    trained = [m.role == "assistant" and message_key(m.content) in keys for m in messages]
    trained[-1] = final.status == COMPLETE and bool(message_key(messages[-1].content))
    if any(trained):  # a chat ends on what the model said: cut what follows its last turn
        end = max(i for i, t in enumerate(trained) if t) + 1
        messages, trained = messages[:end], trained[:end]
    return Conversation(data, thread, segment, final, system,
                        list(final.request.tools), messages, trained)


def _lift_system(system: list[Block], messages: list[Message]
                 ) -> tuple[list[Block], list[Message]]:
    """The system prompt, with the system/developer messages the history opens with: a
    Responses request may carry its prompt as an `input` item with role `system` (pi) or
    `developer` (Codex's instructions), and every format has a place for a system prompt."""
    lead = 0
    while lead < len(messages) and messages[lead].role in ("system", "developer"):
        lead += 1
    if not lead:
        return list(system), list(messages)
    return [*system, *(b for m in messages[:lead] for b in m.content)], list(messages[lead:])


class ConversationExporter:
    """One JSON line per conversation (openai, anthropic, sharegpt). A format says how a
    conversation becomes its line (`to_line`), and, when one cannot become a line, why it
    is skipped (`skip_reason`)."""

    fingerprints = False  # its lines name no harness fingerprint: lineage need not make them
    skip_reason = "conversations the format cannot hold"

    def __init__(self, out: IO[bytes], options: Options, tally: Tally) -> None:
        self.lines = JsonLines(out)
        self.options = options
        self.tally = tally

    def to_line(self, conversation: Conversation) -> dict[str, Any] | None:
        raise NotImplementedError

    def write_session(self, data: SessionData) -> None:
        for conversation in conversations(data, self.options, self.tally):
            line = self.to_line(conversation)
            if line is None:
                self.tally.skipped[self.skip_reason] += 1
                continue
            self.lines.write(line)
            self.tally.exported += 1

    def close(self) -> None:
        pass
