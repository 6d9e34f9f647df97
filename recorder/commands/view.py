"""`forge-record view SESSION [-o FILE.html] [--open]`: one session as one HTML file.

The file is self-contained (forge_record.viewer.html): it fetches nothing, so it can be
mailed, archived or opened offline. It is written to FILE.html, by default
`<session id>.html` in the current directory; the path is printed, and `--open` hands it to
the default browser through the `webbrowser` module (which honours $BROWSER).
"""

from __future__ import annotations

import os
import webbrowser
from pathlib import Path
from typing import Any

import click

from forge_record.commands.common import open_store, store_option
from forge_record.records import Exchange, Session
from forge_record.viewer import View, build_view, render_html


@click.command()
@store_option
@click.argument("ref", metavar="SESSION")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the page here [default: <session id>.html in the current directory].")
@click.option("--open", "open_it", is_flag=True, help="Open the page in the default browser.")
def view(store, ref, output, open_it) -> None:
    """Write SESSION (an id, a unique id prefix, or 'last') as one self-contained HTML page."""
    model = load_view(store, ref)
    path = (output or Path(f"{model.session['id']}.html")).expanduser().absolute()
    _write(path, render_html(model))
    click.echo(str(path))
    if open_it and not webbrowser.open(path.as_uri()):
        raise click.ClickException(f"no browser could be started; open {path} yourself")


def load_view(store: str | None, ref: str) -> View:
    """The view model of the session `ref` names."""
    return build_view(*read_session(store, ref))


def read_session(store: str | None, ref: str) -> tuple[Session, list[Exchange], dict[str, Any]]:
    """The session `ref` names (an id, a unique id prefix, or 'last'), its exchanges and its
    summary, read through the Store API. `show` reads a session the same way."""
    st = open_store(store)
    try:
        session_id = st.resolve_session(ref)
        session = st.get_session(session_id)
        exchanges = list(st.iter_exchanges(session_id))
        summary = st.session_summary(session_id)
    finally:
        st.close()
    return session, exchanges, summary


def _write(path: Path, page: str) -> None:
    # Whole or not at all: a half-written page from an interrupted run would look like a
    # session that ended early.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
