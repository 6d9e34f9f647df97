"""The OpenAI Responses dialect: `POST …/responses` (api.openai.com/v1/responses,
chatgpt.com/backend-api/codex/responses, any compatible base URL), SSE or JSON.

`…/responses/compact` (Codex's remote history compaction, a model call whose body is
`{"output": [items]}`) is recorded as a `side` exchange. Nothing else under `…/responses/`
(`GET /v1/responses/{id}`, `…/cancel`, `…/input_items`, `…/input_tokens`) is recorded: those
read or manage stored responses and are not model turns. The WebSocket transport sends GET
upgrades, which this dialect never matches; it reuses `ResponsesFold` and
`parse_responses_request` on the frames instead.

Requests: `parse_responses_request` (openai_items). Responses: an SSE stream is framed here
and folded by `ResponsesFold` (openai_responses_fold); a JSON body (a response object, or an
`{"error": ...}` body) goes through `response_record`, so both paths give the same Response
for the same response.
"""

from __future__ import annotations

from typing import Any

import orjson

from forge_record.decoders.base import (
    Dialect,
    JsonBodyDecoder,
    decode_object,
    is_event_stream,
)
from forge_record.decoders.openai_items import parse_responses_request
from forge_record.decoders.openai_responses_fold import ResponsesFold, response_record
from forge_record.records import Request, Response
from forge_record.sse import SSEDecoder

__all__ = ["DIALECT", "ResponsesFold", "parse_responses_request", "response_record"]



def _body_response(data: dict[str, Any]) -> Response:
    if isinstance(data.get("error"), dict) and "output" not in data:  # an error body
        return Response(error=data["error"],
                        extras={k: v for k, v in data.items() if k != "error"})
    return response_record(data, list(data.get("output") or ()))


# --- decoders and the dialect --------------------------------------------------------------


class _StreamDecoder:
    """SSE framing around a ResponsesFold."""

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._fold = ResponsesFold()

    @property
    def complete(self) -> bool:
        return self._fold.complete

    def feed(self, chunk: bytes) -> None:
        for event in self._sse.feed(chunk):
            self._on_event(event.event, event.data)

    def finish(self) -> Response:
        for event in self._sse.flush():
            self._on_event(event.event, event.data)
        return self._fold.finish()

    def _on_event(self, name: str | None, data: str) -> None:
        if data.startswith("[DONE]"):  # some compatible servers end this way too
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            event = {"event": name, "data": data}  # not applicable: kept as it came
        if isinstance(event, dict) and "type" not in event and name:
            event["type"] = name
        self._fold.apply(event)


class OpenAIResponses(Dialect):
    name = "openai.responses"
    routes = {"/responses": "model", "/responses/compact": "side"}
    # Codex's built-in provider opens `GET …/responses` as a WebSocket (addons/websocket.py).
    websocket_routes = {"/responses": "model"}
    body_keys = (b'"input"',)

    def parse_request(self, body: bytes) -> Request:
        return decode_object(body, "request body", parse_responses_request,
                             grows="input")

    def response_decoder(self, content_type: str) -> _StreamDecoder | JsonBodyDecoder:
        if is_event_stream(content_type):
            return _StreamDecoder()
        return JsonBodyDecoder(_body_response)


DIALECT = OpenAIResponses()
