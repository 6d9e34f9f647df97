"""The real Codex, unmodified, through `forge-record run --engine vllm` and the Responses
bridge: against the mock engine (an exec_command round trip the random model cannot make)
over both of Codex's transports, and against the real vLLM with its tiny model over the
WebSocket of the built-in provider. Each run exits 0, the record holds each call twice (the
agent's Responses exchange with the engine's tokens, the engine's Chat Completions exchange),
and the tokens export is consistent."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from codex_cli import CUSTOM_PROVIDER, codex_env, forge  # noqa: F401 - fixture

from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.mock import engine as mock_engine

pytestmark = [pytest.mark.slow, pytest.mark.cli]


def codex_through_the_bridge(env: dict, engine: str, prompt: str):
    return forge(env, "run", "--engine", "vllm", "--upstream", f"api.openai.com={engine}",
                 "--", "codex", "exec", "--skip-git-repo-check",
                 "--dangerously-bypass-approvals-and-sandbox", "--color", "never",
                 "-m", "gpt-5.4", prompt, timeout=600)


def check_the_record(env: dict, scheme: str) -> list[dict]:
    """Both records of each bridged call, linked, with the engine's tokens on the agent's;
    the tokens export's rows well formed. The agent's model calls, in order."""
    session = orjson.loads(forge(env, "show", "last", "--json").stdout)
    assert session["exit_code"] == 0
    exchanges = session["exchanges"]
    agent = [e for e in exchanges if e["kind"] == "model"]
    engine = {f: e for e in exchanges if e["kind"] == "engine" for f in e["flags"]
              if f.startswith("bridge:")}
    assert agent
    for ex in agent:
        assert ex["url"].startswith(scheme) and ex["dialect"] == "openai.responses"
        assert ex["status"] == "complete" and "bridged" in ex["flags"], ex["flags"]
        assert "bridge_dropped_tool:web_search" in ex["flags"]  # Codex always offers it
        [link] = [f for f in ex["flags"] if f.startswith("bridge:")]
        pair = engine[link]
        assert pair["dialect"] == "openai.chat" and pair["status"] == "complete"
        assert ex["response"]["tokens"] == pair["response"]["tokens"]
        tokens = ex["response"]["tokens"]
        assert tokens["prompt_ids"] and tokens["ids"]
        assert len(tokens["ids"]) == len(tokens["logprobs"])
    out = forge(env, "export", "--format", "tokens")
    assert out.returncode == 0, out.stderr
    rows = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert rows
    for row in rows:
        assert len(row["response_ids"]) == len(row["response_mask"]) == len(
            row["rollout_log_probs"])
    assert sorted(s for row in rows for s in row["seqs"]) == sorted(e["seq"] for e in agent)
    return agent


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_codex_does_a_tool_round_trip_against_the_mock_engine(codex_env, transport):  # noqa: F811
    if transport == "http":  # a custom provider: HTTP SSE; else the built-in one: WebSocket
        (Path(codex_env["CODEX_HOME"]) / "config.toml").write_text(CUSTOM_PROVIDER)
    with MockUpstream(routes=list(mock_engine.ROUTES)) as engine:
        proc = codex_through_the_bridge(codex_env, engine.url, f"Run the {TOOL_MARKER} command")
        assert proc.returncode == 0, proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout  # Codex ran the engine's call
        chats = [orjson.loads(r.body) for r in engine.requests
                 if r.path == "/v1/chat/completions"]
    assert len(chats) >= 2 and chats[-1]["messages"][-1]["role"] == "tool"
    # the call after the tool ran holds the whole context, though over the WebSocket Codex
    # sent only the tool's output and previous_response_id
    assert chats[-1]["messages"][:len(chats[0]["messages"])] == chats[0]["messages"]
    agent = check_the_record(codex_env, "https" if transport == "http" else "wss")
    calls = [b for ex in agent for b in ex["response"]["content"] if b["type"] == "tool_call"]
    assert calls and calls[0]["name"] == "exec_command"


@pytest.mark.engine
def test_codex_runs_against_a_real_vllm(codex_env, vllm_url):  # noqa: F811
    proc = codex_through_the_bridge(codex_env, vllm_url, "Say hello.")
    assert proc.returncode == 0, proc.stderr
    check_the_record(codex_env, "wss")
