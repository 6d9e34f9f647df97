"""The real Claude Code CLI delegating to a subagent, recorded through `forge-record run`.

The mock (`subagent_script`) makes the main agent call its `Agent` tool; Claude Code starts a
subagent, whose own calls (with `x-claude-code-agent-id`) run a Bash command and answer; the
parent continues with the subagent's result. The stored session must hold two threads: the
main one and the subagent's, linked to the main call whose `Agent` tool call spawned it.
Run interactively, Claude Code also has a small model name the session: that call must be a
side call of kind "title", outside both threads.
"""

from __future__ import annotations

import orjson
import pytest
from claude_code_cli import claude_env, forge, interactive_claude  # noqa: F401 - fixture

from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.mock.anthropic import AGENT_TOOL, SUBAGENT_MARKER, subagent_script

pytestmark = [pytest.mark.slow, pytest.mark.cli]

PROMPT = f"Delegate the {SUBAGENT_MARKER} task"


def test_subagent_thread_is_linked_to_the_agent_tool_call(claude_env):  # noqa: F811
    with MockUpstream(options={"anthropic_script": subagent_script}) as mock:
        proc = forge(claude_env, "run", "--upstream", f"api.anthropic.com={mock.url}", "--",
                     "claude", "-p", PROMPT, "--dangerously-skip-permissions")
        assert proc.returncode == 0, proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout  # the subagent's Bash call ran
    session = orjson.loads(forge(claude_env, "show", "last", "--json").stdout)
    main, sub = check_two_threads(session)
    assert all(e["role"] in ("main", "subagent") for e in session["exchanges"])

    text = forge(claude_env, "show", "last").stdout
    spawn_line = text.index(f"→ {AGENT_TOOL} ")
    sub_line = text.index(f"\n    thread {sub['id']} · spawned by #{sub['spawned_by'][0]}")
    final_line = text.index(f"\n#{main['calls'][-1]} ")
    assert spawn_line < sub_line < final_line  # indented under the call that spawned it


def test_interactive_title_call_is_a_side_call(claude_env, tmp_path):  # noqa: F811
    work = tmp_path / "work"
    work.mkdir()
    with MockUpstream(options={"anthropic_script": subagent_script}) as mock:
        exit_code, screen = interactive_claude(
            claude_env, work, mock.url, PROMPT,
            lambda screen: screen.wait_for(b"subagent reported", timeout=90))
    assert exit_code == 0, screen.text[-2000:]
    session = orjson.loads(forge(claude_env, "show", "last", "--json").stdout)
    check_two_threads(session)
    titles = [e for e in session["exchanges"] if e["side_kind"] == "title"]
    assert titles, [(e["seq"], e["role"], e["request"]["model"]) for e in session["exchanges"]]
    for e in titles:
        assert (e["thread"], e["role"], e["request"]["tools"]) == ("side", "side", [])
    side = next(t for t in session["lineage"]["threads"] if t["id"] == "side")
    assert side["calls"] == [e["seq"] for e in session["exchanges"] if e["role"] == "side"]
    text = forge(claude_env, "show", "last").stdout
    assert f"\n  #{titles[0]['seq']} title · " in text  # folded to one line


def check_two_threads(session: dict) -> tuple[dict, dict]:
    """The main thread and the subagent's, linked; returns them."""
    threads = {t["id"]: t for t in session["lineage"]["threads"] if t["role"] != "side"}
    by_seq = {e["seq"]: e for e in session["exchanges"]}
    [agent_id] = {e["request_headers"]["x-claude-code-agent-id"]
                  for e in session["exchanges"] if "x-claude-code-agent-id" in e["request_headers"]}
    assert set(threads) == {"main", f"subagent-{agent_id}"}
    main, sub = threads["main"], threads[f"subagent-{agent_id}"]
    assert main["role"] == "main" and sub["role"] == "subagent"
    assert len(sub["calls"]) == 2 and len(main["calls"]) == 2
    assert all(by_seq[s]["thread"] == sub["id"] for s in sub["calls"])
    # the subagent's second call continues its first; the parent's second continues its first
    assert [by_seq[s]["parent"] for s in sub["calls"]] == [None, sub["calls"][0]]
    assert [by_seq[s]["parent"] for s in main["calls"]] == [None, main["calls"][0]]
    # spawned by the main call that made the Agent tool call
    spawner, call_id = sub["spawned_by"]
    assert sub["parent_thread"] == "main" and spawner == main["calls"][0]
    [agent_call] = [b for b in by_seq[spawner]["response"]["content"] if b["type"] == "tool_call"]
    assert (agent_call["name"], agent_call["id"]) == (AGENT_TOOL, call_id)
    # the subagent's calls happen between the spawn and the parent's next call
    assert main["calls"][0] < sub["calls"][0] < sub["calls"][1] < main["calls"][1]
    return main, sub
