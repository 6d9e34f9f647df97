"""What the store writer is handed: the items of a write, one per thing that happened.

A recorder adds a session, then its exchanges one by one as they finish, then ends the
session; `serve` also says when each call starts (StartCall), so that its number is reserved
then. The same items travel through the writer's queue, the spool file and push, so each
is a small frozen value that pickles.
"""

from __future__ import annotations

from dataclasses import dataclass

from forge_record.records import Exchange, Session


@dataclass(frozen=True)
class AddSession:
    session: Session
    recorder_pid: int | None = None
    heartbeat_at: float | None = None


@dataclass(frozen=True)
class AddExchange:
    session_id: str
    exchange: Exchange
    # False: the exchange takes the number its `call` took as it started (StartCall,
    # store.numbering), or else its session's next number (store.batch.next_seq) when it is
    # written. `serve` hands every exchange over so: the writer numbers it, whether the store
    # answers now or the exchange waits in the spool, in order, never in memory alone.
    numbered: bool = True
    call: str | None = None


@dataclass(frozen=True)
class StartCall:
    """A `serve` call starts: the writer process takes its session's next number for it at
    once (store.numbering), which the call's exchange gets when it comes (AddExchange.call). A call
    that a killed replica was carrying never comes: its number stays a gap, a missing call.
    `call` names the call uniquely across replicas and restarts; `named_by`, on the first
    calls a replica sees of a session, how the call named it (path, header, token), which the
    writer records on the session (the first way seen stays)."""

    session_id: str
    call: str
    named_by: str | None = None


@dataclass(frozen=True)
class EndSession:
    session_id: str
    ended_at: float
    exit_code: int | None
    harness_version: str | None = None


Item = AddSession | AddExchange | EndSession | StartCall


def describe(item: Item) -> str:
    match item:
        case AddSession(session=s):
            return f"session {s.id}"
        case AddExchange(session_id=sid, exchange=ex):
            return f"exchange {ex.seq} of session {sid}"
        case EndSession(session_id=sid):
            return f"end of session {sid}"
        case StartCall(session_id=sid, call=call):
            return f"start of call {call} of session {sid}"
