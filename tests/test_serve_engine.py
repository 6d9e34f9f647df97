"""`forge-record serve --engine auto` in front of the mock's vLLM side: the probe finds it
once at start, sessions are tagged with it, a Completions call through a session is asked
for tokens, the SDK gets its plain answer, and the record holds the engine's ids; the
session's `weight_version` metadata reaches the tokens export, whose rows the trajectory
endpoint serves too."""

from __future__ import annotations

import io

import anthropic
import openai
import orjson
import pytest
from engine_mock import scripted_engine
from serve_gateway import Served

from forge_record.exporters import export
from forge_record.mock import MockUpstream
from forge_record.mock import engine_tokens as tok
from forge_record.store import open_store

pytestmark = pytest.mark.slow  # a gateway process and its writer


def test_serve_detects_the_engine_and_records_its_tokens(tmp_path):
    db = f"sqlite:///{tmp_path / 'gw.db'}"
    with MockUpstream(options={"engine": "vllm"}) as mock:
        gw = Served(tmp_path / "gw", db, [mock.url], extra=("--top-logprobs", "1"))
        try:
            said = [line for line in gw.log if "upstream http" in line]
            assert len(said) == 1 and "vllm 0.32.0" in said[0], gw.log
            s = gw.client.create_session("generic", metadata={"weight_version": "w-3"})
            sdk = openai.OpenAI(api_key=s["token"], base_url=f"{gw.url}/v1", max_retries=0)
            reply = sdk.completions.create(model="tiny", prompt="hi", max_tokens=64)
            assert reply.choices[0].text == tok.ANSWER
            assert reply.choices[0].model_extra.get("token_ids") is None  # not asked
            gw.client.finish(s["id"], "done", 0)
            [item] = gw.client.trajectories()["items"]
        finally:
            assert gw.stop() == 0, "".join(gw.log)
    sent = mock.requests[-1].json()
    assert sent["return_token_ids"] is True and sent["logprobs"] == 1
    with open_store(db) as store:
        session = store.get_session(s["id"])
        [ex] = list(store.iter_exchanges(s["id"]))
        out = io.BytesIO()
        export(store, "tokens", out)
    assert session.tags["engine"] == "vllm" and session.tags["engine_version"] == "0.32.0"
    assert session.tags["weight_version"] == "w-3"
    assert ex.dialect == "openai.completions" and ex.flags == []
    assert ex.response.tokens.ids == tok.encode(tok.ANSWER)
    assert ex.response.tokens.prompt_ids == tok.encode("hi")
    [row] = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert row["weight_versions"] == ["w-3"]  # no header, no engine's own: the session's
    assert row["response_ids"] == tok.encode(tok.ANSWER)
    assert item["tokens"] == [row]  # the trainer pulls the same rows as the export writes


BASH = {"name": "Bash", "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
SCRIPT = [{"text": "Let me look.", "tool_calls": [{"name": "Bash",
                                                   "arguments": {"command": "ls"}}]},
          {"text": "There is a README."}]
ASK = [{"role": "user", "content": "What is here?"}]


def test_serve_bridges_a_claude_code_session_to_the_engine(tmp_path):
    """An Anthropic Messages rollout through `serve --engine vllm`: each call is translated
    for the engine and back, recorded twice, and the trainer pulls one merged token row."""
    db = f"sqlite:///{tmp_path / 'gw.db'}"
    with scripted_engine(SCRIPT) as engine:
        gw = Served(tmp_path / "gw", db, [engine.url], extra=("--engine", "vllm"))
        try:
            s = gw.client.create_session("claude-code")
            sdk = anthropic.Anthropic(api_key=s["token"], max_retries=0,
                                      base_url=s["env"]["ANTHROPIC_BASE_URL"])
            first = sdk.messages.create(model="claude-sonnet-4-5", max_tokens=200,
                                        messages=ASK, tools=[BASH])
            [call] = [b for b in first.content if b.type == "tool_use"]
            history = [*ASK, {"role": "assistant",
                              "content": [b.model_dump() for b in first.content]},
                       {"role": "user", "content": [{"type": "tool_result",
                                                     "tool_use_id": call.id,
                                                     "content": "README.md"}]}]
            second = sdk.messages.create(model="claude-sonnet-4-5", max_tokens=200,
                                         messages=history, tools=[BASH])
            assert second.content[0].text == "There is a README."
            gw.client.finish(s["id"], "done", 0)
            [item] = gw.client.trajectories()["items"]
        finally:
            assert gw.stop() == 0, "".join(gw.log)
    asked = [r.json() for r in engine.requests if r.path == "/v1/chat/completions"]
    assert [a["model"] for a in asked] == ["mock-engine"] * 2  # the engine's, not Claude's
    assert all(a["return_token_ids"] is True for a in asked)
    with open_store(db) as store:
        records = list(store.iter_exchanges(s["id"]))
    agents = [r for r in records if r.kind == "model"]
    assert len(records) == 4 and len(agents) == 2
    # each call's first record takes the number reserved as it started; the extra one (the
    # agent's, handed over after the engine's) the next one as it ends: no gap is left
    assert [r.seq for r in records] == [1, 2, 3, 4] and item["missing_calls"] == []
    assert all("bridged" in r.flags and r.response.tokens.ids for r in agents)
    [row] = item["tokens"]  # the second call's prompt extends the first: one row
    assert row["seqs"] == [r.seq for r in agents]
    assert len(row["response_ids"]) == len(row["response_mask"]) == len(
        row["rollout_log_probs"])
