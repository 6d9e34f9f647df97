"""Options and helpers shared by the commands."""

from __future__ import annotations

import click

from forge_record.logs import setup_logging  # noqa: F401 - the commands' set-up
from forge_record.paths import store_url

store_option = click.option(
    "--store",
    "store",
    metavar="URL",
    envvar="FORGE_RECORD_STORE",
    help="Store URL: sqlite:///PATH or postgresql://... [env FORGE_RECORD_STORE; "
    "default sqlite:///<data dir>/traces.db]",
)


def open_store(url: str | None):
    from forge_record.store import open_store as _open

    return _open(store_url(url))


def key_value(ctx, param, values: tuple[str, ...]) -> dict[str, str]:
    """Parse repeatable K=V options."""
    out = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"expected K=V, got {item!r}", ctx=ctx, param=param)
        out[key.strip()] = value.strip()
    return out
