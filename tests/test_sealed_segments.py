"""Sealing finished segments (store.sealed, store.seal.seal_segment): once no exchange will be
added to a segment (its session ended, it filled, its writer let the session's encoder go),
its first row holds every manifest and raw response as one frame each and the other rows
hold none; the segment takes fewer bytes and every exchange reads back byte for byte, alone
or with the session, across segments, from a reader that raced the seal, after gc and push.
On SQLite and Postgres."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from support import (
    chat_exchanges,
    gemini_exchanges,
    make_session,
    realistic_exchanges,
    responses_exchanges,
    start_session,
)

from forge_record.errors import StoreError
from forge_record.store import (
    batch,
    compression,
    gc,
    open_store,
    reader,
    seal,
    sealed,
    segments,
    strands,
)
from forge_record.store import push as pushing
from forge_record.store import store as store_module
from forge_record.store.delta import varint
from forge_record.store.items import AddExchange
from forge_record.store.schema import sessions
from forge_record.store.segments import FinishedSegment

DAY = 86_400
STREAMS = sorted((Path(__file__).parent / "data" / "sse").glob("*/*"))
ROWS = sa.text("SELECT segment, piece, record, raw_response FROM exchanges "
               "WHERE session_id = :sid ORDER BY segment, piece")


def rows(store, session_id: str) -> list:
    with store.reading("check") as conn:
        return [tuple(r[:2]) + (bytes(r[2]), bytes(r[3]))
                for r in conn.execute(ROWS, {"sid": session_id})]


def is_sealed(found: list) -> bool:
    """Whether the rows are one sealed segment: its first row holds it all."""
    (_, _, record, response), *rest = found
    return (sealed.is_sealed(record) and sealed.is_sealed(response)
            and all(r[2:] == (b"", b"") for r in rest))


def by_segment(found: list) -> dict[int, list]:
    return {s: [r for r in found if r[0] == s] for s in sorted({r[0] for r in found})}


def manifests(store, session_id: str, segment: int) -> dict[int, bytes]:
    with store.reading("check") as conn:
        return reader.segment_pieces(conn, session_id, segment)


def stored(found: list) -> int:
    return sum(len(r[2]) + len(r[3]) for r in found)


def test_an_ended_session_s_segment_is_sealed_into_its_first_row(store):
    sent = realistic_exchanges(40, 1)
    start_session(store, "one", sent)
    before, plain = rows(store, "one"), manifests(store, "one", 0)
    assert not sealed.is_sealed(before[0][2])

    store.end_session("one", time.time(), 0)
    after = rows(store, "one")
    assert is_sealed(after) and len(after) == len(before) == 40
    assert stored(after) < 0.8 * stored(before)
    assert manifests(store, "one", 0) == plain  # the same plain bytes, from one frame
    assert list(store.iter_exchanges("one", raw=True)) == sent
    for seq in (1, 2, 23, 40):
        assert store.get_exchange("one", seq, raw=True) == sent[seq - 1]


@pytest.mark.parametrize("made", [gemini_exchanges, chat_exchanges, responses_exchanges],
                         ids=["gemini", "chat", "responses"])
def test_every_dialect_s_sealed_responses_read_back(store, made):
    sent = made(30, 2)
    start_session(store, "d", sent)
    store.end_session("d", time.time(), 0)
    assert is_sealed(rows(store, "d"))
    assert list(store.iter_exchanges("d", raw=True)) == sent
    assert store.get_exchange("d", 17, raw=True) == sent[16]


def test_each_full_segment_is_sealed_as_the_next_one_starts(store, monkeypatch):
    monkeypatch.setattr(segments, "SEGMENT_BYTES", 96 << 10)
    sent = realistic_exchanges(40, 3)
    start_session(store, "long", sent)
    *finished, last = by_segment(rows(store, "long")).values()
    assert len(finished) > 1
    assert all(is_sealed(found) for found in finished)
    assert not sealed.is_sealed(last[0][2])  # still being written
    assert list(store.iter_exchanges("long", raw=True)) == sent
    assert store.get_exchange("long", 38, raw=True) == sent[37]


def test_a_resumed_segment_reads_its_raw_parent_from_a_sealed_one(store, monkeypatch):
    """With one encoder for two sessions, each batch of one lets the other's encoder go: its
    segment is sealed, and the session's next segment goes on from its tail."""
    monkeypatch.setattr(batch, "_ENCODERS", 1)
    a, b = realistic_exchanges(24, 4), realistic_exchanges(24, 5)
    for name in ("a", "b"):
        store.add_session(make_session(name))
    for at in range(0, 24, 6):
        store.write([AddExchange("a", ex) for ex in a[at:at + 6]])
        store.write([AddExchange("b", ex) for ex in b[at:at + 6]])
    # Every segment let go is sealed, b's last one aside: a's last one was let go as b
    # wrote, and some chains of a segment go on from an earlier one (not only its first).
    assert all(is_sealed(found) for found in by_segment(rows(store, "a")).values())
    *finished, last = by_segment(rows(store, "b")).values()
    assert len(finished) == 3 and all(is_sealed(found) for found in finished)
    with store.reading("check") as conn:
        first = reader.segment_manifests(conn, "a", 1)[7]
        later = reader.segment_manifests(conn, "a", 2)
    assert first["raw_parent"] == 6  # in segment 0, sealed
    assert min(later) == 13 and any(m["raw_parent"] == 12 for m in later.values())
    for seq in (7, 8, 13, 24):
        assert store.get_exchange("a", seq, raw=True) == a[seq - 1]
    assert list(store.iter_exchanges("a", raw=True)) == a
    assert list(store.iter_exchanges("b", raw=True)) == b


