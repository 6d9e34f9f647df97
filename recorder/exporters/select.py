"""Which sessions an export reads: the session-level filters, applied to store summaries.

Sessions come oldest first (a dataset reads in the order things happened). `--session` refs
are resolved as `show` resolves them (id, unique prefix, `last`); otherwise every session is
listed and filtered by harness, user, start time, tags, label and call count (calls as
forge_record.lineage.usage counts them, the count `sessions` and `show` print). `--tag K=V`
matches the session's tags and its label's tags (the label's win), so an outcome recorded
with `forge-record label --tag` selects like a tag given at `run`. Each session left out is
counted by reason.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from forge_record.errors import UsageError
from forge_record.exporters.base import Tally
from forge_record.lineage import session_usage

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Filters:
    sessions: tuple[str, ...] = ()
    harness: str | None = None
    user: str | None = None
    since: float | None = None
    until: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    labelled: bool = False
    min_calls: int | None = None


def parse_when(text: str, now: float | None = None) -> float:
    """Epoch seconds from `1767225600`, `2026-08-01`, `2026-08-01T12:00` (local time unless
    it names a zone) or an age such as `90m`, `12h`, `7d`, `2w` (that long before now)."""
    text = text.strip()
    if m := _RELATIVE.match(text):
        return (time.time() if now is None else now) - float(m[1]) * _UNIT_SECONDS[m[2]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UsageError(
            f"cannot read {text!r} as a time (try 2026-08-01, an epoch, or 7d)") from None


def session_ids(store: Any, filters: Filters, tally: Tally) -> list[str]:
    if filters.sessions:
        ids = list(dict.fromkeys(store.resolve_session(ref) for ref in filters.sessions))
        rows = {r["id"]: r for r in store.selection_rows(ids)}
        candidates = [rows[i] for i in ids]
    else:
        # Session columns and label tags only: nothing is summed over the exchanges of
        # sessions a filter leaves out.
        candidates = store.selection_rows()
    kept = []
    for row in candidates:
        reason = skip_reason(row, filters, store)
        if reason:
            tally.skipped[f"sessions ({reason})"] += 1
        else:
            kept.append(row["id"])
    return kept


def _calls(store: Any, row: dict[str, Any]) -> int:
    """Calls as `sessions` and `show` count them (lineage.usage: a retry is not a call, side
    calls are apart), not the store's count of model exchanges."""
    return session_usage(store.iter_exchanges(row["id"]), row.get("harness"))["calls"]


def skip_reason(row: dict[str, Any], f: Filters, store: Any) -> str | None:
    """Why the session `row` (as Store.selection_rows has it) is left out, or None."""
    if f.harness and row.get("harness") != f.harness:
        return "other harness"
    if f.user and row.get("user") != f.user:
        return "other user"
    if f.since is not None and row["started_at"] < f.since:
        return "before --since"
    if f.until is not None and row["started_at"] >= f.until:
        return "after --until"
    label = row["label_tags"]
    if f.labelled and label is None:
        return "not labelled"
    tags = {**(row.get("tags") or {}), **(label or {})}
    if any(tags.get(k) != v for k, v in f.tags.items()):
        return "tags do not match"
    if f.min_calls is not None and _calls(store, row) < f.min_calls:
        return "fewer calls than --min-calls"
    return None
