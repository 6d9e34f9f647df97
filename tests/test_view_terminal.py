"""`forge-record show` drawn from the viewer's model (forge_record.viewer.terminal): colours
when stdout is a terminal (run under a real pseudo-terminal), plain text when piped or with
NO_COLOR, and the same threads and calls as the model `forge-record view` draws."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from viewer_sessions import agent_session, session_of, store_session

from forge_record.viewer import build_view
from forge_record.viewer.terminal import render_text

FORGE = str(Path(sys.executable).parent / "forge-record")
ESCAPE = "\x1b["


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    exchanges = agent_session()
    store_session(url, session_of(exchanges), exchanges)
    return url


def show_in_terminal(store_url: str, env: dict[str, str]) -> str:
    """What `forge-record show last` writes to a pseudo-terminal."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([FORGE, "show", "last", "--store", store_url], stdout=follower,
                            stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(60) == 0, proc.stderr.read().decode()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_show_colours_a_terminal(store_url):
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    out = show_in_terminal(store_url, env)
    assert re.search(r"\x1b\[[0-9;]*m", out)
    assert click_style_of("→ Bash", fg="cyan") in out  # a tool call in its colour
    assert "\x1b[35m\x1b[1mthread main" in out


def test_show_is_plain_when_piped_or_no_color(store_url):
    piped = subprocess.run([FORGE, "show", "last", "--store", store_url], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert ESCAPE not in piped and "→ Bash" in piped and "thread main" in piped
    no_color = show_in_terminal(store_url, os.environ | {"NO_COLOR": "1"})
    assert ESCAPE not in no_color and no_color == piped


def test_text_and_page_show_the_same_model():
    view = build_view(session_of([]), agent_session())
    text = "\n".join(render_text(view))
    assert ESCAPE not in text and ESCAPE in "\n".join(render_text(view, color=True))
    for thread in view.threads:
        for call in thread.calls:
            assert re.search(rf"^\s*#{call.seq} ", text, re.M), call.seq
        if thread.role != "side":
            assert f"thread {thread.id} · " in text
    sub = text.index("    thread subagent-a42 · spawned by #2 (toolu_2)")
    assert text.index("→ Agent") < sub < text.index("\n#4 ")  # under its spawning call
    assert text.endswith("\nside calls (1)\n  #5 count_tokens · claude-opus-4-8 (side) · "
                         "complete 200 · 1.5s, 105 in / 20 out")  # folded, at the end


def click_style_of(text: str, **style) -> str:
    import click

    return click.style(text, **style).removesuffix("\x1b[0m")
