"""The benchmark harness runs end to end (bench/run.py --quick, cut down to a tiny size) and
produces a well-formed result. No figure is checked against a threshold: speed is never
asserted in tests. What is checked: every configuration produced numbers, the `streamed`
check tells a pass-through stream from a buffered one, and forge-record stored every
exchange the throughput load made (drain raises otherwise)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _finite(value) -> bool:
    return isinstance(value, float | int) and math.isfinite(value)


@pytest.mark.slow
def test_quick_run_produces_a_well_formed_result(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--json", str(out),
         "--latency-args", "--configs forge-rev,buffered-rev --clients raw --rounds 1 --text 100",
         "--throughput-args", "--exchanges 60 --rounds 1"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())

    latency = result["latency"]["summary"]
    assert set(latency) == {"direct", "forge-rev", "buffered-rev"}
    for config, by_client in latency.items():
        row = by_client["raw"]
        assert row["events"] == 100, config
        assert all(_finite(row[k]) for k in ("ttft_ms", "total_ms", "event_p50_ms",
                                              "event_p99_ms", "added_ttft_ms")), row
    assert latency["direct"]["raw"]["streamed"] is True
    assert latency["forge-rev"]["raw"]["streamed"] is True
    assert latency["buffered-rev"]["raw"]["streamed"] is False  # the check can fail

    throughput = result["throughput"]
    assert set(throughput["summary"]) == {"direct", "bare-rev", "lean-rev", "forge-rev"}
    forge = throughput["summary"]["forge-rev"]
    assert forge["rate"] > 0 and forge["cpu_s_per_mb"] > 0 and forge["sse_mb"] > 0
    assert _finite(throughput["ratios"]["reverse"]["rate"])
    assert _finite(throughput["ratios"]["reverse, against lean"]["cpu_s_per_mb"])
    assert "## Latency" in done.stdout and "## Throughput" in done.stdout


@pytest.mark.slow
def test_scale_bench_measures_every_command_on_a_tiny_store(tmp_path):
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale.py"), "--store", "sqlite",
         "--templates", "2", "--sizes", "200,400", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    assert {r["exchanges"] for r in runs} == {200, 400}
    assert len({r["command"] for r in runs}) == 9  # bench/scale.py commands(): `sessions` twice
    # every command ran (a failed one reports NaN) and its peak memory was read
    assert all(_finite(r["seconds"]) and r["rss_mb"] > 0 for r in runs), runs


@pytest.mark.slow
def test_bridge_latency_bench_streams_every_dialect_through_the_proxy(tmp_path):
    out = tmp_path / "bridge.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bridge_latency.py"), "--tokens", "30",
         "--interval-ms", "1", "--rounds", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == {"chat", "messages", "responses", "gemini", "bare"}
    for config, row in summary.items():
        assert all(_finite(row[k]) for k in ("ttft_ms", "event_p50_ms", "event_p99_ms")), row
        assert row["reads"] > 10, config  # streamed a chunk at a time, not buffered
    assert "| gemini |" in done.stdout


@pytest.mark.slow
def test_bridge_writer_cpu_bench_counts_every_record(tmp_path):
    out = tmp_path / "writer.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bridge_latency.py"), "--tokens", "20",
         "--writer-calls", "2", "--configs", "chat,messages", "--json", str(out)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["chat"]["exchanges"] == 2 and result["messages"]["exchanges"] == 4
    assert all(_finite(r["cpu_ms_per_1k_tokens"]) and r["cpu_ms_per_1k_tokens"] > 0
               for r in result.values())


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.postgres
def test_storage_and_writer_benches_measure_recorded_claude_code_sessions(tmp_path, pg_admin):
    from claude_code_cli import find_claude
    from conftest import require

    require(find_claude() is not None, "Claude Code is not installed (scripts/test installs it)")
    env = {**os.environ, "FORGE_BENCH_SESSIONS": str(tmp_path / "sessions")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "storage.py"), "--on-disk", "--team", "0",
         "--cli", "2", "--calls", "12"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    ratios = {line.split()[0]: float(line.split()[1].rstrip("x")) for line in
              done.stdout.splitlines() if line.strip().startswith("cli_") and "ratio" in line}
    assert set(ratios) == {f"cli_{figure}{kind}" for figure in ("sqlite_one_session", "postgres")
                           for kind in ("_ratio", "_zstd22_stream_ratio")}
    assert all(r > 1 for r in ratios.values()), ratios
    # the bodies alone in one stream: more than a store, which keeps rows and random access
    assert all(ratios[f"cli_{figure}_zstd22_stream_ratio"] > ratios[f"cli_{figure}_ratio"]
               for figure in ("sqlite_one_session", "postgres")), ratios
    assert len(list((tmp_path / "sessions").glob("claude-*-calls12.jsonl.zst"))) == 2
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "writer_session.py"), "--cli", "--calls", "12",
         "--rounds", "1", "--json", str(tmp_path / "writer.json")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    this = json.loads((tmp_path / "writer.json").read_text())["summary"]["this"]
    assert _finite(this["finalize_ms"]) and this["kb"] > 50  # a real request is ~77 KB
