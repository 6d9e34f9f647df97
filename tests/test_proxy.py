"""The in-process proxy itself: start, stop, options."""

from __future__ import annotations

import subprocess
import sys

import pytest

from forge_record.addons.proxy import InProcessProxy
from forge_record.errors import ForgeRecordError
from forge_record.trust import confdir

LINGERING_CLIENT = """
import socket, sys, time
from pathlib import Path
from forge_record.addons.proxy import InProcessProxy
from forge_record.trust import confdir
proxy = InProcessProxy(object(), mode="regular", confdir=confdir(Path(sys.argv[1])))
port = proxy.start()
clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
# half a request
clients[0].sendall(b"GET http://127.0.0.1:9/ HTTP/1.1\\r\\nHost: 127.0.0.1:9\\r\\n")
time.sleep(0.3)
proxy.stop()
print("stopped")
"""


def test_stopping_with_open_client_connections_prints_nothing(tmp_path):
    """An agent's idle keep-alive sockets at exit must not put tracebacks on its terminal."""
    proc = subprocess.run([sys.executable, "-c", LINGERING_CLIENT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "stopped"
    assert proc.stderr == ""


def test_bad_mitmproxy_option_is_a_clear_error(tmp_path):
    proxy = InProcessProxy(object(), mode="regular", confdir=confdir(tmp_path),
                           settings={"no_such_option": "1"})
    with pytest.raises(ForgeRecordError, match="no_such_option"):
        proxy.start()
    proxy.stop()


@pytest.mark.parametrize(("host", "ok"), [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                          ("::ffff:127.0.0.1", True), ("10.1.2.3", False),
                                          ("192.168.0.5", False), ("2001:db8::1", False)])
def test_only_loopback_clients_are_served(host, ok):
    from mitmproxy.test import tflow

    from forge_record.addons.loopback import LoopbackOnly

    client = tflow.tclient_conn()
    client.peername = (host, 50000)
    LoopbackOnly().client_connected(client)
    assert (client.error is None) == ok


def test_only_the_stock_addons_that_will_act_are_loaded():
    """Idle stock addons cost a call per hook per flow; the needed ones are always there."""
    from mitmproxy import addons as mitm_addons
    from mitmproxy.addons import mapremote, save

    from forge_record.addons.proxy import NEEDED, stock_addons

    assert {type(a) for a in stock_addons({})} == set(NEEDED)
    chosen = {type(a) for a in stock_addons({"map_remote": "|a|b", "listen_port": "0"})}
    assert chosen == {*NEEDED, mapremote.MapRemote}
    assert save.Save not in chosen
    assert len(stock_addons({}, all_of_them=True)) == len(mitm_addons.default_addons())


def test_a_set_option_loads_the_addon_that_acts_on_it(tmp_path):
    """`--set modify_headers=...` still works: its addon is loaded because the option is set."""
    import http.server
    import threading
    import urllib.request

    seen: list[str | None] = []

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("X-Forge-Test"))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for settings in ({}, {"modify_headers": "/~q/X-Forge-Test/yes"}):
            proxy = InProcessProxy(object(), mode=f"reverse:{upstream}",
                                   confdir=confdir(tmp_path), settings=settings)
            port = proxy.start()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).close()
            finally:
                proxy.stop()
    finally:
        server.shutdown()
    assert seen == [None, "yes"]
