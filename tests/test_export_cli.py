"""`forge-record export` and `forge-record label` from the command line: every filter, where
the data and the counts go, and the errors a user can make."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from recorded_sessions import SESSIONS, recorded_store

from forge_record.cli import cli
from forge_record.errors import UsageError
from forge_record.exporters.select import parse_when
from forge_record.records import ERROR
from forge_record.store import default_store_url, open_store

FORGE = str(Path(sys.executable).with_name("forge-record"))
ANTHROPIC, CHAT, RESPONSES, GEMINI = (SESSIONS[d][0] for d in SESSIONS)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return recorded_store(tmp_path_factory.getbasetemp() / "export-sessions")


@pytest.fixture
def url(recorded, tmp_path):
    """A copy of the recorded store (tests label it) plus a session whose only call failed."""
    shutil.copy(recorded.removeprefix("sqlite:///"), tmp_path / "traces.db")
    copy = default_store_url(tmp_path)
    with open_store(copy) as store:
        ex = next(store.iter_exchanges(CHAT))
        session = dataclasses.replace(store.get_session(CHAT), id="0bad0bad0bad0bad",
                                      user="someone", tags={}, harness="aider",
                                      started_at=ex.started_at + 3600)
        store.add_session(session)
        store.add_exchange(session.id, dataclasses.replace(ex, status=ERROR, http_status=500))
    return copy


def run(url, *args) -> tuple[list[dict], str]:
    result = CliRunner().invoke(cli, ["export", "--store", url, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(x) for x in result.stdout.splitlines()]
    return lines, result.stderr


def sessions_in(lines) -> set[str]:
    return {line["session_id"] for line in lines}


def test_stdout_has_the_data_and_stderr_the_counts(url):
    lines, err = run(url, "--format", "calls")
    assert len(lines) == 9 and sessions_in(lines) == {*SESSIONS_IDS, "0bad0bad0bad0bad"}
    assert err.strip() == ("forge-record: exported 9 lines (calls) from 5 sessions; "
                           "skipped: 2 side calls")


SESSIONS_IDS = {ANTHROPIC, CHAT, RESPONSES, GEMINI}


@pytest.mark.parametrize("args, expected", [
    (["--session", CHAT[:6], "--session", "last"], {CHAT, "0bad0bad0bad0bad"}),
    (["--harness", "codex"], {RESPONSES}),
    (["--user", "someone"], {"0bad0bad0bad0bad"}),
    (["--tag", "suite=export"], SESSIONS_IDS),
    (["--min-calls", "2"], SESSIONS_IDS),
    (["--model", "gpt-*"], {CHAT, RESPONSES, "0bad0bad0bad0bad"}),
    (["--only-complete"], SESSIONS_IDS),
])
def test_filters(url, args, expected):
    lines, _ = run(url, "--format", "calls", *args)
    assert sessions_in(lines) == expected


def test_since_and_until(url):
    with open_store(url) as store:
        late = store.get_session("0bad0bad0bad0bad").started_at
    lines, err = run(url, "--format", "calls", "--since", str(late))
    assert sessions_in(lines) == {"0bad0bad0bad0bad"}
    assert "4 sessions (before --since)" in err
    lines, _ = run(url, "--format", "calls", "--until", str(late))
    assert sessions_in(lines) == SESSIONS_IDS


def test_only_complete_counts_what_it_left_out(url):
    _, err = run(url, "--format", "calls", "--only-complete")
    assert "1 not complete" in err


def test_label_then_select_and_carry_it(url):
    result = CliRunner().invoke(cli, ["label", "--store", url, GEMINI[:5], "--reward", "0.5",
                                      "--tag", "outcome=pass", "--note", "looks right"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shown = orjson.loads(result.stdout)
    assert (shown["session"], shown["reward"], shown["tags"], shown["note"]) == \
        (GEMINI, 0.5, {"outcome": "pass"}, "looks right")
    lines, err = run(url, "--format", "trajectories", "--label")
    assert [(line["session_id"], line["reward"]) for line in lines] == [(GEMINI, 0.5)]
    assert "4 sessions (not labelled)" in err
    lines, _ = run(url, "--format", "calls", "--tag", "outcome=pass")
    assert sessions_in(lines) == {GEMINI}


def test_thread_main_and_side_calls(url):
    lines, _ = run(url, "--format", "calls", "--thread", "main", "--include-side-calls",
                   "--session", ANTHROPIC)
    assert [line["kind"] for line in lines] == ["model", "side", "model"]


def test_output_file(url, tmp_path):
    out = tmp_path / "train.jsonl"
    lines, err = run(url, "--format", "openai", "-o", str(out))
    assert lines == [] and "exported 4 lines (openai)" in err
    assert len(out.read_bytes().splitlines()) == 4


def test_parquet_needs_a_directory(url):
    with pytest.raises(UsageError, match="give -o DIR"):
        CliRunner().invoke(cli, ["export", "--store", url, "--format", "parquet"],
                           catch_exceptions=False)


def test_parse_when():
    now = 1_800_000_000.0
    assert parse_when("7d", now) == now - 7 * 86400
    assert parse_when("90m", now) == now - 5400
    assert parse_when("1767225600") == 1767225600.0
    assert parse_when("2026-01-01T00:00:00+00:00") == 1767225600.0
    with pytest.raises(UsageError, match="cannot read"):
        parse_when("yesterday")


def test_the_real_command_line(url, tmp_path):
    """The console script: data on stdout, no progress bar when stderr is not a terminal,
    a one-line error and exit 2 for a usage mistake."""
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}
    done = subprocess.run([FORGE, "export", "--store", url, "-f", "sharegpt", "--session",
                           ANTHROPIC], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["conversations"][0]["from"] == "human"
    assert done.stderr.decode().count("\n") == 1 and b"exporting" not in done.stderr
    done = subprocess.run([FORGE, "export", "--store", url, "-f", "parquet"],
                          capture_output=True, env=env, timeout=120)
    assert done.returncode == 2 and b"give -o DIR" in done.stderr and not done.stdout


def test_label_errors(url):
    result = CliRunner().invoke(cli, ["label", "--store", url, "nope", "--reward", "1"])
    assert result.exit_code != 0 and "no session matches 'nope'" in str(result.exception)
    result = CliRunner().invoke(cli, ["label", "--store", url, CHAT, "--reward", "nan"])
    assert result.exit_code == 2 and "finite" in result.output
    result = CliRunner().invoke(cli, ["label", "--store", url, CHAT], catch_exceptions=False)
    assert "has no label" in result.stderr


def test_labelling_again_merges(url):
    for args in (["--reward", "0", "--tag", "a=1", "--note", "first"],
                 ["--tag", "b=2"], ["--reward", "1", "--tag", "a=3"]):
        CliRunner().invoke(cli, ["label", "--store", url, CHAT, *args], catch_exceptions=False)
    with open_store(url) as store:
        label = store.get_label(CHAT)
    assert (label["reward"], label["tags"], label["note"]) == (1.0, {"a": "3", "b": "2"},
                                                               "first")
    assert label["created_at"] <= label["updated_at"] <= time.time()
