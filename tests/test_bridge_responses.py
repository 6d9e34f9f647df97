"""The Responses translator: requests into Chat Completions, and engine streams (captured from
a real vLLM, and synthetic ones with reasoning, parallel and freeform calls) back into
Responses events, under every chunking, read by the openai SDK's own stream accumulator;
whole answers; `previous_response_id` through the per-process history."""

from __future__ import annotations

import openai
import orjson
import pytest
from conftest import chunkings, sse_http_client
from vllm_data import body

from forge_record.bridge import TRANSLATORS, Untranslatable
from forge_record.bridge.base import ChatStream
from forge_record.bridge.call import BridgedCall, HttpBridge
from forge_record.bridge.responses import History, ResponsesTranslator

PATH = "/v1/responses"
ASK = {"model": "gpt-5.4", "stream": True, "instructions": "You are a coding agent.",
       "input": [{"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": "List the files here."}]}]}
SHELL = {"type": "function", "name": "exec_command", "description": "Run a command",
         "strict": False, "parameters": {"type": "object",
                                         "properties": {"cmd": {"type": "string"}}}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}


def translator(request: dict, history: History | None = None) -> ResponsesTranslator:
    history = History() if history is None else history
    return ResponsesTranslator(request, path=PATH, model="tiny", history=history)


def chat(request: dict, history: History | None = None) -> dict:
    return translator(request, history).chat_request()


def sse(*chunks: dict) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "tiny",
            "choices": choices, **extra}


def bridged(chunks: list[bytes], request: dict = ASK, history: History | None = None,
            content_type: str = "text/event-stream") -> bytes:
    """The agent's bytes for the engine's answer cut into `chunks`."""
    history = History() if history is None else history
    call = BridgedCall.open(_Bound(history), orjson.dumps(request), path=PATH, model="tiny")
    assert call.refused is None, call.refused
    http = HttpBridge(call, PATH)
    http.start(200, "", content_type)
    return b"".join(http.feed(c) for c in chunks) + http.flush()


class _Bound:
    """The translator class with its history bound, as the framework constructs it."""

    dialect = ResponsesTranslator.dialect

    def __init__(self, history: History) -> None:
        self.history = history

    def __call__(self, request, *, path, model):
        return ResponsesTranslator(request, path=path, model=model, history=self.history)


def sdk_final(agent: bytes, request: dict = ASK):
    """The openai SDK's accumulated response for our bytes (an incomplete one: as its
    terminal event holds it, since the SDK's final response must be completed)."""
    client = openai.OpenAI(api_key="sk-dummy", http_client=sse_http_client(agent),
                           max_retries=0)
    fields = {k: v for k, v in request.items() if k != "stream"}
    with client.responses.stream(**fields) as stream:
        last = None
        for event in stream:
            last = event
        assert last is not None and last.type in ("response.completed", "response.incomplete")
        return stream.get_final_response() if last.type == "response.completed" else (
            last.response)


def events(agent: bytes) -> list[dict]:
    return [orjson.loads(line[6:]) for line in agent.split(b"\n") if line.startswith(b"data: ")]


# --- the request ---------------------------------------------------------------------------


def test_registry_names_the_translator():
    assert TRANSLATORS["openai.responses"] is ResponsesTranslator


def test_instructions_items_tools_and_sampling_carry_over():
    request = {**ASK, "tools": [SHELL, PATCH], "tool_choice": "auto",
               "parallel_tool_calls": True, "max_output_tokens": 64, "temperature": 0.5,
               "top_p": 0.9, "store": False, "include": ["reasoning.encrypted_content"],
               "prompt_cache_key": "k", "reasoning": {"effort": "low", "summary": "auto"},
               "text": {"verbosity": "low"}, "client_metadata": {"a": "b"}}
    out = chat(request)
    assert out == {
        "model": "tiny",
        "messages": [{"role": "system", "content": "You are a coding agent."},
                     {"role": "user", "content": "List the files here."}],
        "tools": [{"type": "function", "function": {
                      "name": "exec_command", "description": "Run a command", "strict": False,
                      "parameters": SHELL["parameters"]}},
                  {"type": "function", "function": {
                      "name": "apply_patch", "description": "Edit files",
                      "parameters": {"type": "object",
                                     "properties": {"input": {"type": "string"}},
                                     "required": ["input"], "additionalProperties": False}}}],
        "tool_choice": "auto", "parallel_tool_calls": True, "max_tokens": 64,
        "temperature": 0.5, "top_p": 0.9}


