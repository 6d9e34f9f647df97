"""Real third-party clients, recorded through `forge-record run` against the project's mock
on 127.0.0.1, each from an environment of its own that scripts/install-clients makes under
.cache/clients (the clients pin their own dependencies, so none shares the test venv):

- aider (PyPI aider-chat): an edit that creates a file, from the mock's whole-file listing
  (forge_record.mock.edits), then a second call in the same conversation (its test command
  fails once, so aider sends the output back); reverse mode (OPENAI_API_BASE on loopback, also
  as `python -m aider`) and forward mode (HTTPS through the proxy, the CA from SSL_CERT_FILE);
- simonw's llm (PyPI llm) with a `--functions` tool: it sends the call's arguments back
  re-serialized by json.dumps, which must not split the conversation; reverse
  (OPENAI_BASE_URL on loopback) and forward;
- pi (npm @mariozechner/pi-coding-agent) over the Responses API with its bash tool, forward
  (its own undici proxy agent, on any Node); it sends its system prompt as an `input` item
  with role `system`.

Each is checked for: the client's own result, every call recorded and complete, one thread
per conversation, and exports that pass the consumers' rules (OpenAI's fine-tuning rules,
the anthropic SDK's request types). No network: HOME is a fresh directory, the model is the
mock, and every run is bounded by a timeout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from subprocess import DEVNULL, CompletedProcess, run

import orjson
import pytest
from anthropic.types import MessageParam, TextBlockParam, ToolParam
from conftest import require
from export_checks import openai_problems
from pydantic import TypeAdapter

from forge_record.mock import TOOL_MARKER, MockUpstream, default_routes, edits

pytestmark = [pytest.mark.slow, pytest.mark.clients]

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / ".cache" / "clients"
FORGE = str(Path(sys.executable).with_name("forge-record"))
DUMMY_KEY = "sk-dummy-third-party-client-key-0000000000"
OUTPUT = f"{TOOL_MARKER}-output-42"  # what the mock's shell command prints
INSTALL = "run scripts/install-clients"


def installed(name: str, relpath: str) -> Path:
    path = CLIENTS / name / relpath
    require(path.exists(), f"{name} is not installed in {CLIENTS / name} ({INSTALL})")
    return path


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A clean environment: a fresh HOME, nothing from the caller's proxy or base URLs."""
    (tmp_path / "work").mkdir()
    (tmp_path / "home").mkdir()
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path),
            "LANG": "C.UTF-8", "FORGE_RECORD_HOME": str(tmp_path / "forge"),
            "OPENAI_API_KEY": DUMMY_KEY}


def forge(env: dict[str, str], *args: str, timeout: int = 180) -> CompletedProcess:
    return run([FORGE, *args], env=env, stdin=DEVNULL, capture_output=True, text=True,
               timeout=timeout, cwd=Path(env["TMPDIR"]) / "work")


def recorded(env: dict[str, str], mock: MockUpstream, harness: str, one_thread: bool = True
             ) -> list[dict]:
    """The session's model calls, checked: harness, one per request the mock got, complete,
    all in one thread, and no API key anywhere in the store."""
    session = orjson.loads(forge(env, "show", "last", "--json").stdout)
    assert session["harness"] == harness
    calls = [e for e in session["exchanges"] if e["side_kind"] is None]
    assert len(calls) == len(mock.requests), [e["url"] for e in calls]
    assert all(e["status"] == "complete" for e in calls), [e["flags"] for e in calls]
    assert not one_thread or [t["id"] for t in session["lineage"]["threads"]] == ["main"], \
        f"one conversation must be one thread: {[e['thread'] for e in calls]}"
    for path in Path(env["FORGE_RECORD_HOME"]).glob("traces.db*"):
        assert DUMMY_KEY.encode() not in path.read_bytes()
    return calls


def exported(env: dict[str, str], fmt: str) -> list[dict]:
    proc = forge(env, "export", "-f", fmt, "--session", "last")
    assert proc.returncode == 0, proc.stderr
    return [orjson.loads(line) for line in proc.stdout.splitlines()]


def one_openai_line(env: dict[str, str]) -> dict:
    """The conversation as one OpenAI fine-tuning line that breaks none of OpenAI's rules."""
    lines = exported(env, "openai")
    assert len(lines) == 1, "one conversation, one line"
    assert openai_problems(lines[0]) == []
    return lines[0]


# --- aider ----------------------------------------------------------------------------------

AIDER_ARGS = [
    "--model", "openai/gpt-4o-mini", "--edit-format", "whole", "--yes-always", "--no-git",
    "--no-check-update", "--no-analytics", "--no-show-model-warnings", "--no-show-release-notes",
    "--no-pretty", "--no-stream", "--message", f"{edits.EDIT_MARKER} hello.txt please",
]
# fails once, so aider sends its output back: a second call of the same conversation
FAILING_TEST = ["--auto-test",
                "--test-cmd", "test -f .tested || { touch .tested; echo first-run-fails; false; }"]


def aider_home(env: dict[str, str]) -> None:
    """aider fetches litellm's model list from GitHub unless a fresh cache exists; litellm
    reads its own bundled copy with LITELLM_LOCAL_MODEL_COST_MAP."""
    cache = Path(env["HOME"]) / ".aider" / "caches"
    cache.mkdir(parents=True)
    (cache / "model_prices_and_context_window.json").write_text('{"forge-record-mock": {}}')
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"


