"""`forge-record doctor [CMD...]`: what a run of CMD would do, then an offline self-test.

It says which shim and mode `forge-record run -- CMD` would pick, the environment that run
would give CMD, and whether each runtime family would trust the forge-record CA with it (a CLI
that does not trust the CA hangs retrying rather than failing, so this is checked before a
run, not guessed after one). Then it tests the record path for real and offline: it starts
the proxy and a mock model API on 127.0.0.1, and sends one model request through the proxy in
forward mode (TLS intercepted with the CA, verified with the bundle Python clients get; plus a
TLS handshake from Node verified through NODE_EXTRA_CA_CERTS when `node` is installed) and in
reverse mode, checking each time that the reply arrived byte for byte as a direct call's and
that the call was recorded; and that the same request without the run's credentials (proxy
credentials in forward mode, the secret path in reverse mode) is refused and not recorded.
Exit status: 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import click
import orjson

from forge_record import launch, node_proxy, trust
from forge_record.commands.run import pick_shim, plan_route
from forge_record.errors import ForgeRecordError, UsageError
from forge_record.harness_shims import CaFiles, Shim
from forge_record.paths import home

# What a run gives the agent: the proxy URL with the run's credentials (forward), or a base
# URL whose first path segment is the run's secret (reverse); addons/access.py.
PLACEHOLDER = {"forward": "http://forge:<token>@127.0.0.1:<port>",
               "reverse": "http://127.0.0.1:<port>/<token>"}
GEMINI_HOSTS = ("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com")
PROBES = {  # dialect family -> (path, body) of one small model request
    "gemini": ("/v1beta/models/gemini-2.5-flash:generateContent",
               {"contents": [{"role": "user", "parts": [{"text": "doctor"}]}]}),
    "anthropic": ("/v1/messages", {"model": "claude-doctor", "max_tokens": 16,
                                   "messages": [{"role": "user", "content": "doctor"}]}),
}
# runtime family -> the variables it reads; True marks a variable that replaces the trust
# store (so it needs the system roots too), False one that adds to it.
FAMILIES = {
    "Node, Bun": {"NODE_EXTRA_CA_CERTS": False},
    "Python (httpx, requests)": {"SSL_CERT_FILE": True, "REQUESTS_CA_BUNDLE": True},
    "Rust (Codex, goose)": {"CODEX_CA_CERTIFICATE": False, "GOOSE_CA_CERT_PATH": False},
    "Go, OpenSSL, curl": {"SSL_CERT_FILE": True, "CURL_CA_BUNDLE": True},
}
REPLACED = ("HTTPS_PROXY", "HTTP_PROXY", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE")
NODE_PROBE = """
const http = require('http'), tls = require('tls');
const [port, host, auth] = process.argv.slice(1);
const fail = (e) => { console.log('error: ' + e.message); process.exit(1); };
const req = http.request({host: '127.0.0.1', port, method: 'CONNECT', path: host + ':443',
                          headers: {'proxy-authorization': auth}});
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) fail(new Error('CONNECT answered ' + res.statusCode));
  const s = tls.connect({socket, servername: host}, () => { console.log('trusted'); s.destroy(); });
  s.on('error', fail);
});
req.on('error', fail);
req.end();
"""


class Report:
    def __init__(self) -> None:
        self.failed = False
        self.warnings = 0

    def check(self, ok: bool | None, label: str, detail: str = "") -> None:
        mark = {True: click.style("ok  ", fg="green"), False: click.style("FAIL", fg="red"),
                None: "-   "}[ok]
        self.failed |= ok is False
        click.echo(f"  {mark} {label}" + (f": {detail}" if detail else ""))

    def warn(self, label: str, detail: str) -> None:
        """A finding that may break recording but does not fail the run (exit status 0)."""
        self.warnings += 1
        click.echo(f"  {click.style('warn', fg='yellow')} {label}: {detail}")

    def result(self) -> str:
        if self.failed:
            return "problems found"
        return "OK" + (f" ({self.warnings} warning{'s' * (self.warnings > 1)} above)"
                       if self.warnings else "")


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--harness", metavar="NAME", help="Harness shim to use (default: from CMD).")
@click.option("--mode", type=click.Choice(["auto", "forward", "reverse"]), default="auto",
              show_default=True, help="The routing mode to examine.")
@click.option("--no-self-test", is_flag=True, help="Skip the offline self-test.")
@click.option("--engine", "engine_url", metavar="URL",
              help="Check this engine (vLLM, SGLang) instead: its version and models, and "
              "whether its logprobs are raw or processed.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def doctor(harness, mode, no_self_test, engine_url, command) -> None:
    """Show how CMD would be recorded, and test the record path offline."""
    argv, environ, report = list(command), dict(os.environ), Report()
    if engine_url:
        from forge_record.commands.doctor_engine import check_engine

        click.echo(f"forge-record doctor --engine {engine_url}")
        check_engine(engine_url, report)
        click.echo("result: " + report.result())
        if report.failed:
            raise SystemExit(1)
        return
    shim = pick_shim(harness, argv)
    _describe_command(argv, environ, shim, report, harness)
    try:
        route = plan_route(shim, mode, environ, {}, argv)
    except UsageError as e:
        raise ForgeRecordError(str(e)) from e
    click.echo(f"mode: {route.mode}" + (" (auto)" if mode == "auto" else ""))
    conf = trust.confdir(home())
    ca = _ensure_ca(conf)
    env = (shim.reverse_env(PLACEHOLDER["reverse"], environ) if route.mode == "reverse"
           else shim.forward_env(PLACEHOLDER["forward"], ca, environ))
    click.echo("environment it sets:")
    for name in sorted(env):
        click.echo(f"  {name}={env[name]}")
    if route.mode == "reverse" and argv:
        changed = shim.reverse_argv(argv, PLACEHOLDER["reverse"], environ)  # Codex: -c
        if changed != argv:
            click.echo("command line it runs:\n  " + shlex.join(changed))
    _trust(route.mode, env, ca, environ, report)
    if route.mode == "forward" and "NODE_USE_ENV_PROXY" in env:
        _node_fetch(argv, environ, report)
    if not no_self_test:
        _self_test(shim, conf, ca, report)
    click.echo("result: " + report.result())
    if report.failed:
        raise SystemExit(1)


def _describe_command(argv, environ, shim: Shim, report: Report,
                      harness: str | None = None) -> None:
    click.echo("forge-record doctor")
    if argv:
        try:
            report.check(True, f"command {argv[0]}", launch.resolve(argv, environ))
        except ForgeRecordError as e:
            report.check(False, f"command {argv[0]}", str(e))
    if harness:
        how = "from --harness"
    elif argv:
        how = "from the command name" if shim.name != "generic" else "no known CLI in the command"
    else:
        how = "the default: no --harness and no command"
    click.echo(f"harness: {shim.name} ({how})")
    click.echo(f"model hosts intercepted in forward mode: {', '.join(shim.model_hosts)}")


def _ensure_ca(conf: Path) -> CaFiles:
    from mitmproxy.certs import CertStore

    CertStore.from_store(conf, "mitmproxy", 2048)  # made once, as the proxy would
    return trust.ca_files(conf)


# --- CA trust ----------------------------------------------------------------------------


def _trust(mode: str, env: dict[str, str], ca: CaFiles, environ, report: Report) -> None:
    click.echo("CA trust:")
    if mode == "reverse":
        report.check(None, "not needed", "the CLI talks plain HTTP to the proxy on 127.0.0.1")
        return
    ours = ssl.PEM_cert_to_DER_cert(Path(ca.cert).read_text())
    for family, variables in FAMILIES.items():
        set_here = {v: replaces for v, replaces in variables.items() if v in env}
        if not set_here:
            report.check(None, family, "not set by this harness")
            continue
        found = [_file_check(env[v], ours, r) for v, r in set_here.items()]
        problems = [text for ok, text in found if not ok]
        detail = "; ".join(problems) or "; ".join(f"{v}: {text}" for v, (_, text) in
                                                  zip(set_here, found, strict=True))
        report.check(not problems, family, detail)
    for name in REPLACED:
        if environ.get(name) and name in env:
            click.echo(f"  note: your {name}={environ[name]} is replaced during the run")


def _file_check(path: str, ours: bytes, replaces: bool) -> tuple[bool, str]:
    """Whether a CA file makes the runtime trust the proxy (and, for a file that replaces
    the trust store, every other host too), and what it holds."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as e:
        return False, f"{path}: {e}"
    certs = ctx.get_ca_certs(binary_form=True)
    if ours not in certs:
        return False, f"{path} does not hold the forge-record CA"
    if not replaces:
        return True, "the forge-record CA (added to the runtime's roots)"
    if len(certs) < 2:
        return False, f"{path} holds only the forge-record CA; every other host would fail"
    return True, f"{len(certs) - 1} system roots + the forge-record CA"


