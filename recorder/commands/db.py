"""`forge-record db upgrade|current|stats`: the store's schema revision, and bringing it to
this version's. SQLite stores upgrade themselves on open; a shared Postgres store is upgraded
only through `db upgrade`, and refused until then. `db stats`: what the store costs on disk,
by part and per harness version, against the raw bodies it holds (store.stats)."""

from __future__ import annotations

import click

from forge_record.commands.common import open_store, require_store, store_option
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


@db.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stats(store, as_json) -> None:
    """Size on disk by part and per harness version, and the ratio vs the raw bodies."""
    import orjson

    from forge_record.store.stats import measure

    with open_store(store) as st, st.reading("measure store") as conn:
        found = measure(conn, st.url)
    if as_json:
        click.echo(orjson.dumps(found, option=orjson.OPT_INDENT_2).decode())
        return
    for line in _stats_lines(found):
        click.echo(line)


def _stats_lines(found: dict) -> list[str]:
    disk, raw = found["on_disk"], found["raw"]
    lines = [f"store {found['store']}: {found['sessions']} sessions, "
             f"{found['exchanges']} exchanges, {_size(disk)} on disk"]
    for part, size in found["parts"].items():
        lines.append(f"  {part:<34} {_size(size):>10}  {100 * size / max(disk, 1):5.1f}%")
    unknown = found["raw_unknown"]
    lower = f" (at least: {unknown} exchanges have no recorded raw size)" if unknown else ""
    ratio = f"{found['ratio']:.0f}x" if found["ratio"] is not None else "-"
    lines.append(f"raw bodies {_size(raw)}, {ratio} vs raw{lower}")
    if found["harness_versions"]:
        lines.append("by harness version (exchange rows only; packs are shared):")
    for h in found["harness_versions"]:
        name = f"{h['harness'] or '?'} {h['version'] or ''}".strip()
        ratio = f"{h['raw'] / h['rows']:.0f}x" if h["rows"] else "-"
        lines.append(f"  {name:<28} {h['sessions']:>5} sessions {h['exchanges']:>7} exchanges"
                     f"  raw {_size(h['raw']):>10}  rows {_size(h['rows']):>10}  {ratio}")
    return lines


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
