"""Dictionaries per harness version (store.dictionaries): a later session of the same version
packs against what the first one packed, reads back exactly, and gc keeps the dictionary's
pack group after the first session is gone; on SQLite and Postgres."""

from __future__ import annotations

import dataclasses
import time

import sqlalchemy as sa
from support import make_session, realistic_exchanges

from forge_record.store import dictionaries, gc

DAY = 86_400


def record(store, session_id: str, sent, started_at: float) -> None:
    store.add_session(dataclasses.replace(make_session(session_id), started_at=started_at))
    for ex in sent:
        store.add_exchange(session_id, ex)
    store.end_session(session_id, started_at + 60, 0)


def pack_ratio(conn, with_dictionary: bool) -> float:
    where = "IS NOT NULL" if with_dictionary else "IS NULL"
    stored, plain = conn.execute(sa.text(
        f"SELECT sum(length(data)), sum(size) FROM packs WHERE dictionary_id {where}")).one()
    return stored / plain


def test_a_later_session_packs_against_the_first_and_gc_keeps_it(store, monkeypatch):
    monkeypatch.setattr(dictionaries, "MAKE_AFTER", 16 << 10)  # short sessions make one
    first, second = (realistic_exchanges(30, seed, harness=7) for seed in (1, 2))
    record(store, "first", first, time.time() - 40 * DAY)
    with store.reading("check") as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM dictionaries")) == 1
        assert conn.scalar(sa.text("SELECT harness FROM dictionaries")) == "claude-code/2.1.197"
    record(store, "second", second, time.time())
    with store.reading("check") as conn:
        # 30 calls re-read few files: ~10% smaller here, ~40% over 150 calls (bench)
        assert pack_ratio(conn, True) < 0.95 * pack_ratio(conn, False)
    assert list(store.iter_exchanges("second", raw=True)) == second
    assert list(store.iter_exchanges("first", raw=True)) == first

    report = gc.collect(store, 30 * DAY, grace=0, now=time.time() + 1)
    assert report.sessions == 1
    assert [e.seq for e in store.iter_exchanges("second")] == [e.seq for e in second]
    assert list(store.iter_exchanges("second", raw=True)) == second
    assert store.get_exchange("second", 17, raw=True) == second[16]


def test_a_dictionary_s_match_tables_are_built_once_and_streams_write_the_same_bytes():
    # Building them from 1 MB took 5 ms a stream; `serve` starts one for nearly every call
    # once its open sessions outgrow the encoders' budget.
    from forge_record.store import compression

    prefix = b"".join(b'{"line": %d, "text": "the same file, read again"}\n' % i
                      for i in range(20_000))
    pieces = [b'{"line": %d, "text": "the same file, read again"}\n' % i * 3 for i in (7, 9000)]
    compression._stream_prefix.cache_clear()
    streams = [compression.Stream(prefix=prefix) for _ in range(3)]
    assert compression._stream_prefix.cache_info().misses == 1
    written = [[s.piece(p) for p in pieces] for s in streams]
    assert written[0] == written[1] == written[2]
    assert compression.decode_pieces(written[0], prefix) == pieces
    # The same frames a dictionary built for the one stream gives (what readers decode).
    zstd = compression.zstandard
    one = zstd.ZstdCompressor(compression_params=compression._stream_params(
        compression.STREAM_LEVEL, compression.STREAM_TABLE_LOG),
        dict_data=compression._prefix_dict(prefix)).compressobj()
    assert written[0] == [one.compress(p) + one.flush(zstd.COMPRESSOBJ_FLUSH_BLOCK)
                          for p in pieces]