def test_a_codex_history_becomes_chat_messages():
    items = [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "<permissions>"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "message", "role": "assistant", "id": "msg_1",
         "content": [{"type": "output_text", "text": "I'll run it.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
         "arguments": '{"cmd":"ls"}'},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "apply_patch",
         "input": "*** Begin Patch"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py"},
        {"type": "custom_tool_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "Done"}]},
        {"type": "function_call", "call_id": "call_3", "name": "spawn_agent",
         "namespace": "multi_agent_v1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_3", "output": "ok"},
    ]
    out = chat({**ASK, "instructions": None, "input": items})
    assert out["messages"] == [
        {"role": "system", "content": "<permissions>"},
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": "I'll run it.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'}},
            {"id": "call_2", "type": "function",
             "function": {"name": "apply_patch", "arguments": '{"input":"*** Begin Patch"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Done"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_3", "type": "function",
             "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_3", "content": "ok"},
    ]


def test_namespaced_tools_are_flattened_and_server_tools_left_out_and_named():
    namespace = {"type": "namespace", "name": "multi_agent_v1", "description": "agents",
                 "tools": [{"type": "function", "name": "spawn_agent",
                            "parameters": {"type": "object"}}]}
    t = translator({**ASK, "tools": [namespace, {"type": "web_search",
                                                 "external_web_access": True}]})
    out = t.chat_request()
    assert [tool["function"]["name"] for tool in out["tools"]] == ["multi_agent_v1__spawn_agent"]
    assert t.flags == ["bridge_dropped_tool:web_search"]


@pytest.mark.parametrize(("change", "why"), [
    ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]},
     "web_search_call"),
    ({"input": [{"type": "message", "role": "user",
                 "content": [{"type": "input_file", "file_id": "f"}]}]}, "input_file"),
    ({"background": True}, "background"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format"),
])
def test_what_a_chat_engine_cannot_do_is_untranslatable(change, why):
    with pytest.raises(Untranslatable, match=why):
        chat({**ASK, **change})


def test_tool_choice_and_text_format_map():
    named = chat({**ASK, "tools": [SHELL], "tool_choice": {"type": "function",
                                                          "name": "exec_command"}})
    assert named["tool_choice"] == {"type": "function", "function": {"name": "exec_command"}}
    schema = {"type": "json_schema", "name": "out", "schema": {"type": "object"},
              "strict": True}
    assert chat({**ASK, "text": {"format": schema}})["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"},
                                               "strict": True}}


# --- the answer, streamed --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["chat_stream_text", "chat_stream_plain", "chat_stream_tool"])
def test_real_vllm_streams_read_the_same_under_every_chunking(name):
    engine = body(name)
    whole = bridged([engine])
    final = sdk_final(whole)
    assert final.status in ("completed", "incomplete")
    expected = _engine_answer(engine)
    assert final.output_text == expected["content"]
    calls = [i for i in final.output if i.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == expected["calls"]
    for label, chunks in chunkings(engine, max_cuts=40):
        again = sdk_final(bridged(chunks))
        assert _comparable(again) == _comparable(final), label


def _engine_answer(engine: bytes) -> dict:
    stream = ChatStream()
    content, calls = "", {}
    for c in stream.feed(engine) + stream.flush():
        for choice in c.get("choices") or ():
            content += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls") or ():
                got = calls.setdefault(call["index"], [call.get("id"), "", ""])
                got[1] += call.get("function", {}).get("name") or ""
                got[2] += call.get("function", {}).get("arguments") or ""
    return {"content": content, "calls": [tuple(v) for _, v in sorted(calls.items())]}


def _comparable(response) -> list:
    """The output without our minted ids (each run mints new ones)."""
    return [{k: v for k, v in item.model_dump().items() if k != "id"}
            for item in response.output] + [response.status, response.usage]


def test_events_come_in_the_apis_order_with_sequence_numbers():
    engine = sse(chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2]),
                 chunk({"reasoning_content": "think"}), chunk({"content": "Hel"}),
                 chunk({"content": "lo"}),
                 chunk({"tool_calls": [{"index": 0, "id": "call_9", "type": "function",
                                        "function": {"name": "exec_command",
                                                     "arguments": ""}}]}),
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd":'}}]}),
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"ls"}'}}]}),
                 chunk({}, "tool_calls"),
                 chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 7,
                                    "total_tokens": 17}))
    seen = events(bridged([engine], {**ASK, "tools": [SHELL]}))
    assert [e["type"] for e in seen] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
    done = seen[-1]["response"]
    assert done["id"].startswith("resp_") and done["status"] == "completed"
    assert [i["type"] for i in done["output"]] == ["reasoning", "message", "function_call"]
    assert done["output"][2]["call_id"] == "call_9"  # the engine's call id, kept
    assert done["usage"] == {"input_tokens": 10, "input_tokens_details": {
                                 "cached_tokens": 0, "cache_write_tokens": 0},
                             "output_tokens": 7,
                             "output_tokens_details": {"reasoning_tokens": 0},
                             "total_tokens": 17}
    final = sdk_final(sse_bytes(seen), {**ASK, "tools": [SHELL]})
    assert final.output[0].summary[0].text == "think"
    assert final.output_text == "Hello"
    assert final.output[2].arguments == '{"cmd":"ls"}'


