"""The Gemini dialects: requests, the stream fold under every chunking, and the official SDK.

Streams come from tests/data/sse/gemini/. Each is decoded whole, byte by byte and under random
splits, and must fold to the same Response. Against google-genai: the SDK parses the same bytes
(through an in-process transport) into one typed chunk per event; those chunks, serialized back
to wire JSON and given to our JSON-array decoder, must fold to the Response our SSE decoder
made of the raw bytes. So the SDK, not our code, decides where each event starts and ends, how
a raw error JSON is framed and what each field means; the comparison then holds content,
signatures, tool calls, finish reason, usage, ids and errors equal, chunk for chunk.
"""

from __future__ import annotations

import base64
import hashlib
import time
from types import SimpleNamespace

import httpx2
import orjson
import pytest
from conftest import (
    SSE_DATA,
    chunkings,
    decode_chunks,
    record_round_trip,
    sse_cases,
    sse_http_client,
)
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from support import Arrivals

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.decoders.gemini import CODE_ASSIST, GENERATE
from forge_record.errors import DecodeError
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.records import (
    COMPLETE,
    Media,
    Message,
    Other,
    Reasoning,
    Request,
    Text,
    Tool,
    ToolCall,
    ToolResult,
)
from forge_record.trust import ca_files, confdir

DATA = SSE_DATA / "gemini"
CASES = sse_cases("gemini")
PLAIN = [n for n in CASES if n != "code_assist"]  # the SDK speaks the Gemini API only
SIG = "BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2"


MAX_CUTS = 40  # random chunkings cut a stream in at most this many places


def decode(chunks: list[bytes], dialect=GENERATE, content_type="text/event-stream"):
    return decode_chunks(dialect, content_type, chunks)


def stream(name: str, dialect=None):
    return decode([CASES[name]], dialect or (CODE_ASSIST if name == "code_assist" else GENERATE))


# --- mixed line endings (the contract itself: test_decoder_contract.py) ---------------------


def _event(text: str, stop: str | None = None) -> bytes:
    candidate = {"content": {"role": "model", "parts": [{"text": text}]}}
    if stop:
        candidate["finishReason"] = stop
    return b"data: " + orjson.dumps({"candidates": [candidate]})


MIXED = _event("A") + b"\r\r" + _event("B") + b"\n\r\n" + _event("C", "STOP") + b"\r\n\n"


def test_mixed_line_endings_decode_alike_in_any_chunking():
    # Cut in three around every line ending (where a framer keeps state between chunks): a
    # \r that ends a line inside a chunk must not swallow the next chunk's leading \n.
    whole = decode([MIXED])
    assert whole[0].content == [Text(text="ABC")] and whole[0].stop_reason == "STOP"
    ends = [i for i, b in enumerate(MIXED) if b in b"\r\n"]
    cuts = sorted({c for i in ends for c in (i, i + 1) if 0 < c < len(MIXED)})
    for i in range(1, len(MIXED)):
        for j in cuts:
            if i < j:
                assert decode([MIXED[:i], MIXED[i:j], MIXED[j:]]) == whole, (i, j)


@pytest.mark.parametrize("name", CASES)
def test_response_survives_the_record_round_trip(name):
    response, _ = stream(name)
    assert record_round_trip(response) == response


# --- the official SDK reads the same bytes the same way --------------------------------------


def sdk_chunks(body: bytes) -> tuple[list[dict], dict | None, list[str]]:
    """What google-genai makes of a stream: its chunks as wire JSON, the API error it raised,
    and the event it could not parse (a stream cut inside one)."""

    client = genai.Client(api_key="dummy-gemini-key",
                          http_options=genai_types.HttpOptions(httpx_client=sse_http_client(body)))
    chunks, error, undecodable = [], None, []
    try:
        for chunk in client.models.generate_content_stream(model="gemini-2.5-flash",
                                                            contents="hi"):
            wire = chunk.model_dump(mode="json", by_alias=True, exclude_none=True)
            wire.pop("sdkHttpResponse", None)  # the SDK's own addition, not on the wire
            chunks.append(as_on_the_wire(wire))
    except genai_errors.APIError as e:
        error = e.details["error"]
    except genai_errors.UnknownApiResponseError as e:
        undecodable.append(str(e).partition("Raw response: ")[2])
    return chunks, error, undecodable


