"""The Gemini dialects: the Gemini API (`gemini.generate`) and Code Assist (`gemini.code_assist`).

- `gemini.generate`: `POST …/models/{model}:generateContent`, `:streamGenerateContent` (SSE
  with `?alt=sse`, else a JSON array) and `:countTokens` (a side call), on any API version
  and behind any prefix (Vertex's `…/publishers/google/models/{model}:…` too).
- `gemini.code_assist`: what Gemini CLI's Login with Google talks to,
  `POST …/v1internal:streamGenerateContent` (and `:generateContent`, `:countTokens`). The
  request `{model, project, user_prompt_id, request: {...}}` and each response chunk
  `{response: {...}, traceId}` are unwrapped into the same record as the Gemini API's; the
  wrapper's other fields are kept (`parameters["code_assist"]`, `extras["code_assist"]`).
  Its other methods (loadCodeAssist, onboardUser, quota) are not model calls and match nothing.

Requests: `contents` become messages (role `model` → `assistant`), `systemInstruction` the
system blocks, `tools[].functionDeclarations` the tools (`parameters` or
`parametersJsonSchema`; built-in tools such as `googleSearch` keep their key as `kind`), every
other field `parameters`. The model and whether it streams are in the URL, so `from_url` fills
them in after the body is parsed. Parts become blocks as `gemini_parts` says; responses fold
as `gemini_stream` says.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from forge_record.decoders.base import decode_object, is_event_stream
from forge_record.decoders.gemini_parts import PartFold, camel, camel_key
from forge_record.decoders.gemini_stream import BodyDecoder, StreamDecoder
from forge_record.records import Block, Message, Request, Text, Tool

_METHODS = {"generateContent": "model", "streamGenerateContent": "model", "countTokens": "side"}
_MODEL_PARENTS = ("models", "tunedModels")
_VERSION = re.compile(r"v\d+\w*")  # v1internal, or what CODE_ASSIST_API_VERSION names
_ROLES = {"model": "assistant", "function": "tool"}
_REQUEST_OWN = {"contents", "systemInstruction", "tools"}


def _route(path: str) -> tuple[str, str, str] | None:
    """(parent segment, name, method) of `…/{parent}/{name}:{method}`, for known methods."""
    route = unquote(path.partition("?")[0])
    parent, _, last = route.rpartition("/")
    name, colon, method = last.partition(":")
    if not colon or method not in _METHODS:
        return None
    return parent.rpartition("/")[2], name, method


# --- requests ----------------------------------------------------------------------------


def _blocks(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):  # some clients send systemInstruction as a bare string
        return [Text(text=content)] if content else []
    fold = PartFold(merge_text=False)
    for part in camel(content).get("parts") or ():
        fold.add(part)
    return fold.blocks()


def _tools(raw: list[dict[str, Any]]) -> list[Tool]:
    tools = []
    for entry in raw:
        for key, value in camel(entry).items():
            if key == "functionDeclarations":
                tools += [_declaration(camel(f)) for f in value or ()]
            else:  # googleSearch, codeExecution, urlContext, ...: the API runs them
                tools.append(Tool(name=key, kind=key, parameters=value or None))
    return tools


def _declaration(f: dict[str, Any]) -> Tool:
    return Tool(name=f.get("name", ""), description=f.get("description"),
                parameters=f.get("parameters", f.get("parametersJsonSchema")))


def _request(raw: dict[str, Any]) -> Request:
    data = camel(raw)  # to read it; `parameters` keeps the client's own spelling
    return Request(
        system=_blocks(data.get("systemInstruction")),
        tools=_tools(data.get("tools") or []),
        messages=[Message(role=_ROLES.get(c.get("role"), c.get("role") or "user"),
                          content=_blocks(c)) for c in data.get("contents") or ()],
        parameters={k: v for k, v in raw.items() if camel_key(k) not in _REQUEST_OWN},
    )


# --- the dialects ------------------------------------------------------------------------


class _Gemini:
    name = ""
    wrapped = False
    body_keys = (b'"contents"', b'"request"')  # what a request body names (to sniff it)

    def _owns(self, route: tuple[str, str, str]) -> bool:
        raise NotImplementedError

    def matches(self, method: str, path: str) -> bool:
        route = _route(path)
        return method.upper() == "POST" and route is not None and self._owns(route)

    def kind(self, path: str) -> str:
        route = _route(path)
        return _METHODS[route[2]] if route else "model"

    def parse_request(self, body: bytes) -> Request:
        return decode_object(body, "request body", self._parse)

    def _parse(self, data: dict[str, Any]) -> Request:
        return _request(data)

    def from_url(self, request: Request, url: str) -> None:
        """What the URL says about the request: whether it streams (and the model)."""
        route = _route(urlsplit(url).path)
        if route is not None:
            request.stream = route[2] == "streamGenerateContent"

    def response_decoder(self, content_type: str) -> StreamDecoder | BodyDecoder:
        if is_event_stream(content_type):
            return StreamDecoder(self.wrapped)
        return BodyDecoder(self.wrapped)


class GeminiGenerate(_Gemini):
    name = "gemini.generate"

    def _owns(self, route: tuple[str, str, str]) -> bool:
        return route[0] in _MODEL_PARENTS

    def from_url(self, request: Request, url: str) -> None:
        super().from_url(request, url)
        route = _route(urlsplit(url).path)
        if route is not None and request.model is None:
            request.model = route[1]


class CodeAssist(_Gemini):
    name = "gemini.code_assist"
    wrapped = True

    def _owns(self, route: tuple[str, str, str]) -> bool:
        return route[0] not in _MODEL_PARENTS and _VERSION.fullmatch(route[1]) is not None

    def _parse(self, data: dict[str, Any]) -> Request:
        inner = data.get("request")
        if not isinstance(inner, dict):
            raise TypeError("no request object in the Code Assist envelope")
        request = _request(inner)
        request.model = data.get("model") or inner.get("model")
        wrapper = {k: v for k, v in data.items() if k not in ("model", "request")}
        if wrapper:
            request.parameters["code_assist"] = wrapper
        return request


GENERATE = GeminiGenerate()
CODE_ASSIST = CodeAssist()
DIALECTS = (GENERATE, CODE_ASSIST)
