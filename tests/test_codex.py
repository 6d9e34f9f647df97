"""The real Codex CLI, run through `forge-record run` against the mock upstream, in both of its
transports: a custom provider over HTTP SSE, and the built-in provider over the Responses
WebSocket (warm-up, then calls that send only new items plus `previous_response_id`).

The mock asks for an `exec_command` call; Codex runs it and sends the output back; the mock
answers with it. The stored call that carries the output must hold the whole context: the
user's prompt AND the function_call_output, in both transports. Over the WebSocket the mock
must have seen no HTTP POST (Codex never fell back).

Codex is pinned: `scripts/test` installs @openai/codex@CODEX_VERSION, and these facts were checked
with that version. Its default model (gpt-6.2-sol in 0.171.0) offers tools through a
JavaScript `exec` tool, so the runs ask for gpt-5.4, which offers `exec_command` directly.
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import orjson
import pytest
import zstandard
from codex_cli import (  # noqa: F401 - the fixture
    CODEX_VERSION,
    CUSTOM_PROVIDER,
    DUMMY_KEY,
    PROMPT,
    codex_env,
    forge,
)
from export_checks import check_recorded_cli_session
from mitmproxy.test import taddons
from support import Socket, create, events_for

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.addons.websocket import WebSocketRecorder
from forge_record.commands.run import plan_route
from forge_record.errors import UsageError
from forge_record.finalize import finalize
from forge_record.harness_shims import detect
from forge_record.harness_shims.codex import Codex
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.trust import confdir


def run_codex(env, mock, *forge_args) -> subprocess.CompletedProcess:
    proc = forge(env, "run", *forge_args, "--upstream", f"api.openai.com={mock.url}", "--",
                 "codex", "exec", "--skip-git-repo-check",
                 "--dangerously-bypass-approvals-and-sandbox", "--color", "never",
                 "-m", "gpt-5.4", PROMPT)
    assert proc.returncode == 0, proc.stderr
    assert f"{TOOL_MARKER}-output-42" in proc.stdout  # the tool really ran
    return proc


def stored_session(env) -> dict:
    shown = forge(env, "show", "last", "--json")
    assert shown.returncode == 0, shown.stderr
    session = orjson.loads(shown.stdout)
    assert session["harness"] == "codex" and session["harness_version"] == CODEX_VERSION
    assert session["exit_code"] == 0
    return session


def blocks(exchange: dict, kind: str) -> list[dict]:
    return [b for m in exchange["request"]["messages"] for b in m["content"]
            if b["type"] == kind]


def check_tool_round_trip(session: dict, url: str) -> dict:
    """The model asked for exec_command; the call that came back holds the whole context.
    Returns that second call."""
    calls = [e for e in session["exchanges"] if e["kind"] == "model"]
    assert all(e["status"] == "complete" and e["url"] == url and not e["flags"] for e in calls)
    asked = next(e for e in calls if any(b["type"] == "tool_call"
                                         for b in e["response"]["content"]))
    [call] = [b for b in asked["response"]["content"] if b["type"] == "tool_call"]
    assert call["name"] == "exec_command" and TOOL_MARKER in call["arguments"]["cmd"]
    second = calls[calls.index(asked) + 1]
    prompts = [b["text"] for m in second["request"]["messages"] if m["role"] == "user"
               for b in m["content"] if b["type"] == "text"]
    assert PROMPT in prompts  # the original user message...
    [result] = blocks(second, "tool_result")  # ...AND the function_call_output
    assert result["tool_call_id"] == call["id"]
    assert f"{TOOL_MARKER}-output-42" in orjson.dumps(result["content"]).decode()
    assert second["response"]["content"][0]["text"].startswith("The command printed")
    for header in ("session-id", "originator", "x-codex-turn-metadata", "x-client-request-id"):
        assert header in second["request_headers"], header
    assert "authorization" not in second["request_headers"]
    return second


def assert_no_key_stored(env) -> None:
    for path in Path(env["FORGE_RECORD_HOME"]).glob("traces.db*"):
        assert DUMMY_KEY.encode() not in path.read_bytes()


@pytest.mark.slow
@pytest.mark.cli
def test_custom_provider_over_http_sse(codex_env):
    (Path(codex_env["CODEX_HOME"]) / "config.toml").write_text(CUSTOM_PROVIDER)
    with MockUpstream() as mock:
        run_codex(codex_env, mock)  # auto mode: forward
        assert [r.method for r in mock.requests] == ["POST", "POST"]
        assert not mock.websockets
        sent = [r.body for r in mock.requests]
    session = stored_session(codex_env)
    second = check_tool_round_trip(session, "https://api.openai.com/v1/responses")
    assert "previous_response_id" not in second["request"]["parameters"]  # HTTP sends it all
    # Raw requests are compressed against their blobs rendered as Codex writes its items
    # (store.wire's b"R") and read back as Codex sent them.
    assert raw_requests(codex_env, session["id"]) == ([b"R", b"R"], sent)
    assert_no_key_stored(codex_env)
    check_recorded_cli_session(codex_env["FORGE_RECORD_HOME"], session)


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_builtin_provider_over_websocket(codex_env, mode):
    config = Path(codex_env["CODEX_HOME"]) / "config.toml"
    config.write_text("# the user's own config\n")
    with MockUpstream() as mock:
        run_codex(codex_env, mock, "--mode", mode)
        assert not [r for r in mock.requests if r.method == "POST"]  # never fell back to HTTP
        [socket] = mock.websockets
        creates = socket.client_events()
    assert socket.deflate  # permessage-deflate negotiated through the proxy
    assert creates[0]["generate"] is False and "previous_response_id" not in creates[0]
    sent = creates[-1]  # what went on the wire for the last call: only the new item
    assert [i["type"] for i in sent["input"]] == ["function_call_output"]
    assert sent["previous_response_id"]
    assert config.read_text() == "# the user's own config\n"  # reverse mode used -c only

    session = stored_session(codex_env)
    warm_up = session["exchanges"][0]
    assert warm_up["kind"] == "side" and warm_up["status"] == "complete"
    assert warm_up["request"]["parameters"]["generate"] is False
    second = check_tool_round_trip(session, "wss://api.openai.com/v1/responses")
    assert second["request"]["parameters"]["previous_response_id"] == sent[
        "previous_response_id"]
    assert second["http_status"] == 101
    # Every call sends a new previous_response_id and clock: the last call's parameters are
    # stored as what changed from the call before (store.content.parameters_ref), not as a
    # blob. The first turn's are a blob: `x-codex-turn-metadata`, a 700-byte string naming
    # the turn, is new since the warm-up.
    assert len({orjson.dumps(ex["request"]["parameters"]) for ex in session["exchanges"]}) == 3
    assert parameter_blobs(codex_env) == 2
    assert_no_key_stored(codex_env)
    check_recorded_cli_session(codex_env["FORGE_RECORD_HOME"], session)


def raw_requests(env, session_id: str) -> tuple[list[bytes], list[bytes]]:
    """The marks of a session's raw request frames, and the bodies they read back as."""
    import sqlalchemy as sa

    from forge_record.store import open_store

    with open_store(f"sqlite:///{env['FORGE_RECORD_HOME']}/traces.db") as store:
        with store.reading("frames") as conn:
            marks = [bytes(f[:1]) for f in conn.scalars(sa.text(
                "SELECT raw_request FROM exchanges ORDER BY seq"))]
        return marks, [e.raw_request for e in store.iter_exchanges(session_id, raw=True)]


