"""`forge-record demo`: record a real session offline, into the user's store, in seconds.

It starts the built-in mock model API (forge_record.mock) on 127.0.0.1 and runs an agent
through `forge-record run`'s own recording path (commands.run.record) in forward mode, with
api.anthropic.com sent to the mock: the agent is asked to run a command, the mock answers with
a streamed Bash tool call, the agent runs it and sends the result, the mock answers with what
it printed. So `sessions`, `show`, `view` and `export` have something real to read on day one,
without an API key or network.

The agent is the real Claude Code when `claude` is on PATH (in a throw-away HOME, so the
user's own Claude config, login and key are neither used nor touched; the key it gets is a
dummy), else forge_record.mock.client: the official anthropic SDK if installed, else urllib.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import click

from forge_record import config
from forge_record.commands.common import setup_logging, store_option
from forge_record.commands.run import pick_shim, plan_route, record
from forge_record.mock import TOOL_MARKER, MockUpstream
from forge_record.paths import home, store_url

DUMMY_KEY = "sk-ant-demo-dummy-key-not-real"
# The user's own settings for Claude Code would route it elsewhere (a gateway, Bedrock) or
# log it in: the demo's Claude Code gets none of them.
_CLAUDE_SETTINGS = ("ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_CONFIG_DIR")
_QUIET_CLAUDE = {  # no update checks, telemetry or error reports: nothing leaves the machine
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}


@click.command()
@store_option
@click.option("--agent", type=click.Choice(["auto", "claude", "python"]), default="auto",
              show_default=True, help="claude: the real Claude Code (must be on PATH); python: "
              "the built-in client (anthropic SDK or urllib); auto: claude if installed.")
@click.option("-v", "--verbose", count=True, help="Log what the recorder does (-vv: more).")
def demo(store, agent, verbose) -> None:
    """Record a session offline: an agent against the built-in mock model API."""
    setup_logging(verbose)
    claude = shutil.which("claude") if agent in ("auto", "claude") else None
    if agent == "claude" and claude is None:
        raise click.ClickException("claude is not on PATH (npm install -g "
                                   "@anthropic-ai/claude-code, or --agent python)")
    url = store_url(store)
    with MockUpstream() as mock, tempfile.TemporaryDirectory(prefix="forge-record-demo-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        if claude:
            argv = [claude, "-p", f"Run the {TOOL_MARKER} command", "--allowedTools", "Bash"]
            env = _claude_env(Path(tmp))
            shim, tag = pick_shim(None, argv), "claude-code"
        else:
            argv = [sys.executable, "-m", "forge_record.mock.client"]
            env = dict(os.environ, ANTHROPIC_API_KEY=DUMMY_KEY)
            shim, tag = pick_shim("generic", argv), "python-client"
        click.echo(f"forge-record demo: {tag} against the mock model API on {mock.url} "
                   f"(api.anthropic.com is sent there; nothing leaves this machine)", err=True)
        env["FORGE_RECORD_HOME"] = str(home())  # the CA and the store's data dir stay put
        route = plan_route(shim, "forward", env, {"api.anthropic.com": mock.url})
        exit_code = _recorded(argv, shim, route, url, env, work, tag, verbose)
    click.echo(_next_steps(store), err=True)
    sys.exit(exit_code)


def _claude_env(tmp: Path) -> dict[str, str]:
    """The environment for the demo's Claude Code: the user's, without their Claude Code
    settings, with a throw-away HOME and a dummy key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLAUDE_SETTINGS)}
    (tmp / "home").mkdir()
    env.update(_QUIET_CLAUDE, HOME=str(tmp / "home"), ANTHROPIC_API_KEY=DUMMY_KEY)
    return env


def _recorded(argv, shim, route, url, env, work: Path, tag: str, verbose: int) -> int:
    """Run `argv` in `work` through the recorder, with `env` as its environment: record()
    hands the child this process's environment and records its cwd, so both are set here
    for the run and put back after."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(work)
    try:
        return record(argv, shim, route, url, tags={"demo": tag}, settings={},
                      verbose=verbose, redactor=config.redactor(home()))
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def _next_steps(store: str | None) -> str:
    opt = f" --store {store}" if store else ""
    return "\n".join([
        "next:",
        f"  forge-record sessions{opt}                  # what was recorded",
        f"  forge-record show last{opt}                 # the session as a thread tree",
        f"  forge-record view last{opt}                 # the same as one HTML page",
        f"  forge-record export{opt} --format openai --session last -o demo.jsonl",
    ])
