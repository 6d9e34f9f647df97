"""The writer keeps each session's pack groups (store.kept `pack_groups`) exactly, as it
writes: the figure it keeps is valid and equal to what gc finds by decoding the session's
manifests (gc's own function), with other writers of the same blobs and of the same session,
across segments, spool replays and push, and around gc's repacks. On SQLite and Postgres."""


from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import sqlalchemy as sa
from support import make_exchange, make_session, realistic_exchanges

from forge_record.store import content, default_store_url, dictionaries, gc, kept, open_store
from forge_record.store import push as pushing
from forge_record.store.items import AddExchange, AddSession, EndSession
from forge_record.store.reader import segment_manifests
from forge_record.store.schema import blobs, sessions

DAY = 86400.0


@pytest.fixture(autouse=True)
def no_dictionaries(monkeypatch):
    """As in test_gc: no session's pack group becomes a dictionary (gc keeps those)."""
    monkeypatch.setattr(dictionaries, "MAKE_AFTER", 1 << 40)
    monkeypatch.setattr(dictionaries, "SIZE", 1 << 40)


def figures(store) -> dict[str, dict | None]:
    """Each session's kept pack groups if valid (kept.valid), else None."""
    with store.reading("test") as conn:
        return {r["id"]: r["figure"] for r in kept.figures(conn, kept.PACK_GROUPS)}


def decoded(store, session_id: str) -> set[int]:
    """The groups gc finds by decoding the session's manifests."""
    with store.reading("test") as conn:
        return gc._groups(conn, {"id": session_id, "figure": None})[0]


def assert_kept_as_decoded(store, *ids: str) -> dict[str, set[int]]:
    found = figures(store)
    out = {}
    for sid in ids:
        assert found[sid] is not None, f"{sid}: no valid figure"
        out[sid] = set(found[sid]["groups"])
        assert out[sid] == decoded(store, sid) and out[sid], sid
    return out


def add(store, session_id: str, exchanges, started_at: float | None = None,
        end: bool = True) -> None:
    started = time.time() - DAY if started_at is None else started_at
    store.write([AddSession(make_session(session_id, started_at=started), recorder_pid=None,
                            heartbeat_at=None)])
    for ex in exchanges:
        store.add_exchange(session_id, ex)
    if end:
        store.end_session(session_id, started + 60, 0)


def test_a_written_session_keeps_the_groups_gc_would_decode(store, store_url):
    first = realistic_exchanges(12, seed=1)
    add(store, "first", first)
    # The same store again: first's blobs are fresh to it, not touched again (FOR SHARE).
    add(store, "same-store", first[:4] + [dataclasses.replace(ex, seq=ex.seq + 3)
                                          for ex in realistic_exchanges(3, seed=2)[1:]])
    # Another writer: it touches first's system prompt, tools and messages, and its answers
    # conflict with first's rows (the upsert's RETURNING gives first's pack).
    with open_store(store_url) as other:
        add(other, "other-writer", first[:5])
    # A second segment: the encoder dropped between batches (serve's least recent one).
    more = realistic_exchanges(10, seed=3)
    add(store, "segments", more[:5], end=False)
    store._writes.forget({"segments"})
    for ex in more[5:]:
        store.add_exchange("segments", ex)
    # A segment resumed from the session's tail (its encoder let go within the encoders'
    # budget, the last exchanges of its chains kept).
    resumed = realistic_exchanges(10, seed=7)
    add(store, "resumed", resumed[:5], end=False)
    store._writes._retire("resumed")
    for ex in resumed[5:]:
        store.add_exchange("resumed", ex)
    # A spool replay: what reached the store is skipped, the rest counted.
    replayed = realistic_exchanges(6, seed=4)
    add(store, "replayed", replayed[:3], end=False)
    store.write([AddExchange("replayed", ex) for ex in replayed], if_absent=True)
    store.write([AddExchange("replayed", ex) for ex in replayed], if_absent=True)
    # One batch holding exchanges of several sessions, as serve's writer does.
    a, b = realistic_exchanges(4, seed=5), realistic_exchanges(4, seed=6, harness=5)
    store.write([AddSession(make_session("a")), AddSession(make_session("b"))])
    store.write([AddExchange(sid, ex) for pair in zip(a, b, strict=True)
                 for sid, ex in zip(("a", "b"), pair, strict=True)])

    groups = assert_kept_as_decoded(store, "first", "same-store", "other-writer", "segments",
                                    "resumed", "replayed", "a", "b")
    assert groups["first"] < groups["same-store"]
    assert groups["other-writer"] == groups["first"]  # every blob it named was first's
    assert figures(store)["replayed"]["exchanges"] == 6
    assert len(groups["segments"]) >= 2  # a group each segment, and first's
    assert len(groups["resumed"]) >= 2
    with store.reading("resumed") as conn:  # 8 goes on from 5 (6 and 7 are side calls)
        assert content.parent(segment_manifests(conn, "resumed", 1)[8]) == 5


