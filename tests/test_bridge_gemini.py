"""The Gemini translator: requests (as Gemini CLI and google-genai send them) into Chat
Completions, and engine answers (captured from a real vLLM, and vLLM-shaped streams with tool
calls) back into Gemini chunks, under every chunking of the engine's bytes and of ours, read
by google-genai's own client from a local server that replays our bytes."""

from __future__ import annotations

import base64

import orjson
import pytest
from conftest import chunkings
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from vllm_data import body

from forge_record.bridge import TRANSLATORS, Untranslatable
from forge_record.bridge.base import ChatStream, DataSSE, JsonArray
from forge_record.bridge.gemini import GeminiTranslator
from forge_record.mock import MockUpstream, Received, Reply

MODEL = "gemini-2.5-flash"
STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
WHOLE = f"/v1beta/models/{MODEL}:generateContent"
USER = {"role": "user", "parts": [{"text": "List the files here."}]}
ASK = {"contents": [USER]}
SHELL = {"name": "run_shell_command", "description": "Run a command",
         "parametersJsonSchema": {"type": "object",
                                  "properties": {"command": {"type": "string"}}}}


def chat(request: dict, path: str = STREAM) -> dict:
    return GeminiTranslator(request, path=path, model="tiny").chat_request()


# --- the request ---------------------------------------------------------------------------


def test_the_registry_names_the_translator_by_the_decoder_s_dialect():
    assert TRANSLATORS["gemini.generate"] is GeminiTranslator


def test_the_path_says_the_model_and_whether_it_streams():
    streamed = GeminiTranslator(ASK, path=STREAM, model=None)
    whole = GeminiTranslator(ASK, path="/s/r1" + WHOLE, model="tiny")
    assert (streamed.streamed, streamed.chat_request()["model"]) == (True, MODEL)
    assert (whole.streamed, whole.chat_request()["model"]) == (False, "tiny")


def test_system_instruction_contents_and_sampling_carry_over():
    request = {
        "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}, {"text": "Be brief."}]},
        "contents": [{"role": "user", "parts": [{"text": "<session_context>"},
                                                {"text": "List the files here."}]},
                     {"role": "model", "parts": [{"text": "I think so.", "thought": True},
                                                 {"text": "Sure", "thoughtSignature": "c2ln"},
                                                 {"text": "."}]},
                     {"role": "user", "parts": [{"text": "Go on."}]}],
        "generationConfig": {"temperature": 1, "topP": 0.95, "topK": 64,
                             "maxOutputTokens": 100, "stopSequences": ["END"], "seed": 3,
                             "candidateCount": 1,
                             "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 8}},
        "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "OFF"}],
    }
    assert chat(request) == {
        "model": "tiny",
        "messages": [
            {"role": "system", "content": "You are Gemini CLI.\nBe brief."},
            {"role": "user", "content": [{"type": "text", "text": "<session_context>"},
                                         {"type": "text", "text": "List the files here."}]},
            {"role": "assistant", "content": "Sure.", "reasoning": "I think so."},
            {"role": "user", "content": "Go on."}],
        "temperature": 1, "top_p": 0.95, "top_k": 64, "max_tokens": 100, "stop": ["END"],
        "seed": 3}


def test_snake_case_fields_are_read_too():
    request = {"system_instruction": "Be brief.", "contents": [USER],
               "generation_config": {"max_output_tokens": 5},
               "tools": [{"function_declarations": [
                   {"name": "f", "parameters_json_schema": {"type": "object"}}]}]}
    out = chat(request)
    assert out["messages"][0] == {"role": "system", "content": "Be brief."}
    assert out["max_tokens"] == 5
    assert out["tools"] == [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object"}}}]


def test_calls_without_ids_get_ids_by_position_and_results_pair_by_order_and_name():
    contents = [
        USER,
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"d": "a"}}},
                                    {"functionCall": {"name": "cat", "args": {"f": "x"}}},
                                    {"functionCall": {"name": "ls", "args": {"d": "b"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "cat", "response": {"output": "X"}}},
            {"functionResponse": {"name": "ls", "response": {"output": "A"}}},
            {"functionResponse": {"name": "ls", "response": {"error": "no b"}}},
            {"text": "Now summarize."}]},
    ]
    out = chat({"contents": contents})["messages"]
    calls = out[1]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1_0", "call_1_1", "call_1_2"]
    assert calls[0]["function"] == {"name": "ls", "arguments": '{"d":"a"}'}
    assert out[1]["content"] is None
    assert out[2:] == [
        {"role": "tool", "tool_call_id": "call_1_1", "content": '{"output":"X"}'},
        {"role": "tool", "tool_call_id": "call_1_0", "content": '{"output":"A"}'},
        {"role": "tool", "tool_call_id": "call_1_2", "content": '{"error":"no b"}'},
        {"role": "user", "content": "Now summarize."}]
    # the same history in a longer thread mints the same ids: prompts stay prefixes
    longer = contents + [{"role": "model", "parts": [{"text": "Done."}]}, USER]
    assert chat({"contents": longer})["messages"][:6] == out


