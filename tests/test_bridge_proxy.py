"""The bridge through the live proxy: the anthropic SDK talks Anthropic Messages to a recording
proxy in front of the mock engine (Chat Completions only, vLLM's fields), does a tool round
trip, and the record keeps both sides of each call with the engine's tokens on the agent's."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import anthropic
import orjson
import pytest
from engine_mock import bridging_proxy, prepared, scripted_engine

from forge_record.bridge.pairs import link_of
from forge_record.engine_probe import served_model
from forge_record.exporters import export
from forge_record.lineage import analyze
from forge_record.mock import MockUpstream
from forge_record.mock import engine as mock_engine
from forge_record.outcome import Failures
from forge_record.records import COMPLETE, ERROR, Session
from forge_record.store import open_store

BASH = {"name": "Bash", "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
SCRIPT = [{"text": "Let me look.", "tool_calls": [{"name": "Bash",
                                                   "arguments": {"command": "ls"}}]},
          {"text": "There is a README."}]
ASK = [{"role": "user", "content": "What is here?"}]
FORGE = str(Path(sys.executable).with_name("forge-record"))


@pytest.fixture
def engine():
    with scripted_engine(SCRIPT) as m:
        yield m


@pytest.fixture
def bridged(engine, tmp_path):
    """(client, exchanges, recorder): the SDK against a proxy bridging to the mock engine."""
    with bridging_proxy("api.anthropic.com", engine.url, tmp_path, top_logprobs=2) as (
            port, exchanges, addon):
        client = anthropic.Anthropic(api_key="sk-ant-dummy-key",
                                     base_url=f"http://127.0.0.1:{port}", max_retries=0)
        try:
            yield client, exchanges, addon
        finally:
            client.close()


def round_trip(client) -> list:
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=200, messages=ASK,
                                tools=[BASH]) as stream:
        first = stream.get_final_message()
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.input == {"command": "ls"} and first.stop_reason == "tool_use"
    history = [*ASK, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": "README.md"}]}]
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=200, messages=history,
                                tools=[BASH]) as stream:
        second = stream.get_final_message()
    assert second.content[0].text == "There is a README." and second.stop_reason == "end_turn"
    return [first, second]


def test_a_tool_round_trip_is_recorded_twice_per_call(bridged, engine, tmp_path):
    client, exchanges, _ = bridged
    first, _ = round_trip(client)
    records = prepared(exchanges.wait(4))
    assert len(records) == 4
    engine_side = [r for r in records if r.kind == "engine"]
    agent_side = [r for r in records if r.kind == "model"]
    assert len(engine_side) == len(agent_side) == 2
    for agent, sent in zip(agent_side, engine.requests, strict=True):
        [pair] = [e for e in engine_side if link_of(e) == link_of(agent)]
        assert agent.status == pair.status == COMPLETE, (agent.flags, pair.flags)
        assert agent.dialect == "anthropic.messages" and "bridged" in agent.flags
        assert pair.dialect == "openai.chat" and pair.url.endswith("/v1/chat/completions")
        assert pair.raw_request == sent.body  # what the engine was asked, byte for byte
        assert orjson.loads(sent.body)["model"] == "mock-engine"
        tokens = agent.response.tokens
        assert tokens == pair.response.tokens and tokens.prompt_ids
        assert tokens.prompt_ids == mock_engine.tokenize(mock_engine.render(
            orjson.loads(sent.body)["messages"], orjson.loads(sent.body)["tools"]))
        assert len(tokens.ids) == len(tokens.logprobs) == len(tokens.top_logprobs)
        assert agent.response.usage.input_tokens == len(tokens.prompt_ids)
    # The agent's raw response is what the SDK read: Anthropic events, not the engine's chunks
    assert agent_side[0].raw_response.startswith(b"event: message_start\n")
    assert agent_side[0].response.content[-1].id == first.content[-1].id

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with open_store(url) as store:
        store.add_session(Session(id="s1", started_at=0.0))
        for record in records:
            store.add_exchange("s1", record)
        store.end_session("s1", 1.0, 0)
        lineage = analyze(list(store.iter_exchanges("s1")))
        out = io.BytesIO()
        export(store, "tokens", out)
    main = {c.thread for c in lineage.calls.values() if c.role == "main"}
    assert len(main) == 1
    assert sorted(c.side_kind for c in lineage.calls.values() if c.role == "side") == [
        "engine", "engine"]
    [row] = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert row["seqs"] == sorted(r.seq for r in agent_side)  # merged by the prefix rule
    assert len(row["response_ids"]) == len(row["response_mask"]) == len(row["rollout_log_probs"])
    assert row["response_mask"].count(1) == sum(len(r.response.tokens.ids) for r in agent_side)


def test_an_untranslatable_call_gets_a_400_and_is_counted(bridged, engine):
    client, exchanges, addon = bridged
    with pytest.raises(anthropic.BadRequestError, match="web_search"):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=ASK,
                               tools=[{"type": "web_search_20250305", "name": "web_search"}])
    [record] = prepared(exchanges.wait(1))
    assert addon.untranslatable == 1 and "untranslatable" in record.flags
    failures = Failures()
    failures(record)
    assert failures.summary() == "1 call failed: untranslatable for the engine"
    assert record.status == ERROR and record.http_status == 400
    assert record.response.error["type"] == "invalid_request_error"  # the 400 is recorded
    assert "decode_error" not in record.flags
    assert not engine.requests  # the engine was never asked


def test_an_engine_error_reaches_the_agent_in_its_dialect(bridged, engine):
    client, exchanges, _ = bridged
    engine.routes.insert(0, ("POST", lambda p: True, lambda m, r: mock_engine.Reply.json(
        {"error": {"message": "model overloaded", "type": "ServiceUnavailable", "code": 503}},
        503)))
    with pytest.raises(anthropic.APIStatusError, match="model overloaded") as caught:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=ASK)
    assert caught.value.status_code == 503
    records = prepared(exchanges.wait(2))
    assert {r.status for r in records} == {ERROR}


def test_a_whole_answer_is_bridged_too(bridged):
    client, exchanges, _ = bridged
    message = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, messages=ASK,
                                     tools=[BASH])
    assert message.content[-1].input == {"command": "ls"}
    agent = [r for r in prepared(exchanges.wait(2)) if r.kind == "model"][0]
    assert agent.status == COMPLETE and agent.response.tokens.ids


def test_count_tokens_is_the_engine_s_count_of_the_rendered_prompt(bridged, engine):
    client, exchanges, _ = bridged
    counted = client.messages.count_tokens(model="claude-sonnet-4-5", messages=ASK,
                                           tools=[BASH])
    [sent] = engine.requests
    assert sent.path == "/tokenize"
    asked = orjson.loads(sent.body)
    assert counted.input_tokens == len(mock_engine.tokenize(
        mock_engine.render(asked["messages"], asked["tools"])))
    [record] = prepared(exchanges.wait(1))
    assert record.kind == "side" and record.status == COMPLETE, record.flags
    assert "bridged" in record.flags and "tokens:missing" not in record.flags


def test_run_asks_the_engine_which_model_it_serves(engine):
    assert served_model(["http://127.0.0.1:9/v1", engine.url]) == "mock-engine"
    assert served_model(["http://127.0.0.1:9"]) is None


def test_run_bridges_a_messages_agent_to_an_engine(tmp_path):
    """`forge-record run --engine` end to end: the writer process joins each call's two
    records, and the tokens export merges the round trip into one row."""
    env = {**os.environ, "FORGE_RECORD_HOME": str(tmp_path / "home")}
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        env.pop(var, None)
    with MockUpstream(routes=list(mock_engine.ROUTES)) as engine:
        proc = subprocess.run(
            [FORGE, "run", "--harness", "generic", "--engine", "vllm", "--upstream",
             f"api.anthropic.com={engine.url}", "--", sys.executable, "-m",
             "forge_record.mock.client"],
            env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        assert "forge-record-e2e-output-42" in proc.stdout
        asked = [orjson.loads(r.body)["model"] for r in engine.requests if r.method == "POST"]
        assert asked == ["mock-engine"] * 2  # the name /v1/models gave
    out = subprocess.run([FORGE, "export", "--format", "tokens"], env=env, capture_output=True,
                         timeout=60, check=True).stdout
    [row] = [orjson.loads(line) for line in out.splitlines()]
    assert len(row["seqs"]) == 2 and row["response_mask"].count(0) > 0
    assert len(row["response_ids"]) == len(row["response_mask"]) == len(row["rollout_log_probs"])