def as_on_the_wire(chunk: dict) -> dict:
    """Undo two spellings the SDK's types change without changing the value: bytes fields
    come back as URL-safe base64 (the wire has the standard alphabet), and partialArgs'
    numberValue is a double (30 comes back as 30.0)."""
    for candidate in chunk.get("candidates") or ():
        for part in (candidate.get("content") or {}).get("parts") or ():
            if "thoughtSignature" in part:
                part["thoughtSignature"] = rewrite(part["thoughtSignature"])
            if "inlineData" in part:
                part["inlineData"]["data"] = rewrite(part["inlineData"]["data"])
            for piece in (part.get("functionCall") or {}).get("partialArgs") or ():
                if float(piece.get("numberValue", 0.5)).is_integer():
                    piece["numberValue"] = int(piece["numberValue"])
    return chunk


def rewrite(urlsafe: str) -> str:
    return base64.b64encode(base64.urlsafe_b64decode(urlsafe)).decode()


@pytest.mark.parametrize("name", PLAIN)
def test_stream_equals_what_the_sdk_parsed(name):
    streamed, complete = stream(name)
    chunks, error, undecodable = sdk_chunks(CASES[name])
    from_sdk, _ = decode([orjson.dumps(chunks)], content_type="application/json")
    from_sdk.error = error
    if undecodable:  # the SDK raised there; we keep it aside and carry on
        from_sdk.extras["undecoded_events"] = undecodable
    assert streamed == from_sdk
    assert complete == (streamed.stop_reason is not None and name != "truncated")


def test_sdk_comparison_can_fail():
    """A decoder that lost a chunk would not pass the comparison above."""
    chunks, _, _ = sdk_chunks(CASES["text_stream"])
    from_sdk, _ = decode([orjson.dumps(chunks[1:])], content_type="application/json")
    assert stream("text_stream")[0] != from_sdk


# --- what each stream means ------------------------------------------------------------------


def test_text_stream():
    response, complete = stream("text_stream")
    assert complete
    assert response.content == [Text(text="Sure — the test fails because `parse_config` returns "
                                           "None when the file is missing. Add a default.")]
    assert (response.id, response.model) == ("Yw0raN3xA8Hb1MkP1-nQwAk", "gemini-2.5-flash")
    assert response.stop_reason == "STOP"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 23)


def test_thoughts_signature_and_usage():
    response, _ = stream("thinking_then_text")
    reasoning, text = response.content
    assert reasoning.text.startswith("**Calculating the product**\n\nThe user wants 27 * 453. 27")
    assert reasoning.signature == SIG
    assert text == Text(text="27 × 453 = **12,231**")
    usage = response.usage
    assert usage.input_tokens == 1204 - 1024 and usage.cache_read_tokens == 1024
    assert usage.output_tokens == 11 + 171 and usage.reasoning_tokens == 171
    assert usage.raw["totalTokenCount"] == 1386


def test_function_call_gets_a_stable_id_and_its_signature():
    response, _ = stream("function_call")
    text, signed, call = response.content
    assert text == Text(text="I'll run the test suite to see what fails.")
    assert signed == Reasoning(signature=SIG)
    assert call == ToolCall(id="run_shell_command", name="run_shell_command",
                            arguments={"command": "python -m pytest tests/ -x -q",
                                       "description": "Run the test suite"},
                            arguments_raw=orjson.dumps(call.arguments).decode())
    assert response.stop_reason == "STOP"


def test_parallel_calls_of_one_tool_get_distinct_ids():
    response, _ = stream("parallel_function_calls")
    calls = [b for b in response.content if isinstance(b, ToolCall)]
    assert [c.id for c in calls] == ["read_file", "read_file#2", "glob"]
    assert calls[1].arguments == {"absolute_path": "/home/dev/app/tests/test_config.py"}


def test_function_call_id_is_kept():
    response, _ = stream("function_call_with_id")
    call = response.content[-1]
    assert call.id == "call_6b1e0c2f9d" and call.arguments["content"].endswith('"None" handling\n')


def test_partial_args_are_assembled():
    response, complete = stream("partial_args")
    [call] = response.content
    assert call.arguments == {"command": "grep -rn 'TODO' src/", "timeout": 30,
                              "flags": ["-i"], "background": False}
    assert orjson.loads(call.arguments_raw) == call.arguments and complete


