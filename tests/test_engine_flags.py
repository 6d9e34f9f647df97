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


def test_run_warns_once_per_session(capsys):
    from forge_record.commands.run import _warn_tokens

    # run counts each flag over the session's exchanges (lineage.tally, or read back)
    _warn_tokens({TOKENS_MISSING: 3, "bridged": 1})
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "3 engine calls answered without the token ids" in err


def test_show_prints_the_drift_alarm():
    from forge_record.exporters.tokens import drift
    from forge_record.lineage import analyze
    from forge_record.records import Message, Request, Session, Text, Tokens
    from forge_record.viewer import build_view
    from forge_record.viewer.terminal import render_text

    def ex(seq, prompt, ids, said):
        turns = [Message(role=role, content=[Text(text=t)]) for t in said
                 for role in ("user", "assistant")][:-1]  # each answer was "ok"
        for turn in turns[1::2]:
            turn.content = [Text(text="ok")]
        return Exchange(seq=seq, dialect="openai.chat", http_status=200, started_at=seq,
                        request=Request(model="m", messages=turns),
                        response=Response(content=[Text(text="ok")], stop_reason="stop",
                                          tokens=Tokens(prompt_ids=prompt, ids=ids)))
    calls = [ex(1, [1, 2], [3], ["a"]), ex(2, [1, 2, 3, 4], [5], ["a", "b"]),
             ex(3, [9, 9], [5], ["a", "b", "c"])]
    assert drift(calls, analyze(calls)) == {"calls": 3, "merged": 1, "prefix_breaks": 1,
                                            TOKENS_MISSING: 0, TOKENS_MISMATCH: 0}
    session = Session(id="0198c0de-aaaa-7000-8000-00000000e009", started_at=0.0)
    text = "\n".join(render_text(build_view(session, calls)))
    assert "engine tokens: 3 calls · 1 merged · 1 prefix break" in text
