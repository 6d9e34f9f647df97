"""Crash safety: finished exchanges survive a SIGKILLed recorder; a SIGKILLed agent ends the
session with its status."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from forge_record.mock import MockUpstream

pytestmark = pytest.mark.slow

FORGE = str(Path(sys.executable).with_name("forge-record"))
CLIENT = """
import anthropic, os, sys, time
client = anthropic.Anthropic(api_key="sk-ant-dummy-key", max_retries=0)
for _ in range(2):
    client.messages.create(model="claude-haiku-4-5", max_tokens=20,
                           messages=[{"role": "user", "content": "hi"}])
print("done", os.getpid(), flush=True)
time.sleep(60)
"""


def start(tmp_path, mock):
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [FORGE, "run", "--harness", "claude-code", "--mode", "reverse", "--upstream",
         f"api.anthropic.com={mock.url}", "--", sys.executable, "-c", CLIENT],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True)
    line = proc.stdout.readline().split()
    assert line[0] == "done", proc.stderr.read()
    return proc, int(line[1]), env


def test_killed_recorder_keeps_finished_exchanges(tmp_path):
    with MockUpstream() as mock:
        proc, agent, _ = start(tmp_path, mock)
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        _wait_gone(agent)
    db = sqlite3.connect(tmp_path / "traces.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT count(*) FROM exchanges").fetchone() == (2,)


def test_the_agent_dies_with_a_sigkilled_recorder(tmp_path):
    # Without it the agent ran on as an orphan whose every model call failed (no proxy).
    with MockUpstream() as mock:
        proc, agent, _ = start(tmp_path, mock)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        try:
            assert _wait_gone(agent), "the agent outlived its recorder"
        finally:
            if _alive(agent):
                os.kill(agent, signal.SIGKILL)


def _wait_gone(pid: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for init to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_killed_agent_ends_the_session(tmp_path):
    with MockUpstream() as mock:
        proc, agent, env = start(tmp_path, mock)
        os.kill(agent, signal.SIGKILL)
        assert proc.wait(30) == 128 + signal.SIGKILL
    shown = subprocess.run([FORGE, "show", "last", "--json"], env=env, capture_output=True,
                           timeout=60)
    session = orjson.loads(shown.stdout)
    assert session["exit_code"] == 137 and session["ended_at"] is not None
    assert len(session["exchanges"]) == 2


AGENT_WAITING = """
import anthropic, sys
client = anthropic.Anthropic(api_key="sk-ant-dummy-key", max_retries=0)
def call():
    client.messages.create(model="claude-haiku-4-5", max_tokens=20,
                           messages=[{"role": "user", "content": "hi"}])
call()
print("first", flush=True)
sys.stdin.readline()  # the test kills the store writer meanwhile
call()
call()
print("done", flush=True)
"""


def test_a_dead_store_writer_never_breaks_the_agent_and_loses_nothing(tmp_path):
    # Before: the calls after the kill were dropped ("NOT stored") and the run exited 0.
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path)}
    with MockUpstream() as mock:
        proc = subprocess.Popen(
            [FORGE, "run", "--harness", "claude-code", "--mode", "reverse", "--upstream",
             f"api.anthropic.com={mock.url}", "--", sys.executable, "-c", AGENT_WAITING],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE,
            text=True)
        assert proc.stdout.readline().strip() == "first"
        [writer] = [pid for pid in _children(proc.pid) if b"writer_process" in _cmdline(pid)]
        os.kill(writer, signal.SIGKILL)
        out, err = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0, err
    assert out.strip() == "done"  # both later calls went through
    assert len(mock.requests) == 3
    assert "Traceback" not in err
    assert "the store writer died" in err and "restarted" in err and "NOT stored" not in err
    completed = len(mock.requests)
    db = sqlite3.connect(tmp_path / "traces.db")
    assert db.execute("SELECT count(*) FROM exchanges").fetchone() == (completed,)
    assert "3 model calls" in err


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
