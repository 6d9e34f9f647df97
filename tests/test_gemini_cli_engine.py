"""The real Gemini CLI bridged to an engine: `forge-record run --engine vllm` in front of the
mock engine (a function-call round trip the random model cannot make) and of the real vLLM
(`-m engine`: one turn, exit 0, token ids recorded, the tokens export consistent).

The real tiny model serves 2048 tokens of context, and Gemini CLI's own prompt is ~47 KB
(a long system prompt and 16 tools), so that run gives it a one-line system prompt
(GEMINI_SYSTEM_MD) and the shell tool only (`tools.core`): about 3 KB, well inside."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from gemini_cli import SETTINGS, gemini_env  # noqa: F401 - fixture

from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.mock import engine as mock_engine

pytestmark = [pytest.mark.slow, pytest.mark.cli]

FORGE = str(Path(sys.executable).with_name("forge-record"))
HOST = "generativelanguage.googleapis.com"
COMMAND = f"printf '%s-output-%d\\n' {TOOL_MARKER} 42"  # Gemini CLI refuses $((...))
SCRIPT = [{"text": "I'll run that command.",
           "tool_calls": [{"name": "run_shell_command", "arguments": {"command": COMMAND}}]},
          {"text": "The command ran."}]


def forge(env, *args, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=Path(env["TMPDIR"]) / "work")


def gemini(env, engine_url: str, prompt: str) -> subprocess.CompletedProcess:
    return forge(env, "run", "--mode", "reverse", "--engine", "vllm",
                 "--upstream", f"{HOST}={engine_url}", "--",
                 "gemini", "-p", prompt, "--yolo", "-m", "gemini-2.5-flash")


def recorded(env) -> tuple[dict, list[dict], list[dict]]:
    """The last session, its Gemini model calls and its engine records."""
    shown = forge(env, "show", "last", "--json")
    assert shown.returncode == 0, shown.stderr
    session = orjson.loads(shown.stdout)
    agent = [e for e in session["exchanges"] if e["dialect"] == "gemini.generate"
             and e["kind"] == "model"]
    engine = [e for e in session["exchanges"] if e["kind"] == "engine"]
    return session, agent, engine


def token_rows(env) -> list[dict]:
    """`export --format tokens`, each row checked: one mask and logprob per response id."""
    out = forge(env, "export", "--format", "tokens", "--session", "last")
    assert out.returncode == 0, out.stderr
    rows = [orjson.loads(line) for line in out.stdout.splitlines()]
    for row in rows:
        assert len(row["response_ids"]) == len(row["response_mask"]), row["seqs"]
        assert len(row["response_ids"]) == len(row["rollout_log_probs"]), row["seqs"]
    return rows


def check_rows_reproduce_prompts(rows: list[dict], agent: list[dict]) -> None:
    """Each call merged into a row has its prompt ids where the row says: the row's prompt
    and response ids up to that call, exactly; and its own sampled ids after them."""
    by_seq = {e["seq"]: e["response"]["tokens"] for e in agent}
    for row in rows:
        ids = row["prompt_ids"] + row["response_ids"]
        for seq in row["seqs"]:
            tokens = by_seq[seq]
            n = len(tokens["prompt_ids"])
            assert ids[:n] == tokens["prompt_ids"], seq
            assert ids[n:n + len(tokens["ids"])] == tokens["ids"], seq


def test_gemini_cli_makes_a_tool_round_trip_through_the_bridge(gemini_env):
    with MockUpstream(routes=list(mock_engine.ROUTES),
                      options={"engine_script": SCRIPT}) as engine:
        proc = gemini(gemini_env, engine.url, f"Run the {TOOL_MARKER} command")
        sent = [(r.path, orjson.loads(r.body) if r.body else None) for r in engine.requests]
    assert proc.returncode == 0, proc.stderr
    assert "The command ran." in proc.stdout
    chats = [body for path, body in sent if path == "/v1/chat/completions"]
    assert len(chats) >= 2 and all(b["model"] == "mock-engine" for b in chats)
    tool_answer = next(m for m in chats[1]["messages"] if m["role"] == "tool")
    assert f"{TOOL_MARKER}-output-42" in tool_answer["content"]

    session, agent, engine_side = recorded(gemini_env)
    assert session["exit_code"] == 0 and len(engine_side) == len(agent) >= 2
    assert all(e["status"] == "complete" and "bridged" in e["flags"] for e in agent)
    assert all(e["response"]["tokens"]["ids"] for e in agent)
    rows = token_rows(gemini_env)
    assert sum(len(r["seqs"]) for r in rows) == len(agent)
    check_rows_reproduce_prompts(rows, agent)


@pytest.mark.engine
def test_gemini_cli_runs_against_the_real_vllm(gemini_env, vllm_url, tmp_path):  # noqa: F811
    home = Path(gemini_env["HOME"])
    settings = {**SETTINGS, "tools": {"core": ["run_shell_command"]}}
    (home / ".gemini" / "settings.json").write_bytes(orjson.dumps(settings))
    system = tmp_path / "system.md"
    system.write_text("You are a coding agent. Use run_shell_command to run commands.\n")
    env = {**gemini_env, "GEMINI_SYSTEM_MD": str(system)}
    proc = gemini(env, vllm_url, "Say hello.")
    assert proc.returncode == 0, proc.stderr[-3000:]

    session, agent, engine_side = recorded(env)
    assert session["exit_code"] == 0 and agent and len(engine_side) == len(agent)
    for call in agent:
        assert call["status"] == "complete" and "bridged" in call["flags"], call["flags"]
        tokens = call["response"]["tokens"]
        assert tokens["prompt_ids"] and tokens["ids"]
        assert len(tokens["ids"]) == len(tokens["logprobs"])
    rows = token_rows(env)
    assert sum(len(r["seqs"]) for r in rows) == len(agent)
    check_rows_reproduce_prompts(rows, agent)
