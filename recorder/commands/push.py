"""`forge-record push --to URL [--session SESSION ...]`: copy sessions into another store,
typically the team's Postgres. Running it again copies nothing twice; an interrupted push
goes on where it stopped (see forge_record.store.push)."""

from __future__ import annotations

import sys

import click

from forge_record.commands.common import open_store, store_option
from forge_record.outcome import count


@click.command()
@store_option
@click.option("--to", "target", required=True, metavar="URL",
              help="The store to copy into, e.g. postgresql+psycopg://host/db.")
@click.option("--session", "refs", multiple=True, metavar="SESSION",
              help="A session to push (id, unique prefix, or 'last'). Repeatable; "
                   "default: every session in --store.")
def push(store, target, refs) -> None:
    """Copy sessions from --store (default: the local store) to the store at --to."""
    from forge_record.store import push as pushing

    source = open_store(store)
    try:
        dest = open_store(target, create=True)
        try:
            ids = [source.resolve_session(r) for r in refs] if refs else _all(source)
            todo = pushing.plan(source, dest, ids)
            total = sum(len(seqs) for seqs in todo.values())
            report = _run(pushing, source, dest, todo, total)
        finally:
            dest.close()
    finally:
        source.close()
    click.echo(summary(report, len(todo)), err=True)


def summary(report, sessions: int) -> str:
    """What the push copied, e.g. "copied 8 sessions (35 exchanges, 12 new blobs)", then how
    many sessions were there before, whole or in part (an interrupted push)."""
    completed = report.completed
    untouched = sessions - report.new_sessions - completed
    text = (f"copied {count(report.new_sessions, 'session')} "
            f"({count(report.exchanges, 'exchange')}, {count(report.blobs, 'new blob')})")
    if completed:
        text += f"; completed {count(completed, 'session')} copied in part before"
    if untouched:
        text += f"; {count(untouched, 'session')} already there"
    return text


def _all(source) -> list[str]:
    return [s["id"] for s in reversed(source.list_sessions(limit=None))]  # oldest first


def _run(pushing, source, dest, todo, total):
    if not sys.stderr.isatty():
        return pushing.push(source, dest, todo)
    with click.progressbar(length=total, label="pushing exchanges", file=sys.stderr,
                           show_pos=True) as bar:
        return pushing.push(source, dest, todo, progress=bar.update)
