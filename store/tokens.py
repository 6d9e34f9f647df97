"""Engine token ids in the store: packed arrays in a blob, prompt ids as what the parent lacks.

An engine call's `response.tokens` (records.Tokens) holds the prompt ids, the sampled ids,
their logprobs and the top-k alternatives. As JSON lists in a manifest they cost ~7 bytes a
token, and each call of a rollout repeats its whole prompt, which is the previous call's
prompt and output plus a few new turns. So the store keeps them as one blob per call:

    b"t1" varint(keep) ints(prompt ids after the first `keep`) ints(ids) floats(logprobs)
    json(top_logprobs)

where `keep` counts the leading prompt ids equal to the parent's prompt ids followed by its
output ids (the manifest names the parent), ints are uint32 little endian and floats are
float32 when every value survives the trip (vLLM sends float32 values printed as JSON
doubles: tests/data/vllm holds nothing else), float64 otherwise. A list that does not fit
(None in it, a value that is not an int in uint32 range, a non-float) is kept as JSON, so
the record reads back exactly as it was written. Every KEYFRAME_EVERY-th call of a chain
keeps its whole prompt, so rebuilding one call decodes at most that many blobs.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any

import orjson

from forge_record.records import Tokens
from forge_record.store.delta import read_varint, varint

MAGIC = b"t1"
KEYFRAME_EVERY = 32
_NONE, _U32, _F32, _F64, _JSON = range(5)


def encode(tokens: Tokens, base: list[int] | None) -> tuple[bytes, int]:
    """The blob for `tokens` and `keep`, the prompt ids it takes from `base` (the parent's
    prompt then output ids; None for no parent)."""
    prompt = tokens.prompt_ids
    keep = _shared(prompt, base) if prompt is not None and base else 0
    out = bytearray(MAGIC) + varint(keep)
    out += _ints(prompt[keep:] if prompt is not None else None)
    out += _ints(tokens.ids) + _floats(tokens.logprobs) + _json(tokens.top_logprobs)
    return bytes(out), keep


def decode(blob: bytes, base: list[int] | None) -> Tokens:
    if blob[:2] != MAGIC:
        raise ValueError("not a token blob")
    keep, at = read_varint(blob, 2)
    added, at = _read(blob, at)
    ids, at = _read(blob, at)
    logprobs, at = _read(blob, at)
    top, at = _read(blob, at)
    prompt = None if added is None else (base or [])[:keep] + added
    return Tokens(prompt_ids=prompt, ids=ids, logprobs=logprobs, top_logprobs=top)


def full(tokens: Tokens | None) -> list[int] | None:
    """What a child call's prompt may start with: prompt ids, then output ids."""
    if tokens is None or tokens.prompt_ids is None:
        return None
    return tokens.prompt_ids + (tokens.ids or [])


def _shared(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _ints(values: list[int] | None) -> bytes:
    if values is None:
        return bytes([_NONE])
    if all(type(v) is int and 0 <= v < 1 << 32 for v in values):
        return bytes([_U32]) + varint(len(values)) + _le(array("I", values))
    return _json(values)


def _floats(values: list[float | None] | None) -> bytes:
    if values is None:
        return bytes([_NONE])
    if not all(type(v) is float for v in values):
        return _json(values)
    packed = array("f", values)
    kind, packed = (_F32, packed) if packed.tolist() == values else (_F64, array("d", values))
    return bytes([kind]) + varint(len(values)) + _le(packed)


def _json(value: Any) -> bytes:
    if value is None:
        return bytes([_NONE])
    data = orjson.dumps(value)
    return bytes([_JSON]) + varint(len(data)) + data


def _read(blob: bytes, at: int) -> tuple[Any, int]:
    kind = blob[at]
    if kind == _NONE:
        return None, at + 1
    n, at = read_varint(blob, at + 1)
    if kind == _JSON:
        return orjson.loads(blob[at : at + n]), at + n
    code, width = {_U32: ("I", 4), _F32: ("f", 4), _F64: ("d", 8)}[kind]
    values = array(code)
    values.frombytes(blob[at : at + n * width])
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist(), at + n * width


def _le(values: array) -> bytes:
    if sys.byteorder == "big":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()
