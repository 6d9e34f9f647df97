"""The real Claude Code CLI, run through `forge-record run` against the mock upstream.

The mock asks for a Bash tool call; Claude Code runs it and sends the result back; the mock
answers with what the command printed. The stored session must hold all of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import require

from forge_record.mock import TOOL_MARKER, MockUpstream

pytestmark = [pytest.mark.slow, pytest.mark.cli]

ROOT = Path(__file__).resolve().parent.parent
DUMMY_KEY = "sk-ant-api03-dummy-e2e-key-never-real-000000"
FORGE = str(Path(sys.executable).with_name("forge-record"))


def find_claude() -> str | None:
    local = ROOT / ".cache/npm/node_modules/.bin/claude"
    return str(local) if local.exists() else shutil.which("claude")


@pytest.fixture
def claude_env(tmp_path):
    claude = find_claude()
    require(claude is not None, "Claude Code is not installed (.ci/run installs it with npm)")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{Path(claude).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        "FORGE_RECORD_HOME": str(tmp_path / "forge"),
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root
    }
    return env


def forge(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=env["HOME"])


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_claude_code_tool_call_is_recorded(claude_env, mode):
    with MockUpstream() as mock:
        proc = forge(
            claude_env, "run", "--mode", mode, "--upstream", f"api.anthropic.com={mock.url}",
            "--tag", "test=e2e", "--",
            "claude", "-p", f"Run the {TOOL_MARKER} command", "--dangerously-skip-permissions",
        )
        assert proc.returncode == 0, proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout  # the tool really ran
        assert len([r for r in mock.requests if r.path.startswith("/v1/messages?")]) >= 2
    assert "model calls" in proc.stderr.splitlines()[-1]

    shown = forge(claude_env, "show", "last", "--json")
    assert shown.returncode == 0, shown.stderr
    session = orjson.loads(shown.stdout)
    assert session["harness"] == "claude-code"
    assert session["harness_version"]
    assert session["exit_code"] == 0
    assert session["tags"] == {"test": "e2e"}
    turns = [e for e in session["exchanges"] if e["kind"] == "model"
             and "Bash" in [t["name"] for t in e["request"]["tools"]]]
    call_turn = next(e for e in turns if any(b["type"] == "tool_call"
                                             for b in e["response"]["content"]))
    [call] = [b for b in call_turn["response"]["content"] if b["type"] == "tool_call"]
    assert call["name"] == "Bash" and TOOL_MARKER in call["arguments"]["command"]
    assert call_turn["status"] == "complete" and call_turn["url"].startswith(
        "https://api.anthropic.com/v1/messages")
    final = turns[-1]
    results = [b for m in final["request"]["messages"] for b in m["content"]
               if b["type"] == "tool_result"]
    assert results and results[-1]["tool_call_id"] == call["id"]
    assert f"{TOOL_MARKER}-output-42" in orjson.dumps(results[-1]["content"]).decode()
    assert final["response"]["content"][0]["text"].startswith("The command printed")

    text = forge(claude_env, "show", "last")
    assert "→ Bash" in text.stdout and "The command printed" in text.stdout

    db = Path(claude_env["FORGE_RECORD_HOME"]) / "traces.db"
    for path in db.parent.glob("traces.db*"):
        assert DUMMY_KEY.encode() not in path.read_bytes()
