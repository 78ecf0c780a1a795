"""The ``sqlwa`` command line. Each sub-command lives in its own module here and knows
nothing of the group; this module adds them all to it. User mistakes become one red line
and exit code 2."""

from __future__ import annotations

import io
import sys

import click

from sqlwa.cli import check, compare, crash, device, export, lab, matrix, parse, predict, report, run
from sqlwa.cli._app import main as _group
from sqlwa.errors import Interrupted, SqlwaError, UsageError, hint_of

COMMANDS = (
    run.run,
    run.scenarios,
    crash.crash_command,
    matrix.matrix_command,
    matrix.demo_command,
    parse.parse,
    export.export_command,
    report.report_command,
    check.check_command,
    compare.compare_command,
    lab.lab,
    device.device,
    predict.predict_command,
)
for _command in COMMANDS:
    _group.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the click group, turning SqlwaError into a clean message."""
    bytes_as_given()
    try:
        _group.main(args=argv, prog_name="sqlwa", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("sqlwa: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except Interrupted as exc:
        click.echo(f"sqlwa: {exc.args[0] if exc.args else 'interrupted'}", err=True)
        sys.exit(130)
    except SqlwaError as exc:
        fail(exc)
    except OSError as exc:
        # A path the system will not look at (a name too long, a directory this user may
        # not enter) fails wherever sqlwa first touches it: one line, not a traceback.
        fail(UsageError(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc), "check the path"))


def fail(exc: SqlwaError) -> None:
    """The error in one red line, its fix on the next; exit 2."""
    message = exc.args[0] if exc.args else type(exc).__name__
    click.secho(f"sqlwa: error: {message}", fg="red", err=True)
    hint = hint_of(exc)
    if hint:
        click.echo(f"  fix: {hint}", err=True)
    sys.exit(2)


def bytes_as_given() -> None:
    """A path may be any bytes; Python holds those it cannot decode as surrogates, which
    stdout refuses under a UTF-8 locale (a traceback when sqlwa echoes the path): it
    writes them back as the bytes they were, as it does under the C locale."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="surrogateescape")
