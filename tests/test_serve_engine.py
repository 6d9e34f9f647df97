"""`forge-record serve --engine auto` in front of the mock's vLLM side: the probe finds it
once at start, sessions are tagged with it, a Completions call through a session is asked
for tokens, the SDK gets its plain answer, and the record holds the engine's ids; the
session's `weight_version` metadata reaches the tokens export, whose rows the trajectory
endpoint serves too."""

from __future__ import annotations

import io

import openai
import orjson
import pytest
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
