"""Harness shims: the environment each one gives its CLI, the mode auto picks, and the route.

Every variable a shim sets is asserted, so a variable added or dropped fails here. The CA
files are real: the bundle the Python variables point at must hold the system roots and the
forge-record CA, because those variables replace the trust store. The last tests run a plain
client (curl) through `forge-record run` with the generic shim and check it was recorded.
"""

from __future__ import annotations

import ast
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from forge_record import harness_shims
from forge_record.cli import cli
from forge_record.commands.run import plan_route
from forge_record.errors import UsageError
from forge_record.harness_shims import CaFiles
from forge_record.mock import MockUpstream
from forge_record.trust import ca_files, confdir

PROXY = "http://127.0.0.1:4321"
CA = CaFiles(cert="/ca/cert.pem", bundle="/ca/bundle.pem")
FORGE = str(Path(sys.executable).with_name("forge-record"))
SHIM_DIR = Path(__file__).resolve().parent.parent / "harness_shims"

BASE_FORWARD = {
    "HTTPS_PROXY": PROXY, "HTTP_PROXY": PROXY, "https_proxy": PROXY, "http_proxy": PROXY,
    "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
    "NODE_EXTRA_CA_CERTS": CA.cert, "SSL_CERT_FILE": CA.bundle, "REQUESTS_CA_BUNDLE": CA.bundle,
    "CODEX_CA_CERTIFICATE": CA.cert,
}
# Every table below that is keyed by shim name must name every shim in SHIMS
# (test_every_shim_is_in_every_table): a new shim cannot go untested.
SHIM_NAMES = [s.name for s in harness_shims.SHIMS]
FORWARD = {  # shim -> what it sets beyond the base forward variables
    "claude-code": {},
    "codex": {},
    "gemini-cli": {},
    "opencode": {},
    "qwen-code": {},
    "aider": {},
    "llm": {},
    "pi": {},
    "goose": {"GOOSE_CA_CERT_PATH": CA.cert},
    "generic": {
        "ALL_PROXY": PROXY, "all_proxy": PROXY, "NODE_USE_ENV_PROXY": "1",
        "CURL_CA_BUNDLE": CA.bundle, "AWS_CA_BUNDLE": CA.bundle,
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": CA.bundle, "GOOSE_CA_CERT_PATH": CA.cert,
        "DENO_CERT": CA.cert,
    },
}


def shim(name: str):
    found = harness_shims.shim_named(name)
    assert found is not None, name
    return found


@pytest.mark.parametrize("name", SHIM_NAMES)
def test_forward_env_is_exactly_this(name):
    assert shim(name).forward_env(PROXY, CA, {}) == BASE_FORWARD | FORWARD[name]


@pytest.mark.parametrize("name", SHIM_NAMES)
def test_no_proxy_keeps_the_users_entries_and_loopback(name):
    env = shim(name).forward_env(PROXY, CA, {"no_proxy": "corp.example,localhost"})
    assert env["NO_PROXY"] == env["no_proxy"] == "corp.example,localhost,127.0.0.1,::1"


@pytest.fixture(scope="module")
def real_ca(tmp_path_factory):
    from mitmproxy.certs import CertStore

    conf = confdir(tmp_path_factory.mktemp("home"))
    CertStore.from_store(conf, "mitmproxy", 2048)
    return ca_files(conf)


@pytest.mark.parametrize("name", SHIM_NAMES)
def test_python_ca_variables_are_full_bundles(name, real_ca):
    env = shim(name).forward_env(PROXY, real_ca, {})
    ours = ssl.PEM_cert_to_DER_cert(Path(real_ca.cert).read_text())
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        ctx = ssl.create_default_context(cafile=env[var])
        certs = ctx.get_ca_certs(binary_form=True)
        assert ours in certs and len(certs) > 10, var  # system roots + ours
    assert Path(env["NODE_EXTRA_CA_CERTS"]).read_text().count("BEGIN CERTIFICATE") == 1