def sse_bytes(seen: list[dict]) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e))
                    for e in seen)


def test_parallel_and_freeform_calls_under_every_chunking():
    request = {**ASK, "tools": [SHELL, PATCH]}
    engine = sse(chunk({"role": "assistant", "content": ""}),
                 chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                        "function": {"name": "exec_command",
                                                     "arguments": '{"cmd"'}}]}),
                 chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                        "function": {"name": "apply_patch",
                                                     "arguments": '{"input": "*** Be'}}]}),
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "ls"}'}}]}),
                 chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'gin"}'}}]}),
                 chunk({}, "tool_calls"))
    final = sdk_final(bridged([engine], request), request)
    shell, patch = final.output
    assert (shell.type, shell.call_id, shell.arguments) == ("function_call", "call_a",
                                                            '{"cmd": "ls"}')
    assert (patch.type, patch.call_id, patch.name, patch.input) == (
        "custom_tool_call", "call_b", "apply_patch", "*** Begin")
    for label, chunks in chunkings(engine, max_cuts=30):
        assert _comparable(sdk_final(bridged(chunks, request), request)) == _comparable(
            final), label


def test_a_length_stop_is_incomplete():
    engine = sse(chunk({"content": "abc"}), chunk({}, "length"))
    done = events(bridged([engine], {**ASK, "max_output_tokens": 3}))[-1]
    assert done["type"] == "response.incomplete"
    assert done["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_an_error_chunk_mid_stream_fails_the_response():
    engine = (b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}'
              b'\n\ndata: {"error":{"message":"engine died","code":500}}\n\ndata: [DONE]\n\n')
    seen = events(bridged([engine]))
    assert seen[-1]["type"] == "response.failed"
    assert seen[-1]["response"]["error"]["message"] == "engine died"
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))


# --- the answer, whole -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["chat_json_text", "chat_json_tool"])
def test_whole_answers_become_response_objects(name):
    request = {**ASK, "stream": False}
    answer = orjson.loads(body(name))
    out = orjson.loads(bridged([body(name)], request, content_type="application/json"))
    response = openai.types.responses.Response.model_validate(out)
    message = answer["choices"][0]["message"]
    assert response.output_text == (message["content"] or "")
    assert response.usage.input_tokens == answer["usage"]["prompt_tokens"]
    assert response.status == ("incomplete" if answer["choices"][0]["finish_reason"] == "length"
                               else "completed")


# --- previous_response_id ---------------------------------------------------------------------


def test_a_chained_call_gets_the_whole_context_and_an_unknown_id_the_apis_400():
    history = History()
    request = {**ASK, "tools": [SHELL]}
    engine = sse(chunk({"content": "I'll run it."}),
                 chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                        "function": {"name": "exec_command",
                                                     "arguments": '{"cmd":"ls"}'}}]}),
                 chunk({}, "tool_calls"))
    first = events(bridged([engine], request, history))[-1]["response"]
    follow = {**request, "instructions": "New rules.", "previous_response_id": first["id"],
              "input": [{"type": "function_call_output", "call_id": "call_1",
                         "output": "a.py"}]}
    chained = chat(follow, history)
    replayed = chat({**request, "instructions": "New rules.",
                     "input": ASK["input"] + first["output"] + follow["input"]})
    assert chained["messages"] == replayed["messages"]  # as if Codex had sent it all
    assert chained["messages"][0] == {"role": "system", "content": "New rules."}

    with pytest.raises(Untranslatable) as unknown:
        chat({**follow, "previous_response_id": "resp_nope"}, history)
    body_ = translator(ASK).error(400, str(unknown.value))
    assert body_ == {"error": {"message": "Previous response with id 'resp_nope' not found.",
                               "type": "invalid_request_error",
                               "param": "previous_response_id",
                               "code": "previous_response_not_found"}}


def test_only_completed_responses_are_remembered_and_the_map_is_bounded():
    history = History(size=2)
    events(bridged([sse(chunk({"content": "a"}), chunk({}, "length"))], ASK, history))
    assert len(history) == 0
    ids = [events(bridged([sse(chunk({"content": "a"}), chunk({}, "stop"))], ASK,
                          history))[-1]["response"]["id"] for _ in range(3)]
    assert len(history) == 2 and history.get(ids[0]) is None and history.get(ids[2])


def test_a_warm_up_answers_without_the_engine_and_can_be_named():
    history = History()
    warm = translator({**ASK, "generate": False}, history)
    warm.chat_request()
    seen = warm.warm_up()
    assert [e["type"] for e in seen] == ["response.created", "response.in_progress",
                                         "response.completed"]
    assert seen[-1]["response"]["output"] == []
    named = chat({**ASK, "previous_response_id": warm.response_id,
                  "input": [{"type": "message", "role": "user", "content": "more"}]}, history)
    assert [m["content"] for m in named["messages"][1:]] == ["List the files here.", "more"]
