"""`forge-record label SESSION [--reward FLOAT] [--tag K=V] [--note TEXT]`: record an outcome.

A label is how a session turned out (did the task pass, a grader's score, a reviewer's
note). Exports carry it: the `reward` slot of calls, trajectories, Parquet and OTel, and
`--label` / `--tag` select on it. Labelling again merges: a new reward or note replaces the
old one, tags are added to (or overwrite) the ones already there, and what is not given is
kept. With no option it prints the session's label.
"""

from __future__ import annotations

import math

import click
import orjson

from forge_record import config
from forge_record.commands.common import key_value, open_store, store_option
from forge_record.paths import home


@click.command()
@store_option
@click.argument("ref", metavar="SESSION")
@click.option("--reward", type=float, help="A number, e.g. 1 for pass, 0 for fail.")
@click.option("--tag", multiple=True, callback=key_value, metavar="K=V",
              help="An outcome tag (repeatable), e.g. --tag outcome=pass.")
@click.option("--note", metavar="TEXT", help="Free text.")
def label(store, ref, reward, tag, note) -> None:
    """Label SESSION (an id, a unique id prefix, or 'last') with an outcome."""
    if reward is not None and not math.isfinite(reward):
        raise click.BadParameter("must be a finite number", param_hint="--reward")
    st = open_store(store)
    try:
        session_id = st.resolve_session(ref)
        if reward is not None or tag or note is not None:
            tags = config.redactor(home()).tags(tag) if tag else None  # as `run --tag` does
            st.label_session(session_id, reward=reward, tags=tags, note=note)
        current = st.get_label(session_id)
    finally:
        st.close()
    if current is None:
        click.echo(f"session {session_id} has no label", err=True)
        return
    click.echo(orjson.dumps({"session": session_id, **current}).decode())
