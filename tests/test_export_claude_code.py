"""A real Claude Code session (from npm, through `forge-record run`, against the mock) exported
from the command line: the openai lines pass OpenAI's rules, the anthropic lines are the SDK's
request types, the sharegpt lines alternate, and the counts name what was left out."""

from __future__ import annotations

import orjson
import pytest
from anthropic.types import MessageParam, ToolParam
from claude_code_cli import claude_env, forge  # noqa: F401 - fixture
from export_checks import llama_factory_reads, openai_problems
from pydantic import TypeAdapter

from forge_record.mock import TOOL_MARKER, MockUpstream

pytestmark = [pytest.mark.slow, pytest.mark.cli]


@pytest.fixture
def recorded_env(claude_env):  # noqa: F811
    with MockUpstream() as mock:
        proc = forge(claude_env, "run", "--mode", "reverse", "--upstream",
                     f"api.anthropic.com={mock.url}", "--",
                     "claude", "-p", f"Run the {TOOL_MARKER} command",
                     "--dangerously-skip-permissions")
    assert proc.returncode == 0, proc.stderr
    return claude_env


def exported(env, fmt: str) -> tuple[list[dict], str]:
    proc = forge(env, "export", "--format", fmt, "--session", "last")
    assert proc.returncode == 0, proc.stderr
    return [orjson.loads(x) for x in proc.stdout.splitlines()], proc.stderr


def test_claude_code_session_exports_to_every_chat_format(recorded_env):
    [line], err = exported(recorded_env, "openai")
    assert openai_problems(line) == []
    assert "exported 1 lines (openai) from 1 sessions" in err
    roles = [m["role"] for m in line["messages"]]
    assert roles[0] == "system" and roles[-1] == "assistant" and "tool" in roles
    assert f"{TOOL_MARKER}-output-42" in line["messages"][-1]["content"]
    assert any(t["function"]["name"] == "Bash" for t in line["tools"])

    [line], _ = exported(recorded_env, "anthropic")
    TypeAdapter(list[MessageParam]).validate_python(line["messages"])
    TypeAdapter(list[ToolParam]).validate_python(line["tools"])

    [line], _ = exported(recorded_env, "sharegpt")
    assert llama_factory_reads(line) == []


def test_claude_code_session_as_calls_and_trajectory(recorded_env):
    calls, err = exported(recorded_env, "calls")
    assert {c["harness"] for c in calls} == {"claude-code"}
    assert all(c["fingerprint"]["harness"] == "claude-code" for c in calls)
    [trajectory], _ = exported(recorded_env, "trajectories")
    assert trajectory["steps"][0]["observation"], "the Bash result is the first observation"
