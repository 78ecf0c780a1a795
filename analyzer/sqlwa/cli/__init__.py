"""The ``sqlwa`` command line. Each sub-command lives in its own module here and is
registered on :data:`main`; user mistakes become one red line and exit code 2."""

from __future__ import annotations

import sys

import click

from sqlwa.errors import SqlwaError, hint_of, Interrupted
from sqlwa.cli._app import main as _group, register_commands


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the click group, turning SqlwaError into a clean message."""
    register_commands()
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
        message = exc.args[0] if exc.args else type(exc).__name__
        click.secho(f"sqlwa: error: {message}", fg="red", err=True)
        hint = hint_of(exc)
        if hint:
            click.echo(f"  fix: {hint}", err=True)
        sys.exit(2)
