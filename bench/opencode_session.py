"""Real opencode sessions, recorded: the CLI from npm works through a scripted task under
`forge-record run`, whose proxy sends api.anthropic.com to forge_record.mock, and every call
is kept as the store read it back (bench/recorded.py).

    sessions(count, calls=150) -> list[list[Exchange]]   recorded once, then cached

opencode speaks Anthropic Messages here (an Anthropic API key and a Claude model), so this
is the bench's Anthropic harness other than Claude Code. What is real is every request byte:
its system prompt, its tool declarations, the whole history it resends, its side calls (a
title). What is scripted is the answers: a sentence and one `bash` call a call, the command
bench/recorded.Plan's next step over a fresh copy of this repository's source, which the CLI
really runs, then a closing text; calls that offer no bash tool get a short text.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import recorded  # bench/ is on sys.path (run from there, or imported by a bench that is)

from forge_record.mock import MockUpstream
from forge_record.mock.anthropic import text_message
from forge_record.records import Exchange

FORMAT = 1
TASK_MARK = "forge-record-bench-opencode-task"
DUMMY_KEY = "forge-record-bench-dummy-key"  # the mock takes any
ENV = {  # as tests/test_opencode.py: a Claude model, nothing fetched, bash allowed
    "OPENCODE_CONFIG_CONTENT": '{"model": "anthropic/claude-sonnet-4-5"}',
    "OPENCODE_DISABLE_MODELS_FETCH": "true", "OPENCODE_DISABLE_AUTOUPDATE": "true",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true", "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
    "OPENCODE_DISABLE_SHARE": "true", "OPENCODE_PERMISSION": '{"bash": "allow"}',
}


def sessions(count: int, calls: int = 150) -> list[list[Exchange]]:
    """`count` sessions of one opencode version on one project (seeds 0..count-1)."""
    return recorded.sessions("opencode", "opencode", FORMAT, count, calls, record)


def record(cli: str, seed: int, calls: int) -> list[Exchange]:
    with tempfile.TemporaryDirectory(prefix="forge-bench-opencode-") as tmp:
        work = recorded.workspace(Path(tmp))
        plan = recorded.Plan(seed, calls, work)

        def answer(request: dict) -> dict:
            if "bash" not in {t.get("name") for t in request.get("tools") or ()}:  # a side call
                return text_message("A title.")
            text, command, call_id = plan.step()
            if command is None:
                return text_message(text)
            call = {"type": "tool_use", "id": f"toolu_01{call_id}", "name": "bash",
                    "input": {"command": command, "description": "Look at the code"}}
            return {"content": [{"type": "text", "text": text}, call], "stop_reason": "tool_use"}

        with MockUpstream(options={"anthropic_script": answer}) as mock:
            return recorded.run(
                "opencode", cli, Path(tmp), f"api.anthropic.com={mock.url}",
                ["run", recorded.TASK.format(mark=TASK_MARK)],
                {"ANTHROPIC_API_KEY": DUMMY_KEY, **ENV})


if __name__ == "__main__":
    recorded.main(sessions)
