"""When a stream breaks or a body does not decode, the agent still gets exactly what the
upstream sent, and the exchange is stored with what arrived, flagged."""

from __future__ import annotations

import gzip
import time

import httpx2
import orjson
import pytest

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.finalize import finalize
from forge_record.mock import MockUpstream, Reply
from forge_record.records import COMPLETE, INCOMPLETE, Text
from forge_record.trust import confdir

BODY = {"model": "claude-haiku-4-5", "max_tokens": 50, "stream": True,
        "messages": [{"role": "user", "content": "hello there, tell me a long story"}]}
HEADERS = {"x-api-key": "sk-ant-dummy-key", "anthropic-version": "2023-06-01",
           "content-type": "application/json"}


MAX_BODY = 1 << 20


@pytest.fixture
def proxied(tmp_path):
    """(mock, base_url, exchanges) with a reverse-mode recording proxy in front of the mock,
    keeping at most MAX_BODY bytes per body."""
    exchanges: list = []
    with MockUpstream() as mock:
        addon = Recorder(exchanges.append, upstreams={"api.anthropic.com": mock.url},
                         record_any_host=True, max_body=MAX_BODY)
        proxy = InProcessProxy(addon, mode="reverse:https://api.anthropic.com",
                               confdir=confdir(tmp_path))
        port = proxy.start()
        try:
            yield mock, f"http://127.0.0.1:{port}", exchanges
        finally:
            proxy.stop()


def wait_for(exchanges: list, n: int = 1) -> list:
    deadline = time.monotonic() + 5
    while len(exchanges) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return [finalize(e) for e in exchanges]


def test_upstream_reset_mid_stream_keeps_what_arrived(proxied):
    mock, base, exchanges = proxied
    mock.options["cut_after"] = 5  # message_start, ping, block start, two text deltas
    received = b""
    with pytest.raises(httpx2.HTTPError):  # noqa: SIM117
        with httpx2.stream("POST", f"{base}/v1/messages", json=BODY, headers=HEADERS) as r:
            for chunk in r.iter_raw():
                received += chunk
    [ex] = wait_for(exchanges)
    assert ex.status == INCOMPLETE
    assert any(f.startswith("aborted:") for f in ex.flags)
    assert ex.raw_response == received  # everything the client saw is kept
    [text] = ex.response.content
    assert isinstance(text, Text) and text.text == "OK from the mock."[:16]


def test_client_abort_mid_stream(proxied):
    mock, base, exchanges = proxied
    mock.options["event_delay"] = 0.05
    with httpx2.stream("POST", f"{base}/v1/messages", json=BODY, headers=HEADERS) as r:
        stream = r.iter_raw()
        next(stream)
        next(stream)
    [ex] = wait_for(exchanges)
    assert ex.status == INCOMPLETE
    assert ex.response is not None and ex.response.stop_reason is None


def test_undecodable_body_is_kept_raw_and_flagged(proxied):
    mock, base, exchanges = proxied
    garbage = b'{"type": "message", "content": [oops'
    mock.routes.insert(0, ("POST", lambda p: p == "/v1/messages",
                           lambda m, r: Reply(body=garbage)))
    r = httpx2.post(f"{base}/v1/messages", json=dict(BODY, stream=False), headers=HEADERS)
    assert r.content == garbage  # the agent is not affected
    [ex] = wait_for(exchanges)
    assert "decode_error" in ex.flags
    assert ex.raw_response == garbage
    assert ex.request.messages[0].content[0].text == BODY["messages"][0]["content"]


def test_compressed_request_body_is_decoded(proxied):
    mock, base, exchanges = proxied
    body = gzip.compress(orjson.dumps(dict(BODY, stream=False)))
    r = httpx2.post(f"{base}/v1/messages", content=body,
                    headers=HEADERS | {"content-encoding": "gzip"})
    assert r.status_code == 200
    assert mock.requests[-1].body == body  # forwarded as sent
    [ex] = wait_for(exchanges)
    assert ex.status == COMPLETE
    assert ex.request.model == "claude-haiku-4-5"


def test_error_status_is_recorded_as_error(proxied):
    mock, base, exchanges = proxied
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    mock.routes.insert(0, ("POST", lambda p: p == "/v1/messages",
                           lambda m, r: Reply.json(overloaded, status=529)))
    r = httpx2.post(f"{base}/v1/messages", json=BODY, headers=HEADERS)
    assert r.status_code == 529
    [ex] = wait_for(exchanges)
    assert ex.status == "error" and ex.http_status == 529
    assert ex.response.error["type"] == "overloaded_error"


def test_decompression_bomb_is_cut_at_the_limit(proxied):
    """50 MB of gzip-compressed zeros (about 50 KB on the wire): the agent gets every byte,
    the recorder keeps at most the limit and says so."""
    mock, base, exchanges = proxied
    bomb = gzip.compress(b"0" * (50 << 20), compresslevel=9)
    mock.routes.insert(0, ("POST", lambda p: p == "/v1/messages", lambda m, r: Reply(
        body=iter([bomb[i:i + 4096] for i in range(0, len(bomb), 4096)]),
        content_type="text/event-stream", headers={"content-encoding": "gzip"})))
    with httpx2.stream("POST", f"{base}/v1/messages", json=BODY, headers=HEADERS) as r:
        assert b"".join(r.iter_raw()) == bomb
    [ex] = wait_for(exchanges)
    assert "response_truncated" in ex.flags
    assert len(ex.raw_response) <= MAX_BODY


def test_oversized_request_is_kept_truncated(proxied):
    mock, base, exchanges = proxied
    big = dict(BODY, stream=False, messages=[{"role": "user", "content": "x" * (2 << 20)}])
    r = httpx2.post(f"{base}/v1/messages", json=big, headers=HEADERS)
    assert r.status_code == 200
    assert len(mock.requests[-1].body) > 2 << 20  # the upstream got all of it
    [ex] = wait_for(exchanges)
    assert "request_truncated" in ex.flags and len(ex.raw_request) == MAX_BODY
    assert "request_decode_error" in ex.flags  # half a JSON document does not parse
