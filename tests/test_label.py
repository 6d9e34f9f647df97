"""Session labels in the store (revision 0003), on SQLite and on the real Postgres: one label
per session, merged on every call, gone with its session; and `forge-record label`."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from support import make_session

from forge_record.cli import cli
from forge_record.errors import SessionNotFound


def test_a_session_starts_unlabelled(store):  # noqa: F811
    store.add_session(make_session("s1"))
    assert store.get_label("s1") is None


def test_labels_merge(store):  # noqa: F811
    store.add_session(make_session("s1"))
    store.label_session("s1", reward=0.0, tags={"outcome": "fail", "grader": "tests"},
                        note="2 tests fail")
    first = store.get_label("s1")
    store.label_session("s1", tags={"outcome": "pass"})
    store.label_session("s1", reward=1.0)
    label = store.get_label("s1")
    assert label["reward"] == 1.0
    assert label["tags"] == {"outcome": "pass", "grader": "tests"}
    assert label["note"] == "2 tests fail"
    assert label["created_at"] == first["created_at"] <= label["updated_at"]


def test_labels_are_per_session(store):  # noqa: F811
    store.add_session(make_session("s1"))
    store.add_session(make_session("s2"))
    store.label_session("s1", reward=0.25)
    assert store.get_label("s1")["reward"] == 0.25
    assert store.get_label("s2") is None


def test_labelling_an_unknown_session_fails(store):  # noqa: F811
    with pytest.raises(SessionNotFound):
        store.label_session("nope", reward=1.0)


def test_a_label_goes_with_its_session(store):  # noqa: F811
    store.add_session(make_session("s1"))
    store.label_session("s1", reward=1.0)
    with store.transaction("delete session") as conn:
        conn.execute(sa.text("DELETE FROM sessions WHERE id = 's1'"))
        assert conn.scalar(sa.text("SELECT count(*) FROM labels")) == 0


def test_label_command_prints_the_merged_label(store_url, store):  # noqa: F811
    store.add_session(make_session("abc123"))
    runner = CliRunner()
    runner.invoke(cli, ["label", "--store", store_url, "abc", "--reward", "1", "--tag", "k=v"],
                  catch_exceptions=False)
    result = runner.invoke(cli, ["label", "--store", store_url, "abc", "--note", "ok"],
                           catch_exceptions=False)
    assert '"reward":1.0' in result.stdout and '"tags":{"k":"v"}' in result.stdout
    assert '"note":"ok"' in result.stdout and '"session":"abc123"' in result.stdout
