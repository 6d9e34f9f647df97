"""`forge-record gc --older-than AGE [--dry-run]`: delete old sessions and the blobs that no
session names any more (see forge_record.store.gc)."""

from __future__ import annotations

import re

import click

from forge_record.commands.common import open_store, store_option

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(ctx, param, value: str) -> float:
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", value or "")
    if not found:
        raise click.BadParameter(f"expected a number and a unit (s, m, h, d, w), e.g. 30d; "
                                 f"got {value!r}", ctx=ctx, param=param)
    return float(found[1]) * _UNITS[found[2]]


@click.command()
@store_option
@click.option("--older-than", "older_than", required=True, callback=parse_age, metavar="AGE",
              help="Delete sessions that started longer ago than AGE: 30d, 12h, 2w, 90m.")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
def gc(store, older_than, dry_run) -> None:
    """Delete old sessions and the stored content no session uses any more."""
    from forge_record.store import gc as collector

    st = open_store(store)
    try:
        report = collector.collect(st, older_than, dry_run=dry_run)
    finally:
        st.close()
    verb = "would delete" if dry_run else "deleted"
    click.echo(
        f"{verb} {report.sessions} sessions ({report.exchanges} exchanges), "
        f"{report.blobs} blobs ({report.blob_bytes / 1e6:.1f} MB of content); "
        f"{'would free' if dry_run else 'freed'} {report.pack_bytes / 1e6:.1f} MB of packs "
        f"({report.groups} groups dropped, {report.repacked} repacked)"
    )
    if report.kept_recording:
        click.echo(f"kept {report.kept_recording} old sessions that are still being recorded")
