"""Sealing finished pack groups (store.seal): once a group is done with (its session ended, its
segment filled, it idled past PACK_IDLE), it is one pack, smaller, holding the same plain
bytes; every exchange reads back byte for byte, a dictionary made of the group stays the
same bytes, a reader that raced a seal looks its blobs up again, and a SQLite file gives the
freed pages back. On SQLite and Postgres."""

from __future__ import annotations

import dataclasses
import time

import pytest
import sqlalchemy as sa
from support import make_session, realistic_exchanges, start_session

from forge_record.errors import StoreError
from forge_record.store import (
    batch,
    compression,
    default_store_url,
    dictionaries,
    gc,
    open_store,
    reader,
    seal,
    segments,
)
from forge_record.store.items import AddExchange
from forge_record.store.schema import blobs

DAY = 86_400


def groups(store) -> dict[int, tuple[int, int, bytes]]:
    """Each pack group: (packs, stored bytes, plain bytes)."""
    out: dict[int, list] = {}
    with store.reading("check") as conn:
        for group, data, used in conn.execute(sa.text(
                "SELECT group_id, data, dictionary_id FROM packs ORDER BY id")):
            out.setdefault(group, [[], used])[0].append(bytes(data))
        prefixes = {used: dictionaries.plain(conn, used) for _, used in out.values() if used}
    return {g: (len(datas), sum(map(len, datas)),
                b"".join(compression.decode_pieces(datas, prefixes.get(used, b""))))
            for g, (datas, used) in out.items()}


def test_an_ended_session_s_group_is_one_smaller_pack_of_the_same_bytes(store):
    sent = realistic_exchanges(40, 1)
    start_session(store, "one", sent)
    (group, (packs, stored, plain)), = groups(store).items()
    assert packs > 1  # written a piece a call (SQLite: in rows of up to 4 KB)

    store.end_session("one", time.time(), 0)
    assert groups(store) == {group: (1, pytest.approx(stored, rel=0.2), plain)}
    assert groups(store)[group][1] < stored
    assert list(store.iter_exchanges("one", raw=True)) == sent
    assert store.get_exchange("one", 23, raw=True) == sent[22]


def test_a_full_segment_s_group_is_sealed_as_the_next_one_starts(store, monkeypatch):
    monkeypatch.setattr(segments, "SEGMENT_BYTES", 96 << 10)
    sent = realistic_exchanges(40, 2)
    start_session(store, "long", sent)
    found = groups(store)
    assert len(found) > 2
    assert sorted(packs for packs, _, _ in found.values())[:-1] == [1] * (len(found) - 1)
    store.end_session("long", time.time(), 0)
    assert [packs for packs, _, _ in groups(store).values()] == [1] * len(found)
    assert list(store.iter_exchanges("long", raw=True)) == sent


def test_a_group_left_idle_is_sealed_once_the_next_batch_commits(store, monkeypatch):
    sent = realistic_exchanges(24, 3)
    start_session(store, "idle", sent[:12])
    monkeypatch.setattr(segments, "PACK_IDLE", -1.0)  # the next pack starts a new group
    start_group = set(groups(store))
    store.add_exchange("idle", sent[12])
    monkeypatch.setattr(segments, "PACK_IDLE", 600.0)
    found = groups(store)
    (first,) = start_group
    assert found[first][0] == 1 and len(found) == 2
    for ex in sent[13:]:
        store.add_exchange("idle", ex)
    store.end_session("idle", time.time(), 0)
    assert [packs for packs, _, _ in groups(store).values()] == [1, 1]
    assert list(store.iter_exchanges("idle", raw=True)) == sent


def test_a_full_shared_stream_is_sealed_and_its_encoders_go_on_in_a_new_one(store, monkeypatch):
    """`serve` past its encoders' budget: each call resumes its session into the stream its
    writer's resumed segments share. A full one is finished like an encoder's own group, and
    the encoders still packing into it go on in the next."""
    monkeypatch.setattr(batch, "_ENCODERS", 1)  # each call lets the other session's go
    monkeypatch.setattr(batch, "SEGMENT_BYTES", 48 << 10)  # the shared stream's size
    sent = {"a": realistic_exchanges(30, 5), "b": realistic_exchanges(30, 6)}
    for name in sent:
        store.add_session(make_session(name))
    for at in range(30):
        for name, exchanges in sent.items():
            store.write([AddExchange(name, exchanges[at])])
    packs = sorted(n for n, _, _ in groups(store).values())
    shared = [n for n in packs if n > 1]
    assert len(packs) > 3 and len(shared) == 1  # all but the one still written to: sealed
    for name, exchanges in sent.items():
        assert list(store.iter_exchanges(name, raw=True)) == exchanges
        assert store.get_exchange(name, 17, raw=True) == exchanges[16]


