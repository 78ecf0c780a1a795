"""The ``sqlwa`` command line. Each sub-command lives in its own module here and knows
nothing of the group; the group (:mod:`sqlwa.cli._app`) knows where they are and imports
one when it runs. User mistakes become one red line and exit code 2."""

from __future__ import annotations

import io
import os
import sys

from sqlwa.cli import _signals

TYPE_CHECKING = False  # without importing typing, as in sqlwa/__init__.py
if TYPE_CHECKING:
    import click

    from sqlwa.errors import SqlwaError


def command_group() -> click.Group:
    """The click group (imported with click, on first use: after the signal handlers)."""
    from sqlwa.cli._app import main as group

    return group


def __getattr__(name: str) -> click.Group:
    """``sqlwa.cli._group``: the group, for tests and tools that walk the commands."""
    if name != "_group":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return command_group()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the click group, turning SqlwaError into a clean message."""
    bytes_as_given()
    if argv is None:  # the program, not a test calling main() in its own process
        _signals.obey_signals()
    try:
        from sqlwa._system import signals as system_signals

        system_signals.also_ask(_signals.first_received)  # a signal a library's callback dropped
        run_group(argv, as_program=argv is None)
        if argv is None:
            _signals.too_late()
    except BaseException as exc:  # a signal while the CLI itself imports, before click can catch it
        from sqlwa._native import Interrupted  # not sqlwa.errors: the signal may have cut its import short

        if not isinstance(exc, (KeyboardInterrupt, Interrupted)):
            if argv is None and isinstance(exc, SystemExit):
                _signals.too_late()
            raise
        sys.stderr.write(f"sqlwa: {exc.args[0] if exc.args else 'interrupted'}\n")
        exit_interrupted(argv is None)


def run_group(argv: list[str] | None, as_program: bool = False) -> None:
    import click

    try:
        command_group().main(args=argv, prog_name="sqlwa", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("sqlwa: interrupted", err=True)
        exit_interrupted(as_program)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except Exception as exc:
        # sqlwa.errors loads the native module: imported here, `sqlwa --help` never waits for it
        from sqlwa.errors import Interrupted, SqlwaError, UsageError, os_error_fix

        if isinstance(exc, Interrupted):
            click.echo(f"sqlwa: {exc.args[0] if exc.args else 'interrupted'}", err=True)
            exit_interrupted(as_program)
        elif isinstance(exc, SqlwaError):
            fail(exc)
        elif isinstance(exc, OSError):
            # A path the system will not look at (a name too long, a directory this user may
            # not enter) fails wherever sqlwa first touches it: one line, not a traceback.
            said = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
            fail(UsageError(said, os_error_fix(exc, "check the path")))
        else:
            raise


def exit_interrupted(as_program: bool) -> None:
    """Exit 130 once everything has unwound. The program leaves by ``os._exit``: a Ctrl-C
    that reached code an extension module ran through ``PyRun_*`` while it was imported
    leaves CPython's "unhandled KeyboardInterrupt" flag set, and the interpreter then ends
    itself by SIGINT (exit -2) whatever ``sys.exit`` said (seen about one time in four for
    a Ctrl-C 0.4 s after start). In-process callers (tests) get the SystemExit."""
    if not as_program:
        sys.exit(130)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing more can be said
    os._exit(130)


def fail(exc: SqlwaError) -> None:
    """The error in one red line, its fix on the next; exit 2."""
    import click

    from sqlwa.errors import hint_of

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
