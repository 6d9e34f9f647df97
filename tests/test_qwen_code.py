"""The real Qwen Code (npm @qwen-code/qwen-code), run through `forge-record run` against a
scripted OpenAI-compatible server on 127.0.0.1.

Qwen Code with an API key speaks Chat Completions. The server here asks for its shell tool,
`run_shell_command`, then answers with the tool's output. Two routes, both recorded:

- forward: no base URL, so Qwen Code calls its default, DashScope's compatible mode
  (https://dashscope.aliyuncs.com/compatible-mode/v1), through HTTPS_PROXY with
  NODE_EXTRA_CA_CERTS, and `--upstream` sends that host to the local server;
- auto, with OPENAI_BASE_URL already pointing at the local server (a vLLM on loopback, which
  NO_PROXY keeps away from forward mode): the shim picks reverse and keeps it the upstream.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import require
from export_checks import check_recorded_cli_session

from forge_record.mock import TOOL_MARKER, MockUpstream, Received, Reply
from forge_record.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.cli]

ROOT = Path(__file__).resolve().parent.parent
DUMMY_KEY = "sk-dummy-qwen-e2e-key-never-real-0000000000"
FORGE = str(Path(sys.executable).with_name("forge-record"))
SHELL = "run_shell_command"
# Qwen Code 0.24.4 runs a one-shot prompt's shell command with child_process and settles on the
# child's 'exit' event, which can come before its stdout is read: when another of its children
# (sleep inhibitor, git probe) exits at that moment, libuv reaps ours first and the model is told
# "Output: (empty)". Its node-pty path waits for the terminal to drain, so the tests use it.
SETTINGS = {"tools": {"shell": {"enableInteractiveShell": True}}}


def find_qwen() -> str | None:
    local = ROOT / ".cache/npm/node_modules/.bin/qwen"
    return str(local) if local.exists() else shutil.which("qwen")


def _answer(request: dict) -> dict:
    """The assistant message: a shell call on TOOL_MARKER, the tool's output once it is back."""
    messages = request.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        output = messages[-1].get("content")
        if isinstance(output, list):  # Qwen Code sends content parts
            output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
        return {"content": f"The command printed: {output}"}
    users = [m for m in messages if m.get("role") == "user"]
    prompt = orjson.dumps(users[-1].get("content") if users else "").decode()
    tools = [(t.get("function") or {}).get("name") for t in request.get("tools") or ()]
    if TOOL_MARKER in prompt and SHELL in tools:
        command = f"printf '%s-output-%d\\n' {TOOL_MARKER} 42"  # its output is not its text
        return {"content": "Running it.", "tool_calls": [{
            "index": 0, "id": "call_qwen_e2e_0001", "type": "function",
            "function": {"name": SHELL, "arguments": orjson.dumps({"command": command}).decode()}}]}
    return {"content": "OK from the mock."}


