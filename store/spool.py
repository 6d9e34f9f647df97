"""The spool: where a Writer puts what it could not write while the store was unreachable.

One append-only file per writer and store, `<dir>/<store fingerprint>-<pid>-<ms>.spool`, in
forge-record's data dir. The file starts with MAGIC; each write appends frames

    b"F" length(4, big-endian) crc32(4) payload

and is fsync'd before append() returns, so a spooled item survives the recorder being killed
(only the frame being written can be torn, and a torn or damaged frame ends the file for the
reader). A payload is zstd of: a 4-byte length, a JSON header (the item, as records'
to_dict() has it), then the raw request and response bodies. Secret headers are dropped
before anything is written. The directory is 0700 and every file 0600: a spool holds
prompts and files the agent sent, as the store does.

The owning writer holds an exclusive flock on its file for as long as it lives. It creates
the file under a temporary name and renames it once locked, so no other process ever sees an
unlocked live file. Anyone may replay and delete a file whose lock it can take: its writer is
gone (the next `forge-record run` does this for its store). Replays write with `if_absent`,
so a file replayed twice, or an item that reached the store before it was spooled, is
written once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

from forge_record.records import (
    exchange_from_dict,
    exchange_to_dict,
    session_from_dict,
    session_to_dict,
)
from forge_record.store import compression
from forge_record.store.batch import cleaned
from forge_record.store.items import AddExchange, AddSession, EndSession, Item, StartCall

log = logging.getLogger("forge_record")

MAGIC = b"forge-record spool 1\n"
SUFFIX = ".spool"
REPLAY_BATCH = 64
REPLAY_BYTES = 4 << 20  # a replayed batch is held whole, as records: bounded by its bodies too


class Spool:
    """The spool file of one writer; created on the first append."""

    def __init__(self, directory: Path, fingerprint: str) -> None:
        self.directory = Path(directory)
        self.fingerprint = fingerprint
        self.path: Path | None = None
        self.count = 0  # items in the current file
        self._file: BinaryIO | None = None

    def append(self, items: list[Item]) -> None:
        """Write `items` durably (OSError if the disk refuses)."""
        if self._file is None:
            self._create()
        assert self._file is not None
        self._file.write(b"".join(frame(item) for item in items))
        self._file.flush()
        os.fsync(self._file.fileno())
        self.count += len(items)

    def drain(self, write) -> int:
        """Replay this writer's own file through `write(items)`, then delete it. If `write`
        raises, the file stays as it was and the error propagates."""
        if self._file is None or self.path is None:
            return 0
        with open(self.path, "rb") as f:
            done = _replay(f, write)
        self.close(delete=True)
        return done

    def close(self, delete: bool = False) -> None:
        if self._file is None:
            return
        if delete and self.path is not None:
            self.path.unlink(missing_ok=True)
        self._file.close()  # releases the lock
        self._file, self.path, self.count = None, None, 0

    def _create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)  # made by an older version, or under another umask
        stem = f"{self.fingerprint}-{os.getpid()}-{int(time.time() * 1000)}"
        temporary = self.directory / f".{stem}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        f = os.fdopen(fd, "wb")  # lives as long as the writer
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(MAGIC)
        f.flush()
        os.fsync(f.fileno())
        self.path = self.directory / f"{stem}{SUFFIX}"
        os.rename(temporary, self.path)
        _fsync_dir(self.directory)
        self._file = f


def orphans(directory: Path, fingerprint: str) -> list[Path]:
    """Spool files for this store, oldest first (some may still be live: see replay_file)."""
    if not Path(directory).is_dir():
        return []
    found = Path(directory).glob(f"{fingerprint}-*{SUFFIX}")
    return sorted(found, key=lambda p: int(p.stem.rsplit("-", 1)[-1]))


def replay_file(path: Path, write) -> int | None:
    """Replay a dead writer's file through `write(items)` and delete it; None if a live
    writer holds it. If `write` raises, the file stays and the error propagates."""
    f = claim(path)
    if f is None:
        return None
    with f:
        done = _replay(f, write)
        path.unlink()
    return done


def claim(path: Path) -> BinaryIO | None:
    """The file, open and locked (its writer is gone), or None if a live writer holds it or
    another process replayed it meanwhile."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    if not path.exists():  # replayed and deleted between our open and our lock
        f.close()
        return None
    return f


