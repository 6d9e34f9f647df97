"""The gateway's state and operations. Everything that matters is in the store.

A `Gateway` is one replica's handle on it: the store (control requests, session lookups),
the writer process (calls' starts and exchanges, numbered there: store.batch), the upstreams
and the secret that tokens are derived from. Nothing a session needs stays in this process,
so any replica serves any call or control request of any session, and a replica that dies
loses only the calls it was carrying, whose numbers (reserved as they started) stay behind as
gaps: `missing_calls`.

Every method here may wait on the database: the proxy calls them in a worker thread
(`run`), never on its event loop. Errors a caller made raise `Refused` (an HTTP status and
a message); a store that does not answer raises StoreError.
"""

from __future__ import annotations

import dataclasses
import hmac
import itertools
import logging
import secrets
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from forge_record.exporters import tokens
from forge_record.exporters.base import Options, Tally
from forge_record.exporters.trajectories import trajectory
from forge_record.exporters.units import load_session, threads
from forge_record.gateway import keys
from forge_record.gateway.env import session_env
from forge_record.gateway.known import KnownSessions
from forge_record.gateway.reservations import Reservations
from forge_record.gateway.upstreams import Upstreams
from forge_record.records import Exchange, Session
from forge_record.store import gateway as rows
from forge_record.store.batch import Writes
from forge_record.store.items import EndSession
from forge_record.store.store import StoreUnavailable

log = logging.getLogger("forge_record")

FLUSH_WAIT = 15.0  # how long a finish waits for the session's exchanges to be stored
MAX_TRACKED = 100_000  # sessions whose latest item finish may wait for (oldest forgotten)
_FLUSH_POLL = 0.05
WORKERS = 16  # threads for store work; the event loop only hands work to them


class Refused(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"status": self.status, "message": str(self)}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


@dataclass(frozen=True)
class Resolved:
    session_id: str
    how: str
    # how the call named its session, when the store has no way recorded yet: the call's
    # start carries it to the writer, which records it (StartCall.named_by)
    note: str | None = None