def test_a_segment_not_as_its_writer_left_it_is_left_alone(store):
    sent = realistic_exchanges(20, 6)
    start_session(store, "torn", sent)
    before = rows(store, "torn")
    for pieces in (19, 21):  # a piece missing, or one more than the writer wrote
        with store.transaction("seal") as conn:
            assert seal.seal_segment(conn, FinishedSegment("torn", 0, pieces)) == 0
    assert rows(store, "torn") == before
    with store.transaction("seal") as conn:
        assert seal.seal_segment(conn, FinishedSegment("torn", 0, 20)) > 0
        assert seal.seal_segment(conn, FinishedSegment("torn", 0, 20)) == 0  # sealed already
    assert list(store.iter_exchanges("torn", raw=True)) == sent


def test_a_segment_of_one_exchange_is_left_as_it_is(store):
    sent = realistic_exchanges(1, 7)
    start_session(store, "single", sent)
    before = rows(store, "single")
    store.end_session("single", time.time(), 0)
    assert rows(store, "single") == before


def test_a_reader_that_decoded_the_manifests_before_the_seal_reads_frames_after_it(
        store, monkeypatch):
    """Postgres reads in read committed: a reader may decode the manifests before a seal and
    fetch the raw frames after it, which are empty then (SQLite reads from one snapshot)."""
    sent = realistic_exchanges(20, 8)
    start_session(store, "race", sent)
    prefetch, seals = reader.SessionReader.prefetch, []

    def seal_first(self, seq, raw):  # between the manifests and the raw frames
        if not seals:
            with store.transaction("seal") as conn:
                seals.append(seal.seal_segment(conn, FinishedSegment("race", 0, 20)))
        prefetch(self, seq, raw)

    monkeypatch.setattr(reader.SessionReader, "prefetch", seal_first)
    assert store.get_exchange("race", 20, raw=True) == sent[19]
    assert seals[0] > 0 and is_sealed(rows(store, "race"))
    assert store.get_exchange("race", 9, raw=True) == sent[8]


def test_gc_reads_what_sealed_sessions_name(store):
    old, new = realistic_exchanges(12, 9), realistic_exchanges(12, 10)
    start_session(store, "old", old, time.time() - 40 * DAY)
    store.end_session("old", time.time() - 40 * DAY + 60, 0)
    start_session(store, "new", new, time.time())
    store.end_session("new", time.time(), 0)
    assert is_sealed(rows(store, "new"))
    report = gc.collect(store, 30 * DAY, grace=0, now=time.time() + 1)
    assert report.sessions == 1 and report.blobs > 0
    assert list(store.iter_exchanges("new", raw=True)) == new
    assert gc.collect(store, 30 * DAY, grace=0, now=time.time() + 1) == gc.Report()


def test_push_copies_a_sealed_segment_whole_over_a_prefix_copied_before(store, tmp_path):
    """Pushed while recording, then again once the session ended: the target's rows of the
    segment (pieces of a stream) give way to the sealed ones, in one batch."""
    sent = realistic_exchanges(30, 11)
    start_session(store, "pushed", sent[:12])
    with open_store(f"sqlite:///{tmp_path / 'team.db'}") as team:
        report = pushing.push(store, team, pushing.plan(store, team, ["pushed"]))
        assert report.exchanges == 12 and not is_sealed(rows(team, "pushed"))
        for ex in sent[12:]:
            store.add_exchange("pushed", ex)
        store.end_session("pushed", time.time(), 0)
        assert is_sealed(rows(store, "pushed"))

        report = pushing.push(store, team, pushing.plan(store, team, ["pushed"]))
        assert report.exchanges == 18
        assert rows(team, "pushed") == rows(store, "pushed")
        assert list(team.iter_exchanges("pushed", raw=True)) == sent
        with team.reading("check") as conn:  # counted once, not the replaced rows again
            figure = conn.scalar(sa.select(sessions.c.pack_groups))
        assert figure["exchanges"] == 30
        assert pushing.push(store, team, pushing.plan(store, team, ["pushed"])).exchanges == 0


GROUPS = sa.text("SELECT group_id, count(*) FROM packs GROUP BY group_id")


