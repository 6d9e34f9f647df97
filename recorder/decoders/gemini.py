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

from typing import Any
from urllib.parse import urlsplit

from forge_record.decoders.base import Dialect, Reused, decode_object, is_event_stream
from forge_record.decoders.gemini_parts import PartFold, camel, camel_key
from forge_record.decoders.gemini_stream import BodyDecoder, StreamDecoder
from forge_record.records import Block, Message, Request, Text, Tool

# Route patterns (see decoders.base.Dialect): `…/{models|tunedModels}/{model}:{method}` for
# the Gemini API, `…/{version}:{method}` for Code Assist (v1internal, or what
# CODE_ASSIST_API_VERSION names), never under a models segment.
_MODEL = r"/(?:models|tunedModels)/(?P<model>[^/:]+):"
_CODE_ASSIST = r"(?<!/models)(?<!/tunedModels)/v\d+\w*:"
_TURN = r"(?P<method>generateContent|streamGenerateContent)"
_COUNT = r"(?P<method>countTokens)"
_ROLES = {"model": "assistant", "function": "tool"}
_REQUEST_OWN = {"contents", "systemInstruction", "tools"}


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
    return [tool for group in _TOOL_GROUPS(raw) for tool in group]


def _tool_group(entry: dict[str, Any]) -> list[Tool]:
    tools = []
    for key, value in camel(entry).items():
        if key == "functionDeclarations":
            tools += [_declaration(camel(f)) for f in value or ()]
        else:  # googleSearch, codeExecution, urlContext, ...: the API runs them
            tools.append(Tool(name=key, kind=key, parameters=value or None))
    return tools


_TOOL_GROUPS = Reused(_tool_group)


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


class _Gemini(Dialect):
    wrapped = False
    body_keys = (b'"contents"', b'"request"')
    grows: str | None = "contents"  # the array a conversation extends (decoders.repeats)

    def parse_request(self, body: bytes) -> Request:
        return decode_object(body, "request body", self._parse, grows=self.grows)

    def _parse(self, data: dict[str, Any]) -> Request:
        return _request(data)

    def from_url(self, request: Request, url: str) -> None:
        """What the URL says about the request: whether it streams (and the model)."""
        route = self.route("POST", urlsplit(url).path)
        if route is not None:
            request.stream = route["method"] == "streamGenerateContent"

    def response_decoder(self, content_type: str) -> StreamDecoder | BodyDecoder:
        if is_event_stream(content_type):
            return StreamDecoder(self.wrapped)
        return BodyDecoder(self.wrapped)


class GeminiGenerate(_Gemini):
    name = "gemini.generate"
    routes = {_MODEL + _TURN: "model", _MODEL + _COUNT: "side"}

    def from_url(self, request: Request, url: str) -> None:
        super().from_url(request, url)
        route = self.route("POST", urlsplit(url).path)
        if route is not None and request.model is None:
            request.model = route["model"]


class CodeAssist(_Gemini):
    name = "gemini.code_assist"
    wrapped = True
    grows = None  # `contents` is inside the envelope's `request`
    routes = {_CODE_ASSIST + _TURN: "model", _CODE_ASSIST + _COUNT: "side"}

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
