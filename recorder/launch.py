"""Run the agent CLI as a terminal user expects while forge-record waits beside it.

The child inherits stdin, stdout and stderr, and stays in our process group, so it owns the
terminal exactly as if it had been started by the shell: an interactive `claude` gets its
keystrokes, window size and colours. Signals:

- SIGINT from the terminal (Ctrl-C) already reaches the child, which is in the foreground
  process group; forge-record ignores it so it outlives the child and finishes recording.
  When there is no terminal (a script sent SIGINT to forge-record alone) it is forwarded.
- SIGTERM, SIGHUP and SIGQUIT sent to forge-record are forwarded to the child.
- SIGWINCH is forwarded too (harmless when the terminal already sent it).

The exit status is the child's; a child killed by signal N gives 128 + N, as a shell does.

If forge-record itself dies without forwarding anything (SIGKILL, the OOM killer), the child
gets SIGTERM from the kernel (Linux: PR_SET_PDEATHSIG, set between fork and exec): an agent
whose proxy is gone would otherwise run on as an orphan whose every model call fails.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping

from forge_record.errors import ForgeRecordError


class CommandNotFound(ForgeRecordError):
    exit_code = 127


_FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH)
_PR_SET_PDEATHSIG = 1


def resolve(argv: list[str], env: Mapping[str, str]) -> str:
    """The executable's path, or CommandNotFound before anything is started."""
    exe = shutil.which(argv[0], path=env.get("PATH"))
    if exe is None:
        raise CommandNotFound(f"command not found: {argv[0]}")
    return exe


def run_child(argv: list[str], env: Mapping[str, str]) -> int:
    exe = resolve(argv, env)
    try:
        proc = subprocess.Popen([exe, *argv[1:]], env=dict(env),
                                preexec_fn=_dies_with_us())
    except OSError as e:
        raise CommandNotFound(f"cannot run {argv[0]}: {e.strerror}") from e
    previous = _install_forwarding(proc)
    try:
        returncode = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - returncode if returncode < 0 else returncode


def _dies_with_us() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel send the child SIGTERM when we die (Linux only).

    Everything is looked up before the fork: between fork and exec the child may only make
    the system call. The parent's pid is checked after it, in case we died in between."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # already gone: the signal would never come
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _install_forwarding(proc: subprocess.Popen) -> dict[int, object]:
    def forward(signum: int, _frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    def on_sigint(signum: int, frame: object) -> None:
        if not _child_gets_terminal_signals():
            forward(signum, frame)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, on_sigint)}
    for sig in _FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    return previous


def _child_gets_terminal_signals() -> bool:
    """Whether a Ctrl-C on the terminal reaches the child by itself: we (and so the child)
    are the terminal's foreground process group."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except (OSError, ValueError, AttributeError):
            continue
    return False
