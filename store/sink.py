"""What the proxy hands finished exchanges to, and what it learns back.

`Sink` is the interface of both store writers: store.Writer (a thread beside the caller) and
forge_record.writer_process.WriterProcess (a process of its own, fed through a pipe). Its
submit_*() never block and never raise; close() waits (boundedly) until everything
submitted is in the store or in the spool; `counters` are final after close().

`Counters` is the one account both keep, and the one the writer process sends back:
- written: items committed to the store;
- failed: items the store refused for their content, or that could not be spooled (logged);
- dropped: items submitted after close() (a bug in the caller; logged);
- spooled: items that went to the spool because the store did not answer in time;
- overflowed: items that went to the spool because the writer was behind;
- replayed: items written from a spool (this run's or an earlier one's);
- spool_left, spool_file: after close(), how many items wait in the spool for the next run
  with this store, and the (last) file that holds them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from forge_record.records import Exchange, Session


@dataclass
class Counters:
    written: int = 0
    failed: int = 0
    dropped: int = 0
    spooled: int = 0
    overflowed: int = 0
    replayed: int = 0
    spool_left: int = 0
    spool_file: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["spool_file"] = str(self.spool_file) if self.spool_file else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Counters:
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in known}
        if fields.get("spool_file"):
            fields["spool_file"] = Path(fields["spool_file"])
        return cls(**fields)

    def add(self, other: Counters) -> None:
        """Add `other`'s counts into these; its spool file, if any, is the one named."""
        for f in dataclasses.fields(self):
            if f.name != "spool_file":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.spool_file = other.spool_file or self.spool_file


COUNTER_NAMES = tuple(f.name for f in dataclasses.fields(Counters))


class Sink(Protocol):
    counters: Counters

    def submit_session(self, session: Session) -> None: ...

    def submit_exchange(self, session_id: str, exchange: Exchange) -> None: ...

    def submit_end(self, session_id: str, ended_at: float, exit_code: int | None,
                   harness_version: str | None = None) -> None: ...

    def close(self, timeout: float = ...) -> None: ...


class Counted:
    """Each counter readable as an attribute of the sink (`writer.written`), from `counters`."""

    counters: Counters


for _name in COUNTER_NAMES:
    setattr(Counted, _name, property(lambda self, _n=_name: getattr(self.counters, _n)))