def parameter_blobs(env) -> int:
    """How many blobs of the store hold a Codex request's parameters."""
    import sqlalchemy as sa

    from forge_record.identity import blob_key_name
    from forge_record.store import open_store
    from forge_record.store.reader import BlobReader

    with open_store(f"sqlite:///{env['FORGE_RECORD_HOME']}/traces.db") as store, \
            store.reading("blobs") as conn:
        names = [blob_key_name(bytes(k)) for k in conn.scalars(sa.text("SELECT hash FROM blobs"))]
        blobs = BlobReader(conn)
        blobs.load(names)
        return sum(blobs.get(n).startswith(b'{"client_metadata":') for n in names)


GATEWAY_PROVIDER = """\
model_provider = "gateway"
[model_providers.gateway]
name = "gateway"
base_url = "https://gw.example/openai/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("how", ["config.toml", "-c"])
def test_custom_provider_in_reverse_mode_goes_through_the_proxy(codex_env, how):
    """A custom model_provider (its own base_url, with a path) is routed with a -c override
    of its base_url; offline, gw.example answers only through --upstream."""
    config = Path(codex_env["CODEX_HOME"]) / "config.toml"
    if how == "config.toml":
        config.write_text(GATEWAY_PROVIDER)
        chosen = []
    else:  # the provider is defined in config.toml but only chosen on the command line
        config.write_text(GATEWAY_PROVIDER.replace('model_provider = "gateway"\n', ""))
        chosen = ["-c", 'model_provider="gateway"']
    written = config.read_text()
    with MockUpstream() as mock:
        proc = forge(codex_env, "run", "--mode", "reverse", "--upstream",
                     f"gw.example={mock.url}", "--", "codex", *chosen, "exec",
                     "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                     "--color", "never", "-m", "gpt-5.4", PROMPT, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout  # the tool really ran
        assert [r.path for r in mock.requests] == ["/openai/v1/responses"] * 2  # path kept
    assert config.read_text() == written  # never edited
    session = stored_session(codex_env)
    check_tool_round_trip(session, "https://gw.example/openai/v1/responses")
    assert {e["upstream_url"] for e in session["exchanges"]} == {
        f"{mock.url}/openai/v1/responses"}
    assert {e["request_headers"]["host"] for e in session["exchanges"]} == {"gw.example"}
    assert_no_key_stored(codex_env)


@pytest.mark.parametrize(("config", "argv", "reason"), [
    ("", ["codex", "--oss", "exec", "hi"], "--oss uses a built-in local provider"),
    ('model_provider = "ollama"\n', ["codex", "exec", "hi"], "built-in local provider"),
    ('model_provider = "mine"\n', ["codex", "exec", "hi"], "'mine' has no base_url"),
    ("model_provider = [\n", ["codex"], "cannot read"),
    (GATEWAY_PROVIDER, ["codex", "-c", "model_providers.gateway={base_url='http://x/v1'}"],
     "sets the whole 'gateway' provider table"),
])
def test_reverse_mode_refuses_what_it_cannot_route(tmp_path, config, argv, reason):
    (tmp_path / "config.toml").write_text(config)
    with pytest.raises(UsageError, match=reason) as refused:
        plan_route(Codex(), "reverse", {"CODEX_HOME": str(tmp_path)}, {}, argv)
    assert "\n" not in str(refused.value) and str(refused.value).endswith("use --mode forward")


def test_reverse_mode_routes_the_active_provider(tmp_path):
    (tmp_path / "config.toml").write_text(GATEWAY_PROVIDER)
    (tmp_path / "alt.config.toml").write_text(
        'model_provider = "alt"\n[model_providers.alt]\nbase_url = "http://10.0.0.2:8000/v1"\n')
    env, shim = {"CODEX_HOME": str(tmp_path)}, Codex()

    def routed(argv):
        route = plan_route(shim, "reverse", env, {}, argv)
        return route.mitm_mode, shim.reverse_argv(argv, "http://127.0.0.1:9", env)

    assert routed(["codex", "exec", "hi"]) == ("reverse:https://gw.example", [
        "codex", "-c", 'model_providers.gateway.base_url="http://127.0.0.1:9/openai/v1"',
        "exec", "hi"])
    assert routed(["codex", "-p", "alt", "exec"])[0] == "reverse:http://10.0.0.2:8000"
    # the built-in provider chosen back with -c; its base URL set by the user's -c is the
    # upstream, and their override is dropped so that ours is the one Codex applies
    mode, argv = routed(["codex", "exec", "-c", "model_provider=openai",
                         "--config=openai_base_url='http://10.0.0.3/v9'", "--", "-c", "x"])
    assert mode == "reverse:http://10.0.0.3"
    assert argv == ["codex", "-c", 'openai_base_url="http://127.0.0.1:9/v9"', "exec",
                    "-c", "model_provider=openai", "--", "-c", "x"]
    # forward mode intercepts the provider's host
    assert "gw.example" in plan_route(shim, "forward", env, {}, ["codex"]).model_hosts


def test_zstd_request_to_chatgpt_host_is_decoded(tmp_path):
    """Under a ChatGPT login Codex posts zstd bodies to chatgpt.com/backend-api/codex."""
    arrived = []
    body = orjson.dumps({"model": "gpt-5.4", "stream": True, "store": False,
                         "input": [{"type": "message", "role": "user",
                                    "content": [{"type": "input_text", "text": PROMPT}]}]})
    with MockUpstream() as mock:
        recorder = Recorder(arrived.append, upstreams={"chatgpt.com": mock.url},
                            record_any_host=True)
        proxy = InProcessProxy(WebSocketRecorder(recorder), confdir=confdir(tmp_path),
                               mode="reverse:https://chatgpt.com")
        port = proxy.start()
        try:
            post = urllib.request.Request(
                f"http://127.0.0.1:{port}/backend-api/codex/responses",
                data=zstandard.ZstdCompressor(level=3).compress(body),
                headers={"content-encoding": "zstd", "content-type": "application/json"})
            with urllib.request.urlopen(post, timeout=30) as reply:
                answer = reply.read()
        finally:
            proxy.stop()
        assert mock.requests[0].body != body  # the upstream got the zstd bytes unchanged
    assert b"response.completed" in answer
    [exchange] = [finalize(e) for e in arrived]
    assert exchange.url == "https://chatgpt.com/backend-api/codex/responses"
    assert exchange.raw_request == body and not exchange.flags
    assert exchange.request.messages[0].content[0].text == PROMPT


def test_codex_routing_plan():
    shim = detect(["/usr/local/bin/codex", "exec", "hi"])
    assert shim.name == "codex"
    forward = plan_route(shim, "auto", {"OPENAI_API_KEY": DUMMY_KEY}, {})
    assert forward.mode == "forward" and {"api.openai.com", "chatgpt.com"} <= forward.model_hosts
    # reverse: the base URL goes in a -c override before the subcommand, path kept
    api = plan_route(shim, "reverse", {"OPENAI_API_KEY": DUMMY_KEY}, {})
    assert api.mitm_mode == "reverse:https://api.openai.com" and not api.upstreams
    argv = shim.reverse_argv(["codex", "exec", "--", "hi"], "http://127.0.0.1:9", {
        "OPENAI_API_KEY": DUMMY_KEY})
    assert argv == ["codex", "-c", 'openai_base_url="http://127.0.0.1:9/v1"', "exec", "--", "hi"]
    assert shim.reverse_env("http://127.0.0.1:9", {}) == {}
    # no API key: a ChatGPT login, whose host and path differ
    chatgpt = plan_route(shim, "reverse", {}, {})
    assert chatgpt.mitm_mode == "reverse:https://chatgpt.com"
    assert shim.reverse_argv(["codex"], "http://127.0.0.1:9", {})[2] == (
        'openai_base_url="http://127.0.0.1:9/backend-api/codex"')
    assert shim.version_from("codex_exec/0.171.0 (Debian 12.0.0; x86_64) unknown") == "0.171.0"
    assert shim.version_from("codex_cli_rs/0.171.0 (Mac OS 15.1; arm64)") == "0.171.0"


def test_chatgpt_websocket_is_recorded_with_the_codex_hosts():
    arrived = []
    addon = WebSocketRecorder(Recorder(arrived.append, model_hosts=Codex.model_hosts))
    with taddons.context(addon):
        Socket(addon, host="chatgpt.com", path="/backend-api/codex/responses").call(
            create({"role": "user", "content": PROMPT}), events_for("resp_1", []))
    [exchange] = arrived
    assert exchange.url == "wss://chatgpt.com/backend-api/codex/responses"
