"""Real Qwen Code sessions, recorded: the CLI from npm works through a scripted task under
`forge-record run`, whose proxy sends DashScope's OpenAI-compatible host to forge_record.mock,
and every call is kept as the store read it back (bench/recorded.py).

    sessions(count, calls=150) -> list[list[Exchange]]   recorded once, then cached

Qwen Code speaks OpenAI Chat Completions with an API key, so this is the bench's Chat
harness. What is real is every request byte: its system message, its tool declarations, the
whole history it resends (its calls as `tool_calls`, their output as `tool` messages), its
side calls. What is scripted is the answers: a sentence and one `run_shell_command` call a
call, the command bench/recorded.Plan's next step over a fresh copy of this repository's
source, which the CLI really runs (--yolo), then a closing text; calls that offer no shell
tool get a short text.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import recorded  # bench/ is on sys.path (run from there, or imported by a bench that is)

from forge_record.mock import MockUpstream
from forge_record.records import Exchange

FORMAT = 1
TASK_MARK = "forge-record-bench-qwen-task"
DUMMY_KEY = "forge-record-bench-dummy-key"  # the mock takes any
SHELL_TOOL = "run_shell_command"
# As tests/test_qwen_code.py: a command on a PTY, whose output Qwen Code always reads. No cap
# on tool calls in a turn: its adaptive one stops a turn of 100 calls where a command repeats.
SETTINGS = {"tools": {"shell": {"enableInteractiveShell": True}},
            "model": {"maxToolCallsPerTurn": 0},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}


def sessions(count: int, calls: int = 150) -> list[list[Exchange]]:
    """`count` sessions of one Qwen Code version on one project (seeds 0..count-1)."""
    return recorded.sessions("qwen", "Qwen Code", FORMAT, count, calls, record)


def record(cli: str, seed: int, calls: int) -> list[Exchange]:
    with tempfile.TemporaryDirectory(prefix="forge-bench-qwen-") as tmp:
        work = recorded.workspace(Path(tmp), {"home/.qwen/settings.json": orjson.dumps(SETTINGS)})
        plan = recorded.Plan(seed, calls, work)

        def answer(request: dict) -> tuple[str, list[dict]]:
            offered = {(t.get("function") or {}).get("name") for t in request.get("tools") or ()}
            if SHELL_TOOL not in offered:  # a side call
                return "OK.", []
            text, command, call_id = plan.step()
            return text, [{"call_id": f"call_{call_id}", "name": SHELL_TOOL,
                           "arguments": orjson.dumps({"command": command}).decode()}
                          ] if command else []

        with MockUpstream(options={"chat_script": answer}) as mock:
            return recorded.run(
                "Qwen Code", cli, Path(tmp), f"dashscope.aliyuncs.com={mock.url}",
                ["--auth-type", "openai", "--yolo", recorded.TASK.format(mark=TASK_MARK)],
                {"OPENAI_API_KEY": DUMMY_KEY, "OPENAI_MODEL": "qwen3-coder-plus",
                 "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"})


if __name__ == "__main__":
    recorded.main(sessions)
