"""``sqlwa record``: an app's own SQL workload as a SQL log (docs/sql-log-format.md)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sqlwa import outputs
from sqlwa.errors import UsageError
from sqlwa.outputs import allow_system_option

if TYPE_CHECKING:
    from sqlwa.record import Converted, child, program

DEFAULT_LOG = Path("sql-log.jsonl")


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_LOG,
    show_default=True,
    help="The SQL log to write (JSON Lines, docs/sql-log-format.md).",
)
@click.option(
    "--from",
    "source",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Convert a log made elsewhere instead of running a program: Android's logcat "
    "(SQLiteStatements lines in any `adb logcat -v` format or Android Studio copy, pasted "
    "excerpts too; lines of other tags skipped and counted), a .sql file of statements "
    "ending in ';', or a SQL log (validated).",
)
@click.option(
    "--redact",
    is_flag=True,
    help="Replace every literal value (and comment) with a made-up one of the same type and size, "
    "and leave the program's command line out (docs/sql-log-format.md, Redaction).",
)
@click.option(
    "--keep-argv",
    is_flag=True,
    help="With --redact: keep the program's command line in the log's header (it may hold secrets).",
)
@allow_system_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record_command(
    out: Path,
    source: Path | None,
    redact: bool,
    keep_argv: bool,
    allow_system_dir: bool,
    command: tuple[str, ...],
) -> None:
    """Record the SQL a program runs, as a SQL log to replay.

    Runs COMMAND (after `--`) with a preloaded library that traces every statement each
    of its SQLite connections runs — bound values expanded, start time, duration,
    connection, database file, trigger steps marked — in every process it starts. The
    program is not changed and needs no root; it must use a shared libsqlite3 (Python's
    sqlite3 module, the sqlite3 shell, most distribution programs). With --from, a log
    made elsewhere is converted instead.

    \b
    Examples:
      sqlwa record --out notes.jsonl -- python3 app.py
      sqlwa record --redact -- sqlite3 app.db < work.sql
      sqlwa record --from logcat.txt --out app.jsonl"""
    from sqlwa.record import convert, program

    if bool(source) == bool(command):
        raise UsageError(
            "give either a program to run (after --) or --from FILE",
            "sqlwa record -- python3 app.py, or sqlwa record --from logcat.txt",
        )
    reads = () if source is None else (source,)
    target = outputs.check_file(
        out, "--out", allow_system=allow_system_dir, reads=reads, what_read="the log being converted"
    )
    program.check_out(target, out, list(command) if command else None)
    if source is not None:
        with outputs.replacing(target, "the SQL log") as f:
            converted = convert(source, f, redact, keep_argv)
        click.echo(
            f"{out}: {describe(converted.counts, converted.databases)} from {source} ({converted.source})"
            + skipped(converted)
        )
        return
    recorded = program.record(
        list(command), target, redact, on_stop=lambda signum: said_stopping(signum, command[0]), keep_argv=keep_argv
    )
    finish(recorded, out, command[0])


def skipped(converted: Converted) -> str:
    """What a conversion left out, for its summary line ("" when nothing)."""
    parts = [
        (converted.left_out, "statements cut short by logcat left out"),
        (converted.other_tags, "lines of other tags skipped"),
        (converted.other_lines, "lines of no logcat form skipped"),
    ]
    return "".join(f"; {count} {what}" for count, what in parts if count)


def said_stopping(signum: int, name: str) -> None:
    click.echo(
        f"sqlwa record: {signal.Signals(signum).name}: waiting for {name} to end; what it ran is kept in the log",
        err=True,
    )


def finish(recorded: program.Recorded, out: Path, name: str) -> None:
    """Say what was recorded and where, and exit as the recording ended: the program's
    status, 128+N for a program killed by signal N or a recording stopped by it."""
    shown = out if recorded.beside is None else out.parent / recorded.written.name
    ended = recorded.ended
    note = f"; {recorded.unpaired} statements on connections inherited over fork left out" if recorded.unpaired else ""
    failed = ended.returncode != 0 or ended.interrupted is not None
    click.echo(f"{shown}: {describe(recorded.counts, recorded.databases)}{note}", err=failed)
    if recorded.skipped:
        click.echo(f"sqlwa record: {recorded.skipped.describe()}", err=True)
    if ended.interrupted is not None:
        click.echo(
            f"sqlwa record: interrupted by {signal.Signals(ended.interrupted).name}: the log holds what {name} ran until then",
            err=True,
        )
    if recorded.beside is not None:
        raise UsageError(
            f"--out {out}: {recorded.beside}, so it was left as it is; the log was kept in {shown}",
            "give --out a file of its own, one the program does not use",
        )
    status = exit_status(ended)
    if ended.returncode != 0:
        click.echo(f"sqlwa record: {name} {ended_as(ended.returncode)}", err=True)
    if status:
        sys.exit(status)


def exit_status(ended: child.Ended) -> int:
    if ended.returncode < 0:
        return 128 - ended.returncode
    if ended.returncode > 0:
        return ended.returncode if ended.returncode < 256 else 1
    return 0 if ended.interrupted is None else 128 + ended.interrupted


def ended_as(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


def describe(counts: dict[str, int], databases: set[str]) -> str:
    files = {db for db in databases if db not in ("", ":memory:")}
    return (
        f"{counts['sql']} statements ({counts['trigger']} trigger steps besides) on {counts['open']} connections "
        f"to {len(files)} database files"
        + (f" and {len(databases) - len(files)} temporary" if len(databases) > len(files) else "")
    )
