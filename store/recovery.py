"""Crash recovery: what dead writers left in the spool goes into the store.

A writer that died (SIGKILL, OOM, power) leaves its spool file behind, unlocked (store.spool).
The next writer for the same store replays every such file when it starts, when the store
answers again after an outage, and once more when it closes (a file the proxy spooled itself
while this writer was behind or dead is closed by then). Sessions a dead writer's file began
but never ended were cut short: they are marked so (Store.abandon), and show as interrupted.

Files are replayed oldest first, but an item may be in an older file than its session: the
proxy spools new exchanges while the writer process, behind, still holds the session that
came before them. So the sessions of every file claimed are written first, then each file
whole (replays write `if_absent`: the sessions are not written twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from forge_record.errors import StoreError
from forge_record.store import spool as spooling
from forge_record.store.items import AddSession, EndSession, Item
from forge_record.store.store import StoreUnavailable

log = logging.getLogger("forge_record")


def replay_orphans(directory: Path, fingerprint: str, own: Path | None,
                   write: Callable[[list[Item]], None],
                   abandon: Callable[[set[str]], None]) -> int:
    """Replay the spool files for this store that no live writer holds (skipping `own`),
    and delete them; how many items were written. A file whose replay fails stays for
    later; StoreUnavailable propagates (the store went away: stop)."""
    claimed = [(path, f) for path in spooling.orphans(directory, fingerprint)
               if path != own and (f := spooling.claim(path)) is not None]
    done_in_all = 0
    try:
        for _, f in claimed:
            sessions = spooling.sessions_in(f)
            if sessions:
                write(sessions)
        for path, f in claimed:
            replay = OrphanReplay(write)
            try:
                done = spooling.replay(f, replay)
                if replay.unfinished:
                    abandon(replay.unfinished)
            except StoreUnavailable:
                raise
            except StoreError:
                log.exception("forge-record: could not replay %s; kept for later", path)
                continue
            path.unlink()
            done_in_all += done
            log.warning("forge-record: wrote %d items left in %s by an earlier writer",
                        done, path.name)
    finally:
        for _, f in claimed:
            f.close()
    return done_in_all


class OrphanReplay:
    """Writes a dead writer's items, noting which of its sessions never ended."""

    def __init__(self, write: Callable[[list[Item]], None]) -> None:
        self._write = write
        self._seen: set[str] = set()
        self._ended: set[str] = set()

    @property
    def unfinished(self) -> set[str]:
        return self._seen - self._ended

    def __call__(self, items: list[Item]) -> None:
        for item in items:
            sid = item.session.id if isinstance(item, AddSession) else item.session_id
            (self._ended if isinstance(item, EndSession) else self._seen).add(sid)
        self._write(items)
