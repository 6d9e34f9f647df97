"""Real Codex sessions over its Responses WebSocket, recorded: the CLI from npm works through
a scripted task under `forge-record run`, whose proxy sends api.openai.com to
forge_record.mock, and every call is kept as the store read it back (records and raw frames).

    sessions(count, calls=150, http=False) -> list[list[Exchange]]   recorded once, then cached

With `http`, Codex talks to a model provider of its config instead (HTTP_PROVIDER: what a
team's gateway, Azure or a local server looks like to it), over HTTP with SSE, and then each
call sends the whole conversation, as Claude Code's do.

What is real is every frame Codex sent, as `run` recorded it: its instructions, its ~18 KB
of tool schemas resent on every call, its parameters (`client_metadata` with a millisecond
clock, `previous_response_id`, turn metadata), the warm-up, and each call's new items only,
the output of commands it really ran. What is scripted is the answers: a sentence and one
`exec_command` call a call, the command a plan's next step over a fresh copy of this
repository's source at cli_session.PROJECT_REV (grep, sed, git, ls, wc: cli_session's
plan), and a closing text. The mock's answers carry no reasoning items: a real model's
encrypted reasoning would add bytes of its own to every call.

A recording is kept as records (bench/recorded.py) because Codex's stored requests are
stitched from the socket's earlier frames (`previous_response_id`), which only capture sees;
it depends on the CLI's version, the seed and the number of calls.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import orjson
import recorded  # bench/ is on sys.path (run from there, or imported by a bench that is)

from forge_record.mock import MockUpstream
from forge_record.records import Exchange

FORMAT = 1
TASK_MARK = "forge-record-bench-codex-task"
DUMMY_KEY = "forge-record-bench-dummy-key"  # the mock takes any


HTTP_PROVIDER = """\
model_provider = "gateway"
[model_providers.gateway]
name = "gateway"
base_url = "https://api.openai.com/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""


def sessions(count: int, calls: int = 150, http: bool = False) -> list[list[Exchange]]:
    """`count` sessions of one Codex version on one project (seeds 0..count-1)."""
    return recorded.sessions("codex", "Codex", FORMAT, count, calls,
                             lambda cli, seed, n: record(cli, seed, n, http),
                             variant="-http" if http else "")


def record(cli: str, seed: int, calls: int, http: bool = False) -> list[Exchange]:
    with tempfile.TemporaryDirectory(prefix="forge-bench-codex-") as tmp:
        work = recorded.workspace(Path(tmp), {"codex/config.toml": HTTP_PROVIDER.encode()}
                                  if http else None)
        codex_home = Path(tmp) / "codex"
        codex_home.mkdir(exist_ok=True)
        plan = recorded.Plan(seed, calls, work)

        def answer(request: dict) -> tuple[str, list[dict]]:
            text, command, call_id = plan.step()
            return text, [{"call_id": f"call_{call_id}", "name": "exec_command",
                           "arguments": orjson.dumps({"cmd": command}).decode()}
                          ] if command else []

        with MockUpstream(options={"responses_script": answer}) as mock:
            made = recorded.run(
                "Codex", cli, Path(tmp), f"api.openai.com={mock.url}",
                ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                 "--color", "never", "-m", "gpt-5.4", recorded.TASK.format(mark=TASK_MARK)],
                {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": DUMMY_KEY})
            if bool(mock.websockets) == http:
                sys.exit(f"Codex used {'a' if http else 'no'} WebSocket")
        return made


if __name__ == "__main__":  # codex_session.py [N] [--http]
    recorded.main(lambda count: sessions(count, http="--http" in sys.argv))