def run_aider(env: dict[str, str], route: str, *extra: str, one_thread: bool = True
              ) -> tuple[MockUpstream, list[dict]]:
    """aider asked to create hello.txt; (the mock, the recorded calls) once it created it."""
    aider = installed("aider", "bin/aider")
    aider_home(env)
    with MockUpstream(routes=[*edits.ROUTES, *default_routes()]) as mock:
        if route == "forward":  # no base URL: api.openai.com over HTTPS, through the proxy
            options = ["--mode", "forward", "--upstream", f"api.openai.com={mock.url}"]
        else:  # auto: OPENAI_API_BASE is set, so reverse, the local server kept upstream
            env["OPENAI_API_BASE"] = f"{mock.url}/v1"
            options = []
        command = ([str(aider.with_name("python")), "-m", "aider"] if route == "python-m"
                   else [str(aider)])
        proc = forge(env, "run", *options, "--", *command, *AIDER_ARGS, *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "warning" not in proc.stderr
        assert {r.path for r in mock.requests} == {"/v1/chat/completions"}
    assert (Path(env["TMPDIR"]) / "work" / "hello.txt").read_text() == edits.EDIT_CONTENT
    calls = recorded(env, mock, "aider", one_thread)
    assert edits.EDIT_CONTENT.strip() in calls[0]["response"]["content"][0]["text"]
    return mock, calls


@pytest.mark.parametrize("route", ["reverse", "python-m", "forward"])
def test_aider_creates_a_file_and_is_recorded(env, route):
    mock, calls = run_aider(env, route)
    assert len(mock.requests) == 1
    [thread] = orjson.loads(forge(env, "show", "last", "--json").stdout)["lineage"]["threads"]
    assert thread["id"] == "main"
    line = one_openai_line(env)
    assert line["messages"][0]["role"] == "system"
    last = line["messages"][-1]
    assert (last["role"], last["content"], last.get("weight", 1)) == (
        "assistant", edits.listing("hello.txt"), 1)


def test_aider_second_call_of_a_conversation(env):
    """Its test command fails once, so aider sends the output back: two calls, both recorded
    and complete, in one thread, although aider rebuilds the file-context messages before the
    user's turn on every call ('I am not sharing any files' becomes 'I have *added these files
    to the chat*'), so the second call's history does not extend the first's."""
    mock, calls = run_aider(env, "reverse", *FAILING_TEST, one_thread=False)
    assert len(calls) == 2
    assert "first-run-fails" in orjson.dumps(calls[1]["request"]["messages"]).decode()
    assert {c["thread"] for c in calls} == {"main"}


# --- llm ------------------------------------------------------------------------------------

FUNCTIONS = f'''
def run_command(command: str) -> str:
    "Run a shell command and return what it printed."
    return "{OUTPUT}"
'''


@pytest.mark.parametrize("route", ["reverse", "forward"])
def test_llm_tool_call_is_one_thread(env, route):
    llm = installed("llm", "bin/llm")
    env["LLM_USER_PATH"] = str(Path(env["HOME"]) / "llm")
    with MockUpstream() as mock:
        if route == "forward":
            options = ["--mode", "forward", "--upstream", f"api.openai.com={mock.url}"]
        else:  # auto: OPENAI_BASE_URL is set, so reverse
            env["OPENAI_BASE_URL"] = f"{mock.url}/v1"
            options = []
        proc = forge(env, "run", *options, "--", str(llm), "-m", "gpt-4o-mini",
                     "--functions", FUNCTIONS, "--td", f"Run the {TOOL_MARKER} command")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"The command printed: {OUTPUT}" in proc.stdout
        sent_back = mock.requests[1].json()["messages"][1]["tool_calls"][0]["function"]
    # what makes this client worth testing: the arguments come back re-serialized
    assert sent_back["arguments"] == orjson.dumps(orjson.loads(sent_back["arguments"])) \
        .decode().replace('":"', '": "')
    calls = recorded(env, mock, "llm")
    assert len(calls) == 2
    line = one_openai_line(env)
    assert [m["role"] for m in line["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert line["messages"][2]["content"] == OUTPUT


# --- pi -------------------------------------------------------------------------------------


def test_pi_over_responses_is_recorded(env):
    pi = installed("pi", "node_modules/.bin/pi")
    with MockUpstream() as mock:
        proc = forge(env, "run", "--upstream", f"api.openai.com={mock.url}", "--", str(pi),
                     "--offline", "--no-session", "-p", "--provider", "openai", "--model",
                     "gpt-4.1-mini", "--tools", "bash", f"Run the {TOOL_MARKER} command")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"The command printed: {OUTPUT}" in proc.stdout
        assert [r.path for r in mock.requests] == ["/v1/responses"] * 2
        [system] = [i for i in mock.requests[0].json()["input"] if i.get("role") == "system"]
    calls = recorded(env, mock, "pi")
    assert {c["dialect"] for c in calls} == {"openai.responses"}
    [call] = [b for b in calls[0]["response"]["content"] if b["type"] == "tool_call"]
    assert call["name"] == "bash" and TOOL_MARKER in call["arguments"]["command"]
    line = one_openai_line(env)
    assert [m["role"] for m in line["messages"]] == ["system", "user", "assistant", "tool",
                                                      "assistant"]
    assert line["messages"][0]["content"] == system["content"]
    assert OUTPUT in line["messages"][3]["content"]
    # the system item is the Anthropic line's system prompt, not a message
    [anthropic] = exported(env, "anthropic")
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user",
                                                           "assistant"]
    assert anthropic["system"][0]["text"] == system["content"]
    TypeAdapter(list[MessageParam]).validate_python(anthropic["messages"])
    TypeAdapter(list[TextBlockParam]).validate_python(anthropic["system"])
    TypeAdapter(list[ToolParam]).validate_python(anthropic["tools"])
