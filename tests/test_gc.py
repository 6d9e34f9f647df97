"""`forge-record gc`: old sessions go, blobs nothing names go, packs are dropped or repacked,
and everything that stays still reads back exactly. On SQLite and Postgres."""


from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import count, make_session, realistic_exchanges

from forge_record.store import dictionaries, gc
from forge_record.store.items import AddSession
from forge_record.store.schema import sessions

DAY = 86400.0
FORGE = str(Path(sys.executable).with_name("forge-record"))


@pytest.fixture(autouse=True)
def no_dictionaries(monkeypatch):
    """A session's pack group that became its harness version's dictionary is kept by gc
    (tests/test_store_dictionaries.py); here no session makes one, so gc's own handling of
    groups is what is checked."""
    monkeypatch.setattr(dictionaries, "MAKE_AFTER", 1 << 40)
    monkeypatch.setattr(dictionaries, "SIZE", 1 << 40)


def record(store, session_id: str, exchanges, age_days: float, ended: bool = True) -> None:
    started = time.time() - age_days * DAY
    store.write([AddSession(make_session(session_id, started_at=started), recorder_pid=None,
                            heartbeat_at=None if ended else time.time())])
    for ex in exchanges:
        store.add_exchange(session_id, ex)
    if ended:
        store.end_session(session_id, started + 60, 0)


def collect(store, dry_run=False):
    return gc.collect(store, 30 * DAY, dry_run=dry_run, grace=0, now=time.time() + 1)


def test_old_sessions_and_what_only_they_used_are_deleted(store, store_url):
    old, new = realistic_exchanges(12, seed=1), realistic_exchanges(12, seed=2)
    record(store, "old", old, age_days=40)
    record(store, "new", new, age_days=1)
    blobs_before = count(store_url, "blobs")

    report = collect(store)

    assert (report.sessions, report.exchanges) == (1, 12)
    assert [s["id"] for s in store.list_sessions(limit=None)] == ["new"]
    assert count(store_url, "exchanges") == 12
    assert 0 < report.blobs < blobs_before
    assert count(store_url, "blobs") == blobs_before - report.blobs
    assert report.groups + report.repacked >= 1 and report.pack_bytes > 0  # old's pack group
    assert list(store.iter_exchanges("new", raw=True)) == new
    assert collect(store) == gc.Report()  # nothing left to do


def test_a_dry_run_deletes_nothing_and_says_what_would_go(store, store_url):
    record(store, "old", realistic_exchanges(8, seed=1), age_days=40)
    record(store, "new", realistic_exchanges(8, seed=2), age_days=1)
    counts = {t: count(store_url, t) for t in ("sessions", "exchanges", "blobs", "packs")}

    dry = collect(store, dry_run=True)

    assert {t: count(store_url, t) for t in counts} == counts
    assert collect(store) == dry


def test_blobs_a_kept_session_shares_are_kept_and_their_group_repacked(store, store_url):
    """"new" is the first calls of the same conversation as "old": it names old's system
    prompt, tools and first messages, which live in old's pack group."""
    old = realistic_exchanges(30)
    record(store, "old", old, age_days=40)
    record(store, "new", old[:3], age_days=1)

    report = collect(store)

    assert report.sessions == 1 and report.blobs > 0
    assert report.repacked == 1  # old's group: mostly dead, partly named by "new"
    assert list(store.iter_exchanges("new", raw=True)) == old[:3]
    for ex in old[:3]:
        assert store.get_exchange("new", ex.seq, raw=True) == ex


def test_a_pack_group_resumed_sessions_shared_is_repacked_for_the_one_kept(store, monkeypatch):
    """Past the encoders' budget, resumed segments of several sessions pack into their
    writer's shared stream, so one pack group holds blobs of both; deleting one session
    keeps what the other names, and it reads back."""
    from forge_record.store import batch
    from forge_record.store.items import AddExchange

    monkeypatch.setattr(batch, "ENCODER_BYTES", 1)  # a segment a call from the second on
    old, new = realistic_exchanges(8, seed=1), realistic_exchanges(8, seed=2)
    for name, age in (("old", 40), ("new", 1)):
        started = time.time() - age * DAY
        store.write([AddSession(make_session(name, started_at=started), recorder_pid=None)])
    for a, b in zip(old, new, strict=True):
        store.write([AddExchange("old", a)])
        store.write([AddExchange("new", b)])
    for name, age in (("old", 40), ("new", 1)):
        store.end_session(name, time.time() - age * DAY + 60, 0)
    shared = {p.group for p in store._writes._shared.values()}
    assert len(shared) == 1

    report = collect(store)

    assert report.sessions == 1 and report.repacked >= 1
    assert list(store.iter_exchanges("new", raw=True)) == new
    for ex in new:
        assert store.get_exchange("new", ex.seq, raw=True) == ex


