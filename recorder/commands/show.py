"""`forge-record show SESSION`: one session as a readable thread tree, or as JSON.

Text: the view model (forge_record.viewer, the one `forge-record view` draws as HTML) as a
transcript (forge_record.viewer.terminal): each thread with the messages each call added,
subagents indented under the call that spawned them, compaction segments marked, retries
and side calls folded to one line; in colour only when stdout is a terminal. JSON: the session,
its summary, `lineage` (forge_record.lineage.to_dict) and the exchanges, each with its
place in the lineage (thread, role, parent, side_kind, retry_of, segment, fingerprint).
"""

from __future__ import annotations

import os
import sys

import click
import orjson

from forge_record.commands.common import store_option
from forge_record.commands.view import read_session
from forge_record.lineage import Call, analyze, to_dict
from forge_record.records import exchange_to_dict, session_to_dict
from forge_record.viewer import build_view
from forge_record.viewer.terminal import render_text


@click.command()
@store_option
@click.argument("ref", metavar="SESSION")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(store, ref, as_json) -> None:
    """Show SESSION (an id, a unique id prefix, or 'last') as a thread tree."""
    session, exchanges, summary = read_session(store, ref)
    if as_json:
        lineage = analyze(exchanges, session.harness)
        data = session_to_dict(session) | {"summary": summary, "lineage": to_dict(lineage)}
        data["exchanges"] = [exchange_to_dict(e) | _place(lineage.calls[e.seq]) for e in exchanges]
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return
    color = _is_terminal()
    for line in render_text(build_view(session, exchanges, summary), color=color):
        click.echo(line, color=color)


def _place(call: Call) -> dict:
    return {"thread": call.thread, "role": call.role, "parent": call.parent,
            "side_kind": call.side_kind, "retry_of": call.retry_of, "segment": call.segment,
            "fingerprint": call.fingerprint}


def _is_terminal() -> bool:
    # Colour is for a person at a terminal: never in a pipe or a file, never with NO_COLOR.
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")