def test_raw_json_error_mid_stream():
    response, complete = stream("error_raw_json")
    assert response.content == [Text(text="Let me look at the failing test first")]
    assert response.error == {"code": 503, "status": "UNAVAILABLE",
                              "message": "The model is overloaded. Please try again later."}
    assert not complete


def test_code_assist_is_unwrapped():
    response, complete = stream("code_assist")
    text, signed, call = response.content
    assert text == Text(text="Reading the file ") and signed.signature == SIG
    assert call.name == "read_file" and call.arguments == {"absolute_path": "/w/README.md"}
    assert response.id == "9c1f4be27a3d60e5"  # traceId stands in for responseId
    assert response.model == "gemini-2.5-pro" and complete
    assert response.extras["code_assist"]["consumedCredits"][0]["creditType"] == "GOOGLE_ONE_AI"


def test_code_assist_equals_the_same_stream_unwrapped():
    unwrapped = b"".join(
        b"data: " + orjson.dumps(orjson.loads(line[6:])["response"]) + b"\n\n"
        for line in CASES["code_assist"].splitlines() if line.startswith(b"data: "))
    plain, _ = decode([unwrapped])
    wrapped, _ = stream("code_assist")
    assert wrapped.content == plain.content and wrapped.usage == plain.usage
    assert wrapped.stop_reason == plain.stop_reason


def test_non_ascii_and_unicode_line_separator_survive():
    response, _ = stream("non_ascii")
    assert response.content == [Text(text="Naïve café — 日本語のテキスト 🎉\u2028next line «fin»")]


def test_safety_block():
    response, complete = stream("safety_blocked")
    assert response.content == [] and response.stop_reason == "SAFETY" and complete
    assert response.extras["candidate"]["safetyRatings"][0]["blocked"] is True
    assert response.usage.output_tokens is None and response.usage.input_tokens == 31


def test_truncated_stream_keeps_what_arrived():
    response, complete = stream("truncated")
    assert response.content == [Text(text="Step one: open the configuration file and")]
    assert not complete and response.extras["undecoded_events"]


def test_inline_image_is_named_not_copied():
    response, _ = stream("image_output")
    text, image = response.content
    assert isinstance(image, Media) and image.type == "image"
    data = orjson.loads(CASES["image_output"].split(b"data: ")[2])
    png = base64.b64decode(data["candidates"][0]["content"]["parts"][0]["inlineData"]["data"])
    assert png.startswith(b"\x89PNG")
    assert (image.media_type, image.size) == ("image/png", len(png))
    assert image.sha256 == hashlib.sha256(png).hexdigest()


def test_json_array_form():
    body = (DATA / "array_stream.json").read_bytes()
    whole, complete = decode([body], content_type="application/json")
    assert whole.content == [Text(text="Hello there, how can I help?")] and complete
    for label, chunks in chunkings(body, MAX_CUTS):
        assert decode(chunks, content_type="application/json") == (whole, complete), label
    cut, cut_complete = decode([body[:-40]], content_type="application/json")
    assert cut.content == [Text(text="Hello")] and not cut_complete


def test_single_json_body_and_error_body():
    body = orjson.dumps({"candidates": [{"content": {"parts": [{"text": "hi"}]},
                                         "finishReason": "MAX_TOKENS"}]})
    response, complete = decode([body], content_type="application/json")
    assert response.content == [Text(text="hi")] and response.stop_reason == "MAX_TOKENS"
    error = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}
    response, _ = decode([orjson.dumps(error)], content_type="application/json; charset=UTF-8")
    assert response.error["status"] == "INVALID_ARGUMENT"
    with pytest.raises(DecodeError):
        decode([b"<html>bad gateway</html>"], content_type="application/json")


# --- requests --------------------------------------------------------------------------------

CLI_REQUEST = {
    "contents": [
        {"role": "user", "parts": [{"text": "This is the Gemini CLI. Context: linux."}]},
        {"role": "user", "parts": [{"text": "run the tests"},
                                   {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "run_shell_command", "args": {"command": "pytest"}},
             "thoughtSignature": SIG},
            {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "run_shell_command", "response": {"output": "1 passed"}}},
            {"functionResponse": {"name": "run_shell_command",
                                  "response": {"error": "ls: cannot access"}}}]},
    ],
    "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent."}]},
    "tools": [{"functionDeclarations": [
        {"name": "run_shell_command", "description": "Runs a shell command",
         "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}}},
        {"name": "glob", "parameters": {"type": "OBJECT"}}]}, {"googleSearch": {}}],
    "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
}


