"""The `forge-record` command: a thin root group; each command lives in `commands/`."""

from __future__ import annotations

import logging
import os
import sys

import click

from forge_record import __version__
from forge_record.commands import (
    db,
    demo,
    doctor,
    export,
    gc,
    harnesses,
    label,
    mock,
    push,
    run,
    serve,
    sessions,
    show,
    view,
)
from forge_record.errors import ForgeRecordError


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `forge-record show last | head -1`: the reader had enough
            _quiet_stdout()
            raise click.exceptions.Exit(0) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forge-record")
def cli() -> None:
    """Record what coding agents send to and get from their models."""


cli.add_command(run.run)
cli.add_command(serve.serve)
cli.add_command(sessions.sessions)
cli.add_command(show.show)
cli.add_command(doctor.doctor)
cli.add_command(harnesses.harnesses)
cli.add_command(export.export)
cli.add_command(label.label)
cli.add_command(db.db)
cli.add_command(push.push)
cli.add_command(gc.gc)
cli.add_command(view.view)
cli.add_command(demo.demo)
cli.add_command(mock.mock)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.UsageError as e:
        command = e.ctx.command_path if e.ctx else "forge-record"
        click.echo(f"{command}: {e.format_message()} (see {command} --help)", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        click.echo(f"forge-record: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except ForgeRecordError as e:
        click.echo(f"forge-record: {e}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:  # the machine said no: a full disk, a read-only dir, a busy port
        where = f": {e.filename}" if e.filename else ""
        click.echo(f"forge-record: {e.strerror or e}{where}", err=True)
        sys.exit(1)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    else:
        logging.shutdown()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what the closed pipe
    did not take raises nothing either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
