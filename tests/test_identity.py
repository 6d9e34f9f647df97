"""One home for canonical bytes and the hashes named after them (forge_record.identity).

The store's blob names (`c1:`) and lineage's content hashes (`fr1:`) are written to stores and
shown to people: the golden values below were computed before the two schemes shared one
module, and must never change. Both refuse a dataclass the same way.
"""

from __future__ import annotations

import pytest

from forge_record.identity import BLOB_PREFIX, blob_name, canonical_json, content_hash
from forge_record.records import Message, Text, Tool
from forge_record.store import content


def test_blob_names_are_the_ones_stores_already_hold():
    message = Message(role="user", content=[Text(text="héllo ✓")])
    tool = Tool(name="bash", description="run", parameters={"type": "object", "b": 1, "a": 2})
    assert blob_name(content.message_blob(message)) == "c1:ad1d180ec488b9ba4bb20fd742da247d"
    assert blob_name(content.tools_blob([tool])) == "c1:10bc703bfe71f7a6f130b612ac6a12cc"
    assert blob_name(content.parameters_blob({"max_tokens": 5, "a": [1.5, None, True]})) == (
        "c1:f8ae984fe097d312f52b80784e8d922d")
    assert blob_name(b"").startswith(BLOB_PREFIX) and len(blob_name(b"")) == 35


def test_content_hashes_are_the_ones_fingerprints_already_show():
    assert content_hash({"b": [1, "é"], "a": None}) == (
        "fr1:f8f17faab95c024891d173fa43442b0e52007736a1f36715ac721ab22deeefc5")


@pytest.mark.parametrize("make", [
    lambda record: canonical_json(record),
    lambda record: content_hash({"x": record}),
    lambda record: content.parameters_blob({"x": record}),
], ids=["canonical_json", "content_hash", "parameters_blob"])
def test_a_dataclass_is_refused_wherever_bytes_are_made_canonical(make):
    # orjson would write its fields in definition order, sorted keys or not.
    with pytest.raises(TypeError):
        make(Message(role="user", content=[]))
