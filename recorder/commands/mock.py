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
def mock(port) -> None:
    """Serve the built-in mock model API on 127.0.0.1 until Ctrl-C."""
    # A long-running mock keeps only the last requests (the tests read them all).
    upstream = MockUpstream(port=port, requests=collections.deque(maxlen=100))  # type: ignore[arg-type]
    with upstream:
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
