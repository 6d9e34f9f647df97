"""The real Claude Code CLI, run through `forge-record run` against the mock upstream.

The mock asks for a Bash tool call; Claude Code runs it and sends the result back; the mock
answers with what the command printed. The stored session must hold all of it.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from claude_code_cli import DUMMY_KEY, claude_env, forge, interactive_claude  # noqa: F401 - fixture
from export_checks import check_recorded_cli_session

from forge_record.mock import TOOL_MARKER, MockUpstream

pytestmark = [pytest.mark.slow, pytest.mark.cli]


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_claude_code_tool_call_is_recorded(claude_env, mode):  # noqa: F811
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
    check_recorded_cli_session(claude_env["FORGE_RECORD_HOME"], session)


def test_interactive_claude_code_owns_the_terminal(claude_env, tmp_path):  # noqa: F811
    """The TUI under a pseudo-terminal: a prompt typed there leads to a Bash call and an
    answer, Ctrl-C twice quits Claude Code, and forge-record exits 0 with the session stored."""
    work = tmp_path / "work"
    work.mkdir()
    with MockUpstream() as mock:
        def answered(screen):
            deadline = time.monotonic() + 60
            while not any(b'"tool_result"' in r.body for r in mock.requests):
                assert time.monotonic() < deadline, screen.text[-2000:]
                screen.read(0.2)
            screen.wait_for(b"printed")

        exit_code, screen = interactive_claude(claude_env, work, mock.url,
                                               f"Run the {TOOL_MARKER} command", answered)
    assert exit_code == 0, screen.text[-2000:]
    session = orjson.loads(forge(claude_env, "show", "last", "--json").stdout)
    calls = [b for e in session["exchanges"] if e["response"]
             for b in e["response"]["content"] if b["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["Bash"]
