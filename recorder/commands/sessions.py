"""`forge-record sessions`: the recorded sessions, newest first."""

from __future__ import annotations

import time

import click
import orjson

from forge_record.commands.common import open_store, store_option


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("--limit", "-n", default=20, show_default=True, type=click.IntRange(min=1))
def sessions(store, as_json, limit) -> None:
    """List recorded sessions."""
    st = open_store(store)
    try:
        rows = st.list_sessions(limit)
    finally:
        st.close()
    if as_json:
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    if not rows:
        click.echo("No sessions recorded yet. Try: forge-record run -- claude", err=True)
        return
    click.echo(f"{'SESSION':<16}  {'STARTED':<16}  {'HARNESS':<12}  CALLS  TOOLS  TOKENS IN/OUT  EXIT")
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started_at"]))
        tokens = f"{_total_in(r):,}/{r['output_tokens'] or 0:,}"
        exit_code = "-" if r["exit_code"] is None else str(r["exit_code"])
        click.echo(
            f"{r['id']:<16}  {started:<16}  {(r['harness'] or '-'):<12}  "
            f"{r['calls']:>5}  {r['tool_calls']:>5}  {tokens:>13}  {exit_code:>4}"
        )


def _total_in(row: dict) -> int:
    return sum(row[k] or 0 for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens"))
