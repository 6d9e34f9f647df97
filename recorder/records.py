"""The normalized turn record, version 1 (docs/records.md describes it for users).

These are pure values: decoders build them, the store serializes them, exporters read them.
Identity that belongs to storage (row ids, content hashes of whole bodies) lives in
`forge_record.store`, not here. Every record turns into plain JSON-ready dicts with
`to_dict()`; `from_dict()` is its inverse, so a stored record reads back equal.

A content block is one of the `Block` kinds below, told apart by `type`:
text, reasoning, tool_call, tool_result, image, document, other.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

RECORD_VERSION = 1

# Exchange.status values
COMPLETE = "complete"  # the response ended as its protocol says it should
# the stream stopped early (client abort, upstream reset, no terminal event)
INCOMPLETE = "incomplete"
ERROR = "error"  # an error status or an error event from the model API


@dataclass(kw_only=True, slots=True)
class Text:
    type: ClassVar[str] = "text"
    text: str
    citations: list[Any] | None = None


@dataclass(kw_only=True, slots=True)
class Reasoning:
    """Model thinking. `signature` proves it to the API; `encrypted` holds opaque content
    (Anthropic redacted_thinking data, OpenAI encrypted_content)."""

    type: ClassVar[str] = "reasoning"
    text: str = ""
    signature: str | None = None
    encrypted: str | None = None


@dataclass(kw_only=True, slots=True)
class ToolCall:
    """A call the model makes. `arguments` is the parsed JSON (None when `arguments_raw`
    did not parse, in which case `parse_error` is set). `server` marks tools the API runs
    itself (Anthropic server_tool_use)."""

    type: ClassVar[str] = "tool_call"
    id: str
    name: str
    arguments: Any = None
    arguments_raw: str = ""
    parse_error: bool = False
    server: bool = False


@dataclass(kw_only=True, slots=True)
class ToolResult:
    """What a tool returned. `content` is a list of blocks (text, image, ...)."""

    type: ClassVar[str] = "tool_result"
    tool_call_id: str
    content: list[Block] = field(default_factory=list)
    is_error: bool = False
    name: str | None = None  # the provider's block type for server tool results


@dataclass(kw_only=True, slots=True)
class Media:
    """An image or document. The bytes are not repeated here: `sha256` names them and the raw
    request body (kept compressed) still holds them."""

    type: str  # "image" or "document"
    media_type: str | None = None
    sha256: str | None = None
    size: int | None = None
    url: str | None = None


@dataclass(kw_only=True, slots=True)
class Other:
    """Anything the record has no kind for, kept verbatim."""

    type: ClassVar[str] = "other"
    data: Any = None


Block = Text | Reasoning | ToolCall | ToolResult | Media | Other


@dataclass(kw_only=True, slots=True)
class Message:
    role: str  # "user", "assistant", "system", "tool"
    content: list[Block] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class Tool:
    """A tool the model is offered. `parameters` is its JSON schema; `kind` is "function"
    for client tools, or the provider's type for built-in ones (e.g. web_search_20250305)."""

    name: str
    description: str | None = None
    parameters: Any = None
    kind: str = "function"


