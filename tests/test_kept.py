"""Figures kept on the session row (store.kept, revision 0006): `sessions` keeps the lineage
figures it computes, and what it lists from them equals what reading the sessions back gives,
on SQLite and on the real Postgres; a figure that no longer covers every exchange is not used.
"""

from __future__ import annotations

import dataclasses
import time

import orjson
import sqlalchemy as sa
from lineage_sessions import M1, R1, busy_session, call, forge, record

from forge_record.lineage import analyze
from forge_record.records import Session
from forge_record.store import open_store
from forge_record.store.schema import sessions

BUSY, SINGLE = "b" * 16, "1" * 16


def listing(url: str, *args: str) -> list[dict]:
    return orjson.loads(forge("sessions", "--json", "--store", url, *args))


def kept_lineage(url: str) -> dict[str, dict | None]:
    with open_store(url) as st, st.reading("test") as conn:
        return dict(conn.execute(sa.select(sessions.c.id, sessions.c.lineage)).all())


def recomputed(url: str, session_id: str) -> tuple[dict, list[dict]]:
    """The session's usage and conversation fingerprints, read back and analysed."""
    with open_store(url) as st:
        exchanges = list(st.iter_exchanges(session_id))
        harness = st.get_session(session_id).harness
    lineage = analyze(exchanges, harness)
    used = {c.fingerprint for c in lineage.calls.values() if c.role != "side"}
    return lineage.usage, [dataclasses.asdict(f) for i, f in lineage.fingerprints.items()
                           if i in used]


def two_sessions(url: str) -> None:
    record(url, BUSY, busy_session(), started=time.time() - 100)
    record(url, SINGLE, [call(1, M1, R1)], started=time.time() - 50)


def test_sessions_keeps_what_it_computed_and_lists_the_same_from_it(store_url):
    two_sessions(store_url)
    assert kept_lineage(store_url) == {BUSY: None, SINGLE: None}
    first = listing(store_url)
    filtered = listing(store_url, "--harness", "claude-code", "--model", "claude-opus-*")

    kept = kept_lineage(store_url)
    for sid, held in ((BUSY, 8), (SINGLE, 1)):
        usage, fingerprints = recomputed(store_url, sid)
        assert kept[sid] == {"usage": usage, "fingerprints": fingerprints, "exchanges": held}
    assert kept[BUSY]["usage"]["calls"] == 5 and kept[BUSY]["usage"]["retries"] == 1
    # listed from the kept figures: the same as computed
    assert listing(store_url) == first
    assert listing(store_url, "--harness", "claude-code", "--model", "claude-opus-*") == filtered
    assert [r["id"] for r in filtered] == [SINGLE, BUSY]


def test_a_kept_figure_is_what_sessions_prints(store_url):
    two_sessions(store_url)
    listing(store_url)
    with open_store(store_url) as st, st.transaction("test") as conn:
        figure = conn.scalar(sa.select(sessions.c.lineage).where(sessions.c.id == BUSY))
        figure["usage"]["calls"] = 999
        figure["fingerprints"][0]["model"] = "kept-model"
        conn.execute(sessions.update().where(sessions.c.id == BUSY).values(lineage=figure))
    assert {r["id"]: r["calls"] for r in listing(store_url)} == {BUSY: 999, SINGLE: 1}
    assert [r["id"] for r in listing(store_url, "--model", "kept-model")] == [BUSY]


def test_a_figure_that_misses_an_exchange_is_computed_again(store_url):
    two_sessions(store_url)
    listing(store_url)
    with open_store(store_url) as st:  # a spool replayed after the end, say
        st.add_exchange(SINGLE, call(2, M1, R1, model="claude-haiku-4-5"))
    [row] = [r for r in listing(store_url) if r["id"] == SINGLE]
    usage, fingerprints = recomputed(store_url, SINGLE)
    assert row["calls"] == usage["calls"] == 2
    assert kept_lineage(store_url)[SINGLE] == {"usage": usage, "fingerprints": fingerprints,
                                               "exchanges": 2}
    assert [r["id"] for r in listing(store_url, "--model", "claude-haiku-4-5")] == [SINGLE]


def test_a_session_being_recorded_is_listed_but_not_kept(store_url):
    with open_store(store_url) as st:  # recorded by this live process, no end yet
        st.add_session(Session(id=SINGLE, harness="claude-code", argv=["claude"],
                               started_at=time.time()))
        st.add_exchange(SINGLE, call(1, M1, R1))
    [row] = listing(store_url)
    assert row["status"] == "recording" and row["calls"] == 1
    assert kept_lineage(store_url) == {SINGLE: None}
