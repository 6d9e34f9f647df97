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


def test_interactive_claude_code_owns_the_terminal(claude_env, tmp_path):
    """The TUI under a pseudo-terminal: a prompt typed there leads to a Bash call and an
    answer, Ctrl-C twice quits Claude Code, and forge-record exits 0 with the session stored."""
    import pty
    import time

    home = Path(claude_env["HOME"])
    work = tmp_path / "work"
    work.mkdir()
    # What the first-run dialogs would otherwise ask: onboarding, folder trust, the API key.
    (home / ".claude.json").write_bytes(orjson.dumps({
        "hasCompletedOnboarding": True,
        "projects": {str(work): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": [DUMMY_KEY[-20:]], "rejected": []},
    }))
    (home / ".claude").mkdir()
    (home / ".claude/settings.json").write_bytes(orjson.dumps({"permissions": {"allow": ["Bash"]}}))
    with MockUpstream() as mock:
        argv = [FORGE, "run", "--upstream", f"api.anthropic.com={mock.url}", "--", "claude"]
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(work)
            os.execve(FORGE, argv, claude_env | {"TERM": "xterm-256color"})
        screen = Screen(fd)
        try:
            screen.wait_for(b"\xe2\x9d\xaf")  # the "❯" prompt
            time.sleep(1)
            os.write(fd, f"Run the {TOOL_MARKER} command".encode())
            time.sleep(0.5)
            os.write(fd, b"\r")
            deadline = time.monotonic() + 60
            while not any(b'"tool_result"' in r.body for r in mock.requests):
                assert time.monotonic() < deadline, screen.text[-2000:]
                screen.read(0.2)
            screen.wait_for(b"printed")
            os.write(fd, b"\x03")
            time.sleep(0.5)
            os.write(fd, b"\x03")
            status = screen.wait_exit(pid)
        finally:
            screen.close()
    assert os.waitstatus_to_exitcode(status) == 0, screen.text[-2000:]
    session = orjson.loads(forge(claude_env, "show", "last", "--json").stdout)
    calls = [b for e in session["exchanges"] if e["response"]
             for b in e["response"]["content"] if b["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["Bash"]


class Screen:
    """What the terminal has shown so far."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = b""

    def read(self, timeout: float) -> None:
        import select

        if select.select([self.fd], [], [], timeout)[0]:
            try:
                self.text += os.read(self.fd, 65536)
            except OSError:  # the child side closed
                pass

    def wait_for(self, needle: bytes, timeout: float = 60) -> None:
        import time

        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert time.monotonic() < deadline, f"{needle!r} never shown: {self.text[-2000:]!r}"
            self.read(0.2)

    def wait_exit(self, pid: int, timeout: float = 60) -> int:
        """Wait for the child, reading the terminal meanwhile so it never blocks writing."""
        import time

        deadline = time.monotonic() + timeout
        while (status := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                raise AssertionError(f"no exit after Ctrl-C: {self.text[-2000:]!r}")
            self.read(0.1)
        return status[1]

    def close(self) -> None:
        os.close(self.fd)
