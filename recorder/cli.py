"""The `forge-record` command: a thin root group; each command lives in `commands/`."""

from __future__ import annotations

import logging
import sys

import click

from forge_record import __version__
from forge_record.commands import run, sessions, show
from forge_record.errors import ForgeRecordError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forge-record")
def cli() -> None:
    """Record what coding agents send to and get from their models."""


cli.add_command(run.run)
cli.add_command(sessions.sessions)
cli.add_command(show.show)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except ForgeRecordError as e:
        click.echo(f"forge-record: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    else:
        logging.shutdown()
