"""Bad engine answers are flagged, not fixed: `tokens_missing` when an engine ignores
`return_token_ids` (vLLM before 0.10.2), `tokens_mismatch` when its ids and logprobs
disagree; `run` warns once per session. Weight versions reach the tokens export."""

from __future__ import annotations

from engine_mock import arrived, engine_mock, post, recording_proxy

from forge_record.exporters.tokens import weight_version
from forge_record.records import COMPLETE, Exchange, Response
from forge_record.tokens_check import TOKENS_MISMATCH, TOKENS_MISSING


def call(tmp_path, stream: bool, **options):
    with engine_mock(engine="vllm", **options) as mock, \
            recording_proxy(mock.url, tmp_path, "vllm") as (proxy, exchanges):
        post(f"{proxy}/v1/completions", {"model": "tiny", "prompt": "x", "stream": stream,
                                         "max_tokens": 64})
        [ex] = arrived(exchanges)
    return ex


def test_an_engine_that_ignores_return_token_ids_is_flagged_missing(tmp_path):
    for stream in (False, True):
        ex = call(tmp_path, stream, engine_ignores_token_ids=True)
        assert ex.status == COMPLETE and ex.flags == [TOKENS_MISSING]
        assert ex.response.content  # the message-level record is still there


def test_a_streamed_logprob_left_out_is_a_mismatch(tmp_path):
    ex = call(tmp_path, True, engine_drops_logprob=True)
    assert ex.flags == [TOKENS_MISMATCH]
    assert len(ex.response.tokens.logprobs) == len(ex.response.tokens.ids) - 1  # as sent


def test_calls_that_asked_for_no_ids_are_not_flagged(tmp_path):
    with engine_mock(engine="vllm", engine_ignores_token_ids=True) as mock, \
            recording_proxy(mock.url, tmp_path, None) as (proxy, exchanges):
        post(f"{proxy}/v1/completions", {"model": "tiny", "prompt": "x"})
        [ex] = arrived(exchanges)
    assert ex.flags == [] and ex.response.tokens is None


def test_weight_version_header_then_engine_then_session():
    ex = Exchange(dialect="sglang.generate", response=Response(extras={"weight_version": 7}))
    assert weight_version(ex) == "7"
    ex.request_headers = {"x-weight-version": "step-9"}
    assert weight_version(ex) == "step-9"
    assert weight_version(Exchange(dialect="openai.chat")) is None
