"""A bridged call on one mitmproxy flow: the HTTP half of forge_record.bridge.

The Recorder hands over a call whose dialect the bridge translates (`bridges`), when the
upstream is an engine. `bridge_call` rewrites the request into the engine's Chat Completions call
(path, body, headers) or, when the request cannot be said in Chat Completions, answers the
agent at once with its dialect's 400 (`refuse`). `Bridged.response_headers` sets the agent's
headers (its dialect's content type; no Content-Length, since the length is known only at
the end) and the stream callable that passes each engine chunk through the translator, so the
agent gets its events as the engine's arrive, never buffered.

Two captures per call, two exchanges in the record, linked by a shared `bridge:<id>` flag:
the agent's (its dialect, its own bytes both ways, flagged `bridged`) and the engine's
(`openai.chat`, kind "engine", the bytes the engine was sent and sent back). The engine's is
queued first; the writer gives its tokens to the agent's (forge_record.bridge.pairs). A fault
in the bridge is logged and flagged (`bridge_error`); it never breaks the agent's call.
"""

from __future__ import annotations

import logging
import secrets

from mitmproxy import http

from forge_record.bridge import TRANSLATORS
from forge_record.bridge.base import body
from forge_record.bridge.call import CHAT_PATH, TOKENIZE_PATH, BridgedCall, HttpBridge
from forge_record.bridge.pairs import BRIDGED, ENGINE_KIND, link_flag
from forge_record.capture import Capture
from forge_record.decoders import Dialect, dialect_named
from forge_record.finalize import flag
from forge_record.records import Exchange

log = logging.getLogger("forge_record")

META = "forge_record.bridge"
UNTRANSLATABLE = "untranslatable"
BRIDGE_ERROR = "bridge_error"
# The agent's headers that mean something only to its own API, never sent to the engine.
_AGENT_ONLY = ("anthropic-", "x-stainless-", "x-goog-", "openai-beta")
_KEY_HEADERS = ("x-api-key", "x-goog-api-key")  # become `Authorization: Bearer` for the engine


def bridges(dialect: Dialect, path: str) -> bool:
    """Whether a call in `dialect` to `path` is translated for an engine: a model turn of a
    dialect with a translator, or its token count when the translator can say one."""
    translator = TRANSLATORS.get(dialect.name)
    return translator is not None and (dialect.kind(path) == "model" or _counts(path, translator))


def _counts(path: str, translator: type) -> bool:
    route = path.partition("?")[0].rstrip("/")
    return route.endswith(("/count_tokens", ":countTokens")) and hasattr(translator, "count")


def bridge_call(flow: http.HTTPFlow, capture: Capture, body: bytes, path: str, base_path: str, *,
         model: str | None, top_logprobs: int, seq: int) -> Bridged | None:
    """The bridged call for `flow`, its request rewritten for the engine; None when it was
    refused (the agent's 400 is already on the flow)."""
    dialect = capture.dialect.name
    counting = capture.exchange.kind != "model"
    call = BridgedCall.open(TRANSLATORS[dialect], body, path=path, model=model,
                            top_logprobs=top_logprobs, counting=counting)
    link = secrets.token_hex(6)
    flag(capture.exchange, BRIDGED)
    flag(capture.exchange, link_flag(link))
    if call.refused is not None:
        refuse(flow, capture, 400, call.refused)
        return None
    req = flow.request
    req.path = _engine_path(base_path, TOKENIZE_PATH if counting else CHAT_PATH)
    _engine_headers(req.headers, call.streamed)
    req.content = call.request_body  # Content-Length follows
    capture.exchange.upstream_url = req.url
    if counting:  # the agent's record alone: /tokenize is no dialect's call
        return Bridged(call, HttpBridge(call, path), capture, None)
    engine = Capture(dialect_named("openai.chat"), seq=seq, method="POST", url=req.url,
                     upstream_url=req.url, path=req.path,
                     headers=list(req.headers.items(multi=True)), body=call.request_body,
                     max_body=capture.max_body)
    engine.exchange.kind = ENGINE_KIND
    flag(engine.exchange, link_flag(link))
    return Bridged(call, HttpBridge(call, path), capture, engine)


