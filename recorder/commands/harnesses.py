"""`forge-record harnesses`: the agent CLIs forge-record knows, and how it routes each.

One row per shim: its name (for `--harness`), the executables it is picked for, the mode
`--mode auto` gives in this environment (and, from the shim's `reverse_when`, what turns it
to reverse), the model hosts it intercepts in forward mode, and what it was checked with.
"""

from __future__ import annotations

import os

import click
import orjson

from forge_record import harness_shims
from forge_record.harness_shims import Shim


def describe(shim: Shim, environ: dict[str, str]) -> dict:
    return {
        "name": shim.name,
        "executables": list(shim.executables),
        "mode": shim.auto_mode(environ),
        "reverse_when": shim.reverse_when,
        "model_hosts": list(shim.model_hosts),
        "checked_with": getattr(shim, "verified", None),
    }


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def harnesses(as_json) -> None:
    """List the agent CLIs forge-record can route, with their default mode."""
    rows = [describe(s, dict(os.environ)) for s in harness_shims.SHIMS]
    if as_json:
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    table = [("HARNESS", "COMMAND", "AUTO MODE", "CHECKED WITH")] + [
        (row["name"], ",".join(row["executables"]) or "(any)",
         row["mode"] + (f" (reverse if {row['reverse_when']})" if row["reverse_when"]
                        else ""),
         row["checked_with"] or "-") for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    for *cells, checked in table:
        padded = (c.ljust(w) for c, w in zip(cells, widths, strict=True))
        click.echo("  ".join([*padded, checked]))
    click.echo("\nforward: HTTPS_PROXY + CA variables, the real host kept; reverse: the CLI's "
               "base-URL variable points at the proxy.\nforge-record doctor CMD shows exactly "
               "what a run would set.")
