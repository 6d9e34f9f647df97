"""`forge-record db upgrade|current`: the store's schema revision, and bringing it to this
version's. SQLite stores upgrade themselves on open; a shared Postgres store is upgraded
only through `db upgrade`, and refused until then."""

from __future__ import annotations

import click

from forge_record.commands.common import require_store, store_option
from forge_record.paths import store_url


@click.group()
def db() -> None:
    """Show or upgrade the store's schema."""


@db.command()
@store_option
def upgrade(store) -> None:
    """Migrate the store to the schema this forge-record needs."""
    from forge_record.store import upgrade_store
    from forge_record.store.engine import show_url

    url = store_url(store)
    before, after = upgrade_store(url)
    if before == after:
        click.echo(f"store {show_url(url)} is already at revision {after}")
    else:
        click.echo(f"store {show_url(url)} upgraded from revision {before or 'none'} to {after}")


@db.command()
@store_option
def current(store) -> None:
    """Print the store's schema revision and whether it needs `db upgrade`."""
    from forge_record.store import migrate, store_revision
    from forge_record.store.engine import show_url

    url = store_url(store)
    require_store(url)
    revision, head = store_revision(url)
    if revision == head:
        state = "up to date"
    elif revision is not None and not migrate.known(revision):
        state = f"newer than this forge-record (it knows up to {head})"
    elif url.startswith("sqlite"):
        state = f"this forge-record needs {head}, and upgrades a SQLite store when it opens it"
    else:
        state = f"this forge-record needs {head}: run `forge-record db upgrade`"
    click.echo(f"store {show_url(url)}: revision {revision or 'none'}, {state}")