AUTO_MODE = [
    ("claude-code", {}, "forward"),
    ("claude-code", {"ANTHROPIC_BASE_URL": "https://gw.example"}, "reverse"),
    ("codex", {}, "forward"),
    ("codex", {"OPENAI_BASE_URL": "https://gw.example/v1"}, "forward"),  # Codex ignores it
    ("gemini-cli", {}, "forward"),
    ("gemini-cli", {"GOOGLE_GEMINI_BASE_URL": "https://gw.example/gemini"}, "reverse"),
    ("opencode", {}, "forward"),
    ("qwen-code", {}, "forward"),
    ("qwen-code", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, "forward"),  # OAuth
    ("qwen-code", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "k"},
     "reverse"),
    ("aider", {}, "forward"),
    ("aider", {"OPENAI_API_BASE": "http://127.0.0.1:8000/v1"}, "reverse"),
    ("goose", {"GOOSE_PROVIDER": "anthropic"}, "forward"),
    ("goose", {"GOOSE_PROVIDER": "ollama", "OLLAMA_HOST": "localhost:11434"}, "reverse"),
    ("generic", {"OPENAI_BASE_URL": "http://x"}, "forward"),
    # a local server: NO_PROXY keeps it away from forward mode
    ("generic", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, "reverse"),
    ("generic", {"OPENAI_API_BASE": "http://localhost:8000/v1"}, "reverse"),
    ("generic", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000"}, "reverse"),
    ("llm", {}, "forward"),
    ("llm", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, "reverse"),
    ("pi", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, "forward"),  # pi ignores it
]


@pytest.mark.parametrize(("name", "environ", "mode"), AUTO_MODE)
def test_auto_mode(name, environ, mode):
    assert shim(name).auto_mode(environ) == mode


@pytest.mark.parametrize(("name", "environ", "expected"), [
    ("gemini-cli", {}, {"GOOGLE_GEMINI_BASE_URL": PROXY}),
    ("qwen-code", {}, {"OPENAI_BASE_URL": PROXY + "/compatible-mode/v1"}),
    ("aider", {}, {"OPENAI_API_BASE": PROXY + "/v1"}),
    ("goose", {"GOOSE_PROVIDER": "anthropic"}, {"ANTHROPIC_HOST": PROXY}),
    ("goose", {"GOOSE_PROVIDER": "OpenAI"}, {"OPENAI_HOST": PROXY}),
    ("llm", {}, {"OPENAI_BASE_URL": PROXY + "/v1"}),
    # every common variable holding the first one's base URL, none holding another
    ("generic", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1/",
                 "OPENAI_API_BASE": "http://127.0.0.1:8000/v1",
                 "ANTHROPIC_BASE_URL": "http://127.0.0.1:9000"},
     {"OPENAI_BASE_URL": PROXY + "/v1", "OPENAI_API_BASE": PROXY + "/v1"}),
    ("generic", {"ANTHROPIC_BASE_URL": "https://gw.example/anthropic"},
     {"ANTHROPIC_BASE_URL": PROXY + "/anthropic"}),
])
def test_reverse_env(name, environ, expected):
    assert shim(name).reverse_env(PROXY, environ) == expected


def test_opencode_reverse_merges_the_users_inline_config():
    user = {"model": "anthropic/claude-sonnet-4-5", "provider": {"anthropic": {"models": {}}}}
    env = shim("opencode").reverse_env(PROXY, {"OPENCODE_CONFIG_CONTENT": json.dumps(user)})
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == user["model"] and config["provider"]["anthropic"]["models"] == {}
    assert config["provider"]["anthropic"]["options"]["baseURL"] == PROXY + "/v1"


@pytest.mark.parametrize(("name", "environ", "mitm", "upstreams"), [
    ("gemini-cli", {}, "reverse:https://generativelanguage.googleapis.com", {}),
    ("opencode", {}, "reverse:https://api.anthropic.com", {}),
    ("qwen-code", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "k"},
     "reverse:http://127.0.0.1:8000", {}),  # a local vLLM stays the upstream
    ("aider", {}, "reverse:https://api.openai.com", {}),
    ("goose", {"GOOSE_PROVIDER": "ollama", "OLLAMA_HOST": "127.0.0.1:11434"},
     "reverse:http://127.0.0.1:11434", {}),
    ("generic", {"OPENAI_API_BASE": "http://127.0.0.1:8000/v1"}, "reverse:http://127.0.0.1:8000",
     {}),  # the CLI gets the proxy under /v1, so the path needs no mapping back
])
def test_reverse_route_keeps_the_users_upstream(name, environ, mitm, upstreams):
    route = plan_route(shim(name), "reverse", environ, {})
    assert (route.mode, route.mitm_mode, route.upstreams) == ("reverse", mitm, upstreams)


@pytest.mark.parametrize("name", ["goose", "generic", "pi"])
def test_reverse_without_a_base_url_is_refused(name):
    with pytest.raises(UsageError, match="use --mode forward"):
        plan_route(shim(name), "reverse", {}, {})


