"""The mock's Gemini API and Code Assist endpoints, for google-genai and Gemini CLI.

Routes: `…/models/{model}:streamGenerateContent` (SSE with `?alt=sse`, else a JSON array sent
in pieces), `…/models/{model}:generateContent` (one JSON object), `…:countTokens`, and the same
three under Code Assist's `/v1internal:{method}`, whose request `{model, project, request}` is
unwrapped and whose every chunk is wrapped as `{response, traceId}`.

What it answers comes from a script, a function from the (unwrapped) request to a candidate
(`{"parts": [...], "finishReason": ...}`), `options["gemini_script"]` (default `agent_script`):
a `run_shell_command` call when the newest user text carries TOOL_MARKER and that tool is
offered, the tool's output once its functionResponse comes back, a short text otherwise (JSON
when the request asks for it: short_text). With `thinkingConfig.includeThoughts` it thinks
first (a thought part, and a thoughtSignature on the next part). Streams are cut the way the
API cuts them: text a few words per chunk, a function call whole, usage on every chunk, the
finishReason on the last. Everything derives from the request body, so the same request always
gets the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from forge_record.mock import TOOL_MARKER, MockUpstream, Received, Reply

Script = Callable[[dict], dict]
SHELL_TOOL = "run_shell_command"


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _get(obj: dict, camel: str, snake: str) -> Any:
    """A field in either spelling: the API reads both, and google-genai sends snake_case."""
    return obj.get(camel, obj.get(snake))


def _declared(request: dict) -> set[str]:
    return {f.get("name") for t in request.get("tools") or () for f in
            _get(t, "functionDeclarations", "function_declarations") or ()}


def _thinks(request: dict) -> bool:
    config = _get(request, "generationConfig", "generation_config") or {}
    thinking = _get(config, "thinkingConfig", "thinking_config") or {}
    return bool(_get(thinking, "includeThoughts", "include_thoughts"))


def agent_script(request: dict) -> dict:
    """Ask for run_shell_command when the prompt carries TOOL_MARKER; once its result comes
    back, answer with the output. Anything else (a title, a check) gets a short text."""
    users = [c for c in request.get("contents") or () if c.get("role", "user") == "user"]
    parts = users[-1].get("parts") or [] if users else []
    results = [p["functionResponse"] for p in parts if "functionResponse" in p]
    if results:
        output = results[0].get("response") or {}
        shown = output.get("output", output) if isinstance(output, dict) else output
        text = shown if isinstance(shown, str) else orjson.dumps(shown).decode()
        return {"parts": [{"text": f"The command printed: {text}"}], "finishReason": "STOP"}
    prompt = " ".join(p.get("text", "") for p in parts)
    if TOOL_MARKER in prompt and SHELL_TOOL in _declared(request):
        # The output, f"{TOOL_MARKER}-output-42", is not in the command text, so seeing it
        # proves the command ran. Gemini CLI refuses $(...) and $((...)) substitutions.
        call = {"name": SHELL_TOOL,
                "args": {"command": f"printf '%s-output-%d\\n' {TOOL_MARKER} 42"}}
        return {"parts": [{"text": "I'll run that command."}, {"functionCall": call}],
                "finishReason": "STOP"}
    return {"parts": [{"text": short_text(request)}], "finishReason": "STOP"}


def short_text(request: dict) -> str:
    """"OK from the mock.", or, when the request asks for JSON (`responseMimeType`), the
    least JSON its schema allows, as the API answers in JSON mode: Gemini CLI's loop check
    (after 30 turns) and next-speaker check parse the answer, and logged an error on text."""
    config = _get(request, "generationConfig", "generation_config") or {}
    if _get(config, "responseMimeType", "response_mime_type") != "application/json":
        return "OK from the mock."
    schema = (_get(config, "responseJsonSchema", "response_json_schema")
              or _get(config, "responseSchema", "response_schema") or {})
    return orjson.dumps(_least(schema)).decode()


def _least(schema: Any) -> Any:
    """The smallest value a JSON schema (or the API's OpenAPI-style `responseSchema`, types
    in capitals) accepts, required properties only: the first of an enum, "", 0, false, [],
    {}."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "")).lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _least(properties.get(name)) for name in schema.get("required") or ()}
    return {"string": "", "number": 0, "integer": 0, "boolean": False, "array": []}.get(kind)


def _with_thinking(candidate: dict, body: bytes) -> dict:
    signature = base64.b64encode(bytes.fromhex(_digest(b"sig" + body))).decode()
    first, *rest = candidate["parts"]
    thought = {"text": "The user wants me to act. I will answer.", "thought": True}
    return dict(candidate, parts=[thought, dict(first, thoughtSignature=signature), *rest])


