"""`forge-record demo` and `forge-record mock`: a session recorded offline on day one, with the
real Claude Code when it is installed and with the built-in client when no CLI is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson
import pytest
from claude_code_cli import find_claude
from conftest import require

FORGE = str(Path(sys.executable).with_name("forge-record"))
# forge-record and the demo's client are started by absolute path; scripts/ link the agent
# CLIs into the venv's bin, so that is not on this PATH
NO_CLI_PATH = f"/usr/bin{os.pathsep}/bin"
NEXT = ["forge-record sessions", "forge-record show last", "forge-record view last",
        "forge-record export --format openai --session last -o demo.jsonl"]


def demo_env(tmp_path, path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return env | {"PATH": path, "FORGE_RECORD_HOME": str(tmp_path / "forge"),
                  "HOME": str(tmp_path / "user-home"), "ANTHROPIC_API_KEY": "sk-ant-users-own"}


def forge(env, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL, cwd=cwd)


def assert_demo_recorded(env, proc, harness: str) -> dict:
    assert proc.returncode == 0, proc.stderr
    assert "forge-record-e2e-output-42" in proc.stdout  # the tool call really ran
    lines = proc.stderr.splitlines()
    assert any(" · 2 model calls · 1 tool call · " in line for line in lines), proc.stderr
    assert all(step in proc.stderr for step in NEXT), proc.stderr
    session = orjson.loads(forge(env, "show", "last", "--json").stdout)
    assert session["harness"] == harness and session["exit_code"] == 0
    assert session["tags"]["demo"]
    calls = [b for e in session["exchanges"] for b in e["response"]["content"]
             if b["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["Bash"]
    assert all(e["url"].startswith("https://api.anthropic.com/v1/messages")
               for e in session["exchanges"])
    for command in (["sessions"], ["show", "last"], ["export", "--format", "openai",
                                                     "--session", "last"]):
        assert forge(env, *command).returncode == 0
    store = Path(env["FORGE_RECORD_HOME"])
    for path in store.glob("traces.db*"):  # the user's own key never reaches the store
        assert b"sk-ant-users-own" not in path.read_bytes()
    return session


def test_demo_without_any_cli_uses_the_built_in_client(tmp_path):
    env = demo_env(tmp_path, NO_CLI_PATH)
    require(subprocess.run(["sh", "-c", "command -v claude"], env=env,
                           capture_output=True).returncode != 0, "claude is in /usr/bin")
    proc = forge(env, "demo", cwd=tmp_path)
    assert "python-client against the mock model API on http://127.0.0.1:" in proc.stderr
    assert "demo agent (anthropic SDK)" in proc.stdout
    session = assert_demo_recorded(env, proc, "generic")
    assert session["tags"] == {"demo": "python-client"}


def test_demo_client_without_the_sdk_speaks_the_messages_api_itself(tmp_path):
    """anthropic is not a forge-record dependency: without it the client streams through
    urllib (the SDK import made to fail here), and records the same conversation."""
    from forge_record.mock import MockUpstream

    env = demo_env(tmp_path, os.environ["PATH"])
    no_sdk = ("import runpy, sys; sys.modules['anthropic'] = None; "
              "runpy.run_module('forge_record.mock.client', run_name='__main__')")
    with MockUpstream() as mock:
        proc = forge(env, "run", "--harness", "generic", "--upstream",
                     f"api.anthropic.com={mock.url}", "--", sys.executable, "-c", no_sdk)
        assert [r.json()["stream"] for r in mock.requests] == [True, True]
    assert proc.returncode == 0, proc.stderr
    assert "demo agent (urllib)" in proc.stdout and "forge-record-e2e-output-42" in proc.stdout
    session = orjson.loads(forge(env, "show", "last", "--json").stdout)
    assert [e["status"] for e in session["exchanges"]] == ["complete", "complete"]


@pytest.mark.slow
@pytest.mark.cli
def test_demo_with_the_real_claude_code(tmp_path):
    claude = find_claude()
    require(claude is not None, "Claude Code is not installed (scripts/test installs it)")
    env = demo_env(tmp_path, f"{Path(claude).parent}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "user-home").mkdir()
    proc = forge(env, "demo", cwd=tmp_path)
    assert "claude-code against the mock model API" in proc.stderr
    session = assert_demo_recorded(env, proc, "claude-code")
    assert session["harness_version"] and session["tags"] == {"demo": "claude-code"}
    assert list((tmp_path / "user-home").iterdir()) == []  # the user's HOME is left alone


def test_demo_agent_claude_without_claude_is_one_line(tmp_path):
    env = demo_env(tmp_path, NO_CLI_PATH)
    require(subprocess.run(["sh", "-c", "command -v claude"], env=env,
                           capture_output=True).returncode != 0, "claude is in /usr/bin")
    proc = forge(env, "demo", "--agent", "claude")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "claude is not on PATH" in proc.stderr
    assert not Path(env["FORGE_RECORD_HOME"], "traces.db").exists()


def test_mock_serves_on_its_port_until_ctrl_c(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([FORGE, "mock", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        first = proc.stdout.readline()
        assert first.startswith(f"mock model API on http://127.0.0.1:{port} "), first
        urls = [proc.stdout.readline().strip() for _ in range(3)]
        assert urls == [f"ANTHROPIC_BASE_URL=http://127.0.0.1:{port}",
                        f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1",
                        f"GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:{port}"]
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/messages", method="POST",
            data=orjson.dumps({"model": "m", "max_tokens": 8,
                               "messages": [{"role": "user", "content": "hi"}]}),
            headers={"content-type": "application/json"})
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                request, timeout=30) as reply:
            assert orjson.loads(reply.read())["content"][0]["text"] == "OK from the mock."
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_mock_on_a_busy_port_is_one_line(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = forge(os.environ, "mock", "--port", str(busy.getsockname()[1]))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
