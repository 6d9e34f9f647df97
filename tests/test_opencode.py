"""The real opencode (npm opencode-ai, a Bun binary), run through `forge-record run` against the
mock's Anthropic API.

opencode reads its provider from config: the test gives it none beyond the Anthropic API key,
so it talks to api.anthropic.com as a user's would. Forward mode (HTTPS_PROXY for Bun's fetch,
NODE_EXTRA_CA_CERTS) and reverse mode (OPENCODE_CONFIG_CONTENT pointing the provider's
`baseURL`, with `/v1`, at the proxy) must both record the `bash` tool call, its result and the
answer. Models are not fetched from models.dev (offline), nor updates or plugins.
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
from export_checks import check_recorded_cli_session

from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.mock.anthropic import text_message

pytestmark = [pytest.mark.slow, pytest.mark.cli]

ROOT = Path(__file__).resolve().parent.parent
DUMMY_KEY = "sk-ant-api03-dummy-opencode-e2e-key-000000"
FORGE = str(Path(sys.executable).with_name("forge-record"))


def find_opencode() -> str | None:
    local = ROOT / ".cache/npm/node_modules/.bin/opencode"
    return str(local) if local.exists() else shutil.which("opencode")


def bash_script(request: dict) -> dict:
    """opencode's shell tool is `bash`: call it on TOOL_MARKER, then report its output."""
    last = [m for m in request.get("messages") or [] if m.get("role") == "user"][-1]
    blocks = last["content"] if isinstance(last["content"], list) else []
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        output = results[0].get("content")
        if isinstance(output, list):
            output = "".join(b.get("text", "") for b in output)
        return text_message(f"The command printed: {output}")
    tools = [t.get("name") for t in request.get("tools") or ()]
    if TOOL_MARKER in orjson.dumps(last["content"]).decode() and "bash" in tools:
        call = {"type": "tool_use", "id": "toolu_01opencodee2e0000000000", "name": "bash",
                "input": {"command": f"printf '%s-output-%d\\n' {TOOL_MARKER} 42",
                          "description": "Print a marker"}}
        return {"content": [{"type": "text", "text": "Running it."}, call],
                "stop_reason": "tool_use"}
    return text_message("OK from the mock.")


@pytest.fixture
def opencode_env(tmp_path):
    opencode = find_opencode()
    require(opencode is not None, "opencode is not installed (scripts/test installs it with npm)")
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return {
        "PATH": f"{Path(opencode).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path),
        "FORGE_RECORD_HOME": str(tmp_path / "forge"),
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "OPENCODE_CONFIG_CONTENT": '{"model": "anthropic/claude-sonnet-4-5"}',
        "OPENCODE_DISABLE_MODELS_FETCH": "true",
        "OPENCODE_DISABLE_AUTOUPDATE": "true",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
        "OPENCODE_DISABLE_SHARE": "true",
        "OPENCODE_PERMISSION": '{"bash": "allow"}',
    }


def forge(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=Path(env["TMPDIR"]) / "work")


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_opencode_tool_call_is_recorded(opencode_env, mode):
    with MockUpstream(options={"anthropic_script": bash_script}) as mock:
        proc = forge(opencode_env, "run", "--mode", mode,
                     "--upstream", f"api.anthropic.com={mock.url}", "--",
                     "opencode", "run", f"Run the {TOOL_MARKER} command")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout  # the tool ran, the answer came back
        assert len([r for r in mock.requests if r.path == "/v1/messages"]) >= 2

    session = orjson.loads(forge(opencode_env, "show", "last", "--json").stdout)
    assert session["harness"] == "opencode" and session["harness_version"] == "1.18.33"
    turns = [e for e in session["exchanges"] if e["dialect"] == "anthropic.messages"]
    assert all(e["status"] == "complete" for e in turns), [e["flags"] for e in turns]
    assert all(e["url"] == "https://api.anthropic.com/v1/messages" for e in turns)
    call_turn = next(e for e in turns if any(b["type"] == "tool_call"
                                             for b in e["response"]["content"]))
    [call] = [b for b in call_turn["response"]["content"] if b["type"] == "tool_call"]
    assert call["name"] == "bash" and TOOL_MARKER in call["arguments"]["command"]
    final = turns[-1]
    results = [b for m in final["request"]["messages"] for b in m["content"]
               if b["type"] == "tool_result"]
    assert results and results[-1]["tool_call_id"] == call["id"]
    assert f"{TOOL_MARKER}-output-42" in orjson.dumps(results[-1]["content"]).decode()
    assert final["response"]["content"][0]["text"].startswith("The command printed")
    db = Path(opencode_env["FORGE_RECORD_HOME"]) / "traces.db"
    for path in db.parent.glob("traces.db*"):
        assert DUMMY_KEY.encode() not in path.read_bytes()
    check_recorded_cli_session(opencode_env["FORGE_RECORD_HOME"], session)
