"""Completions (`POST /v1/completions`) to an engine: the request asks for token ids and
logprobs, vLLM's per-choice fields land in `response.tokens`, the agent gets what it asked
for. Against the mock's vLLM side (forge_record.mock.vllm), whose tokens are bytes."""

from __future__ import annotations

import openai
import orjson
import pytest
from conftest import assert_every_chunking_agrees, decode_chunks, record_round_trip
from engine_mock import arrived, engine_mock, post, recording_proxy, sse_data

from forge_record.decoders import dialect_for
from forge_record.decoders.openai_completions import DIALECT
from forge_record.engine import COMPLETIONS, Asked, Strip, ask_for_tokens
from forge_record.mock import engine_tokens as tok
from forge_record.records import COMPLETE, Other, Text

ANSWER = tok.encode(tok.ANSWER)
PROMPT = "def main():"


def direct(mock, **body) -> bytes:
    return post(f"{mock.url}/v1/completions", {"model": "tiny", "prompt": PROMPT, **body})


def test_the_route_is_completions_not_chat():
    assert dialect_for("POST", "/v1/completions") is DIALECT
    assert dialect_for("POST", "/v1/chat/completions").name == "openai.chat"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tokens_are_decoded_from_vllms_per_choice_fields(stream):
    with engine_mock(engine="vllm") as mock:
        body = direct(mock, stream=stream, return_token_ids=True, logprobs=2, max_tokens=64)
    ctype = "text/event-stream" if stream else "application/json"
    response, complete = decode_chunks(DIALECT, ctype, [body])
    assert complete
    tokens = response.tokens
    assert tokens.prompt_ids == tok.encode(PROMPT)
    assert tokens.ids == ANSWER
    assert tokens.logprobs == [tok.logprob(i) for i in range(len(ANSWER))]
    assert [len(t) for t in tokens.top_logprobs] == [2] * len(ANSWER)
    assert response.content == [Text(text=tok.ANSWER)] and response.stop_reason == "stop"
    assert record_round_trip(response) == response
    if stream:
        assert_every_chunking_agrees(lambda chunks: decode_chunks(DIALECT, ctype, chunks), body)


def test_a_prompt_of_token_ids_is_recorded_as_ids():
    request = DIALECT.parse_request(orjson.dumps({"model": "m", "prompt": [5, 6, 7]}))
    assert request.messages[0].content == [Other(data={"type": "prompt_ids", "ids": [5, 6, 7]})]


def test_the_request_asks_for_ids_and_logprobs_and_says_what_the_agent_asked():
    new, asked = ask_for_tokens(b'{"prompt":"x","logprobs":1}', 3, COMPLETIONS)
    assert asked == Asked(logprobs=True, top_logprobs=1)
    assert orjson.loads(new) == {"prompt": "x", "logprobs": 3, "return_token_ids": True}
    new, asked = ask_for_tokens(b'{"prompt":"x"}', 0, COMPLETIONS)
    assert asked == Asked() and orjson.loads(new)["logprobs"] == 0
    assert ask_for_tokens(b'{"prompt":"x","logprobs":0}', 0, COMPLETIONS)[1].logprobs


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("agent", [{}, {"logprobs": 1}, {"logprobs": 2, "return_token_ids": True}],
                         ids=["nothing", "logprobs-1", "everything"])
def test_the_agent_gets_what_a_direct_call_gets(tmp_path, stream, agent):
    with engine_mock(engine="vllm") as mock, \
            recording_proxy(mock.url, tmp_path, "vllm", top_logprobs=2) as (proxy, exchanges):
        call = {"model": "tiny", "prompt": PROMPT, "stream": stream, "max_tokens": 64, **agent}
        through = post(f"{proxy}/v1/completions", call)
        assert through == post(f"{mock.url}/v1/completions", call)
        [ex] = arrived(exchanges)
    assert ex.status == COMPLETE and ex.flags == []
    assert orjson.loads(ex.raw_request)["logprobs"] == 2  # what the engine was asked
    assert ex.response.tokens.ids == ANSWER
    assert ex.response.tokens.prompt_ids == tok.encode(PROMPT)
    assert len(ex.response.tokens.top_logprobs[0]) == 2


def test_streamed_prompt_ids_sit_in_the_first_chunks_choice():
    with engine_mock(engine="vllm") as mock:
        chunks = sse_data(direct(mock, stream=True, return_token_ids=True))
    assert "prompt_token_ids" in chunks[0]["choices"][0]
    assert all("prompt_token_ids" not in c["choices"][0] for c in chunks[1:] if c["choices"])


def test_the_openai_sdk_reads_the_stripped_stream(tmp_path):
    with engine_mock(engine="vllm") as mock, \
            recording_proxy(mock.url, tmp_path, "vllm") as (proxy, exchanges):
        sdk = openai.OpenAI(api_key="sk-dummy-key", base_url=f"{proxy}/v1", max_retries=0)
        text = "".join(c.choices[0].text for c in sdk.completions.create(
            model="tiny", prompt=PROMPT, max_tokens=64, stream=True) if c.choices)
        [ex] = arrived(exchanges)
    assert text == tok.ANSWER and ex.response.tokens.ids == ANSWER


def test_top_logprob_maps_keep_the_sampled_token_and_the_agents_top_n():
    answer = {"choices": [{"index": 0, "text": "a", "logprobs": {
        "tokens": ["a"], "token_logprobs": [-2.0],
        "top_logprobs": [{"a": -2.0, "b": -0.5, "c": -1.0, "d": -3.0}]}}]}
    strip = Strip(Asked(logprobs=True, top_logprobs=1), False, COMPLETIONS)
    strip.feed(orjson.dumps(answer))
    [out] = strip.flush()
    assert orjson.loads(out)["choices"][0]["logprobs"]["top_logprobs"] == [{"a": -2.0, "b": -0.5}]
