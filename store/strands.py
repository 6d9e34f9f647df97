"""A streamed response cut into its framing and its text, so each compresses on its own.

An SSE response repeats the decoded record's text (and tool arguments, thinking, signatures)
a few characters at a time, each piece inside the same event framing. Compressed as it is,
every piece costs zstd a match into the answer blob and another into the framing. Cut apart:

- the *skeleton* is the body with every streamed string value emptied (`"text":""`): the same
  event again and again, which zstd stores as repeats of the previous event;
- the *strand* is those values one after another: the record's text in one piece, which the
  answer blob (in the compression prefix) holds almost verbatim;
- the *lengths* say where the strand is cut.

Which values are streamed text is a list of JSON keys, not a parser per dialect: Anthropic's
`text`, `thinking`, `partial_json`, `signature`, OpenAI Chat's `content`, `arguments`,
`refusal`, Responses' `delta`, Gemini's `text`. The strand holds the values unescaped when
re-escaping them gives back the same bytes (then `partial_json` reads as the tool input's
JSON), else as they were. `split` checks that `join` rebuilds the body byte for byte and
returns None otherwise, so an unusual stream is only stored some other way, never changed.
"""

from __future__ import annotations

import re
from itertools import accumulate

import orjson

_KEYS = (b"text", b"thinking", b"partial_json", b"signature", b"content", b"arguments",
         b"refusal", b"delta")
# A key among _KEYS with its colon and opening quote, its string value (escapes consumed,
# so a quote inside a value never ends it), its closing quote. Nothing is matched inside a
# value: the scan resumes after it. re.split() hands back the text between matches and the
# three groups of each, so cutting and rebuilding happen in C.
_VALUE = re.compile(rb'("(?:' + b"|".join(_KEYS) + rb')"\s*:\s*")([^"\\]*(?:\\.[^"\\]*)*)(")', re.S)

ESCAPED, PLAIN = 0, 1  # how the strand holds the values
WHOLE = 2  # not cut: the skeleton is the whole body (a body split() returns None for)
Cut = tuple[int, bytes, list[int], bytes]  # (mode, skeleton, lengths, strand)


def split(body: bytes) -> Cut | None:
    """(mode, skeleton, lengths, strand) that join() turns back into `body`, or None when
    there is nothing to cut or the cut would not rebuild it."""
    parts = _VALUE.split(body)  # text, (key, value, quote, text) per value
    values = parts[2::4]
    if not values:
        return None
    parts[2::4] = [b""] * len(values)
    skeleton = b"".join(parts)
    for mode in (PLAIN, ESCAPED):
        pieces = _unescape(values) if mode == PLAIN else values
        if pieces is None:
            continue
        lengths = [len(p) for p in pieces]
        strand = b"".join(pieces)
        if join(mode, skeleton, lengths, strand) == body:
            return mode, skeleton, lengths, strand
    return None


def join(mode: int, skeleton: bytes, lengths: list[int], strand: bytes) -> bytes:
    """The body split() cut: each value put back where the skeleton has an empty one."""
    if mode == WHOLE:
        return skeleton
    parts = _VALUE.split(skeleton)
    if len(parts) != 4 * len(lengths) + 1:
        raise ValueError("skeleton and lengths disagree")
    ends = list(accumulate(lengths))
    values = [strand[end - n:end] for end, n in zip(ends, lengths, strict=True)]
    if mode == PLAIN and _SPECIAL.search(strand):
        values = [_escape(v) for v in values]
    parts[2::4] = values
    return b"".join(parts)


# What JSON must escape in a string. A value without any of these reads as itself, and
# orjson writes it back as itself (it leaves other characters, non-ASCII included, as they
# are), so most values skip the round trip through a str; split() checks every value with
# join() anyway.
_SPECIAL = re.compile(rb'["\\\x00-\x1f]')


def _unescape(values: list[bytes]) -> list[bytes] | None:
    if not any(b"\\" in v for v in values):
        return values  # nothing escaped: every value reads as itself
    try:
        return [orjson.loads(b'"' + v + b'"').encode() if _SPECIAL.search(v) else v
                for v in values]
    except (orjson.JSONDecodeError, UnicodeEncodeError):
        return None  # a lone surrogate split across events, invalid JSON, ...


def _escape(value: bytes) -> bytes:
    return orjson.dumps(value.decode())[1:-1] if _SPECIAL.search(value) else value
