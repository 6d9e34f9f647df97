"""The command line as a user meets it: through the installed console script."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

FORGE = str(Path(sys.executable).with_name("forge-record"))
PY = sys.executable


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}


def forge(env, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, **kw)


def assert_one_line_error(proc, code=None):
    assert proc.returncode != 0 if code is None else proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_unknown_session(env):
    assert forge(env, "run", "--", "true").returncode == 0
    assert "no session matches 'nosuch'" in assert_one_line_error(forge(env, "show", "nosuch"))


@pytest.mark.parametrize("url", ["nosuch://x", "sqlite:////proc/forbidden/x.db", "not a url"])
def test_bad_store_url(env, url):
    assert_one_line_error(forge(env, "sessions", "--store", url))


def test_unreadable_store(env, tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("this is not a database\n" * 100)
    assert_one_line_error(forge(env, "sessions", "--store", f"sqlite:///{junk}"))


def test_missing_command_exits_127(env):
    line = assert_one_line_error(forge(env, "run", "--", "no-such-agent-cli-xyz"), code=127)
    assert "command not found: no-such-agent-cli-xyz" in line


def test_bad_upstream_url(env):
    proc = forge(env, "run", "--upstream", "api.anthropic.com=notaurl", "--", "true")
    assert "bad --upstream URL" in assert_one_line_error(proc, code=2)


def test_unknown_harness(env):
    assert_one_line_error(forge(env, "run", "--harness", "nope", "--", "true"), code=2)


def test_exit_code_and_session_are_kept(env):
    proc = forge(env, "run", "--tag", "k=v", "--", PY, "-c", "import sys; sys.exit(7)")
    assert proc.returncode == 7
    lines = proc.stderr.strip().splitlines()
    summary = next(i for i, line in enumerate(lines) if line.startswith("forge-record: session "))
    # nothing was recorded, and the run says so after the summary
    assert lines[summary + 1] == "forge-record: warning: the command ran but no model call " \
        "was recorded"
    [row] = orjson.loads(forge(env, "sessions", "--json").stdout)
    assert row["exit_code"] == 7 and row["tags"] == {"k": "v"} and row["calls"] == 0
    shown = orjson.loads(forge(env, "show", row["id"][:6], "--json").stdout)
    assert shown["id"] == row["id"] and shown["exchanges"] == []


def test_forward_env_reaches_the_child(env):
    code = ("import os; print(os.environ['HTTPS_PROXY'], os.environ['NODE_EXTRA_CA_CERTS'], "
            "os.environ['NO_PROXY'])")
    proc = forge(env, "run", "--", PY, "-c", code)
    proxy, ca, no_proxy = proc.stdout.split()
    # with this run's proxy credentials: the proxy serves no other client (addons/access.py)
    assert re.fullmatch(r"http://forge:[0-9a-f]{32}@127\.0\.0\.1:\d+", proxy)
    assert Path(ca).read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert "127.0.0.1" in no_proxy and "localhost" in no_proxy
    ca_dir = Path(ca).parent
    assert ca_dir.stat().st_mode & 0o777 == 0o700
    assert (ca_dir / "mitmproxy-ca.pem").stat().st_mode & 0o777 == 0o600


def test_reverse_keeps_the_users_gateway_as_upstream(env):
    env = {**env, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/gateway"}
    code = "import os; print(os.environ['ANTHROPIC_BASE_URL'], 'HTTPS_PROXY' in os.environ)"
    proc = forge(env, "run", "--harness", "claude-code", "--", PY, "-c", code)
    url, has_proxy = proc.stdout.split()
    # the proxy, under this run's secret path segment (addons/access.py) and then the
    # gateway's path (tests/test_base_paths.py)
    assert url.startswith("http://127.0.0.1:") and urlsplit(url).port != 9
    assert re.fullmatch(r"/[0-9a-f]{32}/gateway", urlsplit(url).path)
    assert has_proxy == "False"


CHILD = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))
signal.signal(signal.SIGINT, lambda *a: sys.exit(4))
print("ready", flush=True)
time.sleep(30)
sys.exit(0)
"""


def start_child(env, **kw):
    proc = subprocess.Popen([FORGE, "run", "--", PY, "-c", CHILD], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 3), (signal.SIGINT, 4)])
def test_signals_are_forwarded_without_a_terminal(env, sig, code):
    proc = start_child(env, stdin=subprocess.DEVNULL)
    proc.send_signal(sig)
    assert proc.wait(20) == code
    assert "forge-record: session" in proc.stderr.read()


def test_child_owns_the_terminal(env):
    """Under a pseudo-terminal the agent sees a TTY on every stream, and Ctrl-C typed there
    reaches it once (forge-record itself keeps running to finish the recording)."""
    code = ("import os, signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(5)); "
            "print('tty', all(os.isatty(f) for f in (0, 1, 2)), flush=True); time.sleep(20)")
    pid, fd = pty.fork()
    if pid == 0:  # the child becomes the session leader with the pty as its terminal
        os.execve(FORGE, [FORGE, "run", "--", PY, "-c", code], env)
    output = b""
    deadline = time.monotonic() + 30
    while not (b"tty True" in output or b"tty False" in output) and time.monotonic() < deadline:
        output += os.read(fd, 1024)
    assert b"tty True" in output
    os.write(fd, b"\x03")  # Ctrl-C, as typed
    _, status = os.waitpid(pid, 0)
    try:
        while chunk := os.read(fd, 1024):
            output += chunk
    except OSError:
        pass
    assert os.waitstatus_to_exitcode(status) == 5, output
    assert b"forge-record: session" in output


def test_port_in_use(env):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = forge(env, "run", "--set", f"listen_port={port}", "--", "true")
    assert "port in use" in assert_one_line_error(proc)


def test_unusable_data_dir(env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = forge({**env, "FORGE_RECORD_HOME": str(blocker / "home")}, "run", "--", "true")
    assert str(blocker) in assert_one_line_error(proc)


@pytest.mark.parametrize("args", [["run", "--mode", "bogus", "--", "true"], ["run"],
                                  ["sessions", "--limit", "x"], ["show"], ["nosuchcommand"]])
def test_wrong_arguments_are_one_line(env, args):
    assert "--help" in assert_one_line_error(forge(env, *args), code=2)


def test_store_files_are_private(env):
    assert forge(env, "run", "--", "true").returncode == 0
    home = Path(env["FORGE_RECORD_HOME"])
    files = list(home.glob("traces.db*"))
    assert files and all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert (home / "redaction.key").stat().st_mode & 0o777 == 0o600