def test_a_group_whose_packs_do_not_add_up_to_what_was_fed_is_left_alone(store):
    start_session(store, "torn", realistic_exchanges(20, 4))
    written = store._writes._encoders["torn"].packs.written
    before = groups(store)
    for fed in (written.fed + 1, written.fed - 1):
        with store.transaction("seal") as conn:
            assert seal.seal(conn, dataclasses.replace(written, fed=fed)) == 0
    assert groups(store) == before
    with store.transaction("seal") as conn:
        assert seal.seal(conn, written) > 0
        assert seal.seal(conn, written) == 0  # one pack: nothing left to seal


def test_a_group_whose_blob_rows_moved_since_is_left_alone(store):
    start_session(store, "moved", realistic_exchanges(20, 4))
    written = store._writes._encoders["moved"].packs.written
    before = groups(store)
    with store.transaction("gc took one") as conn:
        conn.execute(blobs.delete().where(blobs.c.hash == written.made[3][0]))
    with pytest.raises(StoreError, match="1 blob rows of pack group"), \
            store.transaction("seal") as conn:
        seal.seal(conn, written)
    assert groups(store) == before


def test_a_dictionary_s_group_sealed_keeps_its_bytes_and_later_sessions_read(store,
                                                                            monkeypatch):
    monkeypatch.setattr(dictionaries, "MAKE_AFTER", 16 << 10)  # short sessions make one
    first, second = (realistic_exchanges(30, seed, harness=7) for seed in (5, 6))
    start_session(store, "first", first, time.time() - 40 * DAY)
    (plain,) = [p for _, _, p in groups(store).values()]
    store.end_session("first", time.time() - 40 * DAY + 60, 0)
    with store.reading("check") as conn:
        (used, size), = conn.execute(sa.text("SELECT id, size FROM dictionaries")).all()
        assert dictionaries.plain(conn, used) == plain[:size]
    start_session(store, "second", second, time.time())
    store.end_session("second", time.time(), 0)
    found = groups(store)
    assert [packs for packs, _, _ in found.values()] == [1, 1]
    assert list(store.iter_exchanges("second", raw=True)) == second

    gc.collect(store, 30 * DAY, grace=0, now=time.time() + 1)  # the first goes, its group stays
    assert list(store.iter_exchanges("second", raw=True)) == second


def test_a_reader_that_raced_a_seal_looks_its_blobs_up_again(store, monkeypatch, backend):
    sent = realistic_exchanges(20, 7)
    start_session(store, "race", sent)
    written = store._writes._encoders["race"].packs.written
    decode, looks = reader.BlobReader._decode_packs, []

    def seal_first(self, ids):  # between finding the blobs' packs and reading them
        if not looks:
            with store.transaction("seal") as conn:
                assert seal.seal(conn, written) > 0
        looks.append(ids)
        decode(self, ids)

    monkeypatch.setattr(reader.BlobReader, "_decode_packs", seal_first)
    assert store.get_exchange("race", 20, raw=True) == sent[19]
    if backend == "postgres":  # read committed: the places found first were gone
        assert len(looks) > 1
    monkeypatch.setattr(reader.BlobReader, "_decode_packs", decode)
    assert list(store.iter_exchanges("race", raw=True)) == sent


def test_a_sqlite_file_gives_back_the_pages_sealing_and_gc_free(tmp_path):
    with open_store(default_store_url(tmp_path)) as store:
        file_gives_back_pages(store)


def file_gives_back_pages(store) -> None:
    def pages(conn):
        return [conn.exec_driver_sql(f"PRAGMA {p}").scalar()
                for p in ("page_count", "freelist_count")]

    start_session(store, "old", realistic_exchanges(40, 8), time.time() - 40 * DAY)
    with store.reading("check") as conn:
        assert conn.exec_driver_sql("PRAGMA auto_vacuum").scalar() == 2  # incremental
        written, _ = pages(conn)
    store.end_session("old", time.time() - 40 * DAY + 60, 0)
    with store.reading("check") as conn:
        sealed, free = pages(conn)
    assert free == 0 and sealed < written

    start_session(store, "new", realistic_exchanges(10, 9), time.time())
    with store.reading("check") as conn:
        both, _ = pages(conn)
    report = gc.collect(store, 30 * DAY, grace=0, now=time.time() + 1)
    assert report.sessions == 1 and report.blobs > 0
    with store.reading("check") as conn:
        collected, free = pages(conn)
    assert free == 0 and collected < both


def test_sealing_is_one_frame_that_decodes_as_the_pieces_did():
    prefix = b"".join(b'{"line": %d, "text": "a file read before"}\n' % i for i in range(3000))
    stream = compression.Stream(prefix=prefix)
    datas = [b'{"line": %d, "text": "a file read before"}\n' % i * 7 for i in range(0, 900, 3)]
    pieces = [stream.piece(d) for d in datas]
    frame = compression.seal(b"".join(datas), prefix)
    assert compression.decode_pieces([frame], prefix) == [b"".join(datas)]
    assert len(frame) < sum(map(len, pieces))
