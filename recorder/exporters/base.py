"""What every exporter shares: options, the tally printed at the end, and JSON lines output.

An exporter is a class built with `(out, options, tally)` that gets one `SessionData` at a
time (`write_session`) and is closed once (`close`). It writes as it goes and keeps nothing
from one session to the next, so memory stays flat however many sessions the store holds.
What it could not carry into its format it counts in the tally, by reason, instead of
failing: `skipped` counts whole units (a call, a conversation, a thread) left out, `dropped`
counts pieces of content a format cannot hold, `converted` pieces it holds in another shape.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

THREADS = ("main", "all")


@dataclass(frozen=True)
class Options:
    """How units are picked and converted (the selection of sessions is `select.Filters`)."""

    thread: str = "all"  # "main": only the main agent's threads; "all": subagents too
    include_side_calls: bool = False  # titles, count_tokens, quota probes...
    only_complete: bool = False  # leave out calls whose response did not complete
    model: str | None = None  # a glob on the call's model
    keep_extras: bool = False  # keep what a format cannot hold under an extension key


@dataclass
class Tally:
    exported: int = 0  # lines (rows, for parquet) written
    sessions: int = 0  # sessions that gave at least one
    skipped: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    converted: Counter[str] = field(default_factory=Counter)

    def summary(self, fmt: str) -> str:
        """One line for stderr, e.g. `exported 3 lines (openai) from 2 sessions; skipped: ...`."""
        unit = "rows" if fmt == "parquet" else "lines"
        parts = [f"exported {self.exported} {unit} ({fmt}) from {self.sessions} sessions"]
        for name in ("skipped", "dropped", "converted"):
            counts: Counter[str] = getattr(self, name)
            if counts:
                shown = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
                parts.append(f"{name}: {shown}")
        return "; ".join(parts)


class JsonLines:
    """One orjson line per record on a binary stream."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
