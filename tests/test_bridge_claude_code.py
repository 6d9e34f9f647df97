"""The real Claude Code, unmodified, through `forge-record run --engine vllm` and the dialect
bridge: against the mock engine (a scripted Bash round trip the random model cannot make) and
against the real vLLM with its tiny model (ROLLOUTS.md §5: it ends its turn at once). Each run
exits 0, the record holds each call twice (the agent's Anthropic exchange with the engine's
tokens, the engine's Chat Completions exchange), and the tokens export is consistent."""

from __future__ import annotations

import orjson
import pytest
from claude_code_cli import claude_env, forge  # noqa: F401 - fixture

from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.mock import engine as mock_engine

pytestmark = [pytest.mark.slow, pytest.mark.cli]


def claude_through_the_bridge(env: dict, engine: str, prompt: str, *options: str):
    return forge(env, "run", "--engine", "vllm", "--upstream", f"api.anthropic.com={engine}",
                 *options, "--", "claude", "-p", prompt, "--dangerously-skip-permissions",
                 timeout=600)


def check_the_record(env: dict) -> list[dict]:
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
        assert ex["status"] == "complete" and "bridged" in ex["flags"], ex["flags"]
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


def test_claude_code_does_a_tool_round_trip_against_the_mock_engine(claude_env):  # noqa: F811
    with MockUpstream(routes=list(mock_engine.ROUTES)) as engine:
        proc = claude_through_the_bridge(claude_env, engine.url,
                                         f"Run the {TOOL_MARKER} command")
        assert proc.returncode == 0, proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout  # Claude Code ran the engine's call
        chats = [r for r in engine.requests if r.path == "/v1/chat/completions"]
        assert len(chats) >= 2
    agent = check_the_record(claude_env)
    calls = [b for ex in agent for b in ex["response"]["content"] if b["type"] == "tool_call"]
    assert calls and calls[0]["name"] == "Bash"


@pytest.mark.engine
def test_claude_code_runs_against_a_real_vllm(claude_env, vllm_url):  # noqa: F811
    """The tiny model ends its turn with `<|endoftext|>` (id 0) under greedy decoding, and a
    CPU makes 2 tokens a second at Claude Code's ~18k-token prompt: the trainer's pinned
    sampling (`--engine-param`) makes each call one token, and Claude Code's own setting
    keeps its max_tokens under the engine's context."""
    env = {**claude_env, "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "512"}
    proc = claude_through_the_bridge(env, vllm_url, "Say hello.", "--engine-param",
                                     "temperature=0", "--engine-param", "stop_token_ids=[0]")
    assert proc.returncode == 0, proc.stderr
    check_the_record(env)