def test_generic_forward_route_intercepts_the_base_url_hosts():
    route = plan_route(shim("generic"), "forward", {"ANTHROPIC_BASE_URL": "https://gw.example/a",
                                                     "OPENAI_API_BASE": "http://10.1.2.3/v1"}, {})
    assert {"gw.example", "10.1.2.3", "api.openai.com"} <= route.model_hosts


def test_forward_route_intercepts_the_shims_hosts_and_upstreams():
    route = plan_route(shim("gemini-cli"), "auto", {}, {"models.internal": "http://10.0.0.1"})
    assert route.model_hosts == {"generativelanguage.googleapis.com",
                                 "cloudcode-pa.googleapis.com", "models.internal"}


DETECT = [
    ("claude", "claude-code"), ("/opt/bin/claude-code", "claude-code"), ("codex", "codex"),
    ("gemini", "gemini-cli"), ("/usr/local/bin/opencode", "opencode"), ("qwen", "qwen-code"),
    ("aider", "aider"), ("goose", "goose"), ("llm", "llm"), ("pi", "pi"),
    ("some-agent", "generic")]


@pytest.mark.parametrize(("argv0", "name"), DETECT)
def test_detect_by_executable(argv0, name):
    assert harness_shims.detect([argv0, "-p", "x"]).name == name


@pytest.mark.parametrize(("argv", "name"), [
    (["python", "-m", "aider", "--model", "x"], "aider"),
    (["/usr/bin/python3.12", "-u", "-X", "utf8", "-m", "aider.main"], "aider"),
    (["python3", "-mllm", "hi"], "llm"),
    (["python3", ".venv/bin/aider", "--yes"], "aider"),  # a script, by its name
    (["python", "-W", "ignore", "-m", "llm"], "llm"),
    (["python", "-c", "import aider"], "generic"),
    (["python", "-m", "http.server"], "generic"),
    (["python"], "generic"),
    (["notpython", "-m", "aider"], "generic"),
])
def test_detect_python_modules_and_scripts(argv, name):
    assert harness_shims.detect(argv).name == name


@pytest.mark.parametrize(("name", "user_agent", "version"), [
    ("gemini-cli", "GeminiCLI-tui/0.61.0/gemini-2.5-flash (linux; x64; terminal)", "0.61.0"),
    ("gemini-cli", "GeminiCLI/0.62.0-nightly/gemini-2.5-pro (darwin; arm64)", "0.62.0-nightly"),
    ("opencode", "opencode/1.18.33 ai-sdk/provider-utils/4.0.46 runtime/bun/1.3.14", "1.18.33"),
    ("qwen-code", "QwenCode/0.24.4 (linux; x64)", "0.24.4"),
    ("aider", "litellm/1.75", None),
])
def test_version_from_user_agent(name, user_agent, version):
    assert shim(name).version_from(user_agent) == version


# Written before the shims cited PROTOCOLS.md: their wire behaviour is pinned against the real
# CLIs instead (tests/test_claude_code.py, tests/test_codex.py).
_NO_PROTOCOLS_REFERENCE = {"claude_code", "codex"}


@pytest.mark.parametrize("module", [type(s).__module__.rpartition(".")[2]
                                    for s in harness_shims.SHIMS])
def test_shims_use_the_standard_library_only(module):
    tree = ast.parse((SHIM_DIR / f"{module}.py").read_text())
    imported = {n.module if isinstance(n, ast.ImportFrom) else a.name
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in (n.names if isinstance(n, ast.Import) else [n])}
    outside = {m for m in imported if m.split(".")[0] not in sys.stdlib_module_names
               and m != "forge_record.harness_shims.base"}
    assert outside == set()
    assert module in _NO_PROTOCOLS_REFERENCE or "PROTOCOLS.md" in ast.get_docstring(tree)


@pytest.mark.parametrize("table", ["FORWARD", "AUTO_MODE", "DETECT"])
def test_every_shim_is_in_every_table(table):
    rows = globals()[table]
    named = set(rows) if isinstance(rows, dict) else {row[1 if table == "DETECT" else 0]
                                                       for row in rows}
    assert named == set(SHIM_NAMES)


# --- forge-record harnesses ------------------------------------------------------------------


def test_harnesses_lists_every_shim_with_its_mode(monkeypatch):
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    result = CliRunner().invoke(cli, ["harnesses"], catch_exceptions=False)
    lines = result.output.splitlines()
    for s in harness_shims.SHIMS:
        assert any(line.startswith(s.name + " ") for line in lines), s.name
    gemini = next(line for line in lines if line.startswith("gemini-cli "))
    assert "forward (reverse if GOOGLE_GEMINI_BASE_URL is set)" in gemini
    assert "Gemini CLI 0.61.0" in gemini


