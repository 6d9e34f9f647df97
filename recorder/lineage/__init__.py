"""Lineage: the threads inside one recorded session, derived at read time from its exchanges.

`threads.analyze` places every call (docs/records.md says how); `signals` is what one
exchange shows by itself, `fingerprint` names the harness build that sent it, `usage` sums
tokens once per API call, and `types` holds the values all of them return.
"""

from collections.abc import Iterable
from typing import Any

from forge_record.lineage.threads import analyze
from forge_record.lineage.types import Call, Lineage, Thread, to_dict
from forge_record.lineage.usage import tokens_in

__all__ = ["Call", "Lineage", "Thread", "analyze", "session_usage", "to_dict", "tokens_in"]


def session_usage(exchanges: Iterable[Any], harness: str | None = None) -> dict[str, Any]:
    """A session's counts as `usage` defines them (calls, retries, side calls, tokens in),
    for callers that print them without showing the threads."""
    return analyze(exchanges, harness, fingerprints=False).usage
