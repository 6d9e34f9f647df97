"""The proxy serves the agent it was started for, and no one else on the machine.

Forward mode asks for the run's proxy credentials (407 without them, on CONNECT and on plain
HTTP); reverse mode for the run's secret first path segment (403 without it). A refused
request goes nowhere and is not recorded. The last test has a second local user (`nobody`,
through setpriv) try the proxy of a real `forge-record run` while its agent works.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import ssl
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import httpx2
import orjson
import pytest
from conftest import require

from forge_record.addons.access import Access
from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.mock import MockUpstream
from forge_record.trust import ca_files, confdir

HOST = "api.anthropic.com"
BODY = {"model": "claude-haiku-4-5", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"x-api-key": "sk-ant-dummy-key", "anthropic-version": "2023-06-01"}
FORGE = str(Path(sys.executable).with_name("forge-record"))


@pytest.fixture
def mock():
    with MockUpstream() as m:
        yield m


def _proxy(tmp_path, mock, mode: str, exchanges: list) -> tuple[InProcessProxy, Access]:
    access = Access()
    if mode == "forward":
        addon = Recorder(exchanges.append, model_hosts=[HOST], upstreams={HOST: mock.url})
        proxy = InProcessProxy(addon, mode="regular", confdir=confdir(tmp_path), access=access)
    else:
        addon = Recorder(exchanges.append, upstreams={HOST: mock.url}, record_any_host=True)
        proxy = InProcessProxy(addon, mode=f"reverse:https://{HOST}", confdir=confdir(tmp_path),
                               access=access)
    return proxy, access


def _settle(exchanges: list, n: int) -> list:
    deadline = time.monotonic() + 5
    while len(exchanges) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # and nothing more arrives
    return exchanges


def test_forward_mode_asks_for_the_runs_credentials(tmp_path, mock):
    exchanges: list = []
    proxy, access = _proxy(tmp_path, mock, "forward", exchanges)
    port = proxy.start()
    tls = ssl.create_default_context(cafile=ca_files(confdir(tmp_path)).bundle)
    try:
        # HTTPS: the CONNECT is refused, so no tunnel, no TLS, no request.
        with pytest.raises(httpx2.ProxyError, match="407"):
            httpx2.post(f"https://{HOST}/v1/messages", json=BODY, headers=HEADERS,
                        proxy=f"http://127.0.0.1:{port}", verify=tls)
        wrong = access.proxy_url(port, "forward").replace(access.token, "0" * 32)
        with pytest.raises(httpx2.ProxyError, match="407"):
            httpx2.post(f"https://{HOST}/v1/messages", json=BODY, headers=HEADERS,
                        proxy=wrong, verify=tls)
        # Plain HTTP through the proxy: answered 407 by the proxy itself, and not recorded.
        r = httpx2.post(f"{mock.url}/v1/messages", json=BODY, headers=HEADERS,
                        proxy=f"http://127.0.0.1:{port}")
        assert r.status_code == 407
        # A raw CONNECT to any local port (a database, say) is refused too.
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"CONNECT 127.0.0.1:5432 HTTP/1.1\r\nHost: 127.0.0.1:5432\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 407")
        assert mock.requests == []
        # The agent, with the URL the run gives it, gets through.
        client = anthropic.Anthropic(api_key="sk-ant-dummy-key", max_retries=0,
                                     http_client=anthropic.DefaultHttpxClient(
                                         proxy=access.proxy_url(port, "forward"),
                                         verify=tls))
        client.messages.create(**BODY)
        assert len(_settle(exchanges, 1)) == 1
    finally:
        proxy.stop()
    [ex] = exchanges
    assert "proxy-authorization" not in ex.request_headers
    assert len(mock.requests) == 1


def test_reverse_mode_asks_for_the_runs_secret_path(tmp_path, mock):
    exchanges: list = []
    proxy, access = _proxy(tmp_path, mock, "reverse", exchanges)
    port = proxy.start()
    try:
        r = httpx2.post(f"http://127.0.0.1:{port}/v1/messages", json=BODY, headers=HEADERS)
        assert r.status_code == 403
        near = f"http://127.0.0.1:{port}/{access.token}x/v1/messages"  # not the segment
        assert httpx2.post(near, json=BODY, headers=HEADERS).status_code == 403
        assert mock.requests == []
        client = anthropic.Anthropic(api_key="sk-ant-dummy-key", max_retries=0,
                                     base_url=access.proxy_url(port, "reverse"))
        client.messages.create(**BODY)
        # A base URL given with a trailing slash works as well.
        r = httpx2.post(access.proxy_url(port, "reverse") + "//v1/messages", json=BODY,
                        headers=HEADERS)
        assert r.status_code == 200
        assert len(_settle(exchanges, 2)) == 2
    finally:
        proxy.stop()
    assert [m.path for m in mock.requests] == ["/v1/messages"] * 2
    assert all(access.token not in ex.url for ex in exchanges)  # the secret is not recorded
    assert exchanges[0].url == f"https://{HOST}/v1/messages"


# --- a second local user ---------------------------------------------------------------

# Runs as `nobody` with the system Python (the test's own lives under /root): it knows the
# proxy's port (any local user can list listening sockets) but not the run's credentials.
INTRUDER = r"""
import json, socket, sys, urllib.request, urllib.error
port, target, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {}
with socket.create_connection(("127.0.0.1", port)) as s:
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    out["connect"] = s.recv(4096).split(b"\r\n")[0].decode()
body = json.dumps({"model": "claude-haiku-4-5", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "injected by nobody"}]}).encode()
headers = {"content-type": "application/json", "x-api-key": "sk-ant-dummy-key"}
if mode == "reverse":  # the listener itself, as a base URL without the secret path
    calls = {"http": (f"http://127.0.0.1:{port}/v1/messages", {})}
