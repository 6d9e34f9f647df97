"""`forge-record run --gateway URL -- CMD`: one rollout, recorded by a shared gateway.

In a rollout pod there is no local proxy: the session is created at the gateway (its control
API, forge_record.client), CMD runs with the session's environment (its base URL and token;
Codex's `-c` arguments after the executable), and the session is finished with CMD's exit
code. The admin token comes from FORGE_RECORD_GATEWAY_TOKEN or `--gateway-token-file` and
is removed from CMD's environment: the agent never holds it. A CMD that could not be started
finishes its session as `discarded` (an infrastructure failure, not a trajectory).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from forge_record import launch
from forge_record.client import GatewayClient, GatewayError
from forge_record.errors import ForgeRecordError, UsageError

TOKEN_ENV = "FORGE_RECORD_GATEWAY_TOKEN"


def admin_token(token_file: str | None, environ: dict[str, str]) -> str:
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as e:
            raise UsageError(f"cannot read --gateway-token-file {token_file}: "
                             f"{e.strerror or e}") from None
    else:
        token = environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise UsageError(f"--gateway needs the admin token: set {TOKEN_ENV} or give "
                         "--gateway-token-file")
    return token


def run_in_session(url: str, token: str, harness: str, argv: list[str],
                   tags: dict[str, str], meta: dict[str, str]) -> int:
    client = GatewayClient(url, token)
    try:
        session = client.create_session(harness, metadata=meta, tags=tags)
    except GatewayError as e:
        raise ForgeRecordError(f"gateway {url} refused the session: {e.message}") from None
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env.update(session["env"])
    argv = [argv[0], *session.get("args", []), *argv[1:]]
    status, exit_code = "discarded", None
    try:
        exit_code = launch.run_child(argv, env)
        status = "done"
    finally:
        try:
            client.finish(session["id"], status, exit_code)
        except GatewayError as e:
            click.echo(f"forge-record: could not finish session {session['id']}: {e}",
                       err=True)
    click.echo(f"forge-record: session {session['id']} at {url} · {status} "
               f"(exit {exit_code})", err=True)
    return exit_code if exit_code is not None else 1
