"""`forge-record mock [--port N]`: the built-in scripted model API alone, in the foreground.

The same mock the tests, `doctor` and `demo` use (forge_record.mock), on 127.0.0.1, for
trying a setup without an API key or network: it answers the Anthropic Messages API, OpenAI
Chat Completions and Responses (HTTP and WebSocket) and the Gemini API, streamed or not, with
deterministic replies (a prompt containing "forge-record-e2e" and a Bash tool gets a Bash tool
call). It prints each dialect's base URL and serves until Ctrl-C.
"""

from __future__ import annotations

import collections
import threading

import click

from forge_record.mock import TOOL_MARKER, MockUpstream


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The port on 127.0.0.1 (0: a free one).")
@click.option("--engine", is_flag=True,
              help="Serve as an engine does (vLLM's Chat Completions with token ids, "
              "/tokenize, /v1/models) and nothing else: for `run --engine`.")
def mock(port, engine) -> None:
    """Serve the built-in mock model API on 127.0.0.1 until Ctrl-C."""
    from forge_record.mock import engine as engine_mode

    # A long-running mock keeps only the last requests (the tests read them all).
    upstream = MockUpstream(port=port, requests=collections.deque(maxlen=100))  # type: ignore[arg-type]
    if engine:
        upstream.routes = list(engine_mode.ROUTES)
    with upstream:
        if engine:
            click.echo(f"mock engine on {upstream.url} (Ctrl-C stops it); record a CLI "
                       "through the dialect bridge, e.g.:\n"
                       f"  forge-record run --engine vllm --upstream api.anthropic.com="
                       f"{upstream.url} -- claude -p 'Run the {TOOL_MARKER} command' "
                       "--allowedTools Bash")
        else:
            click.echo(f"mock model API on {upstream.url} (Ctrl-C stops it)")
            for var, url in upstream.base_urls().items():
                click.echo(f"  {var}={url}")
            click.echo("record a CLI against it, e.g.:\n"
                       f"  forge-record run --upstream api.anthropic.com={upstream.url} -- "
                       f"claude -p 'Run the {TOOL_MARKER} command' --allowedTools Bash")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            click.echo("mock stopped", err=True)
