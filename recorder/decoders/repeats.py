"""A request body that repeats a recent one, parsed only where it differs.

An agent resends its whole conversation on every call: a new request body is the one before
it up to the last message or so (a moving `cache_control` marker changes a few bytes there),
then a few new messages, then the same system prompt, tools and settings. `Repeats` keeps the
last few big bodies it parsed, with where each element of the growing array (`messages`,
`input`, `contents`) starts in the bytes (found the first time a body extends one: a body
that none extends costs no more than its parse). A new body that shares leading bytes with
one of them up to an element's start has only the elements from there parsed; the others are
the objects parsed before (so a converter comparing them finds them identical at once). So
is every top-level value after the array when the body shares its trailing bytes from the
array's closing `]` on. When it does not, those after the bytes it shares are still the
values parsed before, and the others are parsed anew: Claude Code, talking to
api.anthropic.com, writes its system prompt after the messages with a billing block that
changes on every call, and its tools (35 to 65 KB) after that. (Finding every value's
extent by tokenizing took 10 ms on a 300 KB body; the old body's values are found by
comparing orjson's writing of them with its bytes, and the new elements' end where a tail
as long as the old one would start, when the bytes there read so.)

That is the full parse's answer exactly: JSON's reading of a byte is decided by the bytes
before it, so the shared leading bytes read as before and leave the parser inside the array,
expecting an element; the bytes up to the `]` that closes the array are parsed at the same
depth and must make whole elements; the shared trailing bytes then read as before, and
different ones are parsed as the members after the array, none of them a key the leading
bytes hold. Anything else (the bytes do not parse so, a key written twice, or nothing is
remembered that fits) takes the full parse. tests/test_decoder_repeats.py holds the two
paths equal.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

from forge_record.shared_ends import common_ends

REMEMBER_FROM = 16 << 10  # smaller bodies are parsed whole: there is little to save
REMEMBERED = 4  # bodies, newest kept: a few threads (main, sub-agent, titles) interleave
MAX_BYTES = 16 << 20  # and at most this many body bytes in all (each body is kept once)

# A JSON token that moves the depth or separates values; a string is skipped whole (its
# brackets are text). Possessive, so a long string is one regex step.
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{},:]')
_SPACE = re.compile(rb"[ \t\n\r]*")
_JSON_SPACE = b" \t\n\r"


@dataclass(frozen=True, slots=True)
class _Parsed:
    """A body, its parse, and where the elements of `data[key]` start and the array ends."""

    body: bytes
    key: str
    data: dict[str, Any]
    starts: tuple[int, ...] | None  # None: not laid out yet
    end: int  # the offset of the `]` that closes data[key]


class Repeats:
    def __init__(self, remembered: int = REMEMBERED, max_bytes: int = MAX_BYTES) -> None:
        self._recent: deque[_Parsed] = deque()
        self._remembered, self._max_bytes = remembered, max_bytes
        self._lock = threading.Lock()  # the writer may finalize from more than one thread
        self.extended = 0  # bodies parsed through a remembered one (tests, benchmarks)

    def loads(self, body: bytes, key: str) -> Any:
        """`orjson.loads(body)`, sharing what it can with a remembered body whose `key` (a
        top-level array) this one extends; raises what orjson raises."""
        if len(body) < REMEMBER_FROM:
            return orjson.loads(body)
        parsed = self._extend(body, key)
        if parsed is not None:
            self.extended += 1
        else:
            data = orjson.loads(body)
            if not isinstance(data, dict) or not isinstance(data.get(key), list):
                return data
            # laid out only once a body extends it: one that none does costs nothing more
            parsed = _Parsed(body, key, data, None, -1)
        self._remember(parsed)
        return parsed.data

    def clear(self) -> None:
        with self._lock:
            self._recent.clear()

    def __len__(self) -> int:
        return len(self._recent)

    @property
    def bytes_kept(self) -> int:
        return sum(len(p.body) for p in self._recent)

    def _extend(self, body: bytes, key: str) -> _Parsed | None:
        """`body` parsed through the remembered body it shares the most leading bytes with,
        or None when none fits."""
        with self._lock:
            recent = [p for p in reversed(self._recent) if p.key == key]  # the newest first
        best, shared, suffix = None, 0, 0
        for old in recent:
            p, s = common_ends(body, old.body)
            if p > shared:
                best, shared, suffix = old, p, s
            if 2 * (shared + suffix) >= len(body):  # usually the body before in its thread
                break
        if best is None:
            return None
        if best.starts is None:
            if shared <= best.body.find(b'"%s"' % key.encode()):
                return None  # a head that changes every call: the array is not reached
            best = self._lay_out(best)
            if best is None:
                return None
        # the last element that starts within the shared bytes: it and the rest are parsed
        k = next((i for i in range(len(best.starts) - 1, -1, -1) if best.starts[i] <= shared),
                 None)
        if k is None:
            return None
        tail = len(best.body) - best.end  # the bytes from the array's `]` on
        lo = best.starts[k]
        if suffix >= tail:
            hi, rest = len(body) - tail, None
            found = _elements(body, lo, hi, k)
        else:
            # Where the array ends: first where a tail as long as before would start (a
            # billing block's new value is as long as the old one), then where tokenizing the
            # new elements finds it. Either is taken only if what it cuts reads as elements
            # and as the members after them, and then it is where the full parse ends it.
            found = rest = None
            for hi in _array_ends(body, lo, len(body) - tail):
                found = _elements(body, lo, hi, k)
                rest = None if found is None else _members(body, hi + 1, best, suffix)
                if rest is not None:
                    break
            if rest is None:
                return None
        if found is None:
            return None
        elements, new_starts = found
        data = dict(best.data)  # the same key order; the other values shared
        data[key] = best.data[key][:k] + elements
        if rest is not None:  # the members after the array: this body's own
            for name in list(data)[list(data).index(key) + 1:]:
                del data[name]
            data.update(rest)
        return _Parsed(body, key, data, best.starts[:k] + new_starts, hi)

    def _lay_out(self, parsed: _Parsed) -> _Parsed | None:
        """`parsed` with its elements' starts, in its place among the remembered (dropped
        from them when they cannot be told)."""
        laid = _laid_out(parsed.body, parsed.key, parsed.data)
        with self._lock:
            at = next((i for i, p in enumerate(self._recent) if p is parsed), None)
            if at is not None:
                if laid is None:
                    del self._recent[at]
                else:
                    self._recent[at] = laid
        return laid

    def _remember(self, parsed: _Parsed) -> None:
        if len(parsed.body) > self._max_bytes:
            return
        with self._lock:
            self._recent.append(parsed)
            kept = sum(len(p.body) for p in self._recent)
            while len(self._recent) > self._remembered or kept > self._max_bytes:
                kept -= len(self._recent.popleft().body)


def _laid_out(body: bytes, key: str, data: Any) -> _Parsed | None:
    """`body` (parsed as `data`) with where `data[key]`'s elements start; None when that
    cannot be told for sure (no such array, the key written twice or with escapes)."""
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        return None
    wanted = orjson.dumps(key)
    depth, last_key, found = 0, None, None
    for token in _TOKEN.finditer(body):
        t = body[token.start()]
        if t == 0x22:  # a string: a key when at depth 1 and followed by `:`
            last_key = token.group() if depth == 1 else None
        elif t == 0x3A:  # `:`
            if last_key is not None and b"\\" in last_key:
                return None  # an escaped key could spell `key`: leave it to the full parse
            if last_key == wanted:
                if found is not None:
                    return None  # written twice
                found = _SPACE.match(body, token.end()).end()
            last_key = None
        elif t in b"[{":
            depth += 1
        elif t in b"]}":
            depth -= 1
    if found is None or body[found] != 0x5B:  # `[`
        return None
    end = _array_end(body, found + 1)
    starts = None if end is None else _starts_of(body, found + 1, end, data[key])
    if starts is None or len(starts) != len(data[key]):
        return None
    return _Parsed(body, key, data, starts, end)


def _array_end(body: bytes, lo: int) -> int | None:
    """The offset of the `]` that closes the array whose elements start at `lo` (right after
    its `[`); None if a `}` closes it or nothing does."""
    depth = 0
    for token in _TOKEN.finditer(body, lo):
        t = body[token.start()]
        if t in b"[{":
            depth += 1
        elif t in b"]}":
            depth -= 1
            if depth < 0:
                return token.start() if t == 0x5D else None
    return None


def _array_ends(body: bytes, lo: int, guess: int):
    """Offsets that may hold the `]` closing the array whose elements start at `lo`: `guess`
    if it holds a `]`, then the one tokenizing finds (see _array_end)."""
    if lo <= guess < len(body) and body[guess] == 0x5D:
        yield guess
    end = _array_end(body, lo)
    if end is not None and end != guess:
        yield end


def _elements(body: bytes, lo: int, hi: int, k: int) -> tuple[list, tuple[int, ...]] | None:
    """The elements body[lo:hi] holds, the k-th on of their array, and where each starts;
    None if those bytes are not whole elements."""
    middle = body[lo:hi]
    if k and not middle.strip(_JSON_SPACE):
        return None  # `[a, ]`: not JSON, which the full parse says in its own words
    try:  # at the depth the elements have in the body: the same nesting limit applies
        elements = orjson.loads(b'{"":[' + middle + b"]}")[""]
    except orjson.JSONDecodeError:
        return None
    starts = _starts_of(body, lo, hi, elements)
    if starts is None or len(elements) != len(starts):
        return None  # `1],"x":[2` parses too, as elements of two arrays
    return elements, starts


def _members(body: bytes, at: int, old: _Parsed, suffix: int) -> dict[str, Any] | None:
    """The top-level members body[at:] holds after the array `old.key` (`,"k":v ...}` or
    `}`), parsed; those in the `suffix` trailing bytes it shares with `old.body` are old's
    values (see _kept). None if those bytes are not that, or name the array's key or a key
    before it (the full parse decides what a key written twice means)."""
    cut, kept = _kept(body, old, suffix)
    at = _SPACE.match(body, at).end()
    if cut <= at:  # the array ends after the shared bytes begin: they are not these members
        cut, kept = len(body), {}
    rest = body[at:cut]
    if not kept and rest[:1] == b"}":
        return None if rest[1:].strip(_JSON_SPACE) else {}
    if kept and not rest:
        return dict(kept)  # the array's `]`, then the kept members
    if rest[:1] != b",":
        return None
    try:
        members = orjson.loads(b"{" + rest[1:] + (b"}" if kept else b""))
    except orjson.JSONDecodeError:
        return None
    before = list(old.data)[: list(old.data).index(old.key) + 1]
    if not members or any(name in members for name in (*before, *kept)):
        return None  # `],}`, or a key written twice
    members.update(kept)
    return members


def _kept(body: bytes, old: _Parsed, suffix: int) -> tuple[int, dict[str, Any]]:
    """The members after `old`'s array that lie whole in the trailing bytes `body` shares
    with `old.body` (the tools after Claude Code's changing billing block), with where the
    comma before the first of them is in `body`; (len(body), {}) when there are none, or the
    old members are not written as orjson writes them, which is how their extents are told.
    From that comma on the bytes are old's: once the bytes before it are whole members, they
    read as they read there."""
    names = list(old.data)[list(old.data).index(old.key) + 1:]
    shared_from, at, commas = len(old.body) - suffix, old.end + 1, []
    for name in names:
        head = b"," + orjson.dumps(name) + b":"
        try:
            dump = orjson.dumps(old.data[name])
        except TypeError:  # nested deeper than orjson writes
            return len(body), {}
        if not (old.body.startswith(head, at) and old.body.startswith(dump, at + len(head))):
            return len(body), {}
        commas.append(at)
        at += len(head) + len(dump)
    first = next((i for i, comma in enumerate(commas) if comma >= shared_from), None)
    if first is None or old.body[at:].strip(_JSON_SPACE) != b"}":
        return len(body), {}
    return (commas[first] + len(body) - len(old.body),
            {name: old.data[name] for name in names[first:]})


def _starts_of(body: bytes, lo: int, hi: int, elements: list[Any]) -> tuple[int, ...] | None:
    """Where each of `elements`, the comma-separated JSON values in body[lo:hi], starts.
    Most clients write JSON as orjson does, so each element's dump is tried against the bytes
    first (memcmp speed; a dump that matches is the element's extent, as values other than
    numbers end in a closing delimiter, and a number must be followed by a separator); the
    bytes are tokenized from the first one that does not match."""
    starts: list[int] = []
    at = _SPACE.match(body, lo, hi).end()
    for element in elements:
        if at >= hi:
            break
        try:
            dump = orjson.dumps(element)
        except TypeError:  # nested deeper than orjson writes: tokenized below
            break
        if not body.startswith(dump, at):
            break
        starts.append(at)
        at = _SPACE.match(body, at + len(dump), hi).end()
        if at < hi and body[at] != 0x2C:  # `,`
            starts.pop()
            break
        at = _SPACE.match(body, at + 1, hi).end() if at < hi else hi
    else:
        if at >= hi:
            return tuple(starts)
    rest = _element_starts(body, starts[-1] if starts else lo, hi)
    if rest is None:
        return None
    return (*starts[:-1], *rest) if starts else rest


def _element_starts(body: bytes, lo: int, hi: int) -> tuple[int, ...] | None:
    """Where each of the comma-separated JSON values in body[lo:hi] starts; None if a
    bracket there closes one opened before `lo`."""
    first = _SPACE.match(body, lo, hi).end()
    if first >= hi:
        return ()
    starts, depth = [first], 0
    for token in _TOKEN.finditer(body, first, hi):
        t = body[token.start()]
        if t in b"[{":
            depth += 1
        elif t in b"]}":
            depth -= 1
            if depth < 0:
                return None
        elif t == 0x2C and depth == 0:  # `,`
            starts.append(_SPACE.match(body, token.end(), hi).end())
    return tuple(starts)


REPEATS = Repeats()  # the writer's: one per process, shared by every dialect
