"""`--format tokens`: a thread's engine tokens merged into rows by the prefix rule, through a
real store and the export entry point; and one row from a real vLLM answer."""

from __future__ import annotations

import io

import orjson
from vllm_data import body, decode

from forge_record.exporters import export
from forge_record.records import (
    Exchange,
    Message,
    Request,
    Response,
    Session,
    Text,
    Tokens,
    ToolCall,
    ToolResult,
)
from forge_record.store import open_store

SID = "0198c0de-aaaa-7000-8000-00000000e002"
ASK = Message(role="user", content=[Text(text="list the files")])
CALL = ToolCall(id="call_1", name="run_shell", arguments={"command": "ls"},
                arguments_raw='{"command": "ls"}')
RESULT = Message(role="tool", content=[ToolResult(tool_call_id="call_1",
                                                  content=[Text(text="README.md")])])
MORE = Message(role="user", content=[Text(text="and the tests?")])


def call(seq: int, messages: list[Message], answer: list, tokens: Tokens | None,
         headers: dict[str, str] | None = None) -> Exchange:
    return Exchange(seq=seq, dialect="openai.chat", url="http://127.0.0.1/v1/chat/completions",
                    http_status=200, started_at=float(seq), ended_at=seq + 0.5,
                    request_headers=headers or {},
                    request=Request(model="tiny", messages=messages),
                    response=Response(model="tiny", content=answer, stop_reason="stop",
                                      tokens=tokens))


def exported(tmp_path, exchanges: list[Exchange], tags=None):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with open_store(url) as store:
        store.add_session(Session(id=SID, started_at=0.0, tags=tags or {}))
        for ex in exchanges:
            store.add_exchange(SID, ex)
        store.end_session(SID, 10.0, 0)
        out = io.BytesIO()
        tally = export(store, "tokens", out)
    return [orjson.loads(line) for line in out.getvalue().splitlines()], tally


def test_calls_that_extend_the_prefix_merge_and_a_break_starts_a_segment(tmp_path):
    tool_round = [ASK, Message(role="assistant", content=[CALL]), RESULT]
    exchanges = [
        call(1, [ASK], [CALL], Tokens(prompt_ids=[1, 2, 3], ids=[10, 11, 2],
                                      logprobs=[-0.1, -0.2, -0.3]),
             {"x-weight-version": "step-7"}),
        call(2, tool_round, [Text(text="done")],
             Tokens(prompt_ids=[1, 2, 3, 10, 11, 2, 20, 21], ids=[30, 2], logprobs=[-0.5, -0.6])),
        # the answer came back re-tokenized: 10, 11 became 12, so the prefix breaks
        call(3, [*tool_round, Message(role="assistant", content=[Text(text="done")]), MORE],
             [Text(text="ok")], Tokens(prompt_ids=[1, 2, 3, 12, 2, 20, 21, 30, 2, 40],
                                       ids=[50, 2], logprobs=[-0.7, -0.8])),
    ]
    lines, tally = exported(tmp_path, exchanges, tags={"group_id": "g1", "task_id": "t9"})
    assert [(line["thread"], line["segment"], line["seqs"]) for line in lines] == [
        ("main", 0, [1, 2]), ("main", 1, [3])]
    first, second = lines
    assert first["prompt_ids"] == [1, 2, 3]
    assert first["response_ids"] == [10, 11, 2, 20, 21, 30, 2]
    assert first["response_mask"] == [1, 1, 1, 0, 0, 1, 1]
    assert first["rollout_log_probs"] == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.5, -0.6]
    assert first["weight_versions"] == ["step-7", None]
    assert (first["group_id"], first["task_id"]) == ("g1", "t9")
    assert second["prompt_ids"] == [1, 2, 3, 12, 2, 20, 21, 30, 2, 40]
    assert second["response_mask"] == [1, 1]
    for line in lines:
        assert len(line["response_mask"]) == len(line["response_ids"])
        assert len(line["rollout_log_probs"]) == len(line["response_ids"])
    assert tally.converted["calls merged into the previous call's row"] == 1
    assert tally.converted["prefix breaks (a new segment)"] == 1


def test_a_call_without_engine_tokens_is_counted_not_guessed(tmp_path):
    lines, tally = exported(tmp_path, [call(1, [ASK], [Text(text="hi")], None)])
    assert lines == []
    assert tally.skipped["calls without engine tokens"] == 1


def test_a_real_vllm_answer_is_one_row(tmp_path):
    response = decode("chat_json_tool")[0]
    request = orjson.loads(body("chat_json_tool.request"))
    ex = call(1, [ASK], response.content, response.tokens)
    [line], _ = exported(tmp_path, [ex])
    assert line["prompt_ids"] == response.tokens.prompt_ids
    assert line["response_ids"] == response.tokens.ids
    assert line["response_mask"] == [1] * len(response.tokens.ids)
    assert len(line["response_ids"]) == request["max_tokens"]  # it stopped at the limit
