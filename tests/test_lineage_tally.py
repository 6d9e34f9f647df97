"""lineage.tally: the usage the writer process folds as it writes is the one read back."""

from __future__ import annotations

import copy
import random
import time
from types import SimpleNamespace

from lineage_sessions import busy_session, record

from forge_record.commands import run as run_command
from forge_record.lineage import session_usage
from forge_record.lineage import tally as tally_module
from forge_record.lineage.tally import WINDOW, Tally
from forge_record.outcome import Failures
from forge_record.records import Session, Usage


def answered(exchanges):
    for ex in exchanges:
        if ex.response is not None:
            ex.response.usage = Usage(input_tokens=10, output_tokens=20, cache_read_tokens=1000,
                                      cache_write_tokens=300)
    return exchanges


def test_the_tally_counts_as_reading_back_under_any_arrival_order():
    exchanges = answered(busy_session())
    want = session_usage(exchanges, "claude-code")
    for trial in range(20):
        shuffled = list(exchanges)
        random.Random(trial).shuffle(shuffled)  # fewer than WINDOW: any order is put right
        tally = Tally()
        for ex in shuffled:
            tally.add("s", ex)
        figures = tally.figures()["s"]
        assert figures["usage"] == want
        assert figures["exchanges"] == len(exchanges)


def test_the_tally_remembers_a_few_calls_of_hashes_and_counts_the_same(monkeypatch):
    """The writer folds a session as long as it runs: its memo of record hashes keeps the
    latest entries only (every request here brings its own copies of its records, as a parse
    of each body does), and the counts are those of reading back."""
    monkeypatch.setattr(tally_module, "MEMO", 8)
    exchanges = answered(busy_session())
    want = session_usage(exchanges, "claude-code")
    tally = Tally()
    for ex in exchanges:
        tally.add("s", copy.deepcopy(ex))
    assert tally.figures()["s"]["usage"] == want
    assert len(tally._sessions["s"].fold.hashes) <= 8


def test_a_session_it_cannot_fold_in_order_has_no_figures():
    exchanges = answered(busy_session())
    tally = Tally()
    late = exchanges[0]
    for ex in exchanges[1:]:
        tally.add("s", ex)
    for n in range(WINDOW):  # push the window past the late one
        tally.add("s", _copy(exchanges[1], 100 + n))
    tally.add("s", late)
    assert "s" not in tally.figures()


def _copy(ex, seq):
    out = copy.deepcopy(ex)
    out.seq = seq
    return out


def test_the_closing_line_reads_the_folded_figures_when_they_cover_the_session(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    exchanges = answered(busy_session())
    record(url, "a" * 16, exchanges, started=time.time())
    tally = Tally()
    for ex in exchanges:
        tally.add("a" * 16, ex)
    lines = []
    for usage in ({}, tally.figures()):  # read back, then folded
        writer = SimpleNamespace(spool_left=0, dropped=0, failed=0, usage=usage)
        run_command._print_summary(url, "a" * 16, writer, Failures())
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] and "5 model calls · 1 retry · " in lines[0]
    folded = tally.figures()["a" * 16]
    marked = {"a" * 16: {**folded, "usage": {**folded["usage"], "calls": 99}}}
    writer = SimpleNamespace(spool_left=0, dropped=0, failed=0, usage=marked)
    run_command._print_summary(url, "a" * 16, writer, Failures())
    assert "99 model calls" in capsys.readouterr().err  # the folded figures are what it read
    # figures that miss an exchange the store holds are not used: the store is read back
    short = Tally()
    for ex in exchanges[:-1]:
        short.add("a" * 16, ex)
    fake = {"a" * 16: {**short.figures()["a" * 16], "usage": {}}}
    writer = SimpleNamespace(spool_left=0, dropped=0, failed=0, usage=fake)
    run_command._print_summary(url, "a" * 16, writer, Failures())
    assert capsys.readouterr().err == lines[0]


def test_the_writer_process_hands_back_the_usage_it_folded(tmp_path, monkeypatch):
    from forge_record.writer_process import WriterProcess

    monkeypatch.setenv("FORGE_RECORD_HOME", str(tmp_path / "home"))
    exchanges = answered(busy_session())
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    writers = {}
    for tally in (True, False):
        writer = writers[tally] = WriterProcess(url, tally=tally)
        writer.ready()
        sid = ("t" if tally else "f") * 16
        writer.submit_session(Session(id=sid, harness="claude-code", started_at=time.time()))
        for ex in copy.deepcopy(exchanges):
            writer.submit_exchange(sid, ex)
        writer.submit_end(sid, time.time(), 0)
        writer.close()
    figures = writers[True].usage["t" * 16]
    assert figures["usage"] == session_usage(exchanges, "claude-code")
    assert figures["exchanges"] == len(exchanges)
    assert writers[False].usage == {}  # serve's writer folds nothing
