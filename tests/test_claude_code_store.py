"""A real Claude Code session's bytes through the store. The CLI from npm works through a
scripted task (bench/cli_session.py: the mock's answers ask for Read, Bash and Edit calls,
which Claude Code runs for real in a copy of this repository, and hand a task to a
sub-agent), and every call it sent is written and read back on SQLite and Postgres: raw
bodies byte for byte, records equal, whole and one by one, also written as `serve` writes a
rollout past its encoders' budget.

The synthetic sessions of the other store tests mimic this traffic; this is the traffic."""

from __future__ import annotations

import subprocess

import orjson
import pytest
from claude_code_cli import ROOT, find_claude
from conftest import require
from support import bench_module, exchanges_of, make_session, without_raw

pytestmark = [pytest.mark.slow, pytest.mark.cli]

CALLS = 24


@pytest.fixture(scope="module")
def recorded():
    claude = find_claude()
    require(claude is not None, "Claude Code is not installed (scripts/test installs it with npm)")
    return bench_module("cli_session").record(claude, seed=0, calls=CALLS)


def test_the_recorded_session_is_real_tool_work(recorded):
    """What the store tests below rely on: Claude Code really ran the tools, so the history
    it resent holds real file contents and command output."""
    cli_session = bench_module("cli_session")
    chains = [call.chain for call in recorded]
    assert chains.count("main") == CALLS and chains.count("agent") == cli_session.AGENT_CALLS
    last = orjson.loads(recorded[-1].request)
    uses = {b["id"]: b for m in last["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "tool_use"}
    results = [(uses[b["tool_use_id"]]["name"], uses[b["tool_use_id"]]["input"], str(b["content"]))
               for m in last["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b["type"] == "tool_result"]
    assert len(results) == CALLS - 1
    assert {name for name, _, _ in results} >= {"Read", "Bash", "Edit", "Agent"}
    assert not [out for _, _, out in results if "<tool_use_error>" in out]
    read = 0
    for name, args, out in results:
        if name == "Read":  # numbered lines of the file as this repository has it
            path = args["file_path"].split("/project/", 1)[1]
            source = subprocess.run(["git", "-C", str(ROOT), "show",
                                     f"{cli_session.PROJECT_REV}:{path}"], capture_output=True,
                                    text=True, check=True).stdout.splitlines()
            number, _, text = out.splitlines()[0].partition("\t")
            read += source[int(number) - 1].startswith(text.split("  # ")[0])
    assert read


@pytest.mark.parametrize("budget", [None, 1])
def test_a_real_claude_code_session_reads_back_byte_for_byte(store, recorded, monkeypatch,
                                                              budget):
    from forge_record.store import batch

    if budget is not None:  # `serve` past its budget: a segment a call, resumed from the tail
        monkeypatch.setattr(batch, "ENCODER_BYTES", budget)
    sent = exchanges_of(recorded)
    store.add_session(make_session("cli"))
    for ex in sent:
        store.add_exchange("cli", ex)
    back = list(store.iter_exchanges("cli", raw=True))
    assert len(back) == len(sent)
    for a, b in zip(sent, back, strict=True):
        assert b.raw_request == a.raw_request and b.raw_response == a.raw_response, a.seq
        assert b == a, a.seq
    for ex in reversed(sent):
        assert store.get_exchange("cli", ex.seq, raw=True) == ex
    assert store.get_exchange("cli", 5) == without_raw(sent[4])


def test_a_real_claude_code_session_is_one_main_thread_and_its_subagent(recorded):
    """Claude Code sends each Edit call back with `"replace_all": false` added, which the
    model did not write: still one conversation (signals.turn_identity), not a fork at
    every Edit."""
    from forge_record.lineage import analyze

    edits = [b for call in recorded for b in orjson.loads(call.request)["messages"][-2]["content"]
             if isinstance(b, dict) and b.get("name") == "Edit"]
    assert edits and all(b["input"].get("replace_all") is False for b in edits)
    lineage = analyze(exchanges_of(recorded), "claude-code")
    # the sub-agent's thread is named by the agent id the CLI sends in a header
    threads = {t.id.split("-")[0]: (t.role, len(t.calls)) for t in lineage.threads}
    assert threads == {"main": ("main", CALLS), "subagent": ("subagent", 8)}


def test_its_billing_block_changes_on_every_call_and_costs_no_blob_a_call(store, recorded):
    """Recorded through `forge-record run`, the CLI talks to api.anthropic.com and starts its
    system prompt with a billing block whose `cch` changes on every call; the store names
    such a prompt in parts (store.content.system_ref), so only the calls with no parent store
    a whole prompt: the main loop's first, the sub-agent's first, and the main loop's call
    after the sub-agent (whose 8 calls pushed its parent out of the writer's window)."""
    import sqlalchemy as sa

    from forge_record.identity import blob_key_name
    from forge_record.store.reader import BlobReader

    firsts = [orjson.loads(call.request)["system"][0]["text"] for call in recorded]
    assert all(t.startswith("x-anthropic-billing-header: ") and "cch=" in t for t in firsts)
    assert len(set(firsts)) == len(recorded)
    store.add_session(make_session("cli"))
    for ex in exchanges_of(recorded):
        store.add_exchange("cli", ex)
    with store.reading("blobs") as conn:
        names = [blob_key_name(bytes(k)) for k in conn.scalars(sa.text("SELECT hash FROM blobs"))]
        blobs = BlobReader(conn)
        blobs.load(names)
        prompts = [n for n in names if blobs.get(n).startswith(b'[{"text":"x-anthropic-billing')]
    assert len(prompts) == 2