def test_ids_the_agent_minted_are_kept_and_pair_by_id():
    contents = [USER,
                {"role": "model", "parts": [
                    {"functionCall": {"id": "run_1", "name": "run", "args": {}},
                     "thoughtSignature": "skip_thought_signature_validator"},
                    {"functionCall": {"id": "run_2", "name": "run", "args": {}}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "run_2", "name": "run", "response": {}}},
                    {"functionResponse": {"id": "run_1", "name": "run", "response": {}}}]}]
    out = chat({"contents": contents})["messages"]
    assert [c["id"] for c in out[1]["tool_calls"]] == ["run_1", "run_2"]
    assert [m["tool_call_id"] for m in out[2:]] == ["run_2", "run_1"]


def test_inline_data_images_and_text_translate_other_media_does_not():
    text = base64.b64encode(b"hello").decode()
    parts = [{"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
             {"inline_data": {"mime_type": "text/plain", "data": text}}]
    [message] = chat({"contents": [{"role": "user", "parts": parts}]})["messages"]
    assert message["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "text", "text": "hello"}]
    for part in ({"inlineData": {"mimeType": "audio/wav", "data": "AAAA"}},
                 {"fileData": {"mimeType": "image/png", "fileUri": "gs://b/x.png"}},
                 {"executableCode": {"language": "PYTHON", "code": "1"}}):
        with pytest.raises(Untranslatable):
            chat({"contents": [{"role": "user", "parts": [part]}]})


def test_gemini_schemas_become_json_schema():
    declaration = {"name": "edit", "parameters": {
        "type": "OBJECT", "propertyOrdering": ["path", "lines"], "required": ["path"],
        "properties": {"path": {"type": "STRING", "nullable": True},
                       "lines": {"type": "ARRAY", "min_items": "1",
                                 "items": {"type": "INTEGER", "format": "int32"}},
                       "mode": {"anyOf": [{"type": "STRING", "enum": ["a", "b"]},
                                          {"type": "NULL"}]}}}}
    [tool] = chat({"contents": [USER],
                   "tools": [{"functionDeclarations": [declaration, SHELL]}]})["tools"][:1]
    assert tool == {"type": "function", "function": {"name": "edit", "parameters": {
        "type": "object", "required": ["path"],
        "properties": {"path": {"type": ["string", "null"]},
                       "lines": {"type": "array", "minItems": 1,
                                 "items": {"type": "integer", "format": "int32"}},
                       "mode": {"anyOf": [{"type": "string", "enum": ["a", "b"]},
                                          {"type": "null"}]}}}}}


@pytest.mark.parametrize(("config", "choice", "names"), [
    ({"mode": "AUTO"}, None, ["run_shell_command", "read"]),
    ({"mode": "NONE"}, "none", ["run_shell_command", "read"]),
    ({"mode": "ANY"}, "required", ["run_shell_command", "read"]),
    ({"mode": "ANY", "allowedFunctionNames": ["read"]},
     {"type": "function", "function": {"name": "read"}}, ["read"]),
    ({"mode": "VALIDATED", "allowedFunctionNames": ["read", "run_shell_command"]}, None,
     ["run_shell_command", "read"]),
])
def test_function_calling_config_is_tool_choice(config, choice, names):
    out = chat({"contents": [USER], "tools": [{"functionDeclarations": [SHELL, {"name": "read"}]}],
                "toolConfig": {"functionCallingConfig": config}})
    assert out.get("tool_choice") == choice
    assert [t["function"]["name"] for t in out["tools"]] == names
    read = next(t["function"] for t in out["tools"] if t["function"]["name"] == "read")
    assert read["parameters"] == {"type": "object", "properties": {}}  # none declared


def test_json_responses_become_response_format():
    schema = {"type": "object", "properties": {"next": {"type": "string"}}}
    out = chat({"contents": [USER], "generationConfig": {
        "responseMimeType": "application/json", "responseJsonSchema": schema}}, WHOLE)
    assert out["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "response", "schema": schema}}
    plain = chat({"contents": [USER], "generationConfig": {"responseMimeType": "application/json",
                                                           "responseSchema": {"type": "OBJECT"}}})
    assert plain["response_format"]["json_schema"]["schema"] == {"type": "object"}


def test_count_tokens_reads_either_form_and_answers_total_tokens():
    path = f"/v1beta/models/{MODEL}:countTokens"
    short = GeminiTranslator(ASK, path=path, model="tiny")
    long = GeminiTranslator({"generateContentRequest": {
        "model": f"models/{MODEL}", "systemInstruction": "Be brief.", **ASK}}, path=path,
        model="tiny")
    assert not short.streamed and short.count(12) == {"totalTokens": 12}
    assert short.chat_request()["messages"] == [{"role": "user", "content": "List the files here."}]
    assert long.chat_request()["messages"][0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize("request_", [
    {"contents": [USER], "tools": [{"googleSearch": {}}]},
    {"contents": [USER], "tools": [{"functionDeclarations": [SHELL]}, {"codeExecution": {}}]},
    {"contents": [USER], "generationConfig": {"candidateCount": 2}},
    {"contents": [USER], "generationConfig": {"responseLogprobs": True}},
    {"contents": [USER], "generationConfig": {"responseModalities": ["IMAGE"]}},
    {"contents": [USER], "cachedContent": "cachedContents/abc"},
    {"contents": [{"role": "user", "parts": [{"functionResponse": {
        "name": "f", "response": {}, "parts": [{"inlineData": {"mimeType": "image/png"}}]}}]}]},
], ids=["googleSearch", "codeExecution", "candidates", "logprobs", "image-out", "cache",
        "response-media"])
def test_what_has_no_chat_form_is_untranslatable(request_):
    with pytest.raises(Untranslatable):
        chat(request_)


# --- the answer ----------------------------------------------------------------------------


def sse(chunks: list[dict]) -> bytes:
    """Engine chunks as vLLM frames them."""
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def vllm_stream(*deltas: dict, finish: str = "stop", usage=(30, 9)) -> bytes:
    """A vLLM-shaped stream (the fields of tests/data/vllm): the role chunk with the prompt's
    ids, one chunk per delta with its token ids, the finish chunk, the usage chunk."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}
    chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}],
               "prompt_token_ids": list(range(usage[0]))}]
    chunks += [{**head, "choices": [{"index": 0, "delta": d, "logprobs": None,
                                     "finish_reason": None, "token_ids": [7]}]} for d in deltas]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish,
                                        "stop_reason": None, "token_ids": [2]}]})
    chunks.append({**head, "choices": [], "usage": {
        "prompt_tokens": usage[0], "completion_tokens": usage[1],
        "total_tokens": sum(usage)}})
    return sse(chunks)


def call_deltas(index: int, call_id: str, name: str, arguments: str, cuts: int = 3) -> list:
    step = max(1, len(arguments) // cuts)
    pieces = [arguments[i:i + step] for i in range(0, len(arguments), step)]
    first = {"tool_calls": [{"id": call_id, "type": "function", "index": index,
                             "function": {"name": name}}]}
    return [first, *({"tool_calls": [{"index": index, "function": {"arguments": p}}]}
                     for p in pieces)]


TOOL_STREAM = vllm_stream({"content": "I'll run "}, {"content": "that."},
                          *call_deltas(0, "chatcmpl-tool-a", "run_shell_command",
                                       '{"command": "ls -la"}'),
                          *call_deltas(1, "chatcmpl-tool-b", "read_file",
                                       '{"path": "a\\u00e9.py", "lines": [1, 2]}'),
                          finish="tool_calls")
THINK_STREAM = vllm_stream({"reasoning": "The user wants"}, {"reasoning": " files."},
                           {"content": "Here "}, {"content": "they are."})


def agent_bytes(chunks: list[bytes], path: str = STREAM, request: dict = ASK) -> bytes:
    """What the agent gets for the engine's bytes cut into `chunks`: translated per parsed
    engine chunk and framed as the framework frames Gemini (SSE, or a JSON array)."""
    translator = GeminiTranslator(request, path=path, model="tiny")
    stream, framer = ChatStream(), DataSSE() if "alt=sse" in path else JsonArray()
    out = b""
    for chunk in chunks:
        out += framer.frame([e for c in stream.feed(chunk) for e in translator.events(c)])
    out += framer.frame([e for c in stream.flush() for e in translator.events(c)])
    return out + framer.frame(translator.end()) + framer.close()


@pytest.fixture(scope="module")
def replay():
    """A local server answering every call with `options["reply"]` (status, content type,
    body), the body sent in the pieces `options["cuts"]` when given."""

    def respond(mock: MockUpstream, received: Received) -> Reply:
        status, content_type, data = mock.options["reply"]
        return Reply(status=status, body=iter(mock.options.get("cuts") or [data]),
                     content_type=content_type)

    with MockUpstream(routes=[("POST", lambda path: True, respond)]) as mock:
        yield mock


def genai_client(mock: MockUpstream) -> genai.Client:
    return genai.Client(api_key="AIza-dummy", http_options=types.HttpOptions(
        base_url=mock.url, retry_options=types.HttpRetryOptions(attempts=1)))


def read_stream(mock: MockUpstream, agent: bytes, cuts: list[bytes] | None = None) -> list:
    """google-genai's chunks for our SSE bytes, served cut in `cuts`."""
    mock.options.update(reply=(200, "text/event-stream", agent), cuts=cuts)
    client = genai_client(mock)  # kept: a Client closes its connections when collected
    return list(client.models.generate_content_stream(model=MODEL, contents="hi"))


def folded(responses: list[types.GenerateContentResponse]) -> dict:
    """What an agent folds from the chunks: text, thoughts, calls, the last finish and usage."""
    parts = [p for r in responses for p in r.candidates[0].content.parts or ()]
    finish = [r.candidates[0].finish_reason for r in responses if r.candidates[0].finish_reason]
    return {"text": "".join(p.text for p in parts if p.text and not p.thought),
            "thought": "".join(p.text for p in parts if p.text and p.thought),
            "calls": [(p.function_call.id, p.function_call.name, p.function_call.args)
                      for p in parts if p.function_call],
            "finish": finish, "usage": responses[-1].usage_metadata,
            "ids": {(r.response_id, r.model_version) for r in responses}}


def test_a_captured_vllm_text_stream_reads_as_gemini_under_every_chunking(replay):
    engine = body("chat_stream_text")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in
                   ChatStream().feed(engine) if c["choices"])
    whole = agent_bytes([engine])
    for label, chunks in chunkings(engine, max_cuts=40):
        assert agent_bytes(chunks) == whole, label
    for label, cuts in list(chunkings(whole, max_cuts=20))[::5]:
        got = folded(read_stream(replay, whole, cuts))
        assert got["text"] == text and got["calls"] == [], label
        assert got["finish"] == [types.FinishReason.STOP]
        assert got["ids"] == {("chatcmpl-b22d9a349ae14e7f", "tiny")}
        usage = got["usage"]
        assert usage.prompt_token_count == 29 and usage.total_token_count == (
            usage.prompt_token_count + usage.candidates_token_count)


def test_tool_calls_arrive_whole_without_ids_text_streams_as_it_comes(replay):
    whole = agent_bytes([TOOL_STREAM])
    for label, chunks in chunkings(TOOL_STREAM, max_cuts=40):
        assert agent_bytes(chunks) == whole, label
    events = [orjson.loads(line[6:]) for line in whole.split(b"\r\n\r\n") if line]
    assert [e["candidates"][0]["content"]["parts"] for e in events[:2]] == [
        [{"text": "I'll run "}], [{"text": "that."}]]  # text is not held for the calls
    got = folded(read_stream(replay, whole, [whole[:7], whole[7:300], whole[300:]]))
    assert got["text"] == "I'll run that."
    assert got["calls"] == [(None, "run_shell_command", {"command": "ls -la"}),
                            (None, "read_file", {"path": "a\u00e9.py", "lines": [1, 2]})]
    assert got["finish"] == [types.FinishReason.STOP]
    assert (got["usage"].prompt_token_count, got["usage"].candidates_token_count,
            got["usage"].total_token_count) == (30, 9, 39)


def test_reasoning_is_thought_parts(replay):
    got = folded(read_stream(replay, agent_bytes([THINK_STREAM])))
    assert (got["thought"], got["text"]) == ("The user wants files.", "Here they are.")


def test_arguments_that_are_no_json_object_end_as_a_malformed_call(replay):
    engine = body("chat_stream_tool")  # the random model's arguments: a bare number
    got = folded(read_stream(replay, agent_bytes([engine])))
    assert got["calls"] == [] and got["finish"] == [types.FinishReason.MALFORMED_FUNCTION_CALL]
    last = orjson.loads(agent_bytes([engine]).split(b"\r\n\r\n")[-2][6:])
    assert last["candidates"][0]["finishMessage"].startswith(
        "Malformed function call: run_shell: 7320")


def test_without_alt_sse_the_stream_is_a_json_array():
    out = agent_bytes([TOOL_STREAM], path=STREAM.partition("?")[0])
    items = orjson.loads(out)
    assert out.startswith(b"[{") and items[-1]["candidates"][0]["finishReason"] == "STOP"
    parsed = [types.GenerateContentResponse._from_response(response=i, kwargs={}) for i in items]
    assert folded(parsed)["text"] == "I'll run that."


def test_a_whole_answer_is_one_response(replay):
    answer = orjson.loads(body("chat_json_text"))
    translator = GeminiTranslator(ASK, path=WHOLE, model="tiny")
    out = translator.whole(answer)
    replay.options.update(reply=(200, "application/json", orjson.dumps(out)), cuts=None)
    client = genai_client(replay)
    got = client.models.generate_content(model=MODEL, contents="hi")
    assert got.text == answer["choices"][0]["message"]["content"]
    assert got.response_id == answer["id"] and got.model_version == "tiny"
    assert got.usage_metadata.prompt_token_count == answer["usage"]["prompt_tokens"]
    assert got.candidates[0].finish_reason in (types.FinishReason.STOP,
                                                types.FinishReason.MAX_TOKENS)


def test_a_whole_answer_with_tool_calls_has_function_call_parts():
    answer = {"id": "chatcmpl-2", "model": "tiny", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": None, "reasoning": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        "finish_reason": "tool_calls", "token_ids": [5, 6, 2]}], "prompt_token_ids": [1, 2]}
    out = GeminiTranslator(ASK, path=WHOLE, model="tiny").whole(answer)
    assert out["candidates"] == [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "ls", "args": {}}}]}, "finishReason": "STOP", "index": 0}]
    assert out["usageMetadata"] == {"promptTokenCount": 2, "candidatesTokenCount": 3,
                                    "totalTokenCount": 5}


def test_errors_are_googles_and_google_genai_raises_them(replay):
    translator = GeminiTranslator(ASK, path=STREAM, model="tiny")
    error = translator.error(400, "This model's maximum context length is 2048 tokens.")
    assert error == {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                               "message": "This model's maximum context length is 2048 tokens."}}
    replay.options.update(reply=(400, "application/json", orjson.dumps(error)), cuts=None)
    client = genai_client(replay)
    with pytest.raises(genai_errors.ClientError) as caught:
        list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    assert caught.value.code == 400 and "maximum context length" in caught.value.message
    assert translator.error(503, "busy")["error"]["status"] == "UNAVAILABLE"
