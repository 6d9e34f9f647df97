"""One definition of "calls", "retries" and "tokens in" (issue 18.7), and output a person
reads without `None`, wrong plurals or lost quoting (issue 22.4).

`run`'s closing line, `sessions`, `show`, `view` and the exports' session filter all count
as forge_record.lineage.usage does: a retry is not a call, side calls are apart, tokens in are
uncached + cache read + cache write.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import orjson
from lineage_sessions import busy_session, call, forge, record, said, user

from forge_record.commands import run as run_command
from forge_record.outcome import Failures
from forge_record.records import Session, Text, Usage
from forge_record.store import open_store
from forge_record.viewer.model import build_view

FORGE = str(Path(sys.executable).with_name("forge-record"))


def cached(exchanges):
    """Give every answered call cache reads and writes, as Claude Code's calls have."""
    for ex in exchanges:
        if ex.response is not None:
            ex.response.usage = Usage(input_tokens=10, output_tokens=20, cache_read_tokens=1000,
                                      cache_write_tokens=300)
    return exchanges


def test_run_sessions_show_and_view_count_alike(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    record(url, "a" * 16, cached(busy_session()), started=time.time())
    shown = orjson.loads(forge("show", "last", "--json", "--store", url))["lineage"]["usage"]
    [listed] = orjson.loads(forge("sessions", "--json", "--store", url))
    with open_store(url) as st:
        view = build_view(st.get_session("a" * 16), list(st.iter_exchanges("a" * 16)))
    writer = SimpleNamespace(spool_left=0, dropped=0, failed=0, usage={})  # read back
    run_command._print_summary(url, "a" * 16, writer, Failures())
    closing = capsys.readouterr().err
    # 4 conversation calls + 1 retry (the failed attempt is the first), a title and count_tokens
    assert shown["calls"] == listed["calls"] == view.usage["calls"] == 5
    assert shown["retries"] == listed["retries"] == view.usage["retries"] == 1
    assert shown["side_calls"] == listed["side_calls"] == 2
    tokens_in = 5 * (10 + 1000 + 300)  # the 5 answered conversation calls; the title apart
    assert shown["tokens_in"] == listed["tokens_in"] == view.usage["tokens_in"] == tokens_in
    assert "5 model calls · 1 retry · " in closing and f"{tokens_in:,} in / 100 out" in closing
    text = forge("sessions", "--store", url)
    assert re.search(rf"\b5\s+1\s+\d+\s+{tokens_in:,}/100\b", text), text
    head = forge("show", "last", "--store", url)
    assert "5 model calls, 1 retry, 2 side calls" in head
    assert f"tokens: {tokens_in:,} in (50 uncached, 5,000 cache read, 1,500 cache write)" in head


def test_show_prints_no_none_and_right_plurals(tmp_path):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with open_store(url) as st:  # a session still open: no exit code; one call that failed
        st.add_session(Session(id="b" * 16, harness="claude-code", started_at=time.time(),
                               argv=["claude", "-p", "fix the 'tests' now"]))
        failed = call(1, [user("go")], None, status="incomplete")
        failed.http_status = None
        st.add_exchange("b" * 16, failed)
        st.add_exchange("b" * 16, call(2, [user("hi")], said(Text(text="hello"))))
    out = forge("show", "last", "--store", url)
    assert "None" not in out, out
    assert "$ claude -p 'fix the '\"'\"'tests'\"'\"' now'" in out  # shlex.join
    assert "1 side call," not in out and "side calls, " in out
    assert re.search(r"\b1 model call\b", out) or re.search(r"\b2 model calls\b", out), out
    assert "1 thread" in out or "threads" in out
    assert "· incomplete · " in out  # no status code was received


def test_a_broken_pipe_is_silent(tmp_path):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    many = [call(n, [user(f"question {n} " + "x" * 4000)], said(Text(text="y" * 4000)))
            for n in range(1, 60)]
    record(url, "c" * 16, many, started=time.time())
    proc = subprocess.Popen([FORGE, "show", "last", "--store", url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert err == ""


def test_export_min_calls_counts_a_retry_as_no_call(tmp_path):
    import io

    from forge_record.exporters import Filters, Options, export
    from forge_record.records import ERROR

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    attempt = call(1, [user("go")], None, status=ERROR)
    retry = call(2, [user("go")], said(Text(text="ok")), headers={"x-stainless-retry-count": "1"})
    record(url, "d" * 16, [attempt, retry], started=time.time())
    with open_store(url) as st:
        for wanted, kept in ((1, 1), (2, 0)):
            out = io.BytesIO()
            tally = export(st, "calls", out, Filters(min_calls=wanted), Options())
            assert tally.sessions == kept, (wanted, tally.summary("calls"))
