"""Base URLs keep their path in both modes, and the record says what the agent sent.

Reverse mode hands the CLI the proxy under the upstream base URL's path, so a gateway mounted
at `/openai/v1` or an `--upstream` server that serves `/v1` gets the path it would have got
without the recorder. The record's `url` and request headers (`host` included) are what the
agent sent; `upstream_url` is where the proxy sent it. Checked with the official openai SDK
against the project's mock on 127.0.0.1, through the same route planning `run` uses.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import openai
import orjson
import pytest

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.commands.run import plan_route
from forge_record.errors import UsageError
from forge_record.harness_shims import SHIMS, shim_named
from forge_record.mock import MockUpstream
from forge_record.records import Exchange, exchange_from_dict, exchange_to_dict
from forge_record.store.batch import cleaned
from forge_record.trust import ca_files, confdir

API_KEY = "sk-proj-dummy-key-for-tests"
PROXY = "http://127.0.0.1:9999"
FORGE = str(Path(sys.executable).with_name("forge-record"))


@pytest.fixture(scope="module")
def ca_home(tmp_path_factory):
    return tmp_path_factory.mktemp("ca")


@pytest.fixture
def mock():
    with MockUpstream() as m:
        yield m


def _wait(exchanges: list, n: int = 1, timeout: float = 5.0) -> list:
    # The SDK can return before the proxy's last hook ran.
    deadline = time.monotonic() + timeout
    while len(exchanges) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(exchanges)


def chat(base_url: str, http_client=None) -> None:
    client = openai.OpenAI(api_key=API_KEY, base_url=base_url, max_retries=0,
                           http_client=http_client or openai.DefaultHttpxClient())
    try:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user",
                                                                   "content": "hi"}])
    finally:
        client.close()


def reverse_call(environ: dict[str, str], upstreams: dict[str, str], home: Path
                 ) -> list[Exchange]:
    """One chat call from aider's environment in reverse mode, routed as `run` routes it."""
    shim = shim_named("aider")
    route = plan_route(shim, "reverse", environ, upstreams)
    exchanges: list[Exchange] = []
    addon = Recorder(exchanges.append, upstreams=route.upstreams, record_any_host=True)
    proxy = InProcessProxy(addon, mode=route.mitm_mode, confdir=confdir(home))
    port = proxy.start()
    try:
        env = shim.reverse_env(f"http://127.0.0.1:{port}", environ)
        chat(env["OPENAI_API_BASE"])
        return _wait(exchanges)
    finally:
        proxy.stop()


def test_reverse_keeps_a_gateways_path(mock, ca_home):
    gateway = f"{mock.url}/openai/v1"
    [ex] = reverse_call({"OPENAI_API_BASE": gateway}, {}, ca_home)
    assert [r.path for r in mock.requests] == ["/openai/v1/chat/completions"]
    assert ex.url == ex.upstream_url == f"{gateway}/chat/completions"
    assert ex.request_headers["host"] == urlsplit(mock.url).netloc


def test_reverse_keeps_the_apis_path_on_an_upstream(mock, ca_home):
    # `--mode reverse --upstream api.openai.com=http://127.0.0.1:PORT`: aider's default base
    # URL is https://api.openai.com/v1, so the server gets /v1/chat/completions.
    [ex] = reverse_call({}, {"api.openai.com": mock.url}, ca_home)
    assert [r.path for r in mock.requests] == ["/v1/chat/completions"]
    assert ex.url == "https://api.openai.com/v1/chat/completions"
    assert ex.request_headers["host"] == "api.openai.com"
    assert ex.upstream_url == f"{mock.url}/v1/chat/completions"


def test_forward_records_the_host_the_agent_sent(mock, ca_home):
    exchanges: list[Exchange] = []
    addon = Recorder(exchanges.append, model_hosts=["api.openai.com"],
                     upstreams={"api.openai.com": f"{mock.url}/gw"})
    proxy = InProcessProxy(addon, mode="regular", confdir=confdir(ca_home))
    port = proxy.start()
    try:
        http = openai.DefaultHttpxClient(proxy=f"http://127.0.0.1:{port}",
                                         verify=ssl.create_default_context(
                                             cafile=ca_files(confdir(ca_home)).cert))
        chat("https://api.openai.com/v1", http)
        [ex] = _wait(exchanges)
    finally:
        proxy.stop()
    assert [r.path for r in mock.requests] == ["/gw/v1/chat/completions"]
    assert mock.requests[0].headers["host"] == urlsplit(mock.url).netloc  # the server's own
    assert ex.url == "https://api.openai.com/v1/chat/completions"
    assert ex.request_headers["host"] == "api.openai.com"
    assert ex.upstream_url == f"{mock.url}/gw/v1/chat/completions"


# --- every shim: the base URL handed to the CLI keeps the path --------------------------

# (shim, the user's environment, the variable reverse mode sets, the path it must keep)
BASES = [
    ("claude-code", {"ANTHROPIC_BASE_URL": "https://gw.example/anthropic"},
     "ANTHROPIC_BASE_URL", "/anthropic"),
    ("claude-code", {}, "ANTHROPIC_BASE_URL", ""),
    ("gemini-cli", {"GOOGLE_GEMINI_BASE_URL": "https://gw.example/gemini/"},
     "GOOGLE_GEMINI_BASE_URL", "/gemini"),
    ("qwen-code", {"OPENAI_API_KEY": "k"}, "OPENAI_BASE_URL", "/compatible-mode/v1"),
    ("qwen-code", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "k"},
     "OPENAI_BASE_URL", "/v1"),
    ("aider", {}, "OPENAI_API_BASE", "/v1"),
    ("aider", {"OPENAI_API_BASE": "https://gw.example/openai/v1"}, "OPENAI_API_BASE",
     "/openai/v1"),
    ("goose", {"GOOSE_PROVIDER": "openai", "OPENAI_HOST": "https://gw.example/oa"},
     "OPENAI_HOST", "/oa"),
    ("goose", {"GOOSE_PROVIDER": "ollama"}, "OLLAMA_HOST", ""),
    ("llm", {}, "OPENAI_BASE_URL", "/v1"),
    ("llm", {"OPENAI_BASE_URL": "https://gw.example/openai/v1"}, "OPENAI_BASE_URL",
     "/openai/v1"),
]


