"""An upstream that fails reaches the agent as it would directly, and is recorded as it was.

A hostile upstream on 127.0.0.1 refuses the connection, resets it before the response
headers, or cuts its body short of its Content-Length. The official anthropic SDK calls it
once directly and once through the recording proxy: it must raise the same error class both
times (no 502 page from the proxy), and the exchange is stored as an error with its cause
(nothing came back) or as incomplete (the body was cut short).
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time

import anthropic
import pytest

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.finalize import finalize
from forge_record.records import ERROR, INCOMPLETE
from forge_record.trust import ca_files, confdir

MESSAGE = (b'{"id":"msg_1","type":"message","role":"assistant","model":"m","content":'
           b'[{"type":"text","text":"hi"}],"stop_reason":"end_turn",'
           b'"usage":{"input_tokens":1,"output_tokens":1}}')


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += conn.recv(65536)


def _serve(listener: socket.socket, fault: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # closed: the test is over
            return
        with conn:
            _read_request(conn)
            if fault == "reset":  # SO_LINGER 0: close() sends a RST
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif fault == "short":  # a whole JSON body, 50 bytes short of its Content-Length
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % (len(MESSAGE) + 50) + MESSAGE)


@pytest.fixture
def hostile(request):
    """The base URL of an upstream that fails the given way ("refused": nothing listens)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if request.param == "refused":
        listener.close()
    else:
        listener.listen(8)
        threading.Thread(target=_serve, args=(listener, request.param), daemon=True).start()
    yield f"http://127.0.0.1:{port}"
    listener.close()


@pytest.fixture(params=["reverse", "forward"])
def recording(request, tmp_path):
    """(start(upstream) -> a client that calls through the proxy, the exchanges recorded)."""
    exchanges: list = []
    proxies: list[InProcessProxy] = []
    host = "api.anthropic.com"

    def start(upstream: str) -> anthropic.Anthropic:
        if request.param == "reverse":
            addon = Recorder(exchanges.append, upstreams={host: upstream}, record_any_host=True)
            proxy = InProcessProxy(addon, mode=f"reverse:https://{host}",
                                   confdir=confdir(tmp_path))
            proxies.append(proxy)
            return _client(f"http://127.0.0.1:{proxy.start()}")
        # forward: the agent keeps https://api.anthropic.com, through a TLS-intercepting proxy
        addon = Recorder(exchanges.append, model_hosts=[host], upstreams={host: upstream})
        proxy = InProcessProxy(addon, mode="regular", confdir=confdir(tmp_path))
        proxies.append(proxy)
        port = proxy.start()
        tls = ssl.create_default_context(cafile=ca_files(confdir(tmp_path)).bundle)
        return _client(f"https://{host}", anthropic.DefaultHttpxClient(
            proxy=f"http://127.0.0.1:{port}", verify=tls))

    yield start, exchanges
    for proxy in proxies:
        proxy.stop()


def _client(base_url: str, http_client=None) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-dummy-key", base_url=base_url, max_retries=0,
                               http_client=http_client)


def _call(client: anthropic.Anthropic | str) -> BaseException:
    if isinstance(client, str):  # a direct call to this base URL
        client = _client(client)
    with pytest.raises(anthropic.APIError) as caught:
        client.messages.create(model="claude-haiku-4-5", max_tokens=16,
                               messages=[{"role": "user", "content": "hi"}])
    return caught.value


def _recorded(exchanges: list):
    deadline = time.monotonic() + 10
    while not exchanges and time.monotonic() < deadline:
        time.sleep(0.01)
    [ex] = exchanges
    return finalize(ex)


@pytest.mark.parametrize("hostile", ["refused", "reset"], indirect=True)
def test_no_response_reaches_the_agent_as_a_connection_error(hostile, recording):
    start, exchanges = recording
    direct = _call(hostile)
    proxied = _call(start(hostile))
    assert type(direct) is anthropic.APIConnectionError
    assert type(proxied) is type(direct)  # not InternalServerError with a 502 HTML page
    ex = _recorded(exchanges)
    assert ex.status == ERROR and ex.http_status is None and ex.response is None
    assert "upstream_failed" in ex.flags
    [cause] = [f for f in ex.flags if f.startswith("aborted:")]
    assert cause != "aborted:"  # says what happened: refused, closed


@pytest.mark.parametrize("hostile", ["short"], indirect=True)
def test_a_body_cut_short_of_its_content_length_is_incomplete(hostile, recording):
    start, exchanges = recording
    direct = _call(hostile)
    proxied = _call(start(hostile))
    assert type(proxied) is type(direct) is anthropic.APIConnectionError
    ex = _recorded(exchanges)
    assert ex.raw_response == MESSAGE  # what arrived is kept, and parses whole...
    assert ex.status == INCOMPLETE  # ...but the body ended short: not complete
    assert "upstream_failed" in ex.flags and ex.http_status == 200
