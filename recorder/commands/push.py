"""`forge-record push --to URL [--session SESSION ...]`: copy sessions into another store,
typically the team's Postgres. Running it again copies nothing twice; an interrupted push
goes on where it stopped (see forge_record.store.push)."""

from __future__ import annotations

import sys

import click

from forge_record.commands.common import open_store, store_option


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
        dest = open_store(target)
        try:
            ids = [source.resolve_session(r) for r in refs] if refs else _all(source)
            todo = pushing.plan(source, dest, ids)
            total = sum(len(seqs) for seqs in todo.values())
            report = _run(pushing, source, dest, todo, total)
        finally:
            dest.close()
    finally:
        source.close()
    click.echo(f"pushed {report.exchanges} exchanges of {report.sessions} sessions "
               f"({report.blobs} new blobs); {len(todo) - report.sessions} sessions were "
               "already there", err=True)


def _all(source) -> list[str]:
    return [s["id"] for s in reversed(source.list_sessions(limit=None))]  # oldest first


def _run(pushing, source, dest, todo, total):
    if not sys.stderr.isatty():
        return pushing.push(source, dest, todo)
    with click.progressbar(length=total, label="pushing exchanges", file=sys.stderr,
                           show_pos=True) as bar:
        return pushing.push(source, dest, todo, progress=bar.update)
