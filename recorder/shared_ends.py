"""How far two requests start alike and end alike: as bytes, at memcmp speed, and as lists.

The store's raw-body deltas (store.delta) and the redaction prefilter's rescans
(forge_record.redact.bodies) both look only at what changed between an agent's request and the
one before it, which is the same bytes but for a few messages. `shared_prefix` is the same
question asked of two message lists (lineage's signals, the store's message derivations).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

_CHUNK = 1 << 16


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix; compares 64 KiB at a time, then bisects."""
    n, lo = min(len(a), len(b)), 0
    while lo + _CHUNK <= n and a[lo : lo + _CHUNK] == b[lo : lo + _CHUNK]:
        lo += _CHUNK
    hi = min(lo + _CHUNK, n)  # a[:lo] == b[:lo]; the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the longest common suffix, at most `limit`."""
    la, lb, lo = len(a), len(b), 0
    while lo + _CHUNK <= limit and a[la - lo - _CHUNK : la - lo] == b[lb - lo - _CHUNK : lb - lo]:
        lo += _CHUNK
    hi = min(lo + _CHUNK, limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_ends(a: bytes, b: bytes) -> tuple[int, int]:
    """`common_prefix(a, b)` and the common suffix of what is left after it. A new request
    is compared with the one before it by the redaction prefilter, the request parser
    (decoders.repeats) and the store's delta, one after another: the last few answers are
    kept, by the identity of the two bodies, so the bytes are compared once."""
    with _ENDS_LOCK:
        for x, y, ends in _ENDS:
            if x is a and y is b:
                return ends
    p = common_prefix(a, b)
    ends = p, common_suffix(a, b, min(len(a), len(b)) - p)
    with _ENDS_LOCK:
        _ENDS.append((a, b, ends))
    return ends


# A few (a, b, ends): they hold bodies the writer holds anyway, for a call or two more.
_ENDS: deque[tuple[bytes, bytes, tuple[int, int]]] = deque(maxlen=8)
_ENDS_LOCK = threading.Lock()


def shared_prefix(a: Sequence, b: Sequence) -> int:
    """How many leading items `a` and `b` have in common (compared with ==)."""
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    # The usual case, a request extending the one before, is one compare in C (which takes
    # identical objects as equal without comparing their fields); its last item first, as
    # that is where two lists that differ usually do.
    if a[n - 1] == b[n - 1] and a[:n] == b[:n]:
        return n
    return next((i for i in range(n) if a[i] != b[i]), n)