def packs_a_group(store_url: str) -> list[int]:
    with open_store(store_url) as store, store.reading("check") as conn:
        return sorted(n for _, n in conn.execute(GROUPS))


def test_a_store_closed_on_sessions_still_open_seals_what_it_wrote(store_url, monkeypatch):
    """A `serve` replica stopping with rollouts that ended elsewhere or go on: closing seals
    their segments and pack groups, the stream resumed segments share too; the sessions
    stay open and read back whole."""
    monkeypatch.setattr(batch, "_ENCODERS", 1)  # each batch lets the other session's go
    sent = {"a": realistic_exchanges(24, 12), "b": realistic_exchanges(24, 13)}
    with open_store(store_url) as store:
        for name in sent:
            store.add_session(make_session(name))
        for at in range(0, 24, 6):
            for name, exchanges in sent.items():
                store.write([AddExchange(name, ex) for ex in exchanges[at:at + 6]])
        before = rows(store, "b")
        assert not is_sealed(by_segment(before)[3])  # b's writer holds it
    assert max(packs_a_group(store_url)) == 1  # every group one sealed pack
    with open_store(store_url) as store:
        assert stored(by_segment(rows(store, "b"))[3]) < stored(by_segment(before)[3])
        for name, exchanges in sent.items():
            assert all(is_sealed(found) for found in by_segment(rows(store, name)).values())
            assert list(store.iter_exchanges(name, raw=True)) == exchanges
            assert store.get_session(name).ended_at is None


def test_close_seals_only_within_its_time(store_url, monkeypatch):
    monkeypatch.setattr(store_module, "SEAL_AT_CLOSE", 0.0)
    sent = realistic_exchanges(20, 14)
    with open_store(store_url) as store:
        start_session(store, "open", sent)
        before = rows(store, "open")
    assert max(packs_a_group(store_url)) > 1
    with open_store(store_url) as store:
        assert rows(store, "open") == before
        assert list(store.iter_exchanges("open", raw=True)) == sent


def test_close_stops_sealing_once_the_store_does_not_answer(store, monkeypatch):
    start_session(store, "a", realistic_exchanges(8, 15))
    start_session(store, "b", realistic_exchanges(8, 16))
    tried = []

    def unavailable(conn, item):
        tried.append(item)
        raise store_module.StoreUnavailable("cannot seal: the server did not answer")

    monkeypatch.setattr(seal, "seal_segment", unavailable)
    monkeypatch.setattr(seal, "seal", unavailable)
    store.close()
    assert len(tried) == 1


def test_close_never_waits_on_a_write_still_going(store_url):
    store = open_store(store_url)
    start_session(store, "stuck", realistic_exchanges(8, 17))
    store._write_lock.acquire()  # as a write stuck in a database that does not answer
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 5
    assert max(packs_a_group(store_url)) > 1  # left as it was


# --- the format, without a store --------------------------------------------------------


def test_sealed_responses_rebuild_every_recorded_stream_and_odd_ones():
    bodies = [p.read_bytes() for p in STREAMS]
    bodies += [b"", b"not an event stream", bytes(range(256)),
               b'data: {"text":"an unterminated value',
               b'data: {"delta":{"text":"a\\/b \\u00e9 \\u2028"}}\n\n']  # kept escaped
    manifests = [b'{"seq": %d}' % i for i in range(len(bodies))]
    answers = [b"" if i % 3 else b'{"content": "the answer"}' for i in range(len(bodies))]
    cuts = [strands.split(body) or (strands.WHOLE, body, [], b"") for body in bodies]
    assert {cut[0] for cut in cuts} == {strands.PLAIN, strands.ESCAPED, strands.WHOLE}
    cuts.append((strands.PLAIN, b'{"text":""}', [300], b"x" * 300))  # a length of 2 bytes
    bodies.append(b'{"text":"' + b"x" * 300 + b'"}')
    frame = sealed.seal_responses(cuts, manifests + [b"{}"], answers + [b""])
    assert sealed.is_sealed(frame)
    assert sealed.unseal_cuts(frame, manifests + [b"{}"], answers + [b""]) == cuts
    assert sealed.unseal_responses(frame, manifests + [b"{}"], answers + [b""]) == bodies
    with pytest.raises(StoreError, match="do not match its manifests"):
        sealed.unseal_responses(frame, manifests, answers)


def test_sealed_manifests_read_as_their_pieces_from_any_piece_on():
    plains = [b'{"exchange": {"seq": %d}, "n": "%s"}' % (i, b"x" * i) for i in range(50)]
    record = sealed.seal_manifests(plains)
    assert sealed.unseal_manifests(record) == plains
    assert sealed.manifest_plains([record] + [b""] * 9) == plains[:10]
    # lengths that promise more bytes than the frame holds
    short = varint(2) + varint(5) + varint(50) + b"short"
    with pytest.raises(StoreError, match="do not add up"):
        sealed.unseal_manifests(
            sealed.MARK + compression.seal(short, trained=compression.MANIFESTS))