def _chunks(answer: dict, model: str) -> list[dict]:
    base = {"id": "chatcmpl-qwen-e2e", "object": "chat.completion.chunk", "created": 1,
            "model": model}
    deltas = [{"role": "assistant", "content": answer["content"]}]
    for call in answer.get("tool_calls", []):  # name first, then the arguments in two parts
        args = call["function"]["arguments"]
        deltas.append({"tool_calls": [dict(call, function={"name": SHELL, "arguments": ""})]})
        deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
                   for part in (args[:9], args[9:])]
    finish = "tool_calls" if answer.get("tool_calls") else "stop"
    out = [dict(base, choices=[{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
    out.append(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]))
    out.append(dict(base, choices=[], usage={"prompt_tokens": 900, "completion_tokens": 12,
                                             "total_tokens": 912}))
    return out


def chat(mock: MockUpstream, received: Received) -> Reply:
    request = received.json()
    answer, model = _answer(request), request.get("model", "qwen-mock")
    if not request.get("stream"):
        message = {"role": "assistant", **{k: v for k, v in answer.items()}}
        return Reply.json({"id": "chatcmpl-qwen-e2e", "object": "chat.completion", "model": model,
                           "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
    events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in _chunks(answer, model)]
    return Reply.stream([*events, b"data: [DONE]\n\n"])


@pytest.fixture
def qwen_env(tmp_path):
    qwen = find_qwen()
    require(qwen is not None, "Qwen Code is not installed (scripts/test installs it with npm)")
    home = tmp_path / "home"
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_bytes(orjson.dumps(SETTINGS))
    (tmp_path / "work").mkdir()
    return {
        "PATH": f"{Path(qwen).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        "FORGE_RECORD_HOME": str(tmp_path / "forge"),
        "OPENAI_API_KEY": DUMMY_KEY,
        "OPENAI_MODEL": "qwen3-coder-plus",
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
    }


def forge(env, *args, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=Path(env["TMPDIR"]) / "work")


@pytest.mark.parametrize("route", ["forward", "local-base-url"])
def test_qwen_code_tool_call_is_recorded(qwen_env, route):
    routes = [("POST", lambda path: path.endswith("/chat/completions"), chat)]
    with MockUpstream(routes=routes) as mock:
        if route == "forward":
            # With an API key and no base URL, Qwen Code calls DashScope's compatible mode.
            options = ["--mode", "forward", "--upstream", f"dashscope.aliyuncs.com={mock.url}",
                       "--upstream", f"api.openai.com={mock.url}"]
        else:
            qwen_env = {**qwen_env, "OPENAI_BASE_URL": f"{mock.url}/v1"}
            options = []  # auto: reverse, with the local server kept as the upstream
        proc = forge(qwen_env, "run", *options, "--", "qwen", "--auth-type", "openai", "--yolo",
                     f"Run the {TOOL_MARKER} command")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout
        assert {r.path for r in mock.requests} <= {"/v1/chat/completions",
                                                    "/compatible-mode/v1/chat/completions"}
        sent = sorted(r.body for r in mock.requests)

    session = orjson.loads(forge(qwen_env, "show", "last", "--json").stdout)
    assert session["harness"] == "qwen-code" and session["harness_version"] == "0.24.4"
    turns = [e for e in session["exchanges"] if e["dialect"] == "openai.chat"]
    assert len(turns) == len(mock.requests)
    assert all(e["status"] == "complete" for e in turns), [e["flags"] for e in turns]
    call_turn = next(e for e in turns if any(b["type"] == "tool_call"
                                             for b in e["response"]["content"]))
    [call] = [b for b in call_turn["response"]["content"] if b["type"] == "tool_call"]
    assert call["name"] == SHELL and TOOL_MARKER in call["arguments"]["command"]
    final = next(e for e in turns if e["request"]["messages"][-1]["role"] == "tool")
    [result] = final["request"]["messages"][-1]["content"]
    assert result["tool_call_id"] == call["id"]
    content = orjson.dumps(result["content"]).decode()
    assert f"{TOOL_MARKER}-output-42" in content
    assert "Process Group PGID: (none)" not in content, "SETTINGS did not put the command on a PTY"
    assert final["response"]["content"][0]["text"].startswith("The command printed")
    db = Path(qwen_env["FORGE_RECORD_HOME"]) / "traces.db"
    for path in db.parent.glob("traces.db*"):
        assert DUMMY_KEY.encode() not in path.read_bytes()
    # Raw requests are compressed against their blobs rendered in the Chat wire form
    # (store.wire's b"C") and read back as Qwen Code sent them.
    with sqlite3.connect(db) as conn:
        marks = {frame[:1] for (frame,) in conn.execute("SELECT raw_request FROM exchanges")}
    assert marks == {b"C"}
    with open_store(f"sqlite:///{db}") as store:
        assert sorted(e.raw_request for e in store.iter_exchanges(session["id"], raw=True)) == sent
    check_recorded_cli_session(qwen_env["FORGE_RECORD_HOME"], session)
