"""``sqlwa record``: an app's own SQL workload as a SQL log (docs/sql-log-format.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sqlwa import outputs
from sqlwa.errors import UsageError
from sqlwa.outputs import allow_system_option

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
    "(SQLiteStatements), a .sql file of statements ending in ';', or a SQL log (validated).",
)
@click.option("--redact", is_flag=True, help="Replace literal values with made-up ones of the same type and size.")
@allow_system_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record_command(
    out: Path, source: Path | None, redact: bool, allow_system_dir: bool, command: tuple[str, ...]
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
    target = outputs.check_file(out, "--out", allow_system=allow_system_dir)
    if source is not None:
        if source.resolve() == target:
            raise UsageError(f"--out {out} is the file being converted", "write the log to another file")
        with outputs.replacing(target, "the SQL log") as f:
            converted = convert(source, f, redact)
        click.echo(
            f"{out}: {describe(converted.counts, converted.databases)} from {source} ({converted.source})"
            + (f"; {converted.left_out} statements cut short by logcat left out" if converted.left_out else "")
        )
        return
    with outputs.replacing(target, "the SQL log") as f:
        recorded = program.record(list(command), f, redact)
        if recorded.counts["open"] == 0:
            raise UsageError(
                f"{command[0]} opened no SQLite database through a shared libsqlite3 (its SQLite may be compiled in)",
                program.ELSEWHERE,
            )
    note = f"; {recorded.unpaired} statements on connections inherited over fork left out" if recorded.unpaired else ""
    click.echo(f"{out}: {describe(recorded.counts, recorded.databases)}{note}", err=recorded.returncode != 0)
    if recorded.returncode != 0:
        click.echo(f"sqlwa record: {command[0]} exited with status {recorded.returncode}", err=True)
        sys.exit(recorded.returncode if 0 < recorded.returncode < 256 else 1)


def describe(counts: dict[str, int], databases: set[str]) -> str:
    files = {db for db in databases if db not in ("", ":memory:")}
    return (
        f"{counts['sql']} statements ({counts['trigger']} trigger steps besides) on {counts['open']} connections "
        f"to {len(files)} database files"
        + (f" and {len(databases) - len(files)} temporary" if len(databases) > len(files) else "")
    )