def test_request_is_normalized():
    request = GENERATE.parse_request(orjson.dumps(CLI_REQUEST))
    assert request.system == [Text(text="You are an interactive CLI agent.")]
    assert [t.name for t in request.tools] == ["run_shell_command", "glob", "googleSearch"]
    assert request.tools[0] == Tool(name="run_shell_command", description="Runs a shell command",
                                    parameters=CLI_REQUEST["tools"][0]["functionDeclarations"][0]
                                    ["parametersJsonSchema"])
    assert request.tools[2].kind == "googleSearch"
    assert [m.role for m in request.messages] == ["user", "user", "assistant", "user"]
    assert isinstance(request.messages[1].content[1], Media)
    signed, first, second = request.messages[2].content
    assert signed == Reasoning(signature=SIG) and (first.id, second.id) == (
        "run_shell_command", "run_shell_command#2")
    ok, failed = request.messages[3].content
    assert ok == ToolResult(tool_call_id=first.id, name="run_shell_command",
                            content=[Text(text='{"output":"1 passed"}')])
    assert failed.tool_call_id == second.id and failed.is_error
    assert request.parameters == {"generationConfig": CLI_REQUEST["generationConfig"]}


def test_model_and_stream_come_from_the_url():
    request = GENERATE.parse_request(orjson.dumps(CLI_REQUEST))
    assert request.model is None
    GENERATE.from_url(request, "https://generativelanguage.googleapis.com/v1beta/models/"
                               "gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert (request.model, request.stream) == ("gemini-2.5-flash", True)


def test_code_assist_request_is_unwrapped():
    envelope = {"model": "gemini-2.5-pro", "project": "proj-123", "user_prompt_id": "u-1",
                "request": CLI_REQUEST}
    request = CODE_ASSIST.parse_request(orjson.dumps(envelope))
    plain = GENERATE.parse_request(orjson.dumps(CLI_REQUEST))
    assert request.model == "gemini-2.5-pro"
    assert request.messages == plain.messages and request.tools == plain.tools
    assert request.parameters["code_assist"] == {"project": "proj-123", "user_prompt_id": "u-1"}
    CODE_ASSIST.from_url(request, "https://cloudcode-pa.googleapis.com/v1internal:generateContent")
    assert request.stream is False and request.model == "gemini-2.5-pro"


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"contents": 3}'])
def test_bad_requests_raise_decode_error(body):
    with pytest.raises(DecodeError):
        GENERATE.parse_request(body)
    with pytest.raises(DecodeError):
        CODE_ASSIST.parse_request(b'{"model": "m"}')


def test_unknown_parts_are_kept_verbatim():
    part = {"executableCode": {"language": "PYTHON", "code": "print(1)"}}
    body = orjson.dumps({"contents": [{"role": "user", "parts": [part]}]})
    request = GENERATE.parse_request(body)
    assert request.messages == [Message(role="user", content=[Other(data=part)])]
    assert isinstance(request, Request)


# --- through the live proxy ------------------------------------------------------------------

GEMINI_HOST = "generativelanguage.googleapis.com"
CODE_ASSIST_HOST = "cloudcode-pa.googleapis.com"
STREAM_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
TOOL_REQUEST = {
    "contents": [{"role": "user", "parts": [{"text": f"please run {TOOL_MARKER}"}]}],
    "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parametersJsonSchema": {
        "type": "object", "properties": {"command": {"type": "string"}}}}]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
}


@pytest.fixture(scope="module")
def ca_home(tmp_path_factory):
    return tmp_path_factory.mktemp("ca")  # one CA for the module: a key pair costs a second


@pytest.fixture
def mock():
    with MockUpstream() as m:
        yield m


@pytest.fixture(params=["reverse", "forward"])
def proxied(request, mock, ca_home):
    """(httpx2 client, base URL, exchanges) for a recording proxy in front of the mock."""
    exchanges = Arrivals()
    upstreams = {GEMINI_HOST: mock.url, CODE_ASSIST_HOST: mock.url}
    conf = confdir(ca_home)
    if request.param == "reverse":
        addon = Recorder(exchanges.append, upstreams=upstreams, record_any_host=True)
        proxy = InProcessProxy(addon, mode=f"reverse:https://{GEMINI_HOST}", confdir=conf)
        port = proxy.start()
        http, base = httpx2.Client(), f"http://127.0.0.1:{port}"
    else:
        addon = Recorder(exchanges.append, model_hosts=[GEMINI_HOST, CODE_ASSIST_HOST],
                         upstreams=upstreams)
        proxy = InProcessProxy(addon, mode="regular", confdir=conf)
        port = proxy.start()
        http = httpx2.Client(proxy=f"http://127.0.0.1:{port}", verify=ca_files(conf).cert)
        base = f"https://{GEMINI_HOST}"
    try:
        yield http, base, exchanges
    finally:
        http.close()
        proxy.stop()


