"""The live proxy with the official `openai` SDK as the client and the mock as upstream:
Chat Completions (parallel tool calls, streamed with the usage chunk, and JSON) and Responses
(streamed and JSON), in reverse and forward mode, gzip and plain.

The recorder must be invisible (the SDK gets the bytes of a direct call), and the exchange
that reaches the sink must say what the SDK understood: our record of the stream equals our
JSON decoder's record of the SDK's own final object.
"""

from __future__ import annotations

import time

import httpx2
import openai
import pytest
from support import Arrivals

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.decoders import dialect_named
from forge_record.finalize import finalize
from forge_record.harness_shims.generic import Generic
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.records import COMPLETE, Text, ToolCall, ToolResult
from forge_record.trust import ca_files, confdir

API_KEY = "sk-proj-dummy-key-for-tests"
PROMPT = f"please run {TOOL_MARKER}"
CHAT_TOOLS = [{"type": "function", "function": {
    "name": "exec_command", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                   "required": ["cmd"]}}}]
RESPONSES_TOOLS = [{"type": "function", "name": "exec_command",
                    "description": "Run a shell command", "strict": False,
                    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                   "required": ["cmd"]}}]


@pytest.fixture(params=[False, True], ids=["plain", "gzip"])
def mock(request):
    with MockUpstream(gzip_responses=request.param) as m:
        yield m


@pytest.fixture(scope="session")
def ca_home(tmp_path_factory):
    """One CA for the whole run: making a key pair costs about a second."""
    return tmp_path_factory.mktemp("ca")


@pytest.fixture(params=["reverse", "forward"])
def recorded(request, mock, ca_home):
    """(client, exchanges): an openai client whose calls go through a recording proxy."""
    exchanges = Arrivals()
    upstreams = {"api.openai.com": mock.url}
    conf = confdir(ca_home)
    if request.param == "reverse":
        addon = Recorder(exchanges.append, upstreams=upstreams, record_any_host=True)
        proxy = InProcessProxy(addon, mode="reverse:https://api.openai.com", confdir=conf)
        port = proxy.start()
        http = openai.DefaultHttpxClient()
        base_url = f"http://127.0.0.1:{port}/v1"
    else:
        addon = Recorder(exchanges.append, model_hosts=["api.openai.com"], upstreams=upstreams)
        proxy = InProcessProxy(addon, mode="regular", confdir=conf)
        port = proxy.start()
        http = openai.DefaultHttpxClient(proxy=f"http://127.0.0.1:{port}",
                                         verify=ca_files(conf).cert)
        base_url = "https://api.openai.com/v1"
    client = openai.OpenAI(api_key=API_KEY, base_url=base_url, http_client=http, max_retries=0)
    try:
        yield client, exchanges
    finally:
        client.close()
        proxy.stop()


def as_body_record(dialect: str, sdk_object) -> object:
    """Our JSON decoder's record of what the SDK built."""
    decoder = dialect_named(dialect).response_decoder("application/json")
    decoder.feed(sdk_object.model_dump_json(exclude_unset=True).encode())
    return decoder.finish()


def one_exchange(exchanges: Arrivals, hangs_up_after_done: bool = False):
    """The one exchange recorded, checked whole. `hangs_up_after_done`: the SDK closes a Chat
    Completions stream as soon as it reads `[DONE]` (openai/_streaming.py), which can be before
    the proxy read the transfer's last bytes; the exchange then keeps an `aborted:` flag but is
    whole, as capture.py's `_settle` documents. Whether it does is a race, so only then is that
    flag allowed, and no other."""
    [exchange] = exchanges.finalized(1)
    assert exchange.status == COMPLETE, exchange.flags
    assert exchange.http_status == 200
    flags = exchange.flags
    if hangs_up_after_done:
        flags = [f for f in flags if not f.startswith("aborted:")]
    assert flags == []
    assert "authorization" not in exchange.request_headers
    return exchange


# --- invisible: the same bytes as a direct call --------------------------------------------


def raw_chat(client: openai.OpenAI, stream: bool) -> bytes:
    with client.chat.completions.with_streaming_response.create(
        model="gpt-4.1", tools=CHAT_TOOLS, stream=stream,
        messages=[{"role": "user", "content": PROMPT}],
        **({"stream_options": {"include_usage": True}} if stream else {}),
    ) as response:
        return b"".join(response.http_response.iter_raw())


def raw_responses(client: openai.OpenAI, stream: bool) -> bytes:
    with client.responses.with_streaming_response.create(
        model="gpt-5-codex", input=PROMPT, tools=RESPONSES_TOOLS, stream=stream,
    ) as response:
        return b"".join(response.http_response.iter_raw())


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("call", [raw_chat, raw_responses], ids=["chat", "responses"])
def test_client_gets_the_bytes_of_a_direct_call(recorded, mock, call, stream):
    client, exchanges = recorded
    direct = openai.OpenAI(api_key=API_KEY, base_url=mock.url + "/v1", max_retries=0)
    assert call(client, stream) == call(direct, stream)
    assert len(exchanges.wait(1)) == 1


# --- Chat Completions ----------------------------------------------------------------------


