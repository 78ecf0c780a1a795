"""The ``sqlwa`` command line. Each sub-command lives in its own module here and knows
nothing of the group; this module tells the group where they are, and the group imports
one when it runs (see :mod:`sqlwa.cli._app`). User mistakes become one red line and exit
code 2. ``sqlwa --help`` is printed from click's last rendering of it when that still
holds (:mod:`sqlwa.cli._help_cache`), without importing click."""

from __future__ import annotations

import io
import os
import sys

from sqlwa.cli import _help_cache, _signals
from sqlwa.cli._lazy import LazyCommand

TYPE_CHECKING = False  # without importing typing, as in sqlwa/__init__.py
if TYPE_CHECKING:
    import click

    from sqlwa.errors import SqlwaError

#: Each command: where it is and the first sentence of its help (``sqlwa --help`` lists
#: that without importing the command).
COMMANDS = {
    "run": LazyCommand("sqlwa.cli.run:run", "Run one SQLite workload and report what each commit cost."),
    "scenarios": LazyCommand("sqlwa.cli.run:scenarios", "List the built-in scenarios."),
    "crash": LazyCommand(
        "sqlwa.cli.crash:crash_command",
        "Record a run's device writes and judge what a power cut at any moment would leave.",
    ),
    "matrix": LazyCommand(
        "sqlwa.cli.matrix:matrix_command",
        "Run every combination of scenario × fs × encrypt × fuse × profile × crypt × journal × sync, each on a fresh "
        "filesystem.",
    ),
    "demo": LazyCommand(
        "sqlwa.cli.matrix:demo_command",
        "The default sweep: mobibench-insert on ext4, journal delete/truncate/persist/wal × sync normal/full, then "
        "the table and report.html.",
    ),
    "parse": LazyCommand(
        "sqlwa.cli.parse:parse", "Read block traces captured anywhere (phones, servers) into one event table."
    ),
    "export": LazyCommand(
        "sqlwa.cli.export:export_command", "Write a lab run (sqlwa run --fs …) as a Perfetto trace, or a table as CSV."
    ),
    "report": LazyCommand(
        "sqlwa.cli.report:report_command",
        "Write one HTML page with charts and every number for a matrix (or one run).",
    ),
    "check": LazyCommand(
        "sqlwa.cli.check:check_command",
        "Check a matrix (or one run) against a policy of limits: a regression gate for CI.",
    ),
    "compare": LazyCommand(
        "sqlwa.cli.compare:compare_command",
        "Show two results side by side with deltas (B − A): matrices or single runs.",
    ),
    "lab": LazyCommand("sqlwa.cli.lab:lab", "The lab: fresh filesystems on loop devices, and the tracefs capture."),
    "device": LazyCommand(
        "sqlwa.cli.device:device",
        "Device profiles: how long a storage device takes per request, for `sqlwa predict`.",
    ),
    "record": LazyCommand("sqlwa.cli.record:record_command", "Record the SQL a program runs, as a SQL log to replay."),
    "predict": LazyCommand(
        "sqlwa.cli.predict:predict_command", "Predict the commit latency of measured runs on another device."
    ),
}


def command_group() -> click.Group:
    """The click group, told where its commands are (imported with click, on first use)."""
    from sqlwa.cli._app import main as group

    group.lazy_commands.update(COMMANDS)
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
    if (sys.argv[1:] if argv is None else argv) in _help_cache.HELP_ARGS:
        print_help()
        return
    try:
        run_group(argv, as_program=argv is None)
    except BaseException as exc:  # a signal while the CLI itself imports, before click can catch it
        from sqlwa.errors import Interrupted

        if not isinstance(exc, (KeyboardInterrupt, Interrupted)):
            raise
        sys.stderr.write(f"sqlwa: {exc.args[0] if exc.args else 'interrupted'}\n")
        exit_interrupted(argv is None)


def print_help() -> None:
    """The group's help: the cached rendering, or click's, kept for next time."""
    text = _help_cache.cached_help()
    if text is None:
        import click

        group = command_group()
        text = click.Context(group, info_name="sqlwa", **group.context_settings).get_help()
        _help_cache.save_help(text)
    sys.stdout.write(text + "\n")


def run_group(argv: list[str] | None, as_program: bool = False) -> None:
    import click

    from sqlwa.errors import Interrupted, SqlwaError, UsageError

    try:
        command_group().main(args=argv, prog_name="sqlwa", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("sqlwa: interrupted", err=True)
        exit_interrupted(as_program)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except Interrupted as exc:
        click.echo(f"sqlwa: {exc.args[0] if exc.args else 'interrupted'}", err=True)
        exit_interrupted(as_program)
    except SqlwaError as exc:
        fail(exc)
    except OSError as exc:
        # A path the system will not look at (a name too long, a directory this user may
        # not enter) fails wherever sqlwa first touches it: one line, not a traceback.
        fail(UsageError(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc), "check the path"))


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
