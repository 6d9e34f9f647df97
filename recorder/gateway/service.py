"""The gateway's state and operations. Everything that matters is in the store.

A `Gateway` is one replica's handle on it: the store (control requests, session lookups,
exchange numbers), the writer process (exchanges, as in `forge-record run`), the upstreams
and the secret that tokens are derived from. Nothing a session needs stays in this process,
so any replica serves any call or control request of any session, and a replica that dies
loses only the calls it was carrying, whose numbers (reserved as they started) stay behind as
gaps: `missing_calls`.

Every method here may wait on the database: the proxy calls them in a worker thread
(`run`), never on its event loop. Errors a caller made raise `Refused` (an HTTP status and
a message); a store that does not answer raises StoreError.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from forge_record.errors import StoreError
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
MAX_UNNUMBERED = 100_000  # sessions remembered as numbered by the writer (oldest forgotten)
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
        self._delivering: dict[str, int] = {}  # session -> exchanges handed to the pool
        # Sessions whose exchanges this replica hands to the writer unnumbered (since the
        # store could not number one): the writer numbers them in the order it gets them.
        self._unnumbered: dict[str, None] = {}
        # Sessions read lately: calls skip the store lookup, and go on through an outage.
        self.known = KnownSessions()
        self.lost = 0  # exchanges the store refused (logged)
        self.draining = False
        self.engine_tags: dict[str, str] = {}  # every session's: the engine's name, version

    # --- for the event loop --------------------------------------------------------------

    async def run(self, fn, *args):
        """`fn(*args)` in a worker thread: how the proxy's loop asks anything of the store."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def sink_for(self, session_id: str, reservations: Reservations | None = None):
        """The per-flow sink (addons.recorder.SINK) that stores exchanges in this session,
        each under the number reserved when its call started (the oldest one left), and
        hands them to the writer in the order it got them (a bridged call's engine record
        before the agent's: bridge.pairs relies on it)."""
        last: Future | None = None  # this flow's latest delivery

        def sink(exchange: Exchange) -> None:
            nonlocal last
            reserved = reservations.take() if reservations is not None else None
            with self._lock:
                self._delivering[session_id] = self._delivering.get(session_id, 0) + 1
            last = self._pool.submit(self._deliver, session_id, exchange, reserved, last)

        return sink

    def reserve(self, session_id: str) -> Future | None:
        """On the event loop, as a call starts: its number in the session's sequence, asked
        of the store in a worker thread. None when this replica lets the writer number the
        session's exchanges (after an outage, see _deliver) or is closing."""
        if session_id in self._unnumbered:
            return None
        try:
            return self._pool.submit(self._next_number, session_id)
        except RuntimeError:  # the pool is shut down: the call is numbered as it ends
            return None

    def pending(self) -> int:
        """Exchanges not yet handed to the writer."""
        with self._lock:
            return sum(self._delivering.values())

    def close(self) -> None:
        """Wait until every exchange is in the writer's hands (numbered or not: a store that
        does not answer delays nothing here, store.deadline bounds each attempt)."""
        self._pool.shutdown(wait=True)

    # --- auth ------------------------------------------------------------------------------

    def is_admin(self, authorization: str | None) -> bool:
        scheme, _, value = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                                  self._secret.encode())

    def cached(self, named: keys.Named) -> Resolved | None:
        """On the event loop: the call's session from a row read less than KnownSessions'
        TTL ago, or Refused; None when the store must be asked (`resolve`)."""
        if named.token is None:
            return None
        row = self.known.fresh(rows.token_hash(named.token))
        if row is None or row["keyed_by"] is None:
            return None
        return _admit(row, named)

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
        resolved = _admit(row, named)
        if row["keyed_by"] is None:
            with self.store.transaction("note how a session is named") as conn:
                rows.note_keyed_by(conn, row["session_id"], named.how)
            row = {**row, "keyed_by": named.how}
        self.known.remember(digest, row)
        return resolved

    # --- exchanges -------------------------------------------------------------------------

    def _deliver(self, session_id: str, exchange: Exchange, reserved: Future | None,
                 after: Future | None) -> None:
        """Hand the exchange to the writer process under the number reserved when its call
        started, or else under the session's next number now (shared by all replicas). When
        the store cannot number it, it goes to the writer unnumbered, and so does every later
        exchange of its session here (their order is the writer's order): the writer numbers
        each as it writes it, and while the store is down it spools them, in order, and
        numbers them as it replays (store.batch). So nothing waits in this process's memory
        alone: a replica killed during an outage leaves them in its writer's spool, which its
        writer, or the next one for the store, replays. `after` is the flow's delivery
        before this one, waited for (as `reserved` is, see _reserved) to keep their order."""
        try:
            if after is not None:
                wait([after])
            seq = self._reserved(session_id, reserved)
            if seq is None and session_id not in self._unnumbered:
                seq = self._numbered_now(session_id)
            if seq is None:
                self.writer.submit_exchange(session_id, exchange, numbered=False)
            else:
                exchange.seq = seq
                self.writer.submit_exchange(session_id, exchange)
        except StoreError as e:
            self.lost += 1
            log.error("forge-record: exchange of session %s not stored: %s", session_id, e)
        finally:
            with self._lock:
                left = self._delivering[session_id] - 1
                if left:
                    self._delivering[session_id] = left
                else:
                    del self._delivering[session_id]

    def _reserved(self, session_id: str, reserved: Future | None) -> int | None:
        """The number reserved at the call's start, waited for. This cannot deadlock the
        pool: its workers take tasks in the order they were submitted, and the reservation
        was submitted (as the call started) before this delivery (as it ended), so a worker
        has taken it already and it waits on nothing in the pool. (The same holds for the
        flow's earlier delivery, which waits only on tasks submitted before it.) None when
        none was reserved, or the store could not."""
        if reserved is None:
            return None
        try:
            return reserved.result()
        except StoreUnavailable:
            self._writer_numbers(session_id)
            return None

    def _numbered_now(self, session_id: str) -> int | None:
        try:
            return self._next_number(session_id)
        except StoreUnavailable:
            self._writer_numbers(session_id)
            return None

    def _next_number(self, session_id: str) -> int:
        with self.store.transaction("number an exchange") as conn:
            return rows.next_seq(conn, session_id)

    def _writer_numbers(self, session_id: str) -> None:
        with self._lock:
            self._unnumbered[session_id] = None
            if len(self._unnumbered) > MAX_UNNUMBERED:
                del self._unnumbered[next(iter(self._unnumbered))]

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
        self.known.forget(sid)  # refused here at once; elsewhere within KnownSessions' TTL
        answer = {"id": sid, "already_finished": not changed, **_finished(row)}
        if changed and missing:
            answer["missing_calls"] = missing
        return answer

    def _wait_flushed(self, sid: str) -> int:
        """Wait (bounded) until every exchange numbered for the session is stored and none
        is still on its way here; how many are still missing."""
        deadline = time.monotonic() + FLUSH_WAIT
        while True:
            missing = len(self.missing_calls(sid))
            with self._lock:  # not yet in the writer's hands
                on_way = self._delivering.get(sid, 0)
            if (not missing and not on_way) or time.monotonic() > deadline:
                return missing + on_way
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
