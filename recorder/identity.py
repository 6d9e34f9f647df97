"""Content identity: canonical bytes for plain JSON values, and the hashes named after them.

This module is the one home of both (the store's blob names included): whatever names
content hashes the same bytes the same way.

`canonical_json(value)`: object keys sorted, no whitespace, UTF-8. Only plain values have
canonical bytes (dict with str keys, list, tuple, str, int, float, bool, None); give it a
record's `to_dict()` form, never a dataclass, because orjson serializes dataclass fields in
definition order whatever the sort flag says: a dataclass raises TypeError.

Two names of canonical bytes, each with a prefix naming its scheme, so a future change to one
(a new prefix) can never be mistaken for the old one:
- `content_hash(value)` is `"fr1:"` + the sha256 hex digest of the value's canonical JSON:
  what lineage fingerprints show and compare (docs/records.md). `chain_hash` folds a sequence
  of hashes so that a node's hash includes everything before it: two message lists share a
  chain hash at position k exactly when their first k messages are equal.
- `blob_name(data)` is `"c1:"` + the first 128 bits of the sha256 of canonical bytes, in hex:
  the store's content-addressed blob names (docs/STORAGE.md). Stored names never change.
  The store's `blobs` table keys a name by its 16 bytes (`blob_key`, revision 0007), and
  `blob_key_name` gives the name back: the same name, 19 bytes shorter in every row and index.

`local_hash` is the fast one, for identity within one running analysis only: it hashes
orjson's own serialization, records' dataclasses included (in field order, without their
`type` class variable), so it changes whenever a record's fields do. Never store it, show it
or compare it across versions; that is what `content_hash` is for.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

HASH_PREFIX = "fr1:"  # content_hash and chain_hash
BLOB_PREFIX = "c1:"  # blob_name: the store's blob names


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a plain JSON value (TypeError for anything else, dataclasses
    included: orjson would serialize those natively, in field order)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS)


def content_hash(value: Any) -> str:
    return HASH_PREFIX + hashlib.sha256(canonical_json(value)).hexdigest()


def blob_name(data: bytes) -> str:
    """The store's name for canonical bytes (`canonical_json`'s)."""
    return BLOB_PREFIX + hashlib.sha256(data).hexdigest()[:32]


def blob_key(name: str) -> bytes:
    """The 16 bytes `name` (a `blob_name`) stands for; ValueError for any other string."""
    if len(name) != len(BLOB_PREFIX) + 32 or not name.startswith(BLOB_PREFIX):
        raise ValueError(f"not a blob name: {name!r}")
    return bytes.fromhex(name[len(BLOB_PREFIX):])


def blob_key_name(key: bytes) -> str:
    """The inverse of blob_key."""
    return BLOB_PREFIX + key.hex()


def local_hash(value: Any) -> str:
    """A session-local identity for plain values and records alike (see above)."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def chain_hash(previous: str | None, item: str) -> str:
    """The hash of a chain whose node before is `previous` (None at the start) and whose
    newest node is `item` (itself a hash)."""
    seed = (previous or "").encode() + b"\n" + item.encode()
    return HASH_PREFIX + hashlib.sha256(seed).hexdigest()


def short(hash_value: str | None, length: int = 12) -> str:
    """A hash for people to read: the hex without the prefix, cut to `length`."""
    if not hash_value:
        return "-"
    return hash_value.removeprefix(HASH_PREFIX)[:length]
