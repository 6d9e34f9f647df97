"""`forge-record push`: a local SQLite store copied into a team store (SQLite file and real
Postgres): exact, idempotent, resumable, incremental, with a progress bar on a terminal."""


from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import count, make_session, realistic_exchanges

from forge_record.errors import UsageError
from forge_record.store import default_store_url, open_store
from forge_record.store import push as pushing

FORGE = str(Path(sys.executable).with_name("forge-record"))


@pytest.fixture
def local(tmp_path):
    """A local store with two sessions: "a" (ended, 30 calls) and "b" (still going, 5)."""
    url = default_store_url(tmp_path / "local")
    with open_store(url) as store:
        store.add_session(make_session("a", started_at=100.0))
        for ex in realistic_exchanges(30):
            store.add_exchange("a", ex)
        store.end_session("a", 200.0, 0)
        store.add_session(make_session("b", started_at=300.0))
        for ex in realistic_exchanges(5, seed=1):
            store.add_exchange("b", ex)
    return url


@pytest.fixture
def team(store_url):
    return store_url


def push(source_url, target_url, ids=("a", "b"), progress=lambda n: None):
    with open_store(source_url) as source, open_store(target_url) as target:
        return pushing.push(source, target, pushing.plan(source, target, list(ids)), progress)


def same_sessions(source_url, target_url, ids=("a", "b")) -> None:
    with open_store(source_url) as source, open_store(target_url) as target:
        for sid in ids:
            assert target.get_session(sid) == source.get_session(sid)
            assert target.session_summary(sid) == source.session_summary(sid)
            assert list(target.iter_exchanges(sid, raw=True)) == list(
                source.iter_exchanges(sid, raw=True))


def test_push_copies_sessions_exactly_and_only_once(local, team):
    first = push(local, team)
    assert (first.sessions, first.exchanges) == (2, 35) and first.blobs > 0
    same_sessions(local, team)
    rows = {t: count(team, t) for t in ("sessions", "exchanges", "blobs", "packs")}

    again = push(local, team)

    assert (again.sessions, again.exchanges, again.blobs) == (0, 0, 0)
    assert {t: count(team, t) for t in rows} == rows


def test_an_interrupted_push_resumes_where_it_stopped(local, team, monkeypatch):
    monkeypatch.setattr(pushing, "BATCH", 10)
    class Cut(Exception):
        pass

    def cut_after_first_batch(n):
        raise Cut

    with open_store(local) as store:  # still recording: its segment's rows go 10 a batch
        store.add_session(make_session("c", started_at=500.0))
        for ex in realistic_exchanges(30, seed=2):
            store.add_exchange("c", ex)

        with pytest.raises(Cut):
            push(local, team, ids=["c"], progress=cut_after_first_batch)
        assert count(team, "exchanges") == 10  # one whole batch, committed

        rest = push(local, team, ids=["c"])
        assert rest.exchanges == 20
        same_sessions(local, team, ids=["c"])

    # An ended session's segment is sealed (store.sealed): one batch, whatever BATCH says.
    with pytest.raises(Cut):
        push(local, team, ids=["a"], progress=cut_after_first_batch)
    assert count(team, "exchanges") == 60
    assert push(local, team, ids=["a"]).exchanges == 0
    same_sessions(local, team, ids=["a"])


def test_a_session_that_went_on_is_brought_up_to_date(local, team):
    push(local, team)
    with open_store(local) as store:
        for ex in realistic_exchanges(9, seed=1)[5:]:
            store.add_exchange("b", ex)
        store.end_session("b", 400.0, 1)
    later = push(local, team, ids=["b"])
    assert (later.sessions, later.exchanges) == (1, 4)
    same_sessions(local, team)
    with open_store(team) as target:
        assert target.session_summary("b")["status"] == "ended"


def test_blobs_the_target_has_are_not_copied_again(local, team, tmp_path):
    """A second local store recording the same conversation: its blobs are already there."""
    other = default_store_url(tmp_path / "other")
    with open_store(other) as store:
        store.add_session(make_session("c"))
        for ex in realistic_exchanges(30):
            store.add_exchange("c", ex)
    push(local, team, ids=["a"])
    blobs = count(team, "blobs")
    assert push(other, team, ids=["c"]).blobs == 0
    assert count(team, "blobs") == blobs
    same_sessions(other, team, ids=["c"])


def test_push_into_the_same_store_is_refused(local):
    with open_store(local) as source, open_store(local) as target, pytest.raises(
            UsageError, match="two different stores"):
        pushing.plan(source, target, ["a"])


def forge_env(tmp_path):
    return {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}


def test_push_command_with_sessions_and_without_a_terminal(local, team, tmp_path):
    proc = subprocess.run([FORGE, "push", "--store", local, "--to", team, "--session", "b"],
                          env=forge_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"copied 1 session \(5 exchanges, \d+ new blobs\)",
                        proc.stderr.strip()), proc.stderr
    assert "\r" not in proc.stderr  # no progress bar into a pipe
    same_sessions(local, team, ids=["b"])


def test_push_command_shows_a_progress_bar_on_a_terminal(local, team, tmp_path):
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([FORGE, "push", "--store", local, "--to", team],
                            env=forge_env(tmp_path) | {"TERM": "xterm"}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed its side
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(120) == 0, seen
    os.close(primary)
    text = seen.decode(errors="replace")
    assert "pushing exchanges" in text and "35/35" in text
    assert "copied 2 sessions (35 exchanges" in text
    same_sessions(local, team)


def test_push_counts_what_it_copied(local, team, tmp_path):
    """A session without exchanges (an agent that made no model call) is copied too, and
    counted as copied, not as "already there"; a second push copies nothing and says so."""
    with open_store(local) as store:
        store.add_session(make_session("empty", started_at=400.0))

    def forge_push():
        proc = subprocess.run([FORGE, "push", "--store", local, "--to", team],
                              env=forge_env(tmp_path), capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr.strip()

    assert re.fullmatch(r"copied 3 sessions \(35 exchanges, \d+ new blobs\)", forge_push())
    assert forge_push() == "copied 0 sessions (0 exchanges, 0 new blobs); 3 sessions already there"
    with open_store(local) as store:
        for ex in realistic_exchanges(9, seed=1)[5:]:
            store.add_exchange("b", ex)
    assert re.fullmatch(r"copied 0 sessions \(4 exchanges, \d+ new blobs\); completed 1 "
                        r"session copied in part before; 2 sessions already there", forge_push())