def sessions_in(f: BinaryIO) -> list[Item]:
    """The AddSession items of a claimed file (read from its start; the file is rewound)."""
    f.seek(0)
    found = [item for item in read(f) if isinstance(item, AddSession)]
    f.seek(0)
    return found


def replay(f: BinaryIO, write) -> int:
    """Replay a claimed file from its start through `write(items)`; how many items."""
    f.seek(0)
    return _replay(f, write)


def _replay(f: BinaryIO, write) -> int:
    batch: list[Item] = []
    done = size = 0
    for item in read(f):
        batch.append(item)
        if isinstance(item, AddExchange):
            size += len(item.exchange.raw_request) + len(item.exchange.raw_response)
        if len(batch) >= REPLAY_BATCH or size >= REPLAY_BYTES:
            write(batch)
            done, batch, size = done + len(batch), [], 0
    if batch:
        write(batch)
        done += len(batch)
    return done


# --- frames -------------------------------------------------------------------------------


def frame(item: Item) -> bytes:
    payload = compression.compress(_encode(item))
    return b"F" + len(payload).to_bytes(4, "big") + zlib.crc32(payload).to_bytes(4, "big") + payload


def read(f: BinaryIO) -> Iterator[Item]:
    """The items of a spool file, up to the first torn or damaged frame."""
    if f.read(len(MAGIC)) != MAGIC:
        log.warning("forge-record: %s is not a spool file; skipped", getattr(f, "name", "?"))
        return
    while True:
        head = f.read(9)
        if not head:
            return
        size, crc = int.from_bytes(head[1:5], "big"), int.from_bytes(head[5:9], "big")
        payload = f.read(size) if len(head) == 9 and head[:1] == b"F" else b""
        if len(payload) != size or not payload or zlib.crc32(payload) != crc:
            log.warning("forge-record: spool file %s ends with a torn frame; the rest is "
                        "skipped", getattr(f, "name", "?"))
            return
        yield _decode(compression.decompress(payload))


def _encode(item: Item) -> bytes:
    bodies = b""
    match item:
        case AddSession(session=s, recorder_pid=pid, heartbeat_at=beat):
            head = {"kind": "session", "session": session_to_dict(s), "pid": pid, "beat": beat}
        case AddExchange(session_id=sid, exchange=ex, numbered=numbered, call=call):
            ex = cleaned(ex)
            head = {"kind": "exchange", "session_id": sid, "exchange": exchange_to_dict(ex),
                    "request_size": len(ex.raw_request)}
            if not numbered:
                head["unnumbered"] = True
            if call is not None:
                head["call"] = call
            bodies = ex.raw_request + ex.raw_response
        case StartCall(session_id=sid, call=call, named_by=how):
            head = {"kind": "start", "session_id": sid, "call": call, "named_by": how}
        case EndSession(session_id=sid, ended_at=at, exit_code=code, harness_version=v):
            head = {"kind": "end", "session_id": sid, "ended_at": at, "exit_code": code,
                    "harness_version": v}
    data = orjson.dumps(head)
    return len(data).to_bytes(4, "big") + data + bodies


def _decode(payload: bytes) -> Item:
    size = int.from_bytes(payload[:4], "big")
    head, bodies = orjson.loads(payload[4 : 4 + size]), payload[4 + size :]
    if head["kind"] == "session":
        return AddSession(session_from_dict(head["session"]), head["pid"], head["beat"])
    if head["kind"] == "exchange":
        cut = head["request_size"]
        ex = exchange_from_dict(head["exchange"], bodies[:cut], bodies[cut:])
        return AddExchange(head["session_id"], ex, not head.get("unnumbered", False),
                           head.get("call"))
    if head["kind"] == "start":
        return StartCall(head["session_id"], head["call"], head.get("named_by"))
    return EndSession(head["session_id"], head["ended_at"], head["exit_code"],
                      head["harness_version"])


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