@pytest.mark.parametrize(("name", "environ", "var", "path"), BASES)
def test_reverse_base_keeps_the_path(name, environ, var, path):
    shim = shim_named(name)
    route = plan_route(shim, "reverse", environ, {})
    assert shim.reverse_env(PROXY, environ)[var] == PROXY + path
    origin = urlsplit(shim.upstream_base(environ))
    assert route.mitm_mode == f"reverse:{origin.scheme}://{origin.netloc}"
    assert route.upstreams == {}  # nothing to map back: the path went through as is


def test_every_shim_with_a_reverse_mode_is_covered():
    covered = {name for name, *_ in BASES} | {"codex", "opencode"}  # below
    # generic has its own tests (test_shims.py); pi reads its base URL from a file alone
    reversible = {s.name for s in SHIMS if s.name not in ("generic", "pi")}
    assert reversible <= covered


def test_opencode_and_codex_bases_keep_the_path():
    import json

    opencode = shim_named("opencode")
    config = json.loads(opencode.reverse_env(PROXY, {})["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["anthropic"]["options"]["baseURL"] == PROXY + "/v1"
    codex = shim_named("codex")
    argv = codex.reverse_argv(["codex", "exec", "hi"], PROXY, {"OPENAI_API_KEY": "k"})
    assert argv[1:3] == ["-c", f'openai_base_url="{PROXY}/v1"']


# --- reverse modes that would record nothing are refused ------------------------------


@pytest.mark.parametrize(("name", "environ", "argv", "reason"), [
    ("qwen-code", {"OPENAI_BASE_URL": "https://gw.example/v1"}, ["qwen"], "needs OPENAI_API_KEY"),
    ("claude-code", {"CLAUDE_CODE_USE_BEDROCK": "1"}, ["claude"], "CLAUDE_CODE_USE_BEDROCK"),
    ("claude-code", {"CLAUDE_CODE_USE_VERTEX": "true"}, ["claude"], "CLAUDE_CODE_USE_VERTEX"),
    ("generic", {}, ["agent"], "no base-URL variable"),
])
def test_reverse_mode_that_would_miss_traffic_is_refused(name, environ, argv, reason):
    with pytest.raises(UsageError, match=reason) as refused:
        plan_route(shim_named(name), "reverse", environ, {}, argv)
    assert str(refused.value).endswith("use --mode forward")


@pytest.mark.parametrize(("name", "environ", "argv"), [
    ("qwen-code", {}, ["qwen", "--openai-api-key", "k"]),
    ("claude-code", {"CLAUDE_CODE_USE_BEDROCK": "0"}, ["claude"]),
])
def test_reverse_mode_that_can_route_is_not_refused(name, environ, argv):
    assert plan_route(shim_named(name), "reverse", environ, {}, argv).mode == "reverse"


# --- the new field: stored, shown, masked -----------------------------------------------


def test_upstream_url_round_trips_and_old_records_read_without_it():
    ex = Exchange(dialect="openai.chat", url="https://api.openai.com/v1/chat/completions",
                  upstream_url="http://127.0.0.1:8000/v1/chat/completions")
    data = exchange_to_dict(ex)
    assert data["upstream_url"] == ex.upstream_url
    assert exchange_from_dict(data) == ex
    del data["upstream_url"]  # a record written before the field existed
    assert exchange_from_dict(data).upstream_url is None


def test_a_secret_in_the_upstream_url_is_masked():
    ex = Exchange(dialect="gemini.generate", url="https://g.example/v1beta/models/m:x",
                  upstream_url="https://gw.example/v1beta/models/m:x?key=AIzaSyDUMMY")
    assert "AIzaSyDUMMY" not in cleaned(ex).upstream_url


def test_show_json_has_both_urls(mock, tmp_path):
    """`forge-record run` (aider's environment, reverse, --upstream) then `show --json`."""
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}
    env.pop("OPENAI_API_BASE", None)
    code = ("import os, openai; openai.OpenAI(api_key='sk-dummy', max_retries=0, "
            "base_url=os.environ['OPENAI_API_BASE']).chat.completions.create("
            "model='gpt-4o', messages=[{'role': 'user', 'content': 'hi'}])")
    run = subprocess.run([FORGE, "run", "--harness", "aider", "--mode", "reverse",
                          "--upstream", f"api.openai.com={mock.url}", "--", sys.executable,
                          "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    shown = subprocess.run([FORGE, "show", "last", "--json"], env=env, capture_output=True,
                           timeout=60, stdin=subprocess.DEVNULL)
    [ex] = orjson.loads(shown.stdout)["exchanges"]
    assert ex["url"] == "https://api.openai.com/v1/chat/completions"
    assert ex["upstream_url"] == f"{mock.url}/v1/chat/completions"
    assert ex["request_headers"]["host"] == "api.openai.com"