def _usage(request_body: bytes, text_tokens: int, thinks: bool) -> dict:
    prompt = 40 + len(request_body) // 100
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": text_tokens,
             "totalTokenCount": prompt + text_tokens + (12 if thinks else 0),
             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if thinks:
        usage["thoughtsTokenCount"] = 12
    return usage


def _chunk(parts: list[dict], usage: dict, ids: dict, finish: str | None = None) -> dict:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if finish:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    return {"candidates": [candidate], "usageMetadata": usage, **ids}


def _pieces(part: dict) -> list[dict]:
    """A text part cut into a few words per chunk; other parts arrive whole."""
    text = part.get("text")
    if not text:
        return [part]
    words = text.split(" ")
    cuts = [" ".join(words[i:i + 3]) + (" " if i + 3 < len(words) else "")
            for i in range(0, len(words), 3)]
    kind = {"thought": True} if part.get("thought") else {}
    first = {k: v for k, v in part.items() if k not in ("text", "thought")}  # a signature
    return [{"text": cut, **kind, **(first if i == 0 else {})} for i, cut in enumerate(cuts)]


def chunks(request: dict, body: bytes, model: str, script: Script) -> list[dict]:
    candidate = script(request)
    thinks = _thinks(request)
    if thinks:
        candidate = _with_thinking(candidate, body)
    ids = {"modelVersion": model, "responseId": _digest(body)[:22]}
    pieces = [p for part in candidate["parts"] for p in _pieces(part)]
    out = []
    for n, piece in enumerate(pieces, 1):
        usage = _usage(body, 2 * n, thinks)
        last = n == len(pieces)
        out.append(_chunk([piece], usage, ids, candidate["finishReason"] if last else None))
    return out


def whole(request: dict, body: bytes, model: str, script: Script) -> dict:
    """The generateContent answer: the same chunks, their parts in one candidate."""
    parts = chunks(request, body, model, script)
    merged = [p for c in parts for p in c["candidates"][0]["content"]["parts"]]
    last = parts[-1]
    return _chunk(merged, last["usageMetadata"], {"modelVersion": last["modelVersion"],
                                                   "responseId": last["responseId"]},
                  last["candidates"][0]["finishReason"])


# --- framing -----------------------------------------------------------------------------


def sse(items: list[dict]) -> Iterator[bytes]:
    for item in items:
        yield b"data: " + orjson.dumps(item) + b"\r\n\r\n"


def json_array(items: list[dict]) -> Iterator[bytes]:
    """The array form as the API streams it: pretty-printed elements, `,\\r\\n` between."""
    for n, item in enumerate(items):
        yield (b"[" if n == 0 else b",\r\n") + orjson.dumps(item, option=orjson.OPT_INDENT_2)
    yield b"]"


# --- responders --------------------------------------------------------------------------


def _model_of(path: str) -> str:
    return path.split("?")[0].rpartition("/models/")[2].partition(":")[0]


def _answer(mock: MockUpstream, received: Received, request: dict, model: str,
            wrap: Callable[[dict], dict]) -> Reply:
    script: Script = mock.options.get("gemini_script", agent_script)
    method = received.path.split("?")[0].rpartition(":")[2]
    if method == "countTokens":
        return Reply.json({"totalTokens": 40 + len(received.body) // 100})
    if method == "generateContent":
        return Reply.json(wrap(whole(request, received.body, model, script)))
    items = [wrap(c) for c in chunks(request, received.body, model, script)]
    if "alt=sse" in received.path:
        return Reply.stream(sse(items))
    return Reply(body=json_array(items))


def _gemini(mock: MockUpstream, received: Received) -> Reply:
    request = received.json() if received.body else {}
    return _answer(mock, received, request, _model_of(received.path), lambda c: c)


def _code_assist(mock: MockUpstream, received: Received) -> Reply:
    envelope = received.json() if received.body else {}
    trace = _digest(received.body)[:16]
    # Code Assist has no responseId of its own: Gemini CLI takes the traceId for one.
    return _answer(mock, received, envelope.get("request") or {}, envelope.get("model", ""),
                   lambda c: {"response": {k: v for k, v in c.items() if k != "responseId"},
                              "traceId": trace})


def _is_model_method(path: str) -> bool:
    return "/models/" in path and path.rpartition(":")[2] in (
        "streamGenerateContent", "generateContent", "countTokens")


def _is_code_assist(path: str) -> bool:
    return path.rpartition("/")[2] in (
        "v1internal:streamGenerateContent", "v1internal:generateContent", "v1internal:countTokens")


ROUTES = [
    ("POST", _is_model_method, _gemini),
    ("POST", _is_code_assist, _code_assist),
]