def test_a_call_that_continues_the_conversation_takes_four_statements(store):
    """What `run`'s writer does call after call, besides begin and commit: the pack with its
    blobs (one statement on Postgres, after the repack lock; two on SQLite), the exchange,
    and its own figure extended. No pack groups are looked up and no exchanges counted: a
    request's new messages are packed here, and the answer it repeats was named by the call
    before. (The session's title calls start a conversation of their own: they touch its
    first message, which other sessions may have stored.)"""
    sent = realistic_exchanges(16, seed=7)
    statements: list[str] = []
    sa.event.listen(store._engine, "before_cursor_execute",
                    lambda conn, cursor, statement, *_: statements.append(statement))
    add(store, "s", [], end=False)
    continuing = 0
    for ex in sent:
        statements.clear()
        store.add_exchange("s", ex)
        if ex.seq > 1 and len(ex.request.messages) > 1:
            continuing += 1
            with_begin = 4 + (store.dialect == "sqlite")  # the others' BEGIN is the driver's
            assert len(statements) == with_begin, statements
            assert not any("JOIN packs" in s or "count(" in s for s in statements), statements
    assert continuing >= 10
    assert_kept_as_decoded(store, "s")


def test_two_writers_of_one_session_keep_it_exact(store_url):
    """Two stores (two serve replicas' writers) write interleaved exchanges of the same
    sessions at once, one transaction each: each extends the figure after the other."""
    stores = [open_store(store_url), open_store(store_url)]
    ids = [f"race-{n}" for n in range(4)]
    calls = {sid: realistic_exchanges(12, seed=n) for n, sid in enumerate(ids)}
    for sid in ids:
        stores[0].add_session(make_session(id=sid))
    start = threading.Barrier(2)
    errors = []

    def write(k: int) -> None:
        try:
            start.wait()
            for i in range(k, 12, 2):
                for sid in ids:
                    stores[k].add_exchange(sid, calls[sid][i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert_kept_as_decoded(stores[0], *ids)
        assert {sid: f["exchanges"] for sid, f in figures(stores[0]).items()} == dict.fromkeys(
            ids, 12)
    finally:
        for st in stores:
            st.close()


def make_old(store, session_id: str) -> None:
    with store.transaction("test") as conn:
        conn.execute(sessions.update().where(sessions.c.id == session_id)
                     .values(started_at=time.time() - 40 * DAY))


def collect(store, dry_run=False):
    return gc.collect(store, 30 * DAY, dry_run=dry_run, grace=0, now=time.time() + 1)


def unfresh_deleted(store) -> None:
    """With grace 0, gc deleted blobs this store's writer touched a moment ago and still
    takes for stored; a real gc (grace 1 h, more than FRESH_FOR) never does."""
    with store.reading("test") as conn:
        present = set(conn.scalars(sa.select(blobs.c.hash)))
    writes = store._writes
    writes._fresh = {n: t for n, t in writes._fresh.items() if n in present}


def test_gc_decodes_no_remaining_session_the_writer_wrote(store, monkeypatch):
    old = realistic_exchanges(8, seed=1)
    add(store, "old", old)
    add(store, "sharing", old[:3])  # names old's first blobs: gc must look at it
    # Sessions naming nothing old names (realistic ones of other seeds would share its empty
    # tool list and title prompt, stored first by old, in its group).
    others = {f"s{i}": [make_exchange(seq, request=dataclasses.replace(
        make_exchange().request, model=f"m{i}")) for seq in range(1, 4)] for i in range(2, 6)}
    for sid, exchanges in others.items():
        add(store, sid, exchanges)
    assert_kept_as_decoded(store, "old", "sharing", *others)
    make_old(store, "old")
    spied: list[str] = []
    real = gc._session_manifests
    monkeypatch.setattr(gc, "_session_manifests",
                        lambda conn, sid: (spied.append(sid), real(conn, sid))[1])

    dry = collect(store, dry_run=True)

    # old: its names are the candidates; sharing: its kept groups hold one of them
    assert sorted(set(spied)) == ["old", "sharing"]
    assert dry.sessions == 1 and dry.blobs > 0
    # The same report from a gc that decodes every session.
    with store.transaction("test") as conn:
        conn.execute(sessions.update().values(pack_groups=None))
    spied.clear()
    assert collect(store, dry_run=True) == dry
    assert sorted(set(spied)) == sorted(["old", "sharing", *others])
    assert collect(store) == dry


def test_writes_after_a_repack_never_keep_only_the_old_group(store, store_url):
    """gc repacks old's group; sessions naming its blobs lose their figures, and what is
    written after names the new group."""
    old = realistic_exchanges(30)
    add(store, "old", old, started_at=time.time() - 40 * DAY)
    add(store, "one", old[:3])
    add(store, "going-on", old[:3], end=False)  # its encoder stays
    (group,) = decoded(store, "old")
    assert group in figures(store)["one"]["groups"]

    assert collect(store).repacked == 1
    unfresh_deleted(store)  # what it still takes for fresh moved to the new group

    after = figures(store)
    assert after["one"] is None and after["going-on"] is None
    for ex in old[3:6]:
        store.add_exchange("going-on", ex)  # same segment: names only new messages
    add(store, "one-more", old[3:6])  # its own new segment of "one"'s conversation start
    store.write([AddSession(make_session("late", started_at=time.time()))])
    with open_store(store_url) as other:  # another writer: touches what it names
        other.write([AddExchange("late", ex) for ex in old[:4]])
    store.write([AddExchange("one", ex) for ex in old[3:5]] + [EndSession("late", 1e9, 0)])

    found = figures(store)
    for sid in ("one", "going-on", "one-more", "late"):
        if found[sid] is not None:
            assert set(found[sid]["groups"]) == decoded(store, sid), sid
            assert group not in found[sid]["groups"], sid
    assert found["one"] is None and found["going-on"] is None  # stale until gc
    assert_kept_as_decoded(store, "late", "one-more")
    again = collect(store)  # it may drop the other writer's dead weight (its pack of copies)
    assert (again.sessions, again.blobs, again.repacked) == (0, 0, 0)
    for sid, sent in [("one", old[:5]), ("going-on", old[:6]), ("late", old[:4])]:
        assert list(store.iter_exchanges(sid, raw=True)) == sent


@pytest.mark.postgres
def test_a_repack_waits_for_a_writer_naming_its_blobs_and_forgets_its_figure(new_database):
    """A writer's transaction names blobs of the group gc repacks (blobs it wrote lately, so
    it does not touch them, and locks no row of theirs): the repack waits for its commit
    (store.batch.REPACK_LOCK), then forgets the figure that names the old group."""
    url = new_database()
    store, collector = open_store(url), open_store(url)
    try:
        old = realistic_exchanges(30)
        add(store, "old", old, started_at=time.time() - 40 * DAY)
        add(store, "one", old[:3])
        (group,) = decoded(store, "old")
        add(store, "two", realistic_exchanges(1, seed=9))  # a figure naming its own group
        assert group not in figures(store)["two"]["groups"]
        holding, release, result = threading.Event(), threading.Event(), {}

        def writer() -> None:
            # A new segment (the session's encoder went at its end): old[1] names its
            # system prompt, tools and messages, which live in old's group.
            with store._writing.begin() as conn:
                store._writes.apply(conn, [AddExchange("two", old[1])])
                holding.set()
                release.wait(30)

        def gc_run() -> None:
            result["report"] = collect(collector)

        w = threading.Thread(target=writer)
        w.start()
        assert holding.wait(30)
        g = threading.Thread(target=gc_run)
        g.start()
        g.join(5)
        assert g.is_alive()  # the repack waits on the blob rows the writer locked
        release.set()
        w.join(30)
        g.join(60)
        assert result["report"].repacked == 1
        assert figures(store)["two"] is None  # it named old's group: forgotten
        assert [ex.seq for ex in store.iter_exchanges("two", raw=True)] == [1, 2]
        assert store.get_exchange("two", 2, raw=True) == old[1]
    finally:
        store.close()
        collector.close()


def test_push_keeps_the_target_s_groups(tmp_path, store_url):
    local = default_store_url(tmp_path / "local")
    with open_store(local) as source:
        add(source, "a", realistic_exchanges(30))
        add(source, "b", realistic_exchanges(5, seed=1), end=False)
    with open_store(local) as source, open_store(store_url) as target:
        monkey = pushing.BATCH
        pushing.BATCH = 7  # several batches of "a"
        try:
            pushing.push(source, target, pushing.plan(source, target, ["a", "b"]))
        finally:
            pushing.BATCH = monkey
        assert_kept_as_decoded(target, "a", "b")
        assert figures(target)["a"]["exchanges"] == 30


def test_a_session_with_no_exchanges_yet_counts_from_zero(store):
    store.write([AddSession(make_session("s"))])
    with store.transaction("test") as conn:  # a figure left by something else
        conn.execute(sessions.update().values(pack_groups={"groups": [1], "exchanges": 7}))
    store.add_exchange("s", realistic_exchanges(1)[0])
    assert assert_kept_as_decoded(store, "s")["s"] != {1}


def test_a_stale_figure_is_left_for_gc(store):
    sent = realistic_exchanges(4)
    add(store, "s", sent[:2])
    with store.transaction("test") as conn:  # as a copy, or an older writer, leaves it
        conn.execute(sessions.update().values(pack_groups=None))
    store.add_exchange("s", sent[2])
    assert figures(store)["s"] is None
    collect(store)  # computes and keeps it
    store.add_exchange("s", sent[3])
    assert_kept_as_decoded(store, "s")
    with store.reading("test") as conn:
        assert conn.scalar(sa.select(sessions.c.heartbeat_at)) is not None
