"""A real Claude Code compaction, offline, recorded as one session.

One `forge-record run` wraps three Claude Code runs: a first prompt (a Bash call and an
answer), `claude -p /compact --continue` (Claude Code's compaction call: the history again,
with its summary instruction appended to the last user message; the mock answers with a
`<summary>`), and a second prompt with `--continue`, whose requests open with "This session
is being continued from a previous conversation…" and the summary. The session must show the
compaction as a side call summing up the main thread, and the requests after it as a new
segment of that thread, linked to the compaction call.
"""

from __future__ import annotations

import orjson
import pytest
from claude_code_cli import claude_env, forge  # noqa: F401 - the fixture

from forge_record.lineage.signals import CONTINUATION_PREFIX
from forge_record.mock import TOOL_MARKER, MockUpstream

pytestmark = [pytest.mark.slow, pytest.mark.cli]

RUNS = (f'claude -p "Run the {TOOL_MARKER} command" --dangerously-skip-permissions; '
        "claude -p /compact --continue --dangerously-skip-permissions; "
        f'claude -p "Run the {TOOL_MARKER} command again" --continue '
        "--dangerously-skip-permissions")


def test_compaction_starts_a_new_segment_linked_to_the_old_one(claude_env):  # noqa: F811
    with MockUpstream() as mock:
        proc = forge(claude_env, "run", "--harness", "claude-code", "--upstream",
                     f"api.anthropic.com={mock.url}", "--", "sh", "-c", RUNS)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count(f"{TOOL_MARKER}-output-42") == 2  # both prompts ran Bash
    session = orjson.loads(forge(claude_env, "show", "last", "--json").stdout)
    by_seq = {e["seq"]: e for e in session["exchanges"]}
    [compaction] = [e for e in session["exchanges"] if e["side_kind"] == "compaction"]
    assert (compaction["thread"], compaction["role"]) == ("side", "side")
    assert "<summary>" in compaction["response"]["content"][0]["text"]

    [main] = [t for t in session["lineage"]["threads"] if t["role"] == "main"]
    (first, none), (resumed, link) = main["segments"]
    assert none is None and link == compaction["seq"]
    before = [s for s in main["calls"] if s < compaction["seq"]]
    after = [s for s in main["calls"] if s > compaction["seq"]]
    assert before[0] == first and after[0] == resumed and len(before) == len(after) == 2
    # the compaction summed up the first run's last call; the new segment goes on from it
    assert compaction["parent"] == before[-1] == by_seq[resumed]["parent"]
    assert [by_seq[s]["segment"] for s in main["calls"]] == [0, 0, 1, 1]
    assert by_seq[after[1]]["parent"] == resumed
    opening = [b["text"] for b in by_seq[resumed]["request"]["messages"][0]["content"]
               if b["type"] == "text"]
    assert any(t.startswith(CONTINUATION_PREFIX) for t in opening)
    assert any(f"{TOOL_MARKER}-output-42" in t for t in opening)  # the mock's summary

    text = forge(claude_env, "show", "last").stdout
    assert f"── new segment after compaction #{compaction['seq']} ──" in text
    assert f"#{compaction['seq']} compaction of main up to #{before[-1]} · " in text
