"""Exporters, lineage and the session views change no record they read.

The store shares decoded content between the exchanges of one session read (a message is one
object in every request that repeats it: store.content.Decoded), so a consumer that changed
a message, a block or a parameter in place would silently change other exchanges too. These
tests export a realistic Claude Code session (thinking, a subagent, title calls, tool loops)
to every format with every option that reaches more content, and check that every exchange
the store handed out still equals what was written.
"""

from __future__ import annotations

import io

import pytest
from support import make_session, realistic_exchanges, without_raw

from forge_record import lineage
from forge_record.exporters import DIRECTORY_FORMATS, FORMATS, Options, export
from forge_record.store import default_store_url, open_store
from forge_record.viewer import build_view, render_html
from forge_record.viewer.terminal import render_text

SESSION = "5eed5eed5eed5eed"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(store URL, the exchanges written to its one session)."""
    url = default_store_url(tmp_path_factory.mktemp("shared"))
    sent = realistic_exchanges(40)
    with open_store(url) as store:
        store.add_session(make_session(SESSION))
        for ex in sent:
            store.add_exchange(SESSION, ex)
    return url, [without_raw(e) for e in sent]


class HandedOut:
    """A store that keeps every exchange it hands out, to look at after the export."""

    def __init__(self, store) -> None:
        self._store = store
        self.exchanges: list = []

    def iter_exchanges(self, session_id: str, raw: bool = False):
        for ex in self._store.iter_exchanges(session_id, raw):
            self.exchanges.append(ex)
            yield ex

    def __getattr__(self, name: str):
        return getattr(self._store, name)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("keep_extras", [False, True])
def test_export_changes_no_record_it_read(written, tmp_path, fmt, keep_extras):
    url, sent = written
    options = Options(include_side_calls=True, keep_extras=keep_extras)
    out = tmp_path / "out" if fmt in DIRECTORY_FORMATS else io.BytesIO()
    with open_store(url) as store:
        spy = HandedOut(store)
        tally = export(spy, fmt, out, options=options)
    if fmt == "tokens":  # these calls came from no engine: nothing to export, all counted
        assert tally.exported == 0 and tally.skipped["calls without engine tokens"] > 0
    else:
        assert tally.exported > 0
    assert spy.exchanges == sent


def test_lineage_changes_no_record_it_read(written):
    url, sent = written
    with open_store(url) as store:
        read = list(store.iter_exchanges(SESSION))
    lineage.analyze(read, harness="claude-code")
    assert read == sent


def test_show_and_view_change_no_record_they_read(written):
    url, sent = written
    with open_store(url) as store:
        session = store.get_session(SESSION)
        read = list(store.iter_exchanges(SESSION))
    view = build_view(session, read)
    assert list(render_text(view, color=False)) and render_html(view)
    assert read == sent
