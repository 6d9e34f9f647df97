"""The real vLLM beyond chat: detection by `/version`, Completions streamed and whole through
the recording proxy (the prompt ids equal the engine's `/tokenize` of the prompt, the agent's
answer equals a direct call's), `doctor --engine` naming the logprob mode and why, and
`serve` (engine auto-detected) with the openai SDK's chat through a session."""

from __future__ import annotations

import json
import re

import openai
import pytest
from click.testing import CliRunner
from engine_mock import arrived, post, recording_proxy
from serve_gateway import Served

from forge_record import engine_probe
from forge_record.commands.doctor import doctor
from forge_record.records import COMPLETE
from forge_record.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.engine]

PROMPT = "def main():\n    "
_PER_CALL = re.compile(rb'"(id|created)":("[^"]*"|\d+)')


def test_vllm_is_detected_by_its_version(vllm_url):  # noqa: F811
    found = engine_probe.probe(vllm_url + "/v1")
    assert (found.name, found.version, found.models) == ("vllm", "0.32.0", ["tiny"])


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("agent", [{}, {"logprobs": 1}], ids=["nothing", "logprobs-1"])
def test_completions_through_the_proxy(vllm_url, tmp_path, stream, agent):  # noqa: F811
    with recording_proxy(vllm_url, tmp_path, "vllm", top_logprobs=2) as (proxy, exchanges):
        call = {"model": "tiny", "prompt": PROMPT, "stream": stream, "max_tokens": 12,
                "temperature": 1.0, "seed": 5, **agent}
        through = post(f"{proxy}/v1/completions", call)
        direct = post(f"{vllm_url}/v1/completions", call)
        [ex] = arrived(exchanges)
    assert _PER_CALL.sub(b"", through) == _PER_CALL.sub(b"", direct)
    assert ex.status == COMPLETE and ex.flags == [], ex.flags
    tokens = ex.response.tokens
    tokenized = json.loads(post(f"{vllm_url}/tokenize", {"model": "tiny", "prompt": PROMPT}))
    assert tokens.prompt_ids == tokenized["tokens"]
    assert len(tokens.ids) == len(tokens.logprobs) > 0
    assert all(1 <= len(top) <= 3 for top in tokens.top_logprobs)  # top 2 (+ the sampled)


def test_doctor_names_the_logprob_mode_and_why(vllm_url):  # noqa: F811
    result = CliRunner().invoke(doctor, ["--engine", vllm_url])
    print(result.output)  # the finding, in the -s or -rA log
    assert result.exit_code == 0, result.output
    assert "ok   engine: vllm 0.32.0" in result.output
    assert re.search(r"logprob mode: (raw|processed): the top-2 logprob gap is [\d.]+ at "
                     r"temperature 1 and [\d.]+ at 2", result.output), result.output


def test_serve_detects_vllm_and_records_sdk_chat_tokens(vllm_url, tmp_path):  # noqa: F811
    db = f"sqlite:///{tmp_path / 'gw.db'}"
    gw = Served(tmp_path / "gw", db, [vllm_url], upstream_key=False)
    try:
        assert any("vllm 0.32.0" in line for line in gw.log), gw.log
        s = gw.client.create_session("generic")
        sdk = openai.OpenAI(api_key=s["token"], base_url=f"{gw.url}/v1", max_retries=0,
                            timeout=300)
        messages = [{"role": "user", "content": "List the files here."}]
        reply = sdk.chat.completions.create(model="tiny", messages=messages, max_tokens=8,
                                            seed=3)
        assert reply.model_extra.get("prompt_token_ids") is None  # not asked, not seen
        chunks = list(sdk.chat.completions.create(model="tiny", messages=messages,
                                                  max_tokens=8, seed=3, stream=True))
        assert chunks
        gw.client.finish(s["id"], "done", 0)
    finally:
        assert gw.stop() == 0, "".join(gw.log)
    with open_store(db) as store:
        session = store.get_session(s["id"])
        one, two = store.iter_exchanges(s["id"])
    assert session.tags["engine"] == "vllm"
    tokenized = json.loads(post(f"{vllm_url}/tokenize", {
        "model": "tiny", "messages": messages, "add_generation_prompt": True}))["tokens"]
    for ex in (one, two):
        # The SDK closes a stream as soon as it reads `[DONE]`; on a loaded machine the
        # engine's last bytes (the chunked body's end) can come after that, and the record
        # then says the client hung up on a complete answer. Nothing else may be flagged.
        assert ex.status == "complete"
        assert set(ex.flags) <= {"aborted:Client disconnected."}, ex.flags
        assert ex.response.tokens.prompt_ids == tokenized
        assert len(ex.response.tokens.ids) == len(ex.response.tokens.logprobs) > 0