def test_chat_stream_with_parallel_tool_calls(recorded, mock):
    client, exchanges = recorded
    mock.options["openai_parallel_tools"] = True
    with client.chat.completions.stream(
        model="gpt-4.1", tools=CHAT_TOOLS, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": PROMPT}],
    ) as events:
        completion = events.get_final_completion()
    ex = one_exchange(exchanges, hangs_up_after_done=True)
    assert ex.dialect == "openai.chat" and ex.kind == "model"
    assert ex.url == "https://api.openai.com/v1/chat/completions"  # before the redirect
    assert ex.response == as_body_record("openai.chat", completion)
    sdk_calls = completion.choices[0].message.tool_calls
    calls = [b for b in ex.response.content if isinstance(b, ToolCall)]
    assert len(calls) == len(sdk_calls) == 2
    assert [(c.id, c.arguments_raw) for c in calls] == \
        [(t.id, t.function.arguments) for t in sdk_calls]
    assert calls[0].arguments != calls[1].arguments  # the interleaved fragments did not mix
    assert ex.response.stop_reason == "tool_calls"
    usage = completion.usage
    assert ex.response.usage.input_tokens == \
        usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens
    assert ex.request.system == [Text(text="Be brief.")]
    assert ex.request.messages[0].content == [Text(text=PROMPT)]
    assert [t.name for t in ex.request.tools] == ["exec_command"] and ex.request.stream


def test_chat_json_and_tool_result_turn(recorded):
    client, exchanges = recorded
    first = client.chat.completions.create(
        model="gpt-4.1", tools=CHAT_TOOLS, messages=[{"role": "user", "content": PROMPT}])
    [call] = first.choices[0].message.tool_calls
    second = client.chat.completions.create(model="gpt-4.1", tools=CHAT_TOOLS, messages=[
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "forge-record-e2e-output-42"},
    ])
    exchanges.wait(2)
    one, two = sorted((finalize(e) for e in exchanges), key=lambda e: e.seq)
    assert one.response == as_body_record("openai.chat", first)
    assert two.response.content == [Text(text="The command printed: forge-record-e2e-output-42")]
    assert two.request.messages[-1].content == [
        ToolResult(tool_call_id=call.id, content=[Text(text="forge-record-e2e-output-42")])]
    assert second.choices[0].finish_reason == two.response.stop_reason == "stop"


# --- Responses -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_responses_exchange_is_decoded(recorded, stream):
    client, exchanges = recorded
    if stream:
        with client.responses.stream(model="gpt-5-codex", input=PROMPT, tools=RESPONSES_TOOLS,
                                     instructions="You are Codex.") as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="gpt-5-codex", input=PROMPT,
                                           tools=RESPONSES_TOOLS, instructions="You are Codex.")
    ex = one_exchange(exchanges)
    assert ex.dialect == "openai.responses" and ex.kind == "model"
    assert ex.response == as_body_record("openai.responses", response)
    assert ex.response.id == response.id
    [call] = [b for b in ex.response.content if isinstance(b, ToolCall)]
    assert call.name == "exec_command" and call.id == response.output[1].call_id
    assert call.arguments == {"cmd": f"echo {TOOL_MARKER}-output-$((6*7))"}
    assert ex.response.usage.output_tokens == response.usage.output_tokens
    assert ex.request.system == [Text(text="You are Codex.")]
    assert ex.request.stream is stream


def test_responses_function_call_output_turn(recorded):
    client, exchanges = recorded
    response = client.responses.create(model="gpt-5-codex", tools=RESPONSES_TOOLS, input=[
        {"type": "message", "role": "user", "content": PROMPT},
        {"type": "function_call", "call_id": "call_1", "name": "exec_command",
         "arguments": '{"cmd": "echo hi"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "hi"},
    ], previous_response_id="resp_earlier", store=False)
    ex = one_exchange(exchanges)
    assert ex.response.content == [Text(text="The command printed: hi")]
    assert response.output_text == "The command printed: hi"
    user, model, tool = ex.request.messages
    assert model.content[0].arguments == {"cmd": "echo hi"}
    assert tool.content == [ToolResult(tool_call_id="call_1", content=[Text(text="hi")])]
    assert ex.request.parameters == {"previous_response_id": "resp_earlier", "store": False}


def test_other_responses_paths_pass_through_unrecorded(recorded):
    client, exchanges = recorded
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_123")
    time.sleep(0.2)
    assert exchanges == []


def test_generic_shim_intercepts_the_openai_hosts():
    # chatgpt.com: Codex with a ChatGPT login calls chatgpt.com/backend-api/codex/responses
    assert {"api.openai.com", "chatgpt.com"} <= set(Generic.model_hosts)


def test_a_compatible_server_in_the_clear_is_recorded_when_it_speaks_chat(mock, ca_home):
    """An OpenAI-compatible server (vLLM, Ollama, LM Studio) that is no known model host,
    reached through HTTP_PROXY in the clear: recorded because its body speaks the dialect."""
    exchanges = Arrivals()
    proxy = InProcessProxy(Recorder(exchanges.append, model_hosts=["api.openai.com"]),
                           mode="regular", confdir=confdir(ca_home))
    http = openai.DefaultHttpxClient(proxy=f"http://127.0.0.1:{proxy.start()}")
    client = openai.OpenAI(api_key=API_KEY, base_url=mock.url + "/v1", http_client=http,
                           max_retries=0)
    try:
        with client.chat.completions.stream(model="Qwen/Qwen3-8B", tools=CHAT_TOOLS,
                                            messages=[{"role": "user", "content": PROMPT}]) as s:
            completion = s.get_final_completion()
        # The mock hangs up on a body that is not JSON; through the proxy the client sees
        # that hang-up too, as it would directly (not a 502 page).
        with pytest.raises(httpx2.RemoteProtocolError):
            http.post(mock.url + "/v1/chat/completions", content=b"not a model call")
        [ex] = exchanges.finalized(1)
        time.sleep(0.2)
    finally:
        client.close()
        proxy.stop()
    assert len(exchanges) == 1 and ex.url == mock.url + "/v1/chat/completions"
    assert ex.status == COMPLETE and ex.dialect == "openai.chat"
    assert ex.response == as_body_record("openai.chat", completion)
