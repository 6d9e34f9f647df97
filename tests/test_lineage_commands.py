"""`forge-record show` (the thread tree, and lineage in --json) and `forge-record sessions`
filters, on sessions written to a real SQLite store from synthetic exchanges shaped like
Claude Code's (tests/test_lineage.py builds them)."""

from __future__ import annotations

import time

import orjson
import pytest
from click.testing import CliRunner
from lineage_sessions import (
    M1,
    M2,
    MAIN_SYSTEM,
    R1,
    R2,
    busy_session,
    call,
    forge,
    record,
    said,
    user,
)

from forge_record.cli import cli
from forge_record.identity import HASH_PREFIX
from forge_record.lineage.signals import COMPACTION_MARKERS, CONTINUATION_PREFIX
from forge_record.records import Message, Text
from forge_record.store import open_store


@pytest.fixture
def store_url(tmp_path):
    return f"sqlite:///{tmp_path / 'traces.db'}"


def test_show_json_has_lineage_and_each_exchange_its_place(store_url):
    record(store_url, "a" * 16, busy_session(), started=time.time())
    data = orjson.loads(forge("show", "last", "--json", "--store", store_url))
    placed = {e["seq"]: (e["thread"], e["role"], e["parent"], e["side_kind"], e["retry_of"])
              for e in data["exchanges"]}
    sub = "subagent-a0123456789abcdef"
    assert placed == {1: ("side", "side", None, "title", None),
                      2: ("main", "main", None, None, None),
                      3: (sub, "subagent", None, None, None), 4: (sub, "subagent", 3, None, None),
                      5: ("main", "main", 2, None, None), 6: ("main", "main", 5, None, None),
                      7: ("main", "retry", 5, None, 6),
                      8: ("side", "side", None, "count_tokens", None)}
    lineage = data["lineage"]
    assert [t["id"] for t in lineage["threads"]] == ["main", sub, "side"]
    assert lineage["usage"]["calls"] == 5 and lineage["usage"]["retries"] == 1
    assert all(e["fingerprint"] in lineage["fingerprints"] for e in data["exchanges"])


def test_show_renders_the_thread_tree(store_url):
    record(store_url, "b" * 16, busy_session(), started=time.time())
    lines = forge("show", "last", "--store", store_url).splitlines()
    at = {name: next(i for i, line in enumerate(lines) if line.startswith(name))
          for name in ("thread main", "#2 ", "#5 ", "side calls")}
    spawn = next(i for i, line in enumerate(lines) if "→ Agent" in line)
    sub = next(i for i, line in enumerate(lines) if "thread subagent-" in line)
    assert at["thread main"] < at["#2 "] < spawn < sub < at["#5 "] < at["side calls"]
    assert lines[sub].startswith("    thread subagent-a0123456789abcdef · spawned by #2 ")
    assert any(line.startswith("    #3 ") for line in lines)  # the subagent's calls, indented
    assert any(line.startswith("#7 retry of #6 · ") for line in lines)  # folded in place
    side = lines[at["side calls"] + 1:]
    assert side[0].startswith("  #1 title · claude-haiku-4-5 · ") and "'Fix tests'" in side[0]
    assert side[1].startswith("  #8 count_tokens · ")
    assert len(side) == 2  # one line each


def test_show_marks_a_new_segment_after_compaction(store_url):
    compacting = [*M2[:-1], Message(role="user", content=[
        *M2[-1].content, Text(text=COMPACTION_MARKERS[0])])]
    resumed = [user(f"{CONTINUATION_PREFIX}. Summary: fixed."), user("go on")]
    exchanges = [call(1, M1, R1), call(2, M2, R2), call(3, compacting, said(Text(text="sum"))),
                 call(4, resumed, said(Text(text="ok")))]
    record(store_url, "c" * 16, exchanges, started=time.time())
    out = forge("show", "last", "--store", store_url)
    assert "── new segment after compaction #3 ──" in out
    assert "  #3 compaction of main up to #2 · " in out


def two_sessions(url: str) -> None:
    record(url, "1" * 16, busy_session(), started=1000.0)  # opus main, haiku title
    other_system = [MAIN_SYSTEM[0], Text(text="You are a different agent.")]
    record(url, "2" * 16, [call(1, M1, R1, model="claude-haiku-4-5", system=other_system,
                                headers={"anthropic-beta": "context-1m-2025-08-07",
                                         "user-agent": "claude-cli/2.2.0 (external, cli)"})],
           started=2000.0, version="2.2.0")


def listed(url: str, *args: str) -> list[str]:
    return [r["id"][0] for r in orjson.loads(forge("sessions", "--json", "--store", url, *args))]


def test_sessions_filter_by_start_and_tags_before_fingerprints(store_url):
    two_sessions(store_url)
    with open_store(store_url) as st:
        st.label_session("1" * 16, tags={"team": "a"})
    assert listed(store_url, "--since", "1500") == ["2"]
    assert listed(store_url, "--since", "3000") == []
    assert listed(store_url, "--tag", "team=a") == ["1"]  # a label's tags count
    assert listed(store_url, "--tag", "team=b") == []
    assert listed(store_url, "--tag", "team=a", "--since", "1500") == []
    assert listed(store_url, "--since", "1500", "--harness", "claude-code") == ["2"]
    assert listed(store_url, "--tag", "team=a", "--model", "claude-opus-*") == ["1"]


def test_sessions_filter_by_fingerprint(store_url):
    two_sessions(store_url)
    assert listed(store_url) == ["2", "1"]
    assert listed(store_url, "--model", "claude-opus-*") == ["1"]
    # the first session's haiku call is a side call (a title): it does not make it match
    assert listed(store_url, "--model", "claude-haiku-4-5") == ["2"]
    assert listed(store_url, "--harness", "claude-code") == ["2", "1"]
    assert listed(store_url, "--harness", "codex") == []
    assert listed(store_url, "--version", "2.1.*") == ["1"]
    assert listed(store_url, "--beta", "context-1m-2025-08-07") == ["2"]
    assert listed(store_url, "--beta", "claude-code-20250219", "--beta", "nope") == []
    assert listed(store_url, "--model", "claude-haiku-4-5", "--version", "2.1.197") == []
    assert listed(store_url, "--harness", "claude-code", "--limit", "1") == ["2"]

    [row] = orjson.loads(forge("sessions", "--json", "--store", store_url, "--version", "2.2.0"))
    [fp] = row["fingerprints"]
    assert fp["system_hash"].startswith(HASH_PREFIX)
    hex_prefix = fp["system_hash"].removeprefix(HASH_PREFIX)[:10]
    assert listed(store_url, "--system-hash", hex_prefix) == ["2"]
    assert listed(store_url, "--system-hash", HASH_PREFIX + hex_prefix) == ["2"]
    assert listed(store_url, "--tools-hash", fp["tools_hash"]) == ["2", "1"]  # same tools
    assert listed(store_url, "--system-hash", "0000000000") == []


def test_sessions_text_output_with_filters(store_url):
    two_sessions(store_url)
    out = forge("sessions", "--store", store_url, "--model", "claude-opus-*")
    assert "1111111111111111" in out and "2222222222222222" not in out
    result = CliRunner().invoke(cli, ["sessions", "--store", store_url, "--model", "gpt-*"])
    assert result.exit_code == 0 and "No session matches." in result.output
