"""A system prompt that differs from its parent's only in small blocks is stored in parts
(store.content.system_ref): Claude Code, talking to api.anthropic.com, starts its system prompt
with a billing block whose `cch` changes on every call. Every exchange still reads back
byte for byte, alone and in order (and a segment a call, after gc, pushed:
test_store_references); on SQLite and Postgres."""

from __future__ import annotations

import pytest
from support import (
    billed,
    count,
    reads_back,
    realistic_exchanges,
    write_session,
)

from forge_record.records import Request, Text
from forge_record.store import content


def test_a_billing_block_that_changes_on_every_call_costs_no_blob_a_call(store, store_url):
    plain = realistic_exchanges(40)
    sent = billed(plain)
    assert len({ex.request.system[0].text for ex in sent}) == len(sent)
    write_session(store, "plain", plain)
    before = count(store_url, "blobs")

    write_session(store, "billed", sent)

    # Only the prompts of calls with no parent (nothing to differ from) are new blobs; whole,
    # every call's prompt was one.
    assert count(store_url, "blobs") - before < len(sent) / 4
    reads_back(store, "billed", sent)


# --- the reference itself ------------------------------------------------------------------

BIG = Text(text="You are an agent. " * 40)


def ref(system, parent_system=None):
    kept = {}

    def keep(data: bytes) -> str:
        kept[name := f"n{len(kept)}"] = data
        return name

    parent = None if parent_system is None else Request(system=parent_system)
    found = content.system_ref(Request(system=system), parent, keep)
    return found, kept


@pytest.mark.parametrize("system, parent, parts", [
    ([Text(text="a"), BIG], None, False),  # no parent: whole
    ([Text(text="a"), BIG], [Text(text="b"), BIG], True),  # a small block changed
    ([Text(text="a"), BIG], [Text(text="a"), Text(text="You are an agent. " * 41)], False),
    ([Text(text="a"), BIG], [BIG], False),  # another number of blocks
    ([Text(text="a")], [Text(text="b")], True),
    ([], [Text(text="b")], False),
])
def test_a_prompt_is_in_parts_only_when_only_small_blocks_changed(system, parent, parts):
    found, kept = ref(system, parent)
    assert isinstance(found, list) == parts
    # Either way the reference rebuilds the prompt, and the whole prompt's bytes, exactly.
    assert content.system_bytes(found, kept.__getitem__) == content.system_blob(
        Request(system=system))
    assert content.Decoded(kept.__getitem__).system(found) == system
    if parts:  # small blocks inline, the others named
        assert [isinstance(p, str) for p in found] == [len(b.text) > 200 for b in system]
