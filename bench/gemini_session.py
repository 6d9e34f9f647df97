"""Real Gemini CLI sessions, recorded: the CLI from npm works through a scripted task under
`forge-record run`, whose proxy sends generativelanguage.googleapis.com to forge_record.mock,
and every call is kept as the store read it back (bench/recorded.py).

    sessions(count, calls=150) -> list[list[Exchange]]   recorded once, then cached

What is real is every request byte: Gemini CLI's system instruction, its tool declarations,
its generationConfig, the whole history it resends (its tool results as `functionResponse`
objects, its calls with the ids it makes up: the API sends none), and its side calls (after
30 turns, a loop check in JSON mode). What is scripted is the answers: a sentence and one
`run_shell_command` a call, the command bench/recorded.Plan's next step over a fresh copy of
this repository's source, which the CLI really runs (--yolo), then a closing text; side calls
get the mock's short text, or the least JSON their schema accepts.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import cli_session  # bench/ is on sys.path (run from there, or imported by a bench that is)
import orjson
import recorded

from forge_record.mock import MockUpstream
from forge_record.mock.gemini import SHELL_TOOL, short_text
from forge_record.records import Exchange

FORMAT = 1
TASK_MARK = "forge-record-bench-gemini-task"
MODEL = "gemini-2.5-flash"
SETTINGS = {  # an API key, no telemetry, no updates, no folder trust prompt
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def sessions(count: int, calls: int = 150) -> list[list[Exchange]]:
    """`count` sessions of one Gemini CLI version on one project (seeds 0..count-1)."""
    return recorded.sessions("gemini", "Gemini CLI", FORMAT, count, calls, record)


def record(cli: str, seed: int, calls: int) -> list[Exchange]:
    with tempfile.TemporaryDirectory(prefix="forge-bench-gemini-") as tmp:
        work = recorded.workspace(Path(tmp), {"home/.gemini/settings.json": orjson.dumps(SETTINGS)})
        plan = recorded.Plan(seed, calls, work)

        def answer(request: dict) -> dict:
            declared = {f.get("name") for t in request.get("tools") or ()
                        for f in t.get("functionDeclarations") or ()}
            if SHELL_TOOL not in declared:  # a side call
                return {"parts": [{"text": short_text(request)}], "finishReason": "STOP"}
            text, command, _ = plan.step()
            call = [{"functionCall": {"name": SHELL_TOOL, "args": {"command": command}}}]
            return {"parts": [{"text": text}, *(call if command else [])],
                    "finishReason": "STOP"}

        with MockUpstream(options={"gemini_script": answer}) as mock:
            return recorded.run(
                "Gemini CLI", cli, Path(tmp), f"generativelanguage.googleapis.com={mock.url}",
                ["-p", recorded.TASK.format(mark=TASK_MARK), "--yolo", "-m", MODEL],
                {"GEMINI_API_KEY": cli_session.DUMMY_KEY, "GEMINI_CLI_NO_RELAUNCH": "true"})


if __name__ == "__main__":
    recorded.main(sessions)
