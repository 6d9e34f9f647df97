"""What the store writer is handed: the items of a write, one per thing that happened.

A recorder adds a session, then its exchanges one by one as they finish, then ends the
session. The same items travel through the writer's queue, the spool file and push, so each
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
    # False: the exchange takes its session's next number (store.batch.next_seq) when it is
    # written, e.g. when replayed from the spool. `serve` hands exchanges over so while the
    # store cannot number them: they wait in the spool, in order, never in memory alone.
    numbered: bool = True


@dataclass(frozen=True)
class EndSession:
    session_id: str
    ended_at: float
    exit_code: int | None
    harness_version: str | None = None


Item = AddSession | AddExchange | EndSession


def describe(item: Item) -> str:
    match item:
        case AddSession(session=s):
            return f"session {s.id}"
        case AddExchange(session_id=sid, exchange=ex):
            return f"exchange {ex.seq} of session {sid}"
        case EndSession(session_id=sid):
            return f"end of session {sid}"
