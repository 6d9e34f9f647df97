"""Manifests that name a part of a request by more than a blob name read back byte for byte
written a segment a call, after gc and in a store they were pushed to, on SQLite and
Postgres: a system prompt in parts (store.content.system_ref; Claude Code's billing block,
support.billed) and parameters as changes to a base (store.content.parameters_ref; Codex's
per-call ids and clock, support.stamped), and both at once."""

from __future__ import annotations

import time

import pytest
from support import billed, make_session, reads_back, realistic_exchanges, stamped, write_session

from forge_record.store import gc, open_store
from forge_record.store import push as pushing
from forge_record.store.items import AddExchange

DAY = 86400.0
SHAPES = {"system in parts": billed, "parameters as changes": stamped,
          "parameters changed once a turn": lambda exchanges: stamped(exchanges, clock=False),
          "both": lambda exchanges: billed(stamped(exchanges))}


@pytest.fixture(params=list(SHAPES))
def shaped(request):
    return SHAPES[request.param]


def test_written_a_segment_a_call_it_reads_back(store, monkeypatch, shaped):
    from forge_record.store import batch

    monkeypatch.setattr(batch, "ENCODER_BYTES", 1)  # each call's segment resumes the last's
    sent = shaped(realistic_exchanges(20))
    store.add_session(make_session("s"))
    for ex in sent:
        store.write([AddExchange("s", ex)])
    reads_back(store, "s", sent)


def test_gc_keeps_what_a_remaining_session_names(store, shaped):
    """"new" is the start of "old"'s conversation: the blobs it names (a prompt's big block
    named only as a part, a parameters base) are in old's pack group."""
    old = shaped(realistic_exchanges(30))
    write_session(store, "old", old, started_at=time.time() - 40 * DAY)
    write_session(store, "new", old[:4], started_at=time.time() - DAY)

    report = gc.collect(store, 30 * DAY, grace=0, now=time.time() + 1)

    assert report.sessions == 1 and report.blobs > 0
    reads_back(store, "new", old[:4])


def test_push_copies_what_it_names(store_url, tmp_path, shaped):
    sent = shaped(realistic_exchanges(20))
    local = f"sqlite:///{tmp_path / 'local.db'}"
    with open_store(local) as source:
        write_session(source, "s", sent)
    with open_store(local) as source, open_store(store_url) as target:
        report = pushing.push(source, target, pushing.plan(source, target, ["s"]))
        assert report.exchanges == len(sent)
        reads_back(target, "s", sent)