def refuse(flow: http.HTTPFlow, capture: Capture, status: int, why: str) -> None:
    """Answer the agent now with its dialect's error, without calling the engine: a 400
    for a request the engine cannot be asked (flagged `untranslatable`), a 500 for a fault of
    the bridge's own (`bridge_error`)."""
    flag(capture.exchange, UNTRANSLATABLE if status == 400 else BRIDGE_ERROR)
    log.warning("forge-record: cannot bridge %s: %s", capture.exchange.url, why)
    blank = TRANSLATORS[capture.dialect.name]({}, path="", model=None)
    data = body(blank.error(status, why))
    flow.response = http.Response.make(status, data, {"content-type": "application/json"})
    # Recorded here: mitmproxy still runs `responseheaders` for an answer made in `request`,
    # but never streams its body.
    capture.response_started(status, list(flow.response.headers.items(multi=True)),
                             "application/json", "")
    capture.tee(data)


class Bridged:
    def __init__(self, call: BridgedCall, bridge: HttpBridge, agent: Capture,
                 engine: Capture | None) -> None:
        self.call = call
        self.bridge = bridge
        self.agent = agent
        self.engine = engine
        self._broken = False

    def response_headers(self, resp: http.Response) -> None:
        """The engine's headers are in: record them, give the agent its own, and stream."""
        content_type = resp.headers.get("content-type", "")
        encoding = resp.headers.get("content-encoding", "")
        if self.engine is not None:
            self.engine.response_started(resp.status_code,
                                         list(resp.headers.items(multi=True)),
                                         content_type, encoding)
        agent_type = self.bridge.start(resp.status_code, encoding, content_type)
        resp.headers["content-type"] = agent_type
        for name in ("content-length", "content-encoding"):
            if name in resp.headers:
                del resp.headers[name]
        if resp.http_version == "HTTP/1.1":
            resp.headers["transfer-encoding"] = "chunked"
        self.agent.response_started(resp.status_code, list(resp.headers.items(multi=True)),
                                    agent_type, "")
        resp.stream = self.stream

    def stream(self, chunk: bytes) -> list[bytes]:
        """mitmproxy's stream callable: the engine's chunk kept, the agent's bytes out. A
        list, never b"": an empty chunk would end an HTTP/1.1 chunked body early."""
        if self.engine is not None:
            self.engine.tee(chunk)
        if self._broken:
            return []
        try:
            out = self.bridge.feed(chunk) if chunk else self.bridge.flush()
        except Exception:  # noqa: BLE001 - the agent's call goes on without this chunk
            self._broken = True
            flag(self.agent.exchange, BRIDGE_ERROR)
            log.exception("forge-record: the bridge failed on %s", self.agent.exchange.url)
            return []
        if out:
            self.agent.tee(out)
        return [out] if out else []

    def finish_engine(self, error: str | None, upstream: bool) -> Exchange | None:
        """The engine's record, finished (None for a token count, which has none)."""
        if self.call.faults:
            flag(self.agent.exchange, BRIDGE_ERROR)
        if self.engine is None:
            return None
        return self.engine.finish(error, upstream_failed=upstream)


def _engine_path(base_path: str, route: str) -> str:
    """The engine's route, under its upstream's path (an OpenAI-style base URL ending in /v1
    counts once)."""
    return base_path.rstrip("/").removesuffix("/v1") + route


def _engine_headers(headers: http.Headers, streamed: bool) -> None:
    for name in list(headers.keys()):
        lower = name.lower()
        if lower in _KEY_HEADERS and "authorization" not in headers:
            headers["authorization"] = f"Bearer {headers[name]}"
        if lower.startswith(_AGENT_ONLY) or lower in _KEY_HEADERS:
            del headers[name]
    headers["content-type"] = "application/json"
    headers["accept"] = "text/event-stream" if streamed else "application/json"
    headers["accept-encoding"] = "identity"  # the bridge reads the engine's bytes as they come
