"""`--format calls`, `trajectories` and `parquet` on the recorded sessions: one line per call
with its lineage and full request/response, one line per thread with steps that read back as
the conversation, and Parquet shards that load with `datasets` (offline) and with pyarrow
against the documented schema. Labels fill the reward slots."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
from recorded_sessions import (
    PROMPT,
    SESSIONS,
    TOOL_OUTPUT,
    export_lines,
    first_calls,
    recorded_store,
)

from forge_record.exporters import Filters, Options, export
from forge_record.exporters import parquet as parquet_export
from forge_record.records import block_to_dict, request_to_dict, response_to_dict
from forge_record.store import default_store_url, open_store


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return recorded_store(tmp_path_factory.getbasetemp() / "export-sessions")


@pytest.fixture
def labelled_url(url, tmp_path):
    """A copy of the recorded store with the Anthropic session labelled."""
    source = url.removeprefix("sqlite:///")
    shutil.copy(source, tmp_path / "traces.db")
    copy = default_store_url(tmp_path)
    with open_store(copy) as store:
        store.label_session(SESSIONS["anthropic.messages"][0], reward=1.0,
                            tags={"outcome": "pass"})
    return copy


def recorded(url, dialect):
    with open_store(url) as store:
        return list(store.iter_exchanges(SESSIONS[dialect][0]))


# --- calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_one_line_per_model_call_with_its_records(url, dialect):
    lines, tally = export_lines(url, "calls", dialect)
    model = [e for e in recorded(url, dialect) if e.kind == "model"]
    assert [line["seq"] for line in lines] == [e.seq for e in model]
    for line, ex in zip(lines, model, strict=True):
        assert line["session_id"] == SESSIONS[dialect][0]
        assert line["harness"] == SESSIONS[dialect][1]
        assert (line["dialect"], line["kind"], line["status"]) == (dialect, "model", "complete")
        assert line["request"] == request_to_dict(ex.request)
        assert line["response"] == response_to_dict(ex.response)
        assert line["usage"]["output_tokens"] == ex.response.usage.output_tokens
        assert (line["thread_id"], line["thread_role"], line["segment"]) == ("main", "main", 0)
        assert line["reward"] is None and line["session_tags"] == {"suite": "export"}
        assert line["fingerprint"]["harness"] == SESSIONS[dialect][1]
        assert line["fingerprint_id"] == line["fingerprint"]["id"]
    assert lines[1]["parent_seq"] == lines[0]["seq"]  # the second call continues the first


def test_side_calls_are_counted_or_included(url):
    _, tally = export_lines(url, "calls", "anthropic.messages")
    assert tally.skipped["side calls"] == 1
    lines, _ = export_lines(url, "calls", "anthropic.messages", include_side_calls=True)
    assert [(line["kind"], line["thread_role"]) for line in lines][1] == ("side", "side")


def test_the_reward_slot_carries_the_label(labelled_url):
    lines, _ = export_lines(labelled_url, "calls", "anthropic.messages")
    assert {line["reward"] for line in lines} == {1.0}
    assert lines[0]["label_tags"] == {"outcome": "pass"}
    others, _ = export_lines(labelled_url, "calls", "openai.chat")
    assert {line["reward"] for line in others} == {None}


# --- trajectories --------------------------------------------------------------------------


def test_a_trajectory_reads_back_as_the_conversation(url):
    [line], _ = export_lines(url, "trajectories", "anthropic.messages")
    [call] = first_calls(url, "anthropic.messages")
    first, second = line["steps"]
    assert first["context"]["reset"] is True
    assert first["context"]["messages"] == [{"role": "user",
                                              "content": [{"type": "text", "text": PROMPT}]}]
    assert [b["type"] for b in first["action"]] == ["text", "tool_call"]
    assert first["observation"] == [{"type": "tool_result", "tool_call_id": call.id,
                                     "content": [{"type": "text", "text": TOOL_OUTPUT}]}]
    # The tool result is the first step's observation, so the second step adds nothing.
    assert second["context"] == {"reset": False, "messages": []}
    assert [b["type"] for b in second["action"]] == ["reasoning", "text"]
    assert [s["loss_mask"] for s in line["steps"]] == [1, 1]
    assert line["reward"] is None and line["role"] == "main"
    assert line["usage"]["output_tokens"] == sum(s["usage"]["output_tokens"]
                                                 for s in line["steps"])


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_every_trajectory_rebuilds_the_last_request(url, dialect):
    """Context, action, observation, context, ...: the messages of the thread's last call."""
    [line], _ = export_lines(url, "trajectories", dialect)
    last = [e for e in recorded(url, dialect) if e.kind == "model"][-1]
    rebuilt: list[dict] = []
    for step in line["steps"][:-1]:
        rebuilt += step["context"]["messages"]
        rebuilt.append({"role": "assistant", "content": step["action"]})
        rebuilt.append({"role": "observation", "content": step["observation"]})
    rebuilt += line["steps"][-1]["context"]["messages"]
    wanted = [block_to_dict(b) for m in last.request.messages for b in m.content]
    assert [b for m in rebuilt for b in m["content"]] == wanted


def test_a_labelled_trajectory_ends_on_its_reward(labelled_url):
    [line], _ = export_lines(labelled_url, "trajectories", "anthropic.messages")
    assert line["reward"] == 1.0


# --- parquet -------------------------------------------------------------------------------


@pytest.fixture
def shards(url, tmp_path):
    out = tmp_path / "calls"
    with open_store(url) as store:
        tally = export(store, "parquet", out, Filters(), Options())
    return out, tally


def test_parquet_has_the_documented_schema_and_the_calls_rows(url, shards):
    out, tally = shards
    [path] = sorted(out.glob("calls-*.parquet"))
    table = pq.read_table(path)
    assert table.schema == parquet_export.schema()
    calls, _ = export_lines(url, "calls")
    assert table.num_rows == tally.exported == len(calls) == 8
    assert table.to_pylist() == [parquet_export.flat(c) for c in calls]


def test_parquet_loads_with_datasets_offline(shards, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import datasets

    out, _ = shards
    dataset = datasets.load_dataset("parquet", data_files=str(out / "*.parquet"), split="train",
                                    cache_dir=str(tmp_path / "hf-cache"))
    assert dataset.num_rows == 8
    assert set(dataset["dialect"]) == set(SESSIONS)
    assert dataset.features["flags"].feature.dtype == "string"


def test_parquet_rolls_over_into_shards(url, tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_export, "SHARD_ROWS", 3)
    with open_store(url) as store:
        export(store, "parquet", tmp_path / "out", Filters(), Options())
    paths = sorted((tmp_path / "out").glob("calls-*.parquet"))
    assert [pq.read_metadata(p).num_rows for p in paths] == [3, 3, 2]


# --- Postgres ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
def test_a_postgres_store_exports_the_same_lines(url, new_database):  # noqa: F811
    pg = new_database()
    with open_store(url) as source, open_store(pg) as target:
        for summary in source.list_sessions(limit=None)[::-1]:
            target.add_session(source.get_session(summary["id"]))
            for ex in source.iter_exchanges(summary["id"], raw=True):
                target.add_exchange(summary["id"], ex)
        target.label_session(SESSIONS["openai.chat"][0], reward=0.5)
    for fmt in ("calls", "trajectories", "openai"):
        on_sqlite, _ = export_lines(url, fmt)
        on_postgres, _ = export_lines(pg, fmt)
        if fmt != "openai":
            for line in on_sqlite:
                if line["session_id"] == SESSIONS["openai.chat"][0]:
                    line["reward"] = 0.5
        assert on_postgres == on_sqlite, fmt
