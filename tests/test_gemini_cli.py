"""The real Gemini CLI, run through `forge-record run` against the mock upstream.

Setup as PROTOCOLS.md part 3 says: a fresh HOME whose ~/.gemini/settings.json picks API-key
auth and turns off folder trust, usage statistics, telemetry and auto-update; a dummy
GEMINI_API_KEY. The mock asks for a `run_shell_command` call; Gemini CLI runs it (--yolo) and
sends back its output; the mock answers with it. The stored session must hold all three: the
call, its result and the final answer, in forward mode (HTTPS_PROXY + NODE_EXTRA_CA_CERTS, the
real host kept) and reverse mode (GOOGLE_GEMINI_BASE_URL).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from export_checks import check_recorded_cli_session
from gemini_cli import DUMMY_KEY, SETTINGS, find_gemini, gemini_env  # noqa: F401 - fixture

from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.cli]

FORGE = str(Path(sys.executable).with_name("forge-record"))


def forge(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=Path(env["TMPDIR"]) / "work")


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_gemini_cli_tool_call_is_recorded(gemini_env, mode):
    with MockUpstream() as mock:
        proc = forge(
            gemini_env, "run", "--mode", mode,
            "--upstream", f"generativelanguage.googleapis.com={mock.url}", "--",
            "gemini", "-p", f"Run the {TOOL_MARKER} command", "--yolo", "-m", "gemini-2.5-flash",
        )
        assert proc.returncode == 0, proc.stderr
        assert f"{TOOL_MARKER}-output-42" in proc.stdout  # the tool really ran
        paths = [r.path for r in mock.requests]
        sent = sorted(r.body for r in mock.requests if ":" in r.path.rpartition("/")[2])
    assert paths.count("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse") >= 2
    assert "model calls" in proc.stderr.splitlines()[-1]

    shown = forge(gemini_env, "show", "last", "--json")
    assert shown.returncode == 0, shown.stderr
    session = orjson.loads(shown.stdout)
    assert session["harness"] == "gemini-cli" and session["harness_version"] == "0.61.0"
    assert session["exit_code"] == 0
    turns = [e for e in session["exchanges"] if e["dialect"] == "gemini.generate"
             and e["kind"] == "model"]
    assert all(e["status"] == "complete" for e in turns), [e["flags"] for e in turns]
    assert all(e["url"].startswith("https://generativelanguage.googleapis.com/v1beta/models/"
                                   "gemini-2.5-flash:streamGenerateContent") for e in turns)
    call_turn = next(e for e in turns if any(b["type"] == "tool_call"
                                             for b in e["response"]["content"]))
    assert call_turn["request"]["model"] == "gemini-2.5-flash" and call_turn["request"]["stream"]
    assert "run_shell_command" in [t["name"] for t in call_turn["request"]["tools"]]
    [call] = [b for b in call_turn["response"]["content"] if b["type"] == "tool_call"]
    assert call["name"] == "run_shell_command" and TOOL_MARKER in call["arguments"]["command"]

    final = turns[-1]
    results = [b for m in final["request"]["messages"] for b in m["content"]
               if b["type"] == "tool_result"]
    assert results and results[-1]["name"] == "run_shell_command"
    assert f"{TOOL_MARKER}-output-42" in orjson.dumps(results[-1]["content"]).decode()
    history_calls = [b for m in final["request"]["messages"] if m["role"] == "assistant"
                     for b in m["content"] if b["type"] == "tool_call"]
    assert results[-1]["tool_call_id"] in [c["id"] for c in history_calls]
    answer = final["response"]["content"][-1]["text"]
    assert answer.startswith("The command printed") and f"{TOOL_MARKER}-output-42" in answer

    text = forge(gemini_env, "show", "last")
    assert "→ run_shell_command" in text.stdout and "The command printed" in text.stdout

    db = Path(gemini_env["FORGE_RECORD_HOME"]) / "traces.db"
    for path in db.parent.glob("traces.db*"):
        assert DUMMY_KEY.encode() not in path.read_bytes()
    # Raw requests are compressed against their blobs rendered as Gemini CLI writes them
    # (store.wire's b"G") and read back as the CLI sent them.
    with sqlite3.connect(db) as conn:
        marks = {frame[:1] for (frame,) in conn.execute("SELECT raw_request FROM exchanges")}
    assert marks == {b"G"}
    with open_store(f"sqlite:///{db}") as store:
        assert sorted(e.raw_request for e in store.iter_exchanges(session["id"], raw=True)) == sent
    # Gemini CLI sends the call back with its own id: still one thread (issue 18.1)
    check_recorded_cli_session(gemini_env["FORGE_RECORD_HOME"], session)
