"""The values forge_record.lineage produces (import them from there).

`Call` places one exchange, `Thread` is one conversation inside a session, `Lineage` holds
both with the fingerprints the calls name and the session's usage. `to_dict` gives the
JSON-ready form `forge-record show --json` prints under "lineage".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from forge_record.lineage.fingerprint import Fingerprint

MAIN, SUBAGENT, SIDE, RETRY = "main", "subagent", "side", "retry"
SIDE_THREAD = "side"


@dataclass(kw_only=True)
class Call:
    seq: int
    thread: str  # a Thread id
    parent: int | None = None  # seq of the call this one continues in its thread
    role: str = MAIN  # "main" | "subagent" | "side" | "retry"
    side_kind: str | None = None  # "title" | "count_tokens" | "warmup" | "summary" |
    #                               "compaction" | "engine" | "other" (side calls and their
    #                               retries; "engine": a bridged call's engine record)
    retry_of: int | None = None  # the first attempt of the same logical call
    segment: int = 0  # compaction segment within the thread, 0-based
    fingerprint: str = ""  # a Fingerprint id


@dataclass(kw_only=True)
class Thread:
    id: str  # "main", "main-2", …, "subagent-<agent id>", "side"
    role: str
    parent_thread: str | None = None  # spawner's thread; for a fork, the thread it left
    spawned_by: tuple[int, str] | None = None  # (seq, tool call id) that started a subagent
    calls: list[int] = field(default_factory=list)  # seqs in order, retries included
    # (first seq of a segment, the compaction call that summed up the one before, or None)
    segments: list[tuple[int, int | None]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)  # see forge_record.lineage.usage


@dataclass(kw_only=True)
class Lineage:
    calls: dict[int, Call]
    threads: list[Thread]
    fingerprints: dict[str, Fingerprint]
    usage: dict[str, Any]


def to_dict(lineage: Lineage) -> dict[str, Any]:
    """JSON-ready: calls as a list in seq order, tuples as lists."""
    return {
        "calls": [asdict(lineage.calls[s]) for s in sorted(lineage.calls)],
        "threads": [asdict(t) for t in lineage.threads],
        "fingerprints": {k: asdict(f) for k, f in lineage.fingerprints.items()},
        "usage": lineage.usage,
    }
