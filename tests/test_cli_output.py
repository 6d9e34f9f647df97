"""What the command line tells a person (issue 22): reading commands never make a store, a
run whose proxy never started stores nothing, failed calls are counted with their cause, -v
and -vv say what happened, and `harnesses` cites nothing a user does not have."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from forge_record import harness_shims
from forge_record.cli import cli
from forge_record.mock import MockUpstream

FORGE = str(Path(sys.executable).with_name("forge-record"))
# the demo's Messages API agent, through urllib (tests/test_demo.py runs it with the SDK)
CLIENT = [sys.executable, "-m", "forge_record.mock.client", "--urllib"]


@pytest.fixture
def env(tmp_path):
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        env.pop(var, None)
    return env


def forge(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once it is closed


READING = [["sessions"], ["show", "last"], ["view", "last"], ["export", "--format", "openai"],
           ["db", "current"], ["db", "stats"], ["gc", "--older-than", "1d", "--dry-run"],
           ["label", "last"],
           ["push", "--to", "sqlite:////nonexistent-target/x.db"]]


@pytest.mark.parametrize("args", READING, ids=lambda a: " ".join(a[:2]))
def test_reading_commands_never_create_a_store(env, tmp_path, args):
    missing = tmp_path / "typo" / "trace.db"
    proc = forge(env, *args, "--store", f"sqlite:///{missing}")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == f"forge-record: no store at {missing}"
    assert not missing.parent.exists()


def test_the_default_store_missing_says_how_to_make_one(env):
    proc = forge(env, "sessions")
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith("traces.db (nothing recorded yet; try: forge-record demo)")
    assert not Path(env["FORGE_RECORD_HOME"], "traces.db").exists()


def test_no_session_is_stored_when_the_proxy_never_started(env):
    assert forge(env, "run", "--tag", "first=1", "--", "true").returncode == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = forge(env, "run", "--set", f"listen_port={busy.getsockname()[1]}", "--", "true")
    assert proc.returncode == 1 and "port in use" in proc.stderr
    rows = orjson.loads(forge(env, "sessions", "--json").stdout)
    assert len(rows) == 1 and rows[0]["tags"] == {"first": "1"}  # `last` is still the real one


def test_the_closing_line_counts_failed_calls_and_names_the_cause(env):
    proc = forge(env, "run", "--harness", "generic",
                 "--upstream", f"api.anthropic.com=http://127.0.0.1:{closed_port()}", "--",
                 *CLIENT)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("forge-record: session ")
    assert last.endswith(" · 1 model call · 0 tool calls · 0 in / 0 out tokens · "
                         "1 call failed: api.anthropic.com unreachable"), last


def test_a_run_that_worked_says_nothing_failed(env):
    with MockUpstream() as mock:
        proc = forge(env, "run", "--harness", "generic",
                     "--upstream", f"api.anthropic.com={mock.url}", "--", *CLIENT)
    assert proc.returncode == 0, proc.stderr
    assert "forge-record-e2e-output-42" in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert " · 2 model calls · 1 tool call · " in last and "failed" not in last


# An agent that measures its prompt (count_tokens, a side call) before it sends it.
SIDE_CALLER = [sys.executable, "-c", """
import json, os, urllib.request
def post(path, body):
    headers = {"content-type": "application/json", "x-api-key": "dummy",
               "anthropic-version": "2023-06-01"}
    request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + path,
                                     json.dumps(body).encode(), headers)
    return urllib.request.urlopen(request, timeout=30).read()
asked = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
post("/v1/messages/count_tokens", asked)
post("/v1/messages", {**asked, "max_tokens": 64})
"""]


def test_the_closing_line_counts_side_calls_apart(env):
    """Titles, compaction summaries and count_tokens are calls the agent made, not turns of
    its conversation: the closing line says how many, as `show` does."""
    with MockUpstream() as mock:
        proc = forge({**env, "ANTHROPIC_BASE_URL": mock.url}, "run", "--mode", "reverse",
                     "--harness", "generic", "--", *SIDE_CALLER)
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert " · 1 model call · 1 side call · 0 tool calls · " in last, last


def test_verbose_logs_one_line_per_exchange_and_every_upstream_error(env):
    with MockUpstream() as mock:
        ok = forge(env, "run", "-v", "--harness", "generic",
                   "--upstream", f"api.anthropic.com={mock.url}", "--", *CLIENT)
    lines = [x for x in ok.stderr.splitlines() if x.startswith("forge-record: POST ")]
    assert len(lines) == 2, ok.stderr
    for line in lines:
        assert line.startswith("forge-record: POST 200 anthropic.messages claude-sonnet-4-5 · ")
        assert " in / 20 out · " in line and line.endswith(" ms")
    assert "mitmproxy:" not in ok.stderr  # that is -vv

    port = closed_port()
    failed = forge(env, "run", "-vv", "--harness", "generic",
                   "--upstream", f"api.anthropic.com=http://127.0.0.1:{port}", "--", *CLIENT)
    [line] = [x for x in failed.stderr.splitlines() if x.startswith("forge-record: POST ")]
    assert "POST no response anthropic.messages" in line
    assert "failed: api.anthropic.com unreachable; " in line and str(port) in line
    assert "mitmproxy: HTTP(S) proxy listening at 127.0.0.1:" in failed.stderr


def test_quiet_by_default(env):
    with MockUpstream() as mock:
        proc = forge(env, "run", "--harness", "generic",
                     "--upstream", f"api.anthropic.com={mock.url}", "--", *CLIENT)
    assert proc.stderr.strip().count("\n") == 0, proc.stderr  # the closing line alone


# --- harnesses ---------------------------------------------------------------------------


def test_harnesses_agrees_with_auto_mode_for_qwen_code_and_goose(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "GOOSE_PROVIDER", "OLLAMA_HOST"):
        monkeypatch.delenv(var, raising=False)
    out = CliRunner().invoke(cli, ["harnesses"], catch_exceptions=False).output
    row = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "forward (reverse if OPENAI_BASE_URL and OPENAI_API_KEY are set)" in row["qwen-code"]
    assert "(reverse if GOOSE_PROVIDER is anthropic, openai or ollama and its *_HOST is set)" \
        in row["goose"]
    assert "PROTOCOLS" not in out and "§" not in out  # a file users do not have


# Each shim's reverse_when, as an environment: auto must pick reverse with it and forward
# without it (so `harnesses` and the README say what the code does).
TRIGGERS = {
    "claude-code": {"ANTHROPIC_BASE_URL": "https://gw.example"},
    "gemini-cli": {"GOOGLE_GEMINI_BASE_URL": "https://gw.example"},
    "aider": {"OPENAI_API_BASE": "http://127.0.0.1:8000/v1"},
    "qwen-code": {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "sk-dummy"},
    "goose": {"GOOSE_PROVIDER": "ollama", "OLLAMA_HOST": "127.0.0.1:11434"},
}


@pytest.mark.parametrize("shim", harness_shims.SHIMS, ids=lambda s: s.name)
def test_reverse_when_says_what_auto_mode_does(shim):
    assert shim.auto_mode({}) == "forward"
    trigger = TRIGGERS.get(shim.name)
    assert (shim.reverse_when is not None) == (trigger is not None)
    if trigger is not None:
        assert shim.auto_mode(trigger) == "reverse"
        for var in trigger:  # every variable named is needed
            assert var in shim.reverse_when or "*_HOST" in shim.reverse_when
            if len(trigger) > 1:
                assert shim.auto_mode({k: v for k, v in trigger.items() if k != var}) == "forward"
