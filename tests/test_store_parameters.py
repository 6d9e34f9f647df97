"""Parameters that differ from their parent's are stored as changes to a base blob
(store.content.parameters_ref): Codex over its WebSocket sends a new `previous_response_id`
and a clock on every call. Every exchange still reads back byte for byte, alone and in order
(and a segment a call, after gc, pushed: test_store_references); on SQLite and Postgres. The
changes themselves rebuild any parameters exactly (hypothesis)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    count,
    reads_back,
    realistic_exchanges,
    stamped,
    write_session,
)

from forge_record.identity import canonical_json
from forge_record.store import content


def test_parameters_that_change_on_every_call_cost_no_blob_a_call(store, store_url):
    plain = realistic_exchanges(40)
    sent = stamped(plain)
    assert len({canonical_json(ex.request.parameters) for ex in sent}) == len(sent)
    write_session(store, "plain", plain)
    before = count(store_url, "blobs")

    write_session(store, "stamped", sent)

    # Only the parameters of calls with no parent are new blobs; whole, every call's were one.
    assert count(store_url, "blobs") - before < len(sent) / 4
    reads_back(store, "stamped", sent)


def test_numbers_read_back_as_they_were_written(store):
    """A call's `temperature` 1.0 after its parent's 1 (equal in Python) is stored as 1.0."""
    from forge_record.decoders import anthropic_messages

    sent = []
    for n, ex in enumerate(realistic_exchanges(6)):
        raw = ex.raw_request.replace(b'"stream":', b'"temperature":%s,"stream":'
                                     % (b"1.0" if n % 2 else b"1"), 1)
        sent.append(dataclasses.replace(
            ex, raw_request=raw, request=anthropic_messages.DIALECT.parse_request(raw)))
    assert [ex.request.parameters["temperature"] for ex in sent] == [1] * 6

    write_session(store, "s", sent)

    def written(exchanges):
        return [canonical_json(ex.request.parameters) for ex in exchanges]

    assert written(store.iter_exchanges("s", raw=True)) == written(sent)
    assert written([store.get_exchange("s", sent[3].seq, raw=True)]) == written(sent[3:4])


# --- the reference itself ------------------------------------------------------------------

CLOCKED = {"model": "gpt-5.4", "store": False,
           "client_metadata": {"session_id": "s-1", "clock_ms": "1796429926541"},
           "instructions": "You are Codex. " * 30}


def refs(*parameters):
    """Each parameters' reference, each the child of the one before, and the blobs kept."""
    kept: dict[str, bytes] = {}

    def keep(data: bytes) -> str:
        kept[name := f"n{len(kept)}"] = data
        return name

    out, parent, parent_ref = [], None, None
    for p in parameters:
        parent_ref = content.parameters_ref(p, parent, parent_ref, keep)
        out.append(parent_ref)
        parent = p
    for p, ref in zip(parameters, out, strict=True):
        assert content.parameters_bytes(ref, kept.__getitem__) == content.parameters_blob(p)
        assert content.Decoded(kept.__getitem__).parameters(ref) == p
    return out, kept


def clocked(n: int, **top) -> dict:
    return {**CLOCKED, "client_metadata": {**CLOCKED["client_metadata"], "clock_ms": str(n)},
            **top}


def test_a_child_names_its_parents_base_and_what_changed_from_it():
    (first, second, third), kept = refs(clocked(1), clocked(2, previous_response_id="r1"),
                                        clocked(3, previous_response_id="r2"))
    assert first == "n0" and len(kept) == 1
    assert second == ["n0", [[["client_metadata", "clock_ms"], "2"],
                             [["previous_response_id"], "r1"]]]
    # changes from the base, not from the parent: the same two paths, new values
    assert third == ["n0", [[["client_metadata", "clock_ms"], "3"],
                            [["previous_response_id"], "r2"]]]


def test_removed_keys_and_replaced_objects_are_changes_too():
    a = {"x": {"y": 1, "z": [1]}, "w": True}
    (_, ref, _, _), _ = refs(a, {"x": {"z": [1]}}, {"x": 5, "w": True}, {"x": {"q": None}})
    assert ref[1] == [[["w"]], [["x", "y"]]]


def test_values_compare_as_their_json():
    """1, 1.0 and true are equal in Python, not on the wire."""
    (_, one, true), _ = refs({"t": 1}, {"t": 1.0}, {"t": True})
    assert one[1] == [[["t"], 1.0]] and true[1] == [[["t"], True]]


def test_parameters_that_changed_much_are_a_blob_again():
    (_, ref), kept = refs(CLOCKED, {**CLOCKED, "instructions": "You are Codex, now. " * 30})
    assert ref == "n1" and len(kept) == 2


def test_the_base_the_reader_shares_is_not_changed():
    (_, ref), kept = refs(clocked(1), clocked(2))
    decoded = content.Decoded(kept.__getitem__)
    decoded.parameters(ref)
    assert decoded.parameters("n0") == clocked(1)


_keys = st.sampled_from(["a", "b", "c", "client_metadata"])
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2, allow_nan=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(_keys, _values, max_size=4), min_size=1, max_size=6))
def test_any_chain_of_parameters_rebuilds_exactly(chain):
    refs(*chain)  # each checked against its own canonical bytes


def test_a_call_with_no_parent_names_a_blob_and_one_with_its_parents_names_them_so():
    (first, second, third, fourth), kept = refs(clocked(0), clocked(0), clocked(1), clocked(1))
    assert first == second == "n0" and kept == {"n0": canonical_json(clocked(0))}
    assert third == fourth == ["n0", [[["client_metadata", "clock_ms"], "1"]]]


def test_a_stream_that_starts_over_names_changes_the_parent_made_by_a_blob():
    """`fresh`: the manifest stream starts at this exchange (a segment a call), where the
    changes would be paid for in full on every call of the turn; new changes stay inline."""
    kept: dict[str, bytes] = {}

    def keep(data: bytes) -> str:
        kept[name := f"n{len(kept)}"] = data
        return name

    base = content.parameters_ref(clocked(0), None, None, keep)
    turn = content.parameters_ref(clocked(1), clocked(0), base, keep, fresh=True)
    assert turn == ["n0", [[["client_metadata", "clock_ms"], "1"]]]
    assert content.parameters_ref(clocked(1), clocked(1), turn, keep) == turn
    again = content.parameters_ref(clocked(1), clocked(1), turn, keep, fresh=True)
    assert again == "n1" and kept["n1"] == canonical_json(clocked(1))
    assert content.parameters_ref(clocked(1), clocked(1), again, keep, fresh=True) == "n1"
