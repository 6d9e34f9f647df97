"""The HTTP recorder addon's hooks, called as mitmproxy calls them (`taddons`, `tflow`): which
requests are recorded (by host, path and body), the redirect to an upstream, the response that
arrives whole (no `responseheaders` stream), the error hook, and that a failing sink never
reaches the agent. No sockets: the live proxy is tested in test_proxy*.py.
"""

from __future__ import annotations

import orjson
import pytest
from mitmproxy import http
from mitmproxy.proxy.layers.http import (
    HttpErrorHook,
    HttpRequestHook,
    HttpResponseHeadersHook,
    HttpResponseHook,
)
from mitmproxy.test import taddons, tflow, tutils

from forge_record.addons.recorder import Recorder
from forge_record.finalize import PENDING, finalize
from forge_record.records import COMPLETE, ERROR, INCOMPLETE, Exchange

CHAT = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
ANSWER = orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
                       "choices": [{"index": 0, "finish_reason": "stop", "message": {
                           "role": "assistant", "content": "hello"}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                 "total_tokens": 4}})


def flow(host="api.openai.com", path="/v1/chat/completions", body=CHAT, method="POST",
         scheme="https", port=443) -> http.HTTPFlow:
    headers = http.Headers(host=host, content_type="application/json",
                           authorization="Bearer sk-dummy-never-stored")
    req = tutils.treq(host=host, port=port, scheme=scheme.encode(), method=method.encode(),
                      path=path.encode(), headers=headers, content=body,
                      authority=b"")
    return tflow.tflow(req=req)


def reply(body=ANSWER, status=200, content_type="application/json") -> http.Response:
    return tutils.tresp(status_code=status, content=body,
                        headers=http.Headers(content_type=content_type))


class Hooks:
    """One addon inside a mitmproxy test context; each hook goes through the master."""

    def __init__(self, **options) -> None:
        self.sunk: list[Exchange] = []
        self.addon = Recorder(self.sunk.append, **options)
        self.ctx = taddons.context(self.addon)

    def __call__(self, hook) -> None:
        self.ctx.master.addons.invoke_addon_sync(self.addon, hook)

    def through(self, f: http.HTTPFlow, response: http.Response | None = None,
                *, streamed: bool = True) -> list[Exchange]:
        """request, then (with a response) responseheaders and the tee as mitmproxy drives a
        stream, or the response set whole, then response."""
        self(HttpRequestHook(f))
        if response is not None:
            body = response.content or b""
            f.response = response
            if streamed:
                self(HttpResponseHeadersHook(f))
                stream = f.response.stream
                f.response.content = b"".join(stream(c) for c in _halves(body)) if callable(
                    stream) else body
            self(HttpResponseHook(f))
        return self.sunk


