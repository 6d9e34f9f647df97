"""Fault injection: whatever the upstream sends, the agent receives exactly those bytes, the
recorder keeps them and says what was wrong, and the proxy keeps serving.

Each fault is a reply from the mock. It is fetched once directly and once through the
recording proxy, and the two byte strings must be equal.
"""

from __future__ import annotations

import gzip
import random
import time
from collections.abc import Iterator

import httpx2
import orjson
import pytest

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.finalize import finalize
from forge_record.mock import CutStream, MockUpstream, Reply
from forge_record.mock.anthropic import full_message, sse_events, text_message
from forge_record.records import COMPLETE, ERROR, INCOMPLETE
from forge_record.trust import confdir

pytestmark = pytest.mark.slow

BODY = {"model": "claude-haiku-4-5", "max_tokens": 50, "stream": True,
        "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"x-api-key": "sk-ant-dummy-key", "anthropic-version": "2023-06-01"}
GOOD = list(sse_events(full_message(BODY, text_message("fine, thanks"), b"x")))


def sse(name: str, data: bytes) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


def cut_after(events: list[bytes], n: int) -> Iterator[bytes]:
    yield from events[:n]
    raise CutStream


def slow_drip(events: list[bytes]) -> Iterator[bytes]:
    """One byte at a time, with pauses: a stream that trickles."""
    for byte in b"".join(events[:6]):
        yield bytes([byte])
    for event in events[6:]:
        time.sleep(0.01)
        yield event


OVERLOADED = sse("error", b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
BIG_TEXT = "y" * (10 << 20)
BIG_EVENT = sse("content_block_delta", orjson.dumps(
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": BIG_TEXT}}))

# name -> (reply, expected status, a flag or None)
FAULTS = {
    "malformed_sse": (lambda: Reply.stream(iter([GOOD[0], b"data without event\n\nevent: \xff\xfe\n\n:::\n\n", *GOOD[1:]])), COMPLETE, None),
    "invalid_json_event": (lambda: Reply.stream(iter([*GOOD[:3], sse("content_block_delta", b"{not json"), *GOOD[3:]])), COMPLETE, None),
    "truncated_no_stop": (lambda: Reply.stream(iter(GOOD[:-2])), INCOMPLETE, None),
    "reset_mid_stream": (lambda: Reply.stream(cut_after(GOOD, 4)), INCOMPLETE, "aborted:"),
    "error_529_inside_200": (lambda: Reply.stream(iter([*GOOD[:4], OVERLOADED])), ERROR, None),
    "ten_megabyte_event": (lambda: Reply.stream(iter([*GOOD[:3], BIG_EVENT, *GOOD[3:]])), COMPLETE, None),
    "lying_content_encoding": (lambda: Reply(body=iter(GOOD), content_type="text/event-stream",
                                             headers={"content-encoding": "gzip"}), INCOMPLETE, "content_decode_error"),
    "unknown_content_encoding": (lambda: Reply(body=iter(GOOD), content_type="text/event-stream",
                                               headers={"content-encoding": "x-mystery"}), INCOMPLETE, "unknown_content_encoding"),
    "binary_body": (lambda: Reply(body=bytes(random.Random(1).randbytes(4096)), content_type="application/octet-stream"), INCOMPLETE, "decode_error"),
    "binary_sse": (lambda: Reply.stream(iter([random.Random(2).randbytes(2048), b"\n\n"])), INCOMPLETE, None),
    "slow_drip": (lambda: Reply.stream(slow_drip(GOOD)), COMPLETE, None),
    "empty_200": (lambda: Reply(body=b"", content_type="application/json"), INCOMPLETE, "decode_error"),
    "gzip_garbage_json": (lambda: Reply(body=gzip.compress(b"{oops", mtime=0), headers={"content-encoding": "gzip"}), INCOMPLETE, "decode_error"),
}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    exchanges: list = []
    with MockUpstream() as mock:
        addon = Recorder(exchanges.append, upstreams={"api.anthropic.com": mock.url},
                         record_any_host=True)
        proxy = InProcessProxy(addon, mode="reverse:https://api.anthropic.com",
                               confdir=confdir(tmp_path_factory.mktemp("ca")))
        port = proxy.start()
        try:
            yield mock, f"http://127.0.0.1:{port}", exchanges
        finally:
            proxy.stop()


def fetch(url: str) -> bytes:
    received = b""
    try:
        with httpx2.stream("POST", f"{url}/v1/messages", json=BODY, headers=HEADERS,
                           timeout=30) as r:
            for chunk in r.iter_raw():
                received += chunk
    except httpx2.HTTPError:
        pass  # a reset: keep what arrived
    return received


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_passes_through_and_is_recorded(rig, fault):
    mock, proxy_url, exchanges = rig
    make_reply, status, flag = FAULTS[fault]
    mock.routes.insert(0, ("POST", lambda p: p == "/v1/messages", lambda m, r: make_reply()))
    try:
        direct = fetch(mock.url)
        before = len(exchanges)
        proxied = fetch(proxy_url)
        assert proxied == direct  # the agent sees exactly what the upstream sent
        deadline = time.monotonic() + 10
        while len(exchanges) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        ex = finalize(exchanges[-1])
    finally:
        mock.routes.pop(0)
    assert ex.status == status, ex.flags
    if flag:
        assert any(f.startswith(flag) for f in ex.flags), ex.flags
    if "content_decode_error" not in ex.flags and "unknown_content_encoding" not in " ".join(ex.flags):
        assert ex.raw_response == direct or fault.startswith(("lying", "gzip"))
    # and the proxy still serves a normal call afterwards
    assert fetch(proxy_url) == fetch(mock.url)
