"""`forge-record export --format FORMAT [-o PATH|-] [filters]`: sessions into training formats.

Output goes to stdout (`-`, the default) or a file; Parquet writes shards into a directory.
A progress bar goes to stderr only when stderr is a terminal; the counts (exported, skipped
and why, dropped and why) always end on stderr, so stdout carries nothing but the data.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from forge_record.commands.common import key_value, open_store, store_option
from forge_record.errors import UsageError
from forge_record.exporters import DIRECTORY_FORMATS, FORMATS, Filters, Options
from forge_record.exporters import export as run_export
from forge_record.exporters.base import THREADS
from forge_record.exporters.select import parse_when


@click.command()
@store_option
@click.option("--format", "-f", "fmt", type=click.Choice(list(FORMATS)), required=True,
              help="openai | anthropic | sharegpt: one chat per thread segment; calls: one "
              "line per model call; trajectories: one line per thread; parquet: calls as "
              "Parquet shards (a directory); otel: OTLP JSON spans, one line per session.")
@click.option("-o", "--output", default="-", metavar="PATH|-",
              help="Where to write (default: stdout). For parquet, a directory.")
@click.option("--session", "sessions", multiple=True, metavar="SESSION",
              help="An id, unique prefix or 'last'. Repeatable. Default: every session.")
@click.option("--harness", metavar="NAME", help="Only sessions of this harness.")
@click.option("--model", metavar="GLOB", help="Only calls to a model matching GLOB.")
@click.option("--since", metavar="WHEN", help="Sessions started at or after WHEN "
              "(2026-08-01, an ISO time, an epoch, or an age: 12h, 7d).")
@click.option("--until", metavar="WHEN", help="Sessions started before WHEN.")
@click.option("--user", metavar="NAME", help="Only sessions recorded by this user.")
@click.option("--tag", multiple=True, callback=key_value, metavar="K=V",
              help="Only sessions tagged K=V (at run, or by a label). Repeatable.")
@click.option("--label", "labelled", is_flag=True, help="Only labelled sessions.")
@click.option("--thread", type=click.Choice(THREADS), default="all", show_default=True,
              help="main: the main agent only; all: subagents too.")
@click.option("--include-side-calls", is_flag=True,
              help="Also export side calls (titles, count_tokens, checks).")
@click.option("--only-complete", is_flag=True,
              help="Leave out calls whose response did not complete.")
@click.option("--min-calls", type=click.IntRange(min=0), metavar="N",
              help="Only sessions with at least N model calls.")
@click.option("--keep-extras", is_flag=True,
              help="Keep what a format cannot hold (reasoning in openai, ...) under an "
              "extension key instead of dropping it.")
def export(store, fmt, output, sessions, harness, model, since, until, user, tag, labelled,
           thread, include_side_calls, only_complete, min_calls, keep_extras) -> None:
    """Export recorded sessions as training data or traces."""
    filters = Filters(
        sessions=tuple(sessions), harness=harness, user=user,
        since=parse_when(since) if since else None, until=parse_when(until) if until else None,
        tags=tag, labelled=labelled, min_calls=min_calls,
    )
    options = Options(thread=thread, include_side_calls=include_side_calls,
                      only_complete=only_complete, model=model, keep_extras=keep_extras)
    st = open_store(store)
    try:
        with _destination(fmt, output) as out:
            tally = run_export(st, fmt, out, filters, options, progress=_progress_bar())
    except BrokenPipeError:  # `| head` read what it wanted: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    finally:
        st.close()
    click.echo(f"forge-record: {tally.summary(fmt)}", err=True)


@contextlib.contextmanager
def _destination(fmt: str, output: str):
    if fmt in DIRECTORY_FORMATS:
        if output == "-":
            raise UsageError(f"--format {fmt} writes a directory of shards: give -o DIR")
        yield Path(output)
        return
    if output == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    with open(output, "wb") as f:
        yield f


def _progress_bar():
    """A bar over sessions, on stderr, only for a person watching a terminal."""
    if not sys.stderr.isatty():
        return None

    def bar(ids: list[str]):
        with click.progressbar(ids, label="exporting sessions", file=sys.stderr) as shown:
            yield from shown

    return bar
