"""Lineage: the threads inside one recorded session, derived at read time from its exchanges.

`threads.analyze` places every call (docs/records.md says how); `signals` is what one
exchange shows by itself, `fingerprint` names the harness build that sent it, `usage` sums
tokens once per API call, and `types` holds the values all of them return.
"""

from forge_record.lineage.threads import analyze
from forge_record.lineage.types import Call, Lineage, Thread, to_dict

__all__ = ["Call", "Lineage", "Thread", "analyze", "to_dict"]
