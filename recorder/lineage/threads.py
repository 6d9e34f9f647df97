"""Lineage: the threads inside one recorded session, derived at read time from its exchanges.

Contract: `analyze(exchanges, harness)` is pure (records in, values out; nothing is stored)
and deterministic. Every exchange gets a `Call`: its thread, the call it continues (`parent`),
a role ("main", "subagent", "side", "retry"), for side calls a `side_kind`, for retries the
first attempt (`retry_of`), its compaction `segment` within the thread and its harness
`fingerprint` (forge_record.lineage.fingerprint; with `fingerprints=False` calls name none and the
lineage holds none: placing calls does not use them, and making them is a third of the work
on Claude Code sessions). How a call is placed, first rule that applies:

1. retry: the same request (path + normalized body, Claude Code's per-request `cch=` left
   out) as an earlier call, sent with `x-stainless-retry-count` > 0 or after that attempt
   failed. It joins the first attempt's thread; one logical call, the retry kept and marked.
2. side: what the exchange shows by itself (signals.side_kind_of): count_tokens,
   Codex warm-ups and remote compaction, Claude Code's compaction request, title and summary
   requests. Side calls form the thread "side"; a compaction call's parent is the call whose
   history it sums up.
3. subagent: the headers name an agent (Claude Code's `x-claude-code-agent-id`, Codex
   `thread-id`) or the request says so (`cc_is_subagent=true`): one thread per agent id,
   "subagent-<id>". It is linked to the parent's tool call that spawned it by the
   `agentId: <id>` in that tool call's result (Claude Code), else by the spawning call's
   `prompt` argument equal to the subagent's first user text, else by Codex's
   `x-codex-parent-thread-id`.
4. continuation: the request's messages extend an earlier call's messages plus its reply
   (prefix match on content hashes, signals.message_hash), in a main thread of the
   same harness session id. It continues that thread, or, if that thread already went on
   from there with another answered call, starts a fork: a new thread whose parent is the
   call it extends.
5. after compaction: a request that opens with Claude Code's "This session is being
   continued…" and continues nothing starts a new segment of the thread the latest
   compaction call summed up; `Thread.segments` links it to that compaction call.
6. a call whose request did not decode joins the latest main thread of its harness session
   (the headers are all there is to go on).
7. otherwise a new root: "main" for the first, "main-2", … after; but a call without tools
   from a client whose headers name a tool-using harness (Claude Code, Codex, …) that
   continues nothing is a side call of kind "other" (the session's shim name is not enough:
   any SDK script can run under `--harness claude-code`). A root that shares its first
   messages with another thread (a history rewrite) names that thread as `parent_thread`.

Usage is counted once per API call. A thread's and the session's token fields sum its
conversation calls (main, subagent and their retries: a retry that answered is where the
tokens went); `retry` repeats the retries' share; side calls are summed apart under `side`
(count_tokens answers measure a prompt and are not spend, so they count as calls only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from forge_record.identity import chain_hash
from forge_record.lineage.fingerprint import Fingerprint, client_of, fingerprint_of
from forge_record.lineage.signals import HashMemo, Signals, shared_prefix, signals_of, stream_key
from forge_record.lineage.types import (
    MAIN,
    RETRY,
    SIDE,
    SIDE_THREAD,
    SUBAGENT,
    Call,
    Lineage,
    Thread,
    to_dict,
)
from forge_record.lineage.usage import usage_of
from forge_record.records import Exchange

__all__ = ["Call", "Fingerprint", "Lineage", "Thread", "analyze", "to_dict"]

# Harnesses whose conversation calls always offer tools (a call without any is a side call).
TOOL_HARNESSES = {"claude-code", "codex", "gemini-cli", "qwen-code", "opencode", "goose"}


def analyze(exchanges: Iterable[Exchange], harness: str | None = None, *,
            fingerprints: bool = True) -> Lineage:
    """The lineage of one session's exchanges; `harness` is the session's shim name, used
    for fingerprints whose request headers do not name their client."""
    fold = _Fold(harness, fingerprints)
    for ex in sorted(exchanges, key=lambda e: e.seq):
        fold.feed(ex)
    return fold.finish()


@dataclass
class _ThreadState:
    thread: Thread
    session_key: str | None
    agent_key: str | None = None


class _Fold:
    """Places calls one at a time, in seq order (see the module docstring for the rules)."""

    def __init__(self, harness: str | None, fingerprints: bool = True,
                 memo: HashMemo | None = None) -> None:
        self.harness = harness
        self.with_fingerprints = fingerprints
        self.calls: dict[int, Call] = {}
        self.signals: dict[int, Signals] = {}
        self.threads: dict[str, _ThreadState] = {}
        self.fingerprints: dict[str, Fingerprint] = {}
        self.ends: dict[str, list[int]] = {}  # chain hash of messages + reply -> seqs
        # (newest non-system request message, reply) -> seqs: a call's latest turn, found
        # wherever a later request carries it
        self.turns: dict[tuple[str, str], list[int]] = {}
        self.turn_of: dict[int, str] = {}  # seq -> that message's hash
        self.nodes: dict[str, int] = {}  # chain hash of any message prefix -> latest seq
        self.attempts: dict[str, list[int]] = {}  # request hash -> its attempts
        self.tool_calls: dict[str, int] = {}  # tool call id -> seq whose reply made it
        self.compactions: list[int] = []
        # per header stream: the last request's messages, their hashes and chain hashes
        self.recent: dict[tuple, tuple[list, tuple[str, ...], list[str]]] = {}
        # every message hashed once, however often it is resent (of those `memo` keeps)
        self.hashes: HashMemo = {} if memo is None else memo

    # --- placing one call --------------------------------------------------------------

    def feed(self, ex: Exchange) -> None:
        key = stream_key(ex)
        messages, hashes, chains = self.recent.get(key, ([], (), []))
        sig = signals_of(ex, (messages, hashes), self.hashes)
        chain = _chains(sig.messages, hashes, chains)
        if ex.request is not None:
            self.recent[key] = (ex.request.messages, sig.messages, chain)
            self._note_turn(ex.request.messages, sig)
        self.signals[sig.seq] = sig
        client = client_of(ex.request_headers)[0]
        call = (self._retry(sig) or self._side(sig, chain) or self._subagent(sig, chain)
                or self._conversation(sig, chain, client))
        if self.with_fingerprints:
            fp = fingerprint_of(ex, self.harness)
            self.fingerprints.setdefault(fp.id, fp)
            call.fingerprint = fp.id
        self.calls[sig.seq] = call
        self._thread(call.thread).calls.append(sig.seq)
        if call.thread != SIDE_THREAD:
            self._index(sig, chain)

    def _retry(self, sig: Signals) -> Call | None:
        if sig.request_hash is None:
            return None
        attempts = self.attempts.get(sig.request_hash)
        if attempts is None or (sig.retry_count <= 0 and self.signals[attempts[-1]].complete):
            # A first attempt, or the same request again after an answer: a new call
            self.attempts[sig.request_hash] = [sig.seq]
            return None
        attempts.append(sig.seq)
        first = self.calls[attempts[0]]
        return Call(seq=sig.seq, thread=first.thread, parent=first.parent, role=RETRY,
                    side_kind=first.side_kind, retry_of=first.seq, segment=first.segment)

    def _side(self, sig: Signals, chain: list[str]) -> Call | None:
        if sig.side_kind is None:
            return None
        self._side_thread()
        parent = None
        if sig.side_kind == "compaction":
            self.compactions.append(sig.seq)
            parent = self._shared_prefix(chain, sig)
        return Call(seq=sig.seq, thread=SIDE_THREAD, parent=parent, role=SIDE,
                    side_kind=sig.side_kind)

    def _subagent(self, sig: Signals, chain: list[str]) -> Call | None:
        if not (sig.agent_key or sig.subagent):
            return None
        key = sig.agent_key or self._anonymous_agent(sig, chain)
        state = next((s for s in self.threads.values() if s.agent_key == key), None)
        if state is None:
            n = sum(s.thread.role == SUBAGENT for s in self.threads.values()) + 1
            state = self._new_thread(f"subagent-{sig.agent_key or n}", SUBAGENT, sig)
            state.agent_key = key
            state.thread.parent_thread = self._codex_parent(sig)
        parent = self._extended(chain, sig, lambda s: s is state)
        if parent is None and state.thread.calls:
            parent = state.thread.calls[-1]
        return self._call_in(state, sig, parent)

    def _conversation(self, sig: Signals, chain: list[str], client: str | None) -> Call:
        in_main = lambda s: s.thread.role == MAIN and _same_session(s, sig)  # noqa: E731
        if not sig.decoded:  # no content to match: the headers' latest main thread keeps it
            state = next((s for s in reversed(self.threads.values()) if in_main(s)), None)
            if state is not None:
                return self._call_in(state, sig, state.thread.calls[-1])
        parent = self._extended(chain, sig, in_main) or self._rebuilt(sig, in_main)
        if parent is not None:
            state = self.threads[self.calls[parent].thread]
            if self._goes_on_from(state, parent):
                return self._call_in(state, sig, parent)
            fork = self._new_thread(self._main_id(), MAIN, sig)
            fork.thread.parent_thread = state.thread.id
            return self._call_in(fork, sig, parent)
        if sig.continues_compacted:
            return self._new_segment(sig)
        if sig.decoded and not sig.has_tools and client in TOOL_HARNESSES:
            self._side_thread()
            return Call(seq=sig.seq, thread=SIDE_THREAD, role=SIDE, side_kind="other")
        root = self._new_thread(self._main_id(), MAIN, sig)
        rewritten = self._shared_prefix(chain, sig)  # a history rewrite of another thread
        if rewritten is not None:
            root.thread.parent_thread = self.calls[rewritten].thread
        return self._call_in(root, sig, None)

    def _new_segment(self, sig: Signals) -> Call:
        compaction = next((c for c in reversed(self.compactions)
                           if self.calls[c].parent is not None), None)
        if compaction is not None:
            state = self.threads[self.calls[self.calls[compaction].parent].thread]
        else:  # compacted before recording began: a root whose first segment links nowhere
            state = self._new_thread(self._main_id(), MAIN, sig)
        state.thread.segments.append((sig.seq, compaction))
        tip = state.thread.calls[-1] if state.thread.calls else None
        return self._call_in(state, sig, tip)

    # --- content matching --------------------------------------------------------------

    def _index(self, sig: Signals, chain: list[str]) -> None:
        self.nodes.update(dict.fromkeys(chain, sig.seq))
        end = chain_hash(chain[-1] if chain else None, sig.reply) if sig.reply else (
            chain[-1] if chain else None)
        if end is not None:
            self.ends.setdefault(end, []).append(sig.seq)
            self.nodes[end] = sig.seq
        turn = self.turn_of.get(sig.seq)
        if turn is not None and sig.reply:
            self.turns.setdefault((turn, sig.reply), []).append(sig.seq)

    def _note_turn(self, messages: list, sig: Signals) -> None:
        """The call's newest message that is not a system one: aider sends a system
        reminder after the user's turn, and drops it from the history it resends."""
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].role != "system":
                self.turn_of[sig.seq] = sig.messages[i]
                return
        for call_id, _name, _prompt in sig.tool_calls:
            self.tool_calls.setdefault(call_id, sig.seq)

    def _extended(self, chain: list[str], sig: Signals, accept) -> int | None:
        """The latest accepted call whose messages (+ reply) the request extends, longest
        first. A request equal to that call's messages is a re-send, not an extension."""
        for k in range(len(chain), 0, -1):
            for seq in reversed(self.ends.get(chain[k - 1], ())):
                same = k == len(chain) and self.signals[seq].messages == sig.messages
                if not same and accept(self.threads[self.calls[seq].thread]):
                    return seq
        return None

    def _rebuilt(self, sig: Signals, accept) -> int | None:
        """The latest accepted call whose last turn (its newest non-system message, then its
        reply) the request carries on from, under the same first message, when what came
        before that turn was rebuilt: aider re-renders its file-context messages on every
        call, so its histories never extend each other, yet they are one conversation."""
        messages = sig.messages
        for i in range(len(messages) - 3, -1, -1):  # the turn must be followed by more
            for seq in reversed(self.turns.get((messages[i], messages[i + 1]), ())):
                if self.signals[seq].messages[0] == messages[0] and accept(
                        self.threads[self.calls[seq].thread]):
                    return seq
        return None

    def _shared_prefix(self, chain: list[str], sig: Signals) -> int | None:
        """The latest conversation call sharing the longest message prefix with `chain`."""
        for node in reversed(chain):
            seq = self.nodes.get(node)
            if seq is not None and _same_session(self.threads[self.calls[seq].thread], sig):
                return seq
        return None

    def _goes_on_from(self, state: _ThreadState, seq: int) -> bool:
        """Whether a call extending `seq` continues its thread: nothing after `seq` in the
        thread was answered, except retries of `seq` itself (the rest are dead ends)."""
        after = state.thread.calls[state.thread.calls.index(seq) + 1:]
        return all(self.signals[s].reply is None or self.calls[s].retry_of == seq
                   for s in after)

    # --- threads -----------------------------------------------------------------------

    def _thread(self, thread_id: str) -> Thread:
        return self.threads[thread_id].thread

    def _new_thread(self, thread_id: str, role: str, sig: Signals) -> _ThreadState:
        state = _ThreadState(Thread(id=thread_id, role=role), session_key=sig.session_key)
        self.threads[thread_id] = state
        return state

    def _side_thread(self) -> None:
        if SIDE_THREAD not in self.threads:
            self.threads[SIDE_THREAD] = _ThreadState(Thread(id=SIDE_THREAD, role=SIDE), None)

    def _main_id(self) -> str:
        n = sum(s.thread.role == MAIN for s in self.threads.values())
        return MAIN if n == 0 else f"{MAIN}-{n + 1}"

    def _call_in(self, state: _ThreadState, sig: Signals, parent: int | None) -> Call:
        thread = state.thread
        if not thread.segments:
            thread.segments.append((sig.seq, None))
        return Call(seq=sig.seq, thread=thread.id, parent=parent, role=thread.role,
                    segment=len(thread.segments) - 1)

    def _anonymous_agent(self, sig: Signals, chain: list[str]) -> str:
        """A subagent without an id header: the subagent thread it extends, else a new one."""
        parent = self._extended(chain, sig, lambda s: s.thread.role == SUBAGENT)
        if parent is not None:
            return self.threads[self.calls[parent].thread].agent_key or ""
        return f"#{sig.seq}"

    def _codex_parent(self, sig: Signals) -> str | None:
        key = sig.parent_agent_key
        if not key:
            return None
        for state in self.threads.values():
            if state.agent_key == key or (state.thread.role == MAIN and state.session_key == key):
                return state.thread.id
        return None

    # --- the end -----------------------------------------------------------------------

    def finish(self) -> Lineage:
        self._link_subagents()
        threads = sorted((s.thread for s in self.threads.values()),
                         key=lambda t: (t.role == SIDE, t.calls[0] if t.calls else 0))
        for thread in threads:
            thread.usage = usage_of(thread.calls, self.calls, self.signals)
        usage = usage_of(sorted(self.calls), self.calls, self.signals)
        return Lineage(calls=self.calls, threads=threads, fingerprints=self.fingerprints,
                       usage=usage)

    def _link_subagents(self) -> None:
        """Spawner links, known only once the parent's next request carries the result."""
        for sig in self.signals.values():
            for call_id, agent_id in sig.agent_links.items():
                state = next((s for s in self.threads.values() if s.agent_key == agent_id), None)
                spawner = self.tool_calls.get(call_id)
                if state is not None and spawner is not None and not state.thread.spawned_by:
                    self._spawned(state.thread, spawner, call_id)
        for state in self.threads.values():
            if state.thread.role == SUBAGENT and not state.thread.spawned_by:
                self._link_by_prompt(state.thread)

    def _link_by_prompt(self, thread: Thread) -> None:
        """A subagent's first user text is the `prompt` its spawner passed to the tool."""
        first = thread.calls[0]
        texts = set(self.signals[first].user_texts)
        for seq in sorted((s for s in self.signals if s < first), reverse=True):
            for call_id, _name, prompt in self.signals[seq].tool_calls:
                if prompt and prompt in texts and self.calls[seq].thread != thread.id:
                    self._spawned(thread, seq, call_id)
                    return

    def _spawned(self, thread: Thread, spawner: int, call_id: str) -> None:
        thread.spawned_by = (spawner, call_id)
        thread.parent_thread = thread.parent_thread or self.calls[spawner].thread


def _chains(messages: tuple[str, ...], known: tuple[str, ...] = (),
            known_chains: list[str] | None = None) -> list[str]:
    """Chain hashes of every prefix: element k-1 names messages[:k]. The prefix shared with
    `known` (hashes whose chains are `known_chains`) is not hashed again."""
    shared = shared_prefix(messages, known)
    out = list((known_chains or [])[:shared])
    for h in messages[shared:]:
        out.append(chain_hash(out[-1] if out else None, h))
    return out


def _same_session(state: _ThreadState, sig: Signals) -> bool:
    return state.session_key is None or sig.session_key is None or (
        state.session_key == sig.session_key)
