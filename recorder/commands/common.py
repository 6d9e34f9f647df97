"""Options and helpers shared by the commands."""

from __future__ import annotations

from typing import Any

import click
import orjson

from forge_record.errors import ForgeRecordError
from forge_record.logs import setup_logging  # noqa: F401 - the commands' set-up
from forge_record.paths import default_store_url, store_url

store_option = click.option(
    "--store",
    "store",
    metavar="URL",
    envvar="FORGE_RECORD_STORE",
    help="Store URL: sqlite:///PATH or postgresql://... [env FORGE_RECORD_STORE; "
    "default sqlite:///<data dir>/traces.db]",
)


def open_store(url: str | None, *, create: bool = False):
    """The store at `url` (the --store option, else FORGE_RECORD_STORE, else the default).

    Only a command that records or copies into a store passes `create`: a reading command
    on a mistyped path must say so, not leave an empty database (and its directories) there.
    """
    from forge_record.store import open_store as _open

    url = store_url(url)
    if not create:
        require_store(url)
    return _open(url)


def require_store(url: str) -> None:
    """ForgeRecordError "no store at PATH" when `url` names a SQLite file that does not exist
    (a server store cannot be told apart from here without connecting, which opening does)."""
    from forge_record.store.engine import sqlite_file

    path = sqlite_file(url)
    if path is not None and not path.exists():
        hint = " (nothing recorded yet; try: forge-record demo)" if url == default_store_url() \
            else ""
        raise ForgeRecordError(f"no store at {path}{hint}")


def key_value(ctx, param, values: tuple[str, ...]) -> dict[str, str]:
    """Parse repeatable K=V options."""
    out = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"expected K=V, got {item!r}", ctx=ctx, param=param)
        out[key.strip()] = value.strip()
    return out


def key_json(ctx, param, values: tuple[str, ...]) -> dict[str, Any]:
    """Parse repeatable K=V options whose V is JSON, else a string (`--engine-param`)."""
    return {key: _json_or_text(value) for key, value in key_value(ctx, param, values).items()}


def _json_or_text(value: str) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def engine_options(command):
    """`--engine-model` and `--engine-param`, as `run` and `serve` take them."""
    command = click.option(
        "--engine-param", "engine_params", multiple=True, callback=key_json, metavar="KEY=VALUE",
        help="With an engine: set this in every bridged call to the engine, over what the "
        "agent asked (VALUE is JSON, else a string), e.g. temperature=0. Repeatable.")(command)
    return click.option(
        "--engine-model", metavar="NAME",
        help="With an engine: the model name bridged calls (Anthropic Messages, ...) ask "
        "the engine for [default: the first the engine's /v1/models lists].")(command)