else:  # through the proxy, without its credentials
    calls = {s: (f"{s}://api.anthropic.com/v1/messages", {s: f"http://127.0.0.1:{port}"})
             for s in ("http", "https")}
for name, (url, proxies) in calls.items():
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
    try:
        out[name] = opener.open(urllib.request.Request(url, data=body, headers=headers),
                                timeout=20).status
    except urllib.error.HTTPError as e:
        out[name] = e.code
    except OSError as e:
        out[name] = str(getattr(e, "reason", e))
print(json.dumps(out))
"""

# The agent: first lets `nobody` try the proxy it was given, then makes its own call.
AGENT = r"""
import os, subprocess, sys
from urllib.parse import urlsplit
import anthropic
mode = sys.argv[3]
given = os.environ["HTTPS_PROXY" if mode == "forward" else "ANTHROPIC_BASE_URL"]
intruder = subprocess.run(
    ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3",
     "-c", sys.argv[1], str(urlsplit(given).port), sys.argv[2], mode],
    env={"PATH": "/usr/bin:/bin"}, cwd="/", capture_output=True, text=True, timeout=60)
print("INTRUDER " + (intruder.stdout.strip() or intruder.stderr.strip()), flush=True)
client = anthropic.Anthropic(api_key="sk-ant-dummy-key", max_retries=0)
client.messages.create(model="claude-haiku-4-5", max_tokens=16,
                       messages=[{"role": "user", "content": "the agent's own call"}])
print("AGENT done", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_another_local_user_can_neither_tunnel_nor_get_a_call_recorded(tmp_path, mock, mode):
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None
            and Path("/usr/bin/python3").exists(),
            "needs root, setpriv and /usr/bin/python3 to act as a second user (nobody)")
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        env.pop(var, None)
    target = f"127.0.0.1:{mock.url.rsplit(':', 1)[1]}"  # a port that listens on this host
    proc = subprocess.run(
        [FORGE, "run", "--harness", "generic" if mode == "forward" else "claude-code",
         "--mode", mode, "--upstream", f"{HOST}={mock.url}", "--", sys.executable, "-c", AGENT,
         INTRUDER, target, mode], env=env, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("INTRUDER ")]
    tried = orjson.loads(line.removeprefix("INTRUDER "))
    if mode == "forward":
        assert tried["connect"].startswith("HTTP/1.1 407")
        assert tried["http"] == 407
        assert "407" in str(tried["https"])
    else:  # a reverse listener tunnels nowhere, and wants the secret path
        assert tried["connect"].startswith("HTTP/1.1 4")
        assert tried["http"] == 403
    # Calls the clients completed = calls upstream = calls in the store: the agent's one.
    assert [r.json()["messages"][0]["content"] for r in mock.requests] == ["the agent's own call"]
    with sqlite3.connect(tmp_path / "home" / "traces.db") as db:
        [(n,)] = db.execute("SELECT count(*) FROM exchanges").fetchall()
    assert n == 1