def _halves(body: bytes) -> list[bytes]:
    return [body[: len(body) // 2], body[len(body) // 2:]]


@pytest.fixture(autouse=True)
def no_addon_errors(caplog):
    """mitmproxy logs an exception in a hook ("Addon error") instead of raising it."""
    yield
    assert "Addon error" not in caplog.text


@pytest.fixture
def forward():
    hooks = Hooks(model_hosts=["api.openai.com", "api.anthropic.com"])
    with hooks.ctx:
        yield hooks


# --- which requests are recorded -------------------------------------------------------


@pytest.mark.parametrize(("host", "path", "body", "recorded"), [
    ("api.openai.com", "/v1/chat/completions", CHAT, True),
    ("api.openai.com", "/v1/chat/completions/", CHAT, True),
    ("api.anthropic.com", "/v1/messages?beta=true", b'{"model": "c", "messages": []}', True),
    ("api.openai.com", "/v1/models", CHAT, False),  # not a dialect's route
    ("api.openai.com", "/v1/embeddings", CHAT, False),
    ("llm.lan", "/v1/chat/completions", CHAT, True),  # unknown host: the body speaks it
    ("llm.lan", "/v1/chat/completions", b'{"prompt": "x"}', False),
    ("llm.lan", "/v1/chat/completions", b"not json", False),
    ("llm.lan", "/v1/responses", b'{"model": "m", "input": "x"}', True),
])
def test_request_routing(forward, host, path, body, recorded):
    f = flow(host=host, path=path, body=body, scheme="http", port=80)
    forward(HttpRequestHook(f))
    assert ("forge_record" in f.metadata) == recorded


def test_only_post_is_recorded(forward):
    f = flow(method="GET", body=b"")
    forward(HttpRequestHook(f))
    assert "forge_record" not in f.metadata


def test_reverse_mode_records_any_host():
    hooks = Hooks(record_any_host=True)
    with hooks.ctx:
        f = flow(host="gw.example", body=b'{"x": 1}')  # the body need not say anything
        hooks(HttpRequestHook(f))
    assert "forge_record" in f.metadata


def test_traffic_not_recorded_streams_through(forward):
    f = flow(path="/v1/models", method="GET", body=b"")
    forward(HttpRequestHook(f))
    f.response = reply()
    forward(HttpResponseHeadersHook(f))
    assert f.response.stream is True  # passed on chunk by chunk, nothing kept
    forward(HttpResponseHook(f))
    assert forward.sunk == []


# --- the redirect to an upstream -------------------------------------------------------


def test_redirect_sends_to_the_upstream_and_records_what_the_agent_sent():
    hooks = Hooks(model_hosts=["api.openai.com"],
                  upstreams={"api.openai.com": "http://127.0.0.1:8000/gw/"})
    with hooks.ctx:
        f = flow()
        [ex] = hooks.through(f, reply())
    req = f.request
    assert (req.scheme, req.host, req.port, req.path) == ("http", "127.0.0.1", 8000,
                                                         "/gw/v1/chat/completions")
    assert req.headers["host"] == "127.0.0.1:8000"  # the upstream gets its own name
    assert ex.url == "https://api.openai.com/v1/chat/completions"
    assert ex.request_headers["host"] == "api.openai.com"
    assert ex.upstream_url == "http://127.0.0.1:8000/gw/v1/chat/completions"
    assert "authorization" not in ex.request_headers


def test_every_request_to_an_upstream_host_is_redirected_recorded_or_not():
    hooks = Hooks(upstreams={"api.openai.com": "https://gw.example"})
    with hooks.ctx:
        f = flow(path="/v1/models", method="GET", body=b"")
        hooks(HttpRequestHook(f))
    assert (f.request.host, f.request.path) == ("gw.example", "/v1/models")
    assert "forge_record" not in f.metadata


def test_without_a_redirect_the_upstream_url_is_the_url(forward):
    [ex] = forward.through(flow(), reply())
    assert ex.url == ex.upstream_url == "https://api.openai.com/v1/chat/completions"


# --- how a call ends -------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_response_is_recorded_streamed_or_whole(forward, streamed):
    """Whole: another addon (or a replay) set the response in `request`, so mitmproxy ran no
    responseheaders hook and nothing was teed; `_finish` takes the body as it stands."""
    [ex] = forward.through(flow(), reply(), streamed=streamed)
    assert ex.status == PENDING and ex.http_status == 200
    assert ex.raw_response == ANSWER and ex.raw_request == CHAT
    stored = finalize(ex)
    assert stored.status == COMPLETE and stored.response.content[0].text == "hello"
    assert stored.request.model == "gpt-4o" and not stored.flags


def test_a_whole_error_response(forward):
    body = b'{"error": {"message": "slow down", "type": "rate_limit"}}'
    [ex] = forward.through(flow(), reply(body, status=429), streamed=False)
    assert finalize(ex).status == ERROR and ex.http_status == 429


def test_the_error_hook_before_any_response(forward):
    f = flow()
    forward(HttpRequestHook(f))
    f.error = tflow.terr("server disconnected")
    forward(HttpErrorHook(f))
    [ex] = forward.sunk
    # the upstream side failed before any response: an error, not a cut-off answer
    assert ex.http_status is None
    assert ex.flags == ["aborted:server disconnected", "upstream_failed"]
    assert finalize(ex).status == ERROR


def test_the_error_hook_mid_stream_keeps_what_came(forward):
    sse = (b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":'
           b'[{"index":0,"delta":{"role":"assistant","content":"hel"}}]}\n\n')
    f = flow()
    forward(HttpRequestHook(f))
    f.response = reply(b"", content_type="text/event-stream")
    forward(HttpResponseHeadersHook(f))
    assert f.response.stream(sse) == sse  # the agent gets the bytes unchanged
    f.error = tflow.terr("connection reset")
    forward(HttpErrorHook(f))
    forward(HttpResponseHook(f))  # a late response hook does not record it twice
    [ex] = forward.sunk
    assert ex.raw_response == sse
    assert ex.flags == ["aborted:connection reset", "upstream_failed"]
    stored = finalize(ex)
    assert stored.status == INCOMPLETE and stored.response.content[0].text == "hel"


def test_a_failing_sink_never_reaches_the_agent(caplog):
    def broken(exchange):
        raise RuntimeError("queue full")

    addon = Recorder(broken, model_hosts=["api.openai.com"])
    with taddons.context(addon) as ctx:
        f = flow()
        ctx.master.addons.invoke_addon_sync(addon, HttpRequestHook(f))
        f.response = reply()
        ctx.master.addons.invoke_addon_sync(addon, HttpResponseHook(f))
    assert "could not queue exchange" in caplog.text
    assert addon.recorded == 1