# --- Node's built-in fetch ---------------------------------------------------------------


def _node_fetch(argv, environ, report: Report) -> None:
    """A harness that relies on NODE_USE_ENV_PROXY (the generic one) records nothing of a Node
    program using the built-in fetch on a Node that ignores it (forge_record.node_proxy). A
    FAIL when CMD is such a program, a warning when it may be."""
    version = node_proxy.node_version(environ)
    if version is None:
        return
    click.echo("proxy variables in Node:")
    label = f"Node {node_proxy.describe(version)} built-in fetch"
    if node_proxy.fetch_honours_env_proxy(version):
        report.check(True, label, "honours HTTPS_PROXY with NODE_USE_ENV_PROXY=1")
        return
    detail = ("ignores HTTPS_PROXY and NODE_USE_ENV_PROXY (they need Node >= 22.21 or >= 24): "
              "a Node program using it talks to its model host directly and is not recorded; "
              "use a newer Node or reverse mode")
    exe = shutil.which(argv[0], path=environ.get("PATH")) if argv else None
    if exe and node_proxy.is_node_program(exe):
        report.check(False, label, f"{argv[0]} runs on Node and {detail}")
    else:
        report.warn(label, detail)


# --- the offline self-test ---------------------------------------------------------------


def _self_test(shim: Shim, conf: Path, ca: CaFiles, report: Report) -> None:
    from forge_record.mock import MockUpstream

    host = shim.model_hosts[0] if shim.model_hosts else "api.anthropic.com"
    path, body = PROBES["gemini" if host in GEMINI_HOSTS else "anthropic"]
    click.echo(f"self-test (offline; {host} sent to a mock on 127.0.0.1):")
    with MockUpstream() as mock:
        direct = _post(mock.url + path, body)
        for mode in ("forward", "reverse"):
            try:
                _probe(mode, host, path, body, direct, mock.url, conf, ca, report)
            except Exception as e:  # noqa: BLE001 - a failed probe is a finding, not a crash
                report.check(False, f"{mode} mode", f"{type(e).__name__}: {e}")