@dataclass(kw_only=True, slots=True)
class Usage:
    """Token counts for one API call. `input_tokens` excludes cached tokens, as Anthropic
    reports it; `cache_read_tokens` and `cache_write_tokens` are counted apart."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    raw: dict[str, Any] | None = None  # the provider's usage object, last value seen


@dataclass(kw_only=True, slots=True)
class Request:
    model: str | None = None
    system: list[Block] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    stream: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)  # every other top-level field


@dataclass(kw_only=True, slots=True)
class Tokens:
    """The engine's own tokens for one call (vLLM's `return_token_ids`, SGLang's output ids):
    the prompt exactly as the engine tokenized it and what the policy sampled, for token-level
    training. Message records cannot give these back: re-tokenizing moves BPE boundaries and
    re-serializes tool-call JSON. `logprobs[i]` is the logprob of `ids[i]`; `top_logprobs[i]`
    lists the engine's top-k as `[token, logprob]` pairs, in the engine's order (vLLM puts
    the sampled token first). A list the engine did not send is None."""

    prompt_ids: list[int] | None = None
    ids: list[int] | None = None
    logprobs: list[float | None] | None = None
    top_logprobs: list[list[list[Any]]] | None = None


@dataclass(kw_only=True, slots=True)
class Response:
    id: str | None = None
    model: str | None = None
    content: list[Block] = field(default_factory=list)
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    error: dict[str, Any] | None = None  # {"type":..., "message":...} from an error body or event
    extras: dict[str, Any] = field(default_factory=dict)  # unknown events, stop_sequence, ...
    tokens: Tokens | None = None  # from an engine that returns token ids


@dataclass(kw_only=True, slots=True)
class Exchange:
    """One model call: a request and what came back, with how it went on the wire."""

    seq: int = 0
    dialect: str  # e.g. "anthropic.messages"
    kind: str = "model"  # "model" for a model turn, "side" for count_tokens and the like
    method: str = "POST"
    url: str = ""  # as the agent addressed it; secret query values masked
    # Where the proxy sent it (an --upstream redirect, a gateway), masked alike; None in
    # records made before it was kept.
    upstream_url: str | None = None
    status: str = COMPLETE
    http_status: int | None = None
    started_at: float = 0.0  # epoch seconds
    first_byte_at: float | None = None
    ended_at: float | None = None
    request: Request | None = None
    response: Response | None = None
    request_headers: dict[str, str] = field(default_factory=dict)  # secrets removed
    response_headers: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)  # e.g. "decode_error", "raw_only"
    # Raw bodies as they were on the wire, content-decoded. The store keeps them compressed
    # and never puts them in to_dict() output.
    raw_request: bytes = b""
    raw_response: bytes = b""


@dataclass(kw_only=True, slots=True)
class Session:
    id: str
    harness: str | None = None
    harness_version: str | None = None
    argv: list[str] = field(default_factory=list)  # secrets masked
    cwd: str | None = None
    user: str | None = None
    host: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float | None = None
    exit_code: int | None = None


# --- serialization -----------------------------------------------------------------------

_BLOCK_TYPES: dict[str, type] = {
    "text": Text,
    "reasoning": Reasoning,
    "tool_call": ToolCall,
    "tool_result": ToolResult,
    "other": Other,
}


def block_to_dict(block: Block) -> dict[str, Any]:
    out: dict[str, Any] = {"type": block.type}
    for name in _field_names(type(block)):
        value = getattr(block, name)
        if name == "content" and isinstance(block, ToolResult):
            value = [block_to_dict(b) for b in value]
        if value is None or name == "type":
            continue
        if value is False and name in ("parse_error", "server", "is_error"):
            continue
        out[name] = value
    return out


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))  # fields() itself costs a µs or two a call


def block_from_dict(data: dict[str, Any]) -> Block:
    data = dict(data)
    kind = data.pop("type")
    if kind in ("image", "document"):
        return Media(type=kind, **data)
    cls = _BLOCK_TYPES.get(kind)
    if cls is None:
        return Other(data={"type": kind, **data})
    if cls is ToolResult:
        data["content"] = [block_from_dict(b) for b in data.get("content", [])]
    return cls(**data)


def _blocks(items: list[Block]) -> list[dict[str, Any]]:
    return [block_to_dict(b) for b in items]


def request_to_dict(req: Request) -> dict[str, Any]:
    return {
        "model": req.model,
        "system": _blocks(req.system),
        "tools": [asdict(t) for t in req.tools],
        "messages": [{"role": m.role, "content": _blocks(m.content)} for m in req.messages],
        "stream": req.stream,
        "parameters": req.parameters,
    }


def request_from_dict(data: dict[str, Any]) -> Request:
    return Request(
        model=data.get("model"),
        system=[block_from_dict(b) for b in data.get("system", [])],
        tools=[Tool(**t) for t in data.get("tools", [])],
        messages=[
            Message(role=m["role"], content=[block_from_dict(b) for b in m["content"]])
            for m in data.get("messages", [])
        ],
        stream=data.get("stream", False),
        parameters=data.get("parameters", {}),
    )


_BLOCKS = object()


def response_to_dict(resp: Response, content: Any = _BLOCKS) -> dict[str, Any]:
    """`content`, if given, stands for the blocks (the store puts a blob name there)."""
    out = {
        "id": resp.id,
        "model": resp.model,
        "content": _blocks(resp.content) if content is _BLOCKS else content,
        "stop_reason": resp.stop_reason,
        "usage": _usage_to_dict(resp.usage),
        "error": resp.error,
        "extras": resp.extras,
    }
    if resp.tokens is not None:  # absent, not null, for the calls of every other model
        out["tokens"] = asdict(resp.tokens)
    return out


_USAGE_FIELDS = tuple(f.name for f in fields(Usage))


def _usage_to_dict(usage: Usage) -> dict[str, Any]:
    # Not asdict(): it deep-copies `raw` and costs 20 µs an exchange on the store's path.
    # `raw` is shared, as the other JSON values of a record are (arguments, extras).
    return {name: getattr(usage, name) for name in _USAGE_FIELDS}


def response_from_dict(data: dict[str, Any]) -> Response:
    return Response(
        id=data.get("id"),
        model=data.get("model"),
        content=[block_from_dict(b) for b in data.get("content", [])],
        stop_reason=data.get("stop_reason"),
        usage=Usage(**data.get("usage", {})),
        error=data.get("error"),
        extras=data.get("extras", {}),
        tokens=Tokens(**data["tokens"]) if data.get("tokens") else None,
    )


_EXCHANGE_BODY_FIELDS = ("request", "response", "raw_request", "raw_response")


def exchange_to_dict(ex: Exchange) -> dict[str, Any]:
    """The exchange without its raw bodies (those are stored apart, compressed)."""
    out = {f.name: getattr(ex, f.name) for f in fields(ex) if f.name not in _EXCHANGE_BODY_FIELDS}
    out["request"] = request_to_dict(ex.request) if ex.request else None
    out["response"] = response_to_dict(ex.response) if ex.response else None
    return out


def exchange_from_dict(data: dict[str, Any], raw_request=b"", raw_response=b"") -> Exchange:
    data = dict(data)
    req, resp = data.pop("request", None), data.pop("response", None)
    return Exchange(
        **data,
        request=request_from_dict(req) if req else None,
        response=response_from_dict(resp) if resp else None,
        raw_request=raw_request,
        raw_response=raw_response,
    )


def session_to_dict(s: Session) -> dict[str, Any]:
    return asdict(s)


def session_from_dict(data: dict[str, Any]) -> Session:
    return Session(**data)
