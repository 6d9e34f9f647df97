"""The real CLIs as rollouts of one `forge-record serve` whose upstream is the project's mock:
Claude Code, Codex (built-in provider, over its Responses WebSocket) and Gemini CLI, at the
same time, each started by `forge-record run --gateway` (which creates the session, runs the
CLI with the session's environment and finishes it with the exit code). Each lands in its own
session with its tool round trip whole, a reward posted through the API shows in the
trajectories, and the cursor gives each finished session exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from claude_code_cli import claude_env
from codex_cli import codex_env
from gemini_cli import gemini_env
from serve_gateway import ADMIN, Served

from forge_record.mock import TOOL_MARKER, MockUpstream

pytestmark = [pytest.mark.slow, pytest.mark.cli]

FORGE = str(Path(sys.executable).with_name("forge-record"))
PROMPT = f"Run the {TOOL_MARKER} command"
COMMANDS = {
    "claude-code": ["claude", "-p", PROMPT, "--dangerously-skip-permissions"],
    "codex": ["codex", "exec", "--skip-git-repo-check",
              "--dangerously-bypass-approvals-and-sandbox", "--color", "never", "-m", "gpt-5.4",
              PROMPT],
    "gemini-cli": ["gemini", "-p", PROMPT, "--yolo", "-m", "gemini-2.5-flash"],
}


def each_own(tmp_path: Path, name: str, fixture) -> dict:
    """One CLI's environment (its test module's fixture), in a directory of its own."""
    (tmp_path / name).mkdir()
    return fixture.__wrapped__(tmp_path / name)


def test_three_real_clis_as_concurrent_rollouts(tmp_path):
    envs = {"claude-code": each_own(tmp_path, "claude", claude_env),
            "codex": each_own(tmp_path, "codex", codex_env),
            "gemini-cli": each_own(tmp_path, "gemini", gemini_env)}
    with MockUpstream() as mock, Served(tmp_path / "gw", f"sqlite:///{tmp_path}/gw.db",
                                        [mock.url]) as gw:
        procs = {}
        for harness, argv in COMMANDS.items():
            env = {**envs[harness], "FORGE_RECORD_GATEWAY_TOKEN": ADMIN}
            cwd = Path(env["TMPDIR"]) / "work" if harness == "gemini-cli" else env["HOME"]
            procs[harness] = subprocess.Popen(
                [FORGE, "run", "--gateway", gw.url, "--meta", f"task_id={harness}",
                 "--meta", "group_id=g1", "--tag", f"cli={harness}", "--", *argv],
                env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
        outputs = {h: p.communicate(timeout=300) for h, p in procs.items()}
        for harness, (out, err) in outputs.items():
            assert procs[harness].returncode == 0, (harness, err, "".join(gw.log))
            assert f"{TOOL_MARKER}-output-42" in out, harness  # the tool really ran
        # the CLIs never used the gateway as a relay to anything but their session
        assert mock.websockets, "Codex did not use its WebSocket transport"

        page = gw.client.trajectories(group_id="g1")
        items = {i["metadata"]["task_id"]: i for i in page["items"]}
        assert set(items) == set(COMMANDS)
        for harness, item in items.items():
            assert item["status"] == "done" and item["exit_code"] == 0
            assert item["harness"] == harness and item["tags"]["cli"] == harness
            view = gw.client.session(item["session_id"])
            # a number is reserved only for a call that is recorded (not Codex's GET /models)
            assert item["missing_calls"] == view["missing_calls"] == [], (harness, view)
            models = [c for c in view["calls"] if c["status"] == "complete"]
            assert len(models) >= 2, (harness, view["calls"])
            if harness == "codex":
                assert any(c["url"].startswith("ws") for c in view["calls"])
            text = orjson.dumps(item["trajectories"]).decode()
            assert f"{TOOL_MARKER}-output-42" in text, harness  # the tool result, stitched
            for other in set(COMMANDS) - {harness}:
                assert items[other]["session_id"] not in text

        gw.client.reward(items["codex"]["session_id"], 1.0, tags={"outcome": "pass"})
        # the cursor: everything once, then nothing more
        seen = [i["session_id"] for i in gw.client.iter_trajectories(after=0)]
        assert sorted(seen) == sorted(i["session_id"] for i in items.values())
        assert gw.client.trajectories(after=page["cursor"])["items"] == []
        rewarded = gw.client.trajectories(after=0)["items"]
        codex = next(i for i in rewarded if i["harness"] == "codex")
        assert codex["reward"] == 1.0
        assert all(t["reward"] == 1.0 for t in codex["trajectories"])
