"""Driving the real Claude Code CLI through `forge-record run`, for the test_claude_code* modules.

`claude_env` (a fixture: import it into the test module) is an environment with a fresh home,
a dummy API key and Claude Code's background traffic switched off; `forge` runs forge-record
in it; `interactive_claude` runs the TUI in a pseudo-terminal, read through a `Screen`.
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from conftest import require

ROOT = Path(__file__).resolve().parent.parent
DUMMY_KEY = "sk-ant-api03-dummy-e2e-key-never-real-000000"
FORGE = str(Path(sys.executable).with_name("forge-record"))


def find_claude() -> str | None:
    local = ROOT / ".cache/npm/node_modules/.bin/claude"
    return str(local) if local.exists() else shutil.which("claude")


@pytest.fixture
def claude_env(tmp_path):
    claude = find_claude()
    require(claude is not None, "Claude Code is not installed (scripts/test installs it with npm)")
    home = tmp_path / "home"
    home.mkdir()
    return {
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


def forge(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=env["HOME"])


def interactive_claude(env: dict, work: Path, upstream: str, prompt: str,
                       answered: Callable[[Screen], None]) -> tuple[int, Screen]:
    """`forge-record run -- claude` in a pseudo-terminal, started in `work`, with
    api.anthropic.com sent to `upstream`: `prompt` is typed at the "❯" prompt, `answered(screen)`
    waits for the turn to end, then Ctrl-C quits Claude Code (_quit). Returns forge-record's exit
    code and the screen."""
    _skip_first_run_dialogs(Path(env["HOME"]), work)
    argv = [FORGE, "run", "--upstream", f"api.anthropic.com={upstream}", "--", "claude"]
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(work)
        os.execve(FORGE, argv, env | {"TERM": "xterm-256color"})
    screen = Screen(fd)
    try:
        screen.wait_for(b"\xe2\x9d\xaf")  # the "❯" prompt
        time.sleep(1)
        os.write(fd, prompt.encode())
        time.sleep(0.5)
        os.write(fd, b"\r")
        answered(screen)
        status = _quit(screen, pid, fd)
    finally:
        screen.close()
    return os.waitstatus_to_exitcode(status), screen


def _quit(screen: Screen, pid: int, fd: int, attempts: int = 3) -> int:
    """Ctrl-C twice, half a second apart, quits Claude Code at its prompt. On a busy machine
    the turn may still be running when the answer shows: then the first Ctrl-C only
    interrupts it, and the pair is sent again."""
    for _ in range(attempts - 1):
        os.write(fd, b"\x03")
        time.sleep(0.5)
        os.write(fd, b"\x03")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            screen.read(0.1)
    os.write(fd, b"\x03")
    time.sleep(0.5)
    os.write(fd, b"\x03")
    return screen.wait_exit(pid)


def _skip_first_run_dialogs(home: Path, work: Path) -> None:
    """Answer in advance what the first-run dialogs would ask: onboarding, folder trust, the
    API key; and allow Bash."""
    (home / ".claude.json").write_bytes(orjson.dumps({
        "hasCompletedOnboarding": True,
        "projects": {str(work): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": [DUMMY_KEY[-20:]], "rejected": []},
    }))
    (home / ".claude").mkdir()
    (home / ".claude/settings.json").write_bytes(orjson.dumps({"permissions": {"allow": ["Bash"]}}))


class Screen:
    """What the terminal has shown so far."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = b""

    def read(self, timeout: float) -> None:
        if select.select([self.fd], [], [], timeout)[0]:
            try:
                self.text += os.read(self.fd, 65536)
            except OSError:  # the child side closed
                pass

    def wait_for(self, needle: bytes, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert time.monotonic() < deadline, f"{needle!r} never shown: {self.text[-2000:]!r}"
            self.read(0.2)

    def wait_exit(self, pid: int, timeout: float = 60) -> int:
        """Wait for the child, reading the terminal meanwhile so it never blocks writing."""
        deadline = time.monotonic() + timeout
        while (status := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                raise AssertionError(f"no exit after Ctrl-C: {self.text[-2000:]!r}")
            self.read(0.1)
        return status[1]

    def close(self) -> None:
        os.close(self.fd)