def raw_post(http: httpx2.Client, url: str, body: dict) -> bytes:
    with http.stream("POST", url, json=body, headers={"x-goog-api-key": "dummy-gemini-key"}) as r:
        return b"".join(r.iter_raw())


@pytest.mark.parametrize("query", ["?alt=sse", ""], ids=["sse", "json-array"])
def test_client_gets_the_bytes_of_a_direct_call(proxied, mock, query):
    http, base, exchanges = proxied
    direct = raw_post(httpx2.Client(), mock.url + STREAM_PATH + query, TOOL_REQUEST)
    assert raw_post(http, base + STREAM_PATH + query, TOOL_REQUEST) == direct
    [ex] = exchanges.finalized(1)
    assert ex.raw_response == direct and ex.status == COMPLETE, ex.flags
    assert "x-goog-api-key" not in ex.request_headers


def test_sdk_stream_through_the_proxy_is_recorded_as_the_sdk_saw_it(proxied):
    http, base, exchanges = proxied
    client = genai.Client(api_key="dummy-gemini-key", http_options=genai_types.HttpOptions(
        base_url=base, httpx_client=http))
    config = genai_types.GenerateContentConfig(
        tools=[genai_types.Tool(function_declarations=[genai_types.FunctionDeclaration(
            name="run_shell_command", parameters_json_schema={"type": "object"})])],
        thinking_config=genai_types.ThinkingConfig(include_thoughts=True),
        automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True))
    seen = [as_on_the_wire(c.model_dump(mode="json", by_alias=True, exclude_none=True))
            for c in client.models.generate_content_stream(
                model="gemini-2.5-flash", contents=f"please run {TOOL_MARKER}", config=config)]
    for chunk in seen:
        chunk.pop("sdkHttpResponse", None)
    [ex] = exchanges.finalized(1)
    assert ex.dialect == "gemini.generate" and ex.status == COMPLETE, ex.flags
    assert ex.url.startswith(f"https://{GEMINI_HOST}/v1")  # the SDK picks the API version
    assert ex.url.endswith("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    from_sdk, _ = decode([orjson.dumps(seen)], content_type="application/json")
    assert ex.response == from_sdk
    reasoning, text, call = ex.response.content  # the signature on the text seals the thought
    assert reasoning.text and reasoning.signature and call.name == "run_shell_command"
    assert text == Text(text="I'll run that command.")
    assert ex.request.stream and ex.request.model == "gemini-2.5-flash"  # from the URL
    assert ex.request.tools[0].name == "run_shell_command"
    assert ex.request.messages[0].content == [Text(text=f"please run {TOOL_MARKER}")]


def test_code_assist_through_the_proxy(proxied):
    http, base, exchanges = proxied
    envelope = {"model": "gemini-2.5-pro", "project": "proj-1", "request": TOOL_REQUEST}
    # Reverse mode fronts one host: the path alone picks the dialect.
    url = f"https://{CODE_ASSIST_HOST}" if base.startswith("https://") else base
    raw = raw_post(http, url + "/v1internal:streamGenerateContent?alt=sse", envelope)
    assert b'"traceId"' in raw
    [ex] = exchanges.finalized(1)
    assert ex.dialect == "gemini.code_assist" and ex.status == COMPLETE, ex.flags
    assert ex.request.model == "gemini-2.5-pro" and ex.request.stream
    assert ex.request.parameters["code_assist"] == {"project": "proj-1"}
    call = ex.response.content[-1]
    assert call.name == "run_shell_command" and TOOL_MARKER in call.arguments["command"]
    assert ex.response.id == orjson.loads(raw.split(b"data: ")[1])["traceId"]


def test_plain_http_to_an_unknown_host_is_recorded_when_it_speaks_gemini(mock, ca_home):
    """A local server (vLLM, Ollama, a LAN gateway) reached through HTTP_PROXY in the clear:
    not a known model host, so the body must speak the dialect too."""
    exchanges = Arrivals()
    proxy = InProcessProxy(Recorder(exchanges.append, model_hosts=[GEMINI_HOST]),
                           mode="regular", confdir=confdir(ca_home))
    http = httpx2.Client(proxy=f"http://127.0.0.1:{proxy.start()}")
    try:
        raw_post(http, mock.url + STREAM_PATH + "?alt=sse", TOOL_REQUEST)
        # The mock hangs up on a body that is not JSON; through the proxy the client sees
        # that hang-up too, as it would directly (not a 502 page).
        with pytest.raises(httpx2.RemoteProtocolError):
            http.post(mock.url + STREAM_PATH, content=b"not a model call")
        [ex] = exchanges.finalized(1)
        time.sleep(0.2)
    finally:
        http.close()
        proxy.stop()
    assert len(exchanges) == 1 and ex.url.startswith(mock.url) and ex.status == COMPLETE


def test_forward_mode_intercepts_model_hosts_only():
    addon = Recorder(lambda e: None, model_hosts=[GEMINI_HOST], upstreams={"local.test": "http://x"})
    for sni, ignored in [(GEMINI_HOST, False), ("local.test", False), ("github.com", True),
                         ("play.googleapis.com", True)]:
        data = SimpleNamespace(client_hello=SimpleNamespace(sni=sni), ignore_connection=False)
        addon.tls_clienthello(data)
        assert data.ignore_connection is ignored, sni


def test_snake_case_fields_read_like_camel_case():
    """Protobuf JSON endpoints read both spellings, and google-genai sends snake_case."""
    snake = {"system_instruction": {"parts": [{"text": "sys"}]},
             "contents": [{"role": "model", "parts": [
                 {"function_call": {"name": "glob", "args": {"file_path": "x"}},
                  "thought_signature": SIG},
                 {"inline_data": {"mime_type": "image/png", "data": "iVBORw0K"}}]}],
             "tools": [{"function_declarations": [{"name": "glob",
                                                   "parameters_json_schema": {"type": "object"}}]}],
             "generation_config": {"thinking_config": {"include_thoughts": True}}}
    request = GENERATE.parse_request(orjson.dumps(snake))
    assert request.system == [Text(text="sys")]
    signed, call, image = request.messages[0].content
    assert signed.signature == SIG and call.arguments == {"file_path": "x"}  # args untouched
    assert image.media_type == "image/png"
    assert request.tools == [Tool(name="glob", parameters={"type": "object"})]
    assert request.parameters == {"generation_config": snake["generation_config"]}


def test_request_text_parts_keep_their_boundaries():
    """Gemini CLI sends its session context and the prompt as two parts of one message."""
    content = {"role": "user", "parts": [{"text": "<session_context>…</session_context>"},
                                         {"text": "Run the tests"}]}
    request = GENERATE.parse_request(orjson.dumps({"contents": [content]}))
    assert request.messages[0].content == [Text(text="<session_context>…</session_context>"),
                                           Text(text="Run the tests")]


# --- the mock in JSON mode, read by the official SDK ----------------------------------------


@pytest.mark.parametrize("schema_as", ["response_json_schema", "response_schema"])
def test_the_mock_answers_json_mode_with_json_its_schema_accepts(schema_as):
    """Gemini CLI's loop check (after 30 turns) asks for JSON; the real API answers JSON, so
    the mock must too (it answered "OK from the mock.", and the CLI logged a parse error)."""
    import pydantic

    class Check(pydantic.BaseModel):
        analysis: str
        confidence: float
        speaker: str = pydantic.Field(json_schema_extra={"enum": ["user", "model"]})
        tags: list[str]
        done: bool

    schema = Check.model_json_schema() if schema_as == "response_json_schema" else Check
    with MockUpstream() as mock:
        client = genai.Client(api_key="AIza-dummy", http_options=genai_types.HttpOptions(
            base_url=mock.url, retry_options=genai_types.HttpRetryOptions(attempts=1)))
        response = client.models.generate_content(
            model="gemini-2.5-flash", contents="Is this conversation looping?",
            config=genai_types.GenerateContentConfig(response_mime_type="application/json",
                                                     **{schema_as: schema}))
        plain = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert Check.model_validate_json(response.text) == Check(
        analysis="", confidence=0, speaker="user", tags=[], done=False)
    assert plain.text == "OK from the mock."