def test_sessions_still_recording_are_kept_whatever_their_age(store):
    record(store, "running", realistic_exchanges(3), age_days=40, ended=False)
    record(store, "interrupted", realistic_exchanges(3, seed=3), age_days=40, ended=False)
    store.abandon({"interrupted"})  # its recorder died

    report = collect(store)

    assert (report.sessions, report.kept_recording) == (1, 1)
    assert [s["id"] for s in store.list_sessions()] == ["running"]
    assert len(list(store.iter_exchanges("running", raw=True))) == 3


def test_recently_touched_blobs_survive_the_grace_period(store, store_url):
    record(store, "old", realistic_exchanges(5, seed=4), age_days=40)
    blobs = count(store_url, "blobs")
    report = gc.collect(store, 30 * DAY)  # the default grace: an hour
    assert report.sessions == 1 and report.blobs == 0
    assert count(store_url, "blobs") == blobs


def make_old(store, session_id: str) -> None:
    with store.transaction("test") as conn:
        conn.execute(sessions.update().where(sessions.c.id == session_id)
                     .values(started_at=time.time() - 40 * DAY))


def test_gc_decodes_only_what_deleted_sessions_put_in_question(store, monkeypatch):
    """Pack groups are kept on the session rows: once every session has them, a gc with
    nothing to delete decodes no manifest, and one that deletes a session decodes it and
    only sessions that may name its blobs, until each is found named or not."""
    first = realistic_exchanges(20, seed=1)
    record(store, "old", first, age_days=40)
    record(store, "sharing", first[:3], age_days=1)  # names old's first blobs
    others = {f"s{i}": realistic_exchanges(6, seed=i) for i in range(2, 8)}
    for sid, exchanges in others.items():
        record(store, sid, exchanges, age_days=1)
    decoded = []
    real = gc._session_manifests
    monkeypatch.setattr(gc, "_session_manifests",
                        lambda conn, sid: (decoded.append(sid), real(conn, sid))[1])

    assert collect(store).sessions == 1
    # The writer kept every session's groups; all of them name old's group (old stored first
    # what they all name: the empty tool list, the title prompt), which holds blobs in
    # question until gc finds them named.
    assert sorted(set(decoded)) == sorted(["old", "sharing", *others])
    collect(store)  # the sessions whose groups gc 1 repacked find theirs again
    decoded.clear()
    assert collect(store) == gc.Report()
    assert decoded == []

    make_old(store, "s7")
    report = collect(store)

    assert report.sessions == 1 and report.blobs > 0
    assert decoded[0] == "s7" and len(set(decoded)) < 1 + len(others)
    for sid, exchanges in [("sharing", first[:3]), *others.items()][:-1]:
        assert list(store.iter_exchanges(sid, raw=True)) == exchanges


def test_blobs_moved_by_a_repack_stay_live_for_every_session_naming_them(store):
    """gc 1 repacks old's group: what "one" and "two" share moves to a new group. gc 2
    deletes "one", so that group is suspect: "two" must be decoded, not trusted to its
    kept groups from before the move."""
    first = realistic_exchanges(30)
    record(store, "old", first, age_days=40)
    record(store, "one", first[:3], age_days=1)
    record(store, "two", first[:3], age_days=1)
    assert collect(store).repacked == 1
    make_old(store, "one")

    assert collect(store).sessions == 1
    assert list(store.iter_exchanges("two", raw=True)) == first[:3]
    for ex in first[:3]:
        assert store.get_exchange("two", ex.seq, raw=True) == ex


def test_gc_command(store, store_url, tmp_path):
    record(store, "old", realistic_exchanges(4, seed=5), age_days=40)
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}

    def forge(*args):
        return subprocess.run([FORGE, *args, "--store", store_url], env=env, text=True,
                              capture_output=True, timeout=120)

    dry = forge("gc", "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would delete 1 sessions (4 exchanges)")
    assert count(store_url, "sessions") == 1
    done = forge("gc", "--older-than", "4w")
    assert done.returncode == 0 and done.stdout.startswith("deleted 1 sessions (4 exchanges)")
    assert count(store_url, "sessions") == 0
    bad = forge("gc", "--older-than", "30 days")
    assert bad.returncode == 2 and "expected a number and a unit" in bad.stderr


def test_ages_parse():
    from forge_record.commands.gc import parse_age

    assert [parse_age(None, None, v) for v in ("30d", "12h", "2w", "90m", "1.5d", "45s")] == [
        30 * DAY, 12 * 3600, 14 * DAY, 90 * 60, 1.5 * DAY, 45]