def _probe(mode, host, path, body, direct, mock_url, conf, ca: CaFiles, report) -> None:
    from forge_record.addons.access import Access
    from forge_record.addons.proxy import InProcessProxy
    from forge_record.addons.recorder import Recorder
    from forge_record.finalize import finalize

    got: list = []
    upstreams, access = {host: mock_url}, Access()
    if mode == "forward":
        addon = Recorder(got.append, model_hosts=[host], upstreams=upstreams)
        proxy = InProcessProxy(addon, mode="regular", confdir=conf, access=access)
    else:
        addon = Recorder(got.append, upstreams=upstreams, record_any_host=True)
        proxy = InProcessProxy(addon, mode=f"reverse:https://{host}", confdir=conf,
                               access=access)
    port = proxy.start()
    agent_url, anyone_url = access.proxy_url(port, mode), f"http://127.0.0.1:{port}"
    try:
        # One request as another local user would send it (no credentials), which must be
        # refused and not recorded; then the agent's own.
        if mode == "forward":
            refused = _refusal(lambda: _post(f"https://{host}{path}", body, proxy=anyone_url,
                                             cafile=ca.bundle))
            reply = _post(f"https://{host}{path}", body, proxy=agent_url, cafile=ca.bundle)
            _node_probe(port, host, access, ca, report)
        else:
            refused = _refusal(lambda: _post(f"{anyone_url}{path}", body))
            reply = _post(f"{agent_url}{path}", body)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proxy.stop()
    without = "the run's proxy credentials" if mode == "forward" else "the run's secret path"
    report.check(refused is not None, f"{mode} mode: other clients refused",
                 f"without {without}: {refused}" if refused else
                 f"a request without {without} went through")
    how = "TLS trusted with the Python bundle, " if mode == "forward" else ""
    report.check(reply == direct, f"{mode} mode: reply unchanged",
                 f"{how}{len(reply)} bytes, as a direct call" if reply == direct else
                 "the reply differs from a direct call")
    # The sink gets exchanges as the proxy hands them on; folding the response (which settles
    # the status) is the store writer's job, so it is done here as the writer would.
    recorded = [f"{e.dialect} {finalize(e).status}" for e in got]
    report.check(recorded == [f"{got[0].dialect} complete"] if got else False,
                 f"{mode} mode: recorded", ", ".join(recorded) or "nothing arrived")


def _refusal(send) -> str | None:
    """How the proxy refused what `send` sent (407 on the CONNECT, 403), or None if it did
    not."""
    try:
        send()
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.reason}"
    except OSError as e:  # urllib: "Tunnel connection failed: 407 Proxy Authentication..."
        return str(e.reason if isinstance(e, urllib.error.URLError) else e)
    return None


def _post(url: str, body: dict, proxy: str | None = None, cafile: str | None = None) -> bytes:
    proxies = {"https": proxy} if proxy else {}
    handlers: list = [urllib.request.ProxyHandler(proxies)]  # {}: ignore the user's proxy
    if cafile:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(
            cafile=cafile)))
    request = urllib.request.Request(url, data=orjson.dumps(body), method="POST", headers={
        "content-type": "application/json", "x-api-key": "doctor-dummy-key"})
    with urllib.request.build_opener(*handlers).open(request, timeout=20) as response:
        return response.read()


def _node_probe(port: int, host: str, access, ca: CaFiles, report: Report) -> None:
    node = shutil.which("node")
    if node is None:
        report.check(None, "forward mode: Node trust", "node is not installed")
        return
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": ca.cert}
    auth = "Basic " + base64.b64encode(
        urlsplit(access.proxy_url(port, "forward")).netloc.rpartition("@")[0].encode()).decode()
    proc = subprocess.run([node, "-e", NODE_PROBE, str(port), host, auth], env=env, timeout=30,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    out = proc.stdout.strip() or proc.stderr.strip()[-200:]
    report.check(out == "trusted", "forward mode: Node trust",
                 "TLS handshake verified through NODE_EXTRA_CA_CERTS" if out == "trusted"
                 else out)