class Gateway:
    def __init__(self, store: Any, writer: Any, upstreams: Upstreams, *, admin_token: str,
                 public_url: str, upstream_key: str | None = None,
                 metrics: Any = None) -> None:
        self.store = store
        self.writer = writer
        self.upstreams = upstreams
        self.public_url = public_url.rstrip("/")
        self.upstream_key = upstream_key
        self.metrics = metrics
        self._secret = admin_token
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="forge-record-gateway")
        self._lock = threading.Lock()
        self._replica = secrets.token_hex(6)  # call names: this replica's, then a count
        self._calls = itertools.count(1)
        self._latest: dict[str, int] = {}  # session -> writer position of its latest item
        # Sessions read lately: calls skip the store lookup, and go on through an outage.
        self.known = KnownSessions()
        self.draining = False
        self.engine_tags: dict[str, str] = {}  # every session's: the engine's name, version

    # --- for the event loop --------------------------------------------------------------

    async def run(self, fn, *args):
        """`fn(*args)` in a worker thread: how the proxy's loop asks anything of the store."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def sink_for(self, session_id: str, reservations: Reservations | None = None):
        """The per-flow sink (addons.recorder.SINK) that hands exchanges to the writer
        process in this session, each under the call its flow started first (the oldest one
        left), in the order it got them (a bridged call's engine record before the agent's:
        bridge.pairs relies on it). The writer numbers them (store.batch): nothing here
        waits on the store."""

        def sink(exchange: Exchange) -> None:
            call = reservations.take() if reservations is not None else None
            self._track(session_id, self.writer.submit_exchange(
                session_id, exchange, numbered=False, call=call))

        return sink

    def start_call(self, session_id: str, named_by: str | None = None) -> str:
        """On the event loop, as a call starts: a name for it, unique across replicas, under
        which the writer process reserves its number (store.items.StartCall)."""
        call = f"{self._replica}-{next(self._calls)}"
        self._track(session_id, self.writer.submit_start(session_id, call, named_by))
        return call

    def _track(self, session_id: str, position: int) -> None:
        """Remember the session's latest item in the writer's hands, for finish."""
        with self._lock:
            self._latest.pop(session_id, None)
            self._latest[session_id] = position
            if len(self._latest) > MAX_TRACKED:
                del self._latest[next(iter(self._latest))]

    def close(self) -> None:
        """Wait for the control requests in the worker threads (exchanges are already in
        the writer's hands: the sink hands them over on the event loop)."""
        self._pool.shutdown(wait=True)

    # --- auth ------------------------------------------------------------------------------

    def is_admin(self, authorization: str | None) -> bool:
        scheme, _, value = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                                  self._secret.encode())

    def cached(self, named: keys.Named) -> Resolved | None:
        """On the event loop: the call's session from a row this replica read or created
        lately (gateway.known), or Refused; None when the store must be asked first
        (`resolve`)."""
        if named.token is None:
            return None
        digest = rows.token_hash(named.token)
        row = self.known.get(digest)
        if row is None:
            return None
        resolved = _admit(row, named)
        if row["keyed_by"] is None:  # its first call: the start carries how it was named
            resolved = dataclasses.replace(resolved, note=named.how)
            self.known.note(digest, named.how)
        return resolved

    def closed(self, session_id: str, status: str) -> None:
        """In the writer's reader thread: numbering a call of the session, the writer found
        it finished (through any replica) or gone (store.numbering)."""
        if status in rows.FINISHED:
            self.known.closed(session_id, status)
        else:  # gone: the next call reads the store, which refuses it
            self.known.forget(session_id)

    def resolve(self, named: keys.Named) -> Resolved:
        """The session a proxied call belongs to, or Refused (401: no valid token; 403: the
        token is another session's; 409: the session has finished)."""
        if named.token is None:
            raise Refused(401, "no session token: send the session's token as the API key")
        digest = rows.token_hash(named.token)
        try:
            with self.store.reading("find session") as conn:
                row = rows.by_token(conn, named.token)
        except StoreUnavailable:
            row = self.known.any_age(digest)  # the store is down: a session seen open goes on
            if row is None:
                raise
        if row is None:
            raise Refused(401, "unknown session token")
        note = None
        if row["keyed_by"] is None:  # noted by the writer, from the call's start
            note, row = named.how, {**row, "keyed_by": named.how}
        self.known.remember(digest, row)  # a finished one too: it is refused from memory then
        return dataclasses.replace(_admit(row, named), note=note)

    # --- the control API's operations ------------------------------------------------------

    def create(self, harness: str, meta: dict[str, Any], tags: dict[str, str],
               request_id: str | None) -> tuple[bool, dict[str, Any]]:
        """(created now, the session's answer). The same `request_id` gives the same
        session, token included: a retried create does not make a second one."""
        sid = keys.derive(self._secret, "session", request_id, 16) if request_id \
            else secrets.token_hex(8)
        token = keys.session_token(self._secret, sid)
        session_tags = {k: str(meta[k]) for k in ("task_id", "group_id", "attempt",
                                                  "weight_version") if meta.get(k) is not None}
        session = Session(id=sid, harness=harness, argv=[], host=socket.gethostname(),
                          tags={**self.engine_tags, **session_tags, **tags},
                          started_at=time.time())
        with self.store.transaction(f"create session {sid}") as conn:
            created = rows.get(conn, sid) is None
            if created:
                rows.create(conn, session, token, meta)
            row = rows.get(conn, sid)
        if row["status"] == rows.OPEN:  # its first call here needs no store read
            self.known.remember(rows.token_hash(token), row)
        base_url = f"{self.public_url}/s/{sid}"
        env, args = session_env(harness, base_url, token)
        return created, {"id": sid, "token": token, "base_url": base_url, "env": env,
                         "args": args, "harness": harness, "metadata": meta, "tags": tags}

    def reward(self, sid: str, reward: float | None, tags: dict[str, str] | None,
               note: str | None) -> dict[str, Any]:
        self._row(sid)
        self.store.label_session(sid, reward=reward, tags=tags, note=note)
        return {"id": sid, "label": self.store.get_label(sid)}

    def finish(self, sid: str, status: str, exit_code: int | None) -> dict[str, Any]:
        row = self._row(sid)
        if row["status"] in rows.FINISHED:
            return {"id": sid, "already_finished": True, **_finished(row)}
        missing = self._wait_flushed(sid)
        with self.store.transaction(f"finish session {sid}") as conn:
            changed, row = rows.finish(conn, sid, status, exit_code)
            if changed:
                Writes().apply(conn, [EndSession(sid, row["finished_at"], exit_code)])
        if changed and self.writer is not None:
            # The store says it ended; this tells the writer too, which then lets the
            # session's encoder go and seals its pack group (store.seal), as `run`'s does.
            # Other replicas' writers let theirs go with their encoders' budget.
            self.writer.submit_end(sid, row["finished_at"], exit_code)
        self.known.forget(sid)  # refused here at once; elsewhere once a call is numbered
        answer = {"id": sid, "already_finished": not changed, **_finished(row)}
        if changed and missing:
            answer["missing_calls"] = missing
        return answer

    def _wait_flushed(self, sid: str) -> int:
        """Wait (bounded) until what this replica handed its writer for the session is
        stored and every number handed out for it (by any replica) has its exchange; how
        many numbers are still missing."""
        deadline = time.monotonic() + FLUSH_WAIT
        with self._lock:
            latest = self._latest.pop(sid, None)  # None: nothing handed over here
        while True:
            missing = len(self.missing_calls(sid))
            settled = latest is None or self.writer.settled(latest)
            if (not missing and settled) or time.monotonic() > deadline:
                return missing
            time.sleep(_FLUSH_POLL)

    def missing_calls(self, sid: str) -> list[int]:
        """The session's numbers with no stored exchange (store.gateway.missing_calls)."""
        with self.store.reading("find missing calls") as conn:
            return rows.missing_calls(conn, sid)

    def describe(self, sid: str) -> dict[str, Any]:
        row = self._row(sid)
        summary = self.store.session_summary(sid)
        data = load_session(self.store, sid, fingerprints=False)
        calls = [{"seq": ex.seq, "dialect": ex.dialect, "kind": ex.kind, "url": ex.url,
                  "model": (ex.request.model if ex.request else None)
                  or (ex.response.model if ex.response else None),
                  "status": ex.status, "http_status": ex.http_status, "flags": ex.flags,
                  "thread": data.calls[ex.seq].thread if ex.seq in data.calls else None}
                 for ex in data.exchanges.values()]
        lineage = [{"id": t.id, "role": t.role, "parent_thread": t.parent_thread,
                    "calls": len(t.seqs)} for t in data.threads]
        return {"id": sid, "harness": summary.get("harness"), "status": row["status"],
                "keyed_by": row["keyed_by"], "metadata": row["meta"],
                "tags": summary.get("tags"), "label": data.label, **_finished(row),
                "summary": {k: summary.get(k) for k in (
                    "calls", "side_calls", "tool_calls", "input_tokens", "output_tokens",
                    "model")},
                "calls": calls, "missing_calls": self.missing_calls(sid), "threads": lineage}

    def trajectories(self, after: int, limit: int, group_id: str | None,
                     wait: float) -> dict[str, Any]:
        """Finished sessions after `after`, in finish order; waits up to `wait` seconds for
        one when there is none yet (long poll)."""
        deadline = time.monotonic() + wait
        while True:
            with self.store.reading("list finished sessions") as conn:
                found = rows.finished_after(conn, after, limit, group_id)
            if found or time.monotonic() >= deadline or self.draining:
                break
            time.sleep(0.2)
        items = [self._trajectory_item(row) for row in found]
        cursor = found[-1]["finish_seq"] if found else after
        return {"items": items, "cursor": cursor}

    def _trajectory_item(self, row: dict[str, Any]) -> dict[str, Any]:
        sid = row["session_id"]
        data = load_session(self.store, sid)
        lines, token_lines = [], []
        if row["status"] == rows.DONE:  # discarded: an infrastructure failure, not data
            tally = Tally()
            for thread, kept in threads(data, Options(), tally):
                lines.append(trajectory(data, thread, kept))
                # the engine's own ids, as `export --format tokens` writes them
                token_lines += tokens.thread_lines(data, thread, kept, tally)
        return {"cursor": row["finish_seq"], "session_id": sid, "harness": data.session.harness,
                "metadata": row["meta"], "tags": data.session.tags, "reward": data.reward,
                "label": data.label, **_finished(row),
                "missing_calls": self.missing_calls(sid), "trajectories": lines,
                "tokens": token_lines}

    def _row(self, sid: str) -> dict[str, Any]:
        with self.store.reading("read session") as conn:
            row = rows.get(conn, sid)
        if row is None:
            raise Refused(404, f"no session {sid!r}")
        return row


def _admit(row: dict[str, Any], named: keys.Named) -> Resolved:
    """The call's session if its token may use it (403: another session's path or header;
    409: finished), else Refused."""
    if named.session_id is not None and named.session_id != row["session_id"]:
        raise Refused(403, "this token belongs to another session")
    if row["status"] != rows.OPEN:
        raise Refused(409, f"session {row['session_id']} is finished ({row['status']})")
    return Resolved(row["session_id"], named.how)


def _finished(row: dict[str, Any]) -> dict[str, Any]:
    return {"status": row["status"], "exit_code": row["exit_code"],
            "finished_at": row["finished_at"], "finish_seq": row["finish_seq"]}
