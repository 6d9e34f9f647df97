"""`forge-record db stats`: the store's size on disk by part and per harness version, and the
ratio vs the raw bodies it holds, on SQLite and Postgres; one-line errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import orjson
import sqlalchemy as sa
from click.testing import CliRunner
from support import make_session, realistic_exchanges

from forge_record.cli import cli
from forge_record.store import open_store


def stats(*args: str):
    return CliRunner().invoke(cli, ["db", "stats", *args])


def fill(store_url: str) -> int:
    """Two sessions of one harness version, one of another; the raw bytes written."""
    sent = realistic_exchanges(20)
    with open_store(store_url) as store:
        for sid, version in (("a", "2.1.0"), ("b", "2.1.0"), ("c", "2.2.0")):
            store.add_session(dataclasses.replace(make_session(sid), harness_version=version))
            for ex in sent:
                store.add_exchange(sid, ex)
    return 3 * sum(len(e.raw_request) + len(e.raw_response) for e in sent)


def test_stats_by_part_and_harness_version(store_url):
    raw = fill(store_url)
    done = stats("--store", store_url, "--json")
    assert done.exit_code == 0, done.output
    found = orjson.loads(done.output)
    assert (found["sessions"], found["exchanges"], found["raw"]) == (3, 60, raw)
    assert found["raw_unknown"] == 0
    parts = found["parts"]
    assert sum(parts.values()) == found["on_disk"]
    for part in ("manifests", "packs", "raw requests", "raw responses", "blob index"):
        assert parts[part] > 0, part
    assert found["ratio"] == round(raw / found["on_disk"], 1) and found["ratio"] > 1
    versions = {(h["harness"], h["version"]): h for h in found["harness_versions"]}
    assert versions.keys() == {("claude", "2.1.0"), ("claude", "2.2.0")}
    assert versions["claude", "2.1.0"]["sessions"] == 2
    assert versions["claude", "2.1.0"]["raw"] == 2 * versions["claude", "2.2.0"]["raw"]
    with open_store(store_url) as store, store.reading("check") as conn:
        rows = conn.scalar(sa.text("SELECT sum(length(record) + length(raw_request) + "
                                   "length(raw_response)) FROM exchanges"))
    assert sum(h["rows"] for h in versions.values()) == rows

    text = stats("--store", store_url)
    assert text.exit_code == 0, text.output
    assert "packs" in text.output and "x vs raw" in text.output
    assert "claude 2.1.0" in text.output


def test_rows_written_before_sizes_were_kept_make_the_ratio_a_lower_bound(store_url):
    fill(store_url)
    with open_store(store_url) as store, store.transaction("forget sizes") as conn:
        conn.execute(sa.text("UPDATE exchanges SET raw_request_size = NULL, "
                             "raw_response_size = NULL WHERE session_id = 'c'"))
    found = orjson.loads(stats("--store", store_url, "--json").output)
    assert found["raw_unknown"] == 20
    assert "at least: 20 exchanges have no recorded raw size" in stats(
        "--store", store_url).output


def test_no_store_and_unreachable_store_are_one_line_errors(tmp_path):
    forge = str(Path(sys.executable).with_name("forge-record"))
    for url, says in ((f"sqlite:///{tmp_path / 'none.db'}", "no store at"),
                      ("postgresql+psycopg://postgres@127.0.0.1:1/x", "cannot open store")):
        done = subprocess.run([forge, "db", "stats", "--store", url], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "FORGE_RECORD_HOME":
                                                          str(tmp_path)})
        assert done.returncode != 0 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert not (tmp_path / "none.db").exists()
