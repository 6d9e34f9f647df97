"""SGLang's native `/generate` to an engine: the request asks for logprobs, `output_ids`, the
`[logprob, id, text]` triples, `input_ids`, `finish_reason{type}` and `weight_version` land
in the record, streamed (cumulative lines) and whole; the agent gets what it asked for.
Against the mock's SGLang side (forge_record.mock.sglang), whose tokens are bytes."""

from __future__ import annotations

import orjson
import pytest
from conftest import assert_every_chunking_agrees, decode_chunks, record_round_trip
from engine_mock import arrived, engine_mock, post, recording_proxy, sse_data

from forge_record.decoders.sglang_generate import DIALECT
from forge_record.engine import GENERATE, Asked, ask_for_tokens
from forge_record.mock import engine_tokens as tok
from forge_record.records import COMPLETE, Text
from forge_record.tokens_check import TOKENS_MISMATCH

ANSWER = tok.encode(tok.ANSWER)
PROMPT_IDS = [11, 12, 13, 14]
SSE = "text/event-stream"


def generate(mock, **body) -> bytes:
    return post(f"{mock.url}/generate", {"input_ids": PROMPT_IDS, **body})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_answer_is_decoded(stream):
    with engine_mock(engine="sglang", weight_version="step-7") as mock:
        body = generate(mock, stream=stream, return_logprob=True, top_logprobs_num=2)
    ctype = SSE if stream else "application/json"
    response, complete = decode_chunks(DIALECT, ctype, [body])
    assert complete
    assert response.tokens.ids == ANSWER
    assert response.tokens.logprobs == [tok.logprob(i) for i in range(len(ANSWER))]
    assert [len(t) for t in response.tokens.top_logprobs] == [2] * len(ANSWER)
    assert response.content == [Text(text=tok.ANSWER)] and response.stop_reason == "stop"
    assert response.extras["weight_version"] == "step-7"
    assert response.usage.output_tokens == len(ANSWER)
    assert record_round_trip(response) == response
    if stream:
        assert_every_chunking_agrees(lambda chunks: decode_chunks(DIALECT, SSE, chunks), body)


def test_a_stream_of_deltas_is_appended():
    """Under `incremental_streaming_output` each line holds only the new ids and text."""
    lines = [{"text": "ab", "output_ids": [1, 2], "meta_info": {"finish_reason": None}},
             {"text": "c", "output_ids": [3], "meta_info": {"finish_reason": {"type": "stop"}}}]
    body = b"".join(b"data: " + orjson.dumps(x) + b"\n\n" for x in lines) + b"data: [DONE]\n\n"
    response, complete = decode_chunks(DIALECT, SSE, [body])
    assert complete and response.tokens.ids == [1, 2, 3]
    assert response.content == [Text(text="abc")]


def test_the_request_asks_for_logprobs():
    new, asked = ask_for_tokens(b'{"text":"x","sampling_params":{}}', 2, GENERATE)
    assert asked == Asked(token_ids=True)
    assert orjson.loads(new) == {"text": "x", "sampling_params": {}, "return_logprob": True,
                                 "top_logprobs_num": 2}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("agent", [{}, {"return_logprob": True}], ids=["nothing", "logprobs"])
def test_the_agent_gets_what_a_direct_call_gets(tmp_path, stream, agent):
    with engine_mock(engine="sglang") as mock, \
            recording_proxy(mock.url, tmp_path, "sglang", top_logprobs=2) as (proxy, exchanges):
        call = {"input_ids": PROMPT_IDS, "stream": stream, **agent}
        through = post(f"{proxy}/generate", call)
        assert through == post(f"{mock.url}/generate", call)
        [ex] = arrived(exchanges)
    assert ex.status == COMPLETE and ex.flags == []
    tokens = ex.response.tokens
    assert tokens.prompt_ids == PROMPT_IDS  # from the request's input_ids
    assert tokens.ids == ANSWER and len(tokens.logprobs) == len(ANSWER)
    assert ex.response.extras["weight_version"] == "default"


def test_text_prompts_have_prompt_ids_only_when_logprobs_start_at_zero():
    with engine_mock(engine="sglang") as mock:
        whole = generate(mock, input_ids=None, text="hi", return_logprob=True,
                         logprob_start_len=0)
        last = generate(mock, input_ids=None, text="hi", return_logprob=True)
    assert decode_chunks(DIALECT, "application/json", [whole])[0].tokens.prompt_ids == \
        tok.encode("hi")
    assert decode_chunks(DIALECT, "application/json", [last])[0].tokens.prompt_ids is None


def test_triples_whose_ids_disagree_are_flagged(tmp_path):
    from forge_record.finalize import finalize
    from forge_record.records import Exchange

    answer = {"text": "ab", "output_ids": [1, 2], "meta_info": {
        "finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1, 1, None],
                                                                      [-0.2, 9, None]]}}
    ex = Exchange(dialect=GENERATE, status="pending", http_status=200, first_byte_at=1.0,
                  response_headers={"content-type": "application/json"},
                  raw_request=b'{"input_ids":[5]}', raw_response=orjson.dumps(answer))
    finalize(ex)
    assert TOKENS_MISMATCH in ex.flags and ex.response.tokens.ids == [1, 2]


def test_cumulative_lines_repeat_the_whole_answer():
    with engine_mock(engine="sglang") as mock:
        lines = sse_data(generate(mock, stream=True))
    assert [len(x["output_ids"]) for x in lines] == sorted(len(x["output_ids"]) for x in lines)
    assert lines[-1]["output_ids"] == ANSWER


def test_sglangs_chat_puts_prompt_ids_in_the_choice():
    """SGLang's OpenAI chat answers `prompt_token_ids` per choice, and only non-streamed."""
    from forge_record.decoders.openai_chat import DIALECT as CHAT

    answer = {"id": "c", "object": "chat.completion", "model": "m", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": "hi"},
        "finish_reason": "stop", "prompt_token_ids": [1, 2, 3], "token_ids": [7, 8]}]}
    response, complete = decode_chunks(CHAT, "application/json", [orjson.dumps(answer)])
    assert complete and response.tokens.prompt_ids == [1, 2, 3]
    assert response.tokens.ids == [7, 8]
