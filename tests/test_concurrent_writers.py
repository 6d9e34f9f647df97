"""Eight recorder processes writing to one store at once, on SQLite and on Postgres: every
exchange is stored, none waits in a spool, no write fails (no lock errors), and every
session reads back exactly. They record the same conversation, so they also race to store
the very same blobs."""


from __future__ import annotations

import multiprocessing

import pytest
from support import make_session, realistic_exchanges

from forge_record.store import Writer, open_store

pytestmark = pytest.mark.slow

RECORDERS = 8
CALLS = 20


def _record(url: str, session_id: str, spool_dir: str, barrier, results) -> None:
    exchanges = realistic_exchanges(CALLS)
    writer = Writer(open_store(url), spool_dir=spool_dir)
    barrier.wait(60)
    writer.submit_session(make_session(session_id))
    for ex in exchanges:
        writer.submit_exchange(session_id, ex)
    writer.submit_end(session_id, 1e9, 0)
    writer.close()
    results.put((session_id, writer.written, writer.failed, writer.dropped, writer.spooled))


def test_eight_recorders_at_once_lose_nothing(store_url, tmp_path):
    open_store(store_url).close()  # migrated once, as the first recorder would
    ctx = multiprocessing.get_context("spawn")  # see test_migrations.open_in_processes
    barrier, results = ctx.Barrier(RECORDERS), ctx.Queue()
    ids = [f"rec{n}" for n in range(RECORDERS)]
    procs = [ctx.Process(target=_record, args=(store_url, sid, str(tmp_path / "spool"),
                                               barrier, results)) for sid in ids]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * RECORDERS
    counters = sorted(results.get(timeout=5) for _ in ids)
    assert counters == [(sid, CALLS + 2, 0, 0, 0) for sid in ids]

    sent = realistic_exchanges(CALLS)
    with open_store(store_url) as store:
        for sid in ids:
            assert list(store.iter_exchanges(sid, raw=True)) == sent, sid
            assert store.session_summary(sid)["status"] == "ended"
