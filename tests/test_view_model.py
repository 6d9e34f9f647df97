"""The viewer's model and page, without a browser: forge_record.viewer.build_view on sessions
shaped like Claude Code's and Codex's, the page's embedded data (escaped, deduplicated,
read back equal), and `forge-record view` writing, naming and opening the file.

tests/test_view.py opens the pages in headless Chromium. The sessions come from viewer_sessions.py.
"""

from __future__ import annotations

import json
import re
import stat
import time
from dataclasses import asdict

import pytest
from click.testing import CliRunner
from viewer_sessions import (
    agent_session,
    exchange,
    hostile_session,
    said,
    session_of,
    store_session,
    user,
)

from forge_record.cli import cli
from forge_record.records import (
    Exchange,
    Message,
    Text,
)
from forge_record.viewer import build_view, render_html
from forge_record.viewer.html import pack
from forge_record.viewer.parts import FOLD_LINES

# --- the model --------------------------------------------------------------------------


def test_each_call_shows_only_its_new_messages():
    view = build_view(session_of([]), agent_session())
    main = next(t for t in view.threads if t.id == "main")
    shown = {c.seq: [(m.role, [p.kind for p in m.parts]) for m in c.messages] for c in main.calls}
    assert shown == {1: [("user", ["text"])],
                     2: [("user", ["tool_result"])],  # not the prompt and reply again
                     4: [("user", ["tool_result"])]}
    first = main.calls[0]
    assert [p.kind for p in first.reply] == ["thinking", "text", "tool_call"]
    assert first.reply[2].name == "Bash" and json.loads(first.reply[2].text) == {
        "command": "pytest -q"}
    assert (first.start, first.duration, first.ttfb) == pytest.approx((1.0, 1.5, 0.4), abs=1e-3)
    assert first.usage["input"] == 101 and first.usage["output"] == 20


def test_threads_are_a_tree_with_side_calls_last():
    view = build_view(session_of([]), agent_session())
    assert [(t.id, t.depth) for t in view.threads] == [
        ("main", 0), ("subagent-a42", 1), ("side", 0)]
    sub = view.threads[1]
    assert sub.spawned_by == (2, "toolu_2")
    assert view.threads[0].calls[1].spawns == ["subagent-a42"]
    assert [(b.seq, b.start, b.end) for b in view.threads[0].timeline] == [
        (1, 1.0, 2.5), (2, 3.0, 4.5), (4, 8.0, 9.5)]
    side = view.threads[2].calls[0]
    assert side.folded and side.side_kind == "count_tokens"


def test_tool_results_are_named_after_their_call_and_long_ones_fold():
    view = build_view(session_of([]), agent_session())
    [part] = view.threads[0].calls[1].messages[0].parts
    assert part.kind == "tool_result" and part.name == "Bash" and part.ref == "toolu_1"
    assert part.folded and part.text.count("\n") >= FOLD_LINES
    short = view.threads[0].calls[2].messages[0].parts[0]
    assert short.name == "Agent" and not short.folded


def test_system_prompt_and_tools_once_per_fingerprint():
    view = build_view(session_of([]), agent_session())
    by_system = {tuple(p.text for p in fp.system): fp for fp in view.fingerprints}
    main = by_system[("You are an interactive agent.",)]  # the billing block left out
    assert [t.name for t in main.tools] == ["Bash", "Agent"]
    assert main.calls == 4  # the main thread's three and count_tokens
    assert ("You are a subagent.",) in by_system
    calls = [c for t in view.threads for c in t.calls]
    assert {c.fingerprint for c in calls} == {fp.id for fp in view.fingerprints}


def test_codex_instructions_in_developer_messages_go_to_the_fingerprint():
    messages = [Message(role="developer", content=[Text(text="You are Codex.")]), user("hi")]
    ex = exchange(1, messages, said(Text(text="hello")), start=1_800_000_001.0, system=[])
    view = build_view(session_of([ex]), [ex])
    assert [p.text for p in view.fingerprints[0].system] == ["You are Codex."]
    assert [m.role for m in view.threads[0].calls[0].messages] == ["user"]


def test_a_call_without_request_or_response_still_shows():
    ex = Exchange(seq=1, dialect="anthropic.messages", status="error", started_at=1.0)
    view = build_view(session_of([ex]), [ex])
    [call] = [c for t in view.threads for c in t.calls]
    assert call.messages == [] and call.reply == [] and call.duration is None


# --- the page ---------------------------------------------------------------------------


def embedded(page: str) -> str:
    """What an HTML parser takes as the data block: up to the first `</script`."""
    start = page.index('<script type="application/json" id="data">') + len(
        '<script type="application/json" id="data">')
    return page[start: page.index("</script", start)]


def test_recorded_markup_cannot_leave_the_data_block():
    session, exchanges = hostile_session()
    view = build_view(session, exchanges)
    page = render_html(view)
    data = embedded(page)
    assert json.loads(data) == json.loads(json.dumps(pack(view)))  # all of it, read back
    assert not re.search(r"[<>&]", data)
    assert page.count("<script") == 2 and "alert" not in page.replace(data, "")


def test_content_is_stored_once_in_the_page():
    exchanges = agent_session()
    for ex in exchanges[1:4]:  # the same long output comes back in three calls
        ex.response.content.append(Text(text="same words " * 50))
    data = pack(build_view(session_of([]), exchanges))
    assert len(data["strings"]) == len(set(data["strings"]))
    assert data["strings"].count("same words " * 50) == 1
    assert json.dumps(data).count("same words") == 50


def test_the_page_fetches_nothing():
    page = render_html(build_view(session_of([]), agent_session()))
    [csp] = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert not re.search(r"(src|href)=\"?(https?:)?//", page)


# --- the command ------------------------------------------------------------------------


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    exchanges = agent_session()
    store_session(url, session_of(exchanges), exchanges)
    return url


def test_view_writes_session_id_html_in_the_cwd(store_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["view", "last", "--store", store_url])
    assert result.exit_code == 0, result.output
    path = tmp_path / "5e55104a00000001.html"
    assert result.output.strip() == str(path)
    data = json.loads(embedded(path.read_text()))
    assert data["session"]["id"] == "5e55104a00000001"
    assert [t["id"] for t in data["threads"]] == ["main", "subagent-a42", "side"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_view_output_and_open_use_the_browser(store_url, tmp_path, monkeypatch):
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {opened}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("BROWSER", f"{browser} %s")  # webbrowser's own way to pick one
    out = tmp_path / "pages" / "s.html"
    out.parent.mkdir()
    result = CliRunner().invoke(cli, ["view", "5e55", "-o", str(out), "--open",
                                      "--store", store_url])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    deadline = time.monotonic() + 10
    while not opened.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert opened.read_text() == out.as_uri()


def test_view_of_an_unknown_session_fails_cleanly(store_url):
    result = CliRunner().invoke(cli, ["view", "nope", "--store", store_url])
    assert result.exit_code != 0 and "nope" in str(result.exception or result.output)


def test_view_model_is_plain_data():
    view = build_view(session_of([]), agent_session())
    assert json.loads(json.dumps(asdict(view)))["threads"][0]["id"] == "main"