def test_harnesses_json_follows_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:8000/v1")
    rows = orjson.loads(CliRunner().invoke(cli, ["harnesses", "--json"]).output)
    aider = next(r for r in rows if r["name"] == "aider")
    assert aider["mode"] == "reverse" and aider["executables"] == ["aider"]
    assert [r["name"] for r in rows] == [s.name for s in harness_shims.SHIMS]


# --- the generic shim, for real --------------------------------------------------------------


def forge(home: Path, *args, **environ) -> subprocess.CompletedProcess:
    env = {**os.environ, "FORGE_RECORD_HOME": str(home)}
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                "OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL"):
        env.pop(var, None)
    env.update(environ)
    return subprocess.run([FORGE, *args], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_curl_through_the_generic_shim_is_recorded(tmp_path):
    """A plain client that knows nothing of forge-record: curl, with HTTPS_PROXY and
    CURL_CA_BUNDLE from the generic shim, to an OpenAI-compatible API."""
    body = json.dumps({"model": "gpt-4.1-mini", "stream": True,
                       "messages": [{"role": "user", "content": "hello"}]})
    with MockUpstream() as mock:
        proc = forge(tmp_path, "run", "--upstream", f"api.openai.com={mock.url}", "--",
                     "curl", "-sS", "--fail", "https://api.openai.com/v1/chat/completions",
                     "-H", "content-type: application/json",
                     "-H", "authorization: Bearer sk-dummy-generic-key", "-d", body)
        assert proc.returncode == 0, proc.stderr
        assert "data: [DONE]" in proc.stdout
    shown = orjson.loads(forge(tmp_path, "show", "last", "--json").stdout)
    assert shown["harness"] == "generic"
    [ex] = shown["exchanges"]
    assert ex["dialect"] == "openai.chat" and ex["status"] == "complete"
    assert ex["url"] == "https://api.openai.com/v1/chat/completions"
    assert ex["request"]["messages"][0]["content"][0]["text"] == "hello"
    assert ex["response"]["content"]


OPENAI_CLIENT = ("import openai; r = openai.OpenAI().chat.completions.create(model='gpt-4.1-mini',"
                 " messages=[{'role': 'user', 'content': 'hello'}]); print(r.choices[0].message"
                 ".content)")


def test_a_local_base_url_is_recorded_by_the_generic_shim(tmp_path):
    """The openai SDK with OPENAI_BASE_URL on 127.0.0.1, unknown to every shim: auto mode is
    reverse, so the local server is recorded (its /v1 kept) instead of bypassing the proxy."""
    with MockUpstream() as mock:
        proc = forge(tmp_path, "run", "--", sys.executable, "-c", OPENAI_CLIENT,
                     OPENAI_BASE_URL=f"{mock.url}/v1", OPENAI_API_KEY="sk-dummy-generic")
        assert proc.returncode == 0, proc.stderr
        assert [r.path for r in mock.requests] == ["/v1/chat/completions"]
    assert "warning" not in proc.stderr
    shown = orjson.loads(forge(tmp_path, "show", "last", "--json").stdout)
    [ex] = shown["exchanges"]
    assert shown["harness"] == "generic" and ex["status"] == "complete"


def test_a_run_that_records_nothing_says_why(tmp_path):
    """Forward mode cannot see a server on loopback: the run still exits with the agent's code,
    and ends with a warning naming the variable and the doctor line."""
    with MockUpstream() as mock:
        proc = forge(tmp_path, "run", "--mode", "forward", "--", sys.executable, "-c",
                     OPENAI_CLIENT, OPENAI_BASE_URL=f"{mock.url}/v1",
                     OPENAI_API_KEY="sk-dummy-generic")
        assert proc.returncode == 0 and len(mock.requests) == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    warning = lines.index("forge-record: warning: the command ran but no model call was recorded")
    assert lines[warning - 1].startswith("forge-record: session ")
    assert "0 model calls" in lines[warning - 1]
    assert lines[warning + 1] == (f"  likely: OPENAI_BASE_URL={mock.url}/v1 is on loopback, "
                                  "which never goes through the proxy in forward mode: run "
                                  "with --mode reverse")
    assert lines[-1] == f"  check with: forge-record doctor --mode forward -- {sys.executable}"
