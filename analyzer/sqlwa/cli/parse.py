"""``sqlwa parse``: turn block traces into one Parquet event table and summarise them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sqlwa import _system, outputs
from sqlwa.catalogue import (
    BLOCK_COMMIT_COLUMNS,
    BLOCK_OPERATIONS,
    BLOCK_STAGES,
    SYSCALL_COMMIT_COLUMNS,
    TRACE_FORMATS,
)
from sqlwa.errors import UsageError, writing
from sqlwa.outputs import allow_system_option

if TYPE_CHECKING:  # imported where a parse runs: `sqlwa parse --help` needs none of them
    import polars as pl
    from rich.console import Console
    from rich.table import Table


@click.command("parse")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(TRACE_FORMATS),
    default="auto",
    show_default=True,
    help="Trace format; auto detects blktrace binary, blkparse text, ftrace text and Perfetto traces.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the event table to this Parquet file.",
)
@click.option(
    "--commits",
    "commits_output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the per-commit figures to this Parquet file (traces that mark their commits: "
    "sqlwa's markers, or Android's SQLite slices).",
)
@click.option(
    "--lenient",
    is_flag=True,
    help="Skip and count unparsable records (and commit markers out of order) instead of failing.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the parse report as JSON instead of the tables: first, per device, the requests "
    "completed and their bytes per operation (completed) and the events and bytes of each stage "
    "(stages); then the files and their formats, event, lost and bad-record counts, events per "
    "action/operation/kind, and block bytes per action and operation of every stage added "
    "(bytes_per_action, bytes_per_operation).",
)
@allow_system_option
def parse(
    traces: tuple[Path, ...],
    fmt: str,
    output: Path | None,
    commits_output: Path | None,
    lenient: bool,
    as_json: bool,
    allow_system_dir: bool,
) -> None:
    """Read block traces captured anywhere (phones, servers) into one event table.

    TRACE is a blktrace capture (the per-CPU files NAME.blktrace.N, or just NAME),
    blkparse's text output, ftrace text (block tracepoints, the blk tracer, or a
    sqlwa run's trace.txt), or a Perfetto trace (`adb shell perfetto` on a phone, or
    `sqlwa export`). It prints, per device, the requests completed and their bytes per
    operation (reads, writes, cache flushes, discards), as blkparse's summary counts
    them, then each stage's events apart (queued, issued, completed …), and, with -o,
    writes every event to Parquet for
    Polars, pandas or `sqlwa.scan()` in a notebook. With -o a trace of any length
    parses in bounded memory (a few hundred MB): use it for long phone traces; a
    Perfetto trace also needs about 110 bytes an event of temporary space beside the
    output, and says how far it has got as it goes.

    \b
    Examples:
      sqlwa parse sda                         blktrace files sda.blktrace.0, .1, ...
      sqlwa parse phone.blkparse.txt -o ev.parquet
      sqlwa parse trace.txt --lenient         skip (and count) lines it cannot read
      sqlwa parse app.perfetto-trace --commits commits.parquet

    A bad record stops the parse with the file and byte offset or line number;
    --lenient skips such records and says how many. Where the trace marks its commits
    (sqlwa's markers, or on Android the SQLite slices of the atrace 'database'
    category) it also shows per-commit fsyncs, cache flushes and bytes written;
    otherwise the trace is analysed at the device level."""
    from rich.console import Console

    # Checked before the parse: neither may be a device, FIFO or directory (the parser's
    # rename would replace the node), a trace, or a file of a run; a symlink's target is
    # written, as a regular file.
    if output is not None:
        output = outputs.check_file(output, "-o", allow_system=allow_system_dir, reads=traces, what_read="the capture")
    if commits_output is not None:
        commits_output = outputs.check_file(
            commits_output, "--commits", allow_system=allow_system_dir, reads=traces, what_read="the capture"
        )
    if output is not None and commits_output is not None and outputs.same_file(output, commits_output):
        raise UsageError(
            f"-o and --commits both name {commits_output}: the commit table would replace the event table",
            "give --commits another file",
        )
    # A spinner on stderr (a terminal only): big traces take seconds to parse and write.
    status = Console(stderr=True)
    # SIGTERM, like Ctrl-C, unwinds: the parse stops at its next progress check and says
    # so in one line (exit 130), its temporary files removed on the way out. The outputs
    # are put in place only after all else is done, so one the signal stops leaves every
    # output it was replacing as it was.
    with _system.signals.signals_unwind(), ExitStack() as stack:
        staged = {
            option: stack.enter_context(outputs.staged(path, what))
            for option, path, what in (
                ("-o", output, "the event table"),
                ("--commits", commits_output, "the per-commit table"),
            )
            if path is not None
        }
        table = staged["-o"] if "-o" in staged else None
        events, report = parsed_events(traces, fmt, lenient, table, status)
        found = None
        if events is not None:
            from sqlwa.analysis import windows

            found = windows.trace_commits(events, lenient)
        if "--commits" in staged:
            from sqlwa.results import rundir

            if found is None:
                raise UsageError(
                    "--commits: the trace marks no commit (no sqlwa markers, no Android SQLite slices)",
                    "record the atrace category 'database' with the app (see docs/guide/traces-and-perfetto.md, Recording on a phone)",
                )
            commits = staged["--commits"]
            with writing(commits.target, commits.what):
                rundir.write_parquet(found[0], commits.part)
        for each in staged.values():
            each.sync()
        show(report, output, found, as_json)
        with _system.signals.too_late_to_stop():
            for each in staged.values():
                each.put_in_place()


def show(report: dict, output: Path | None, found: tuple[pl.DataFrame, str, int] | None, as_json: bool) -> None:
    """The parse report: JSON, or the tables (and the per-commit figures, if marked)."""
    if as_json:
        from sqlwa.views import json_output

        click.echo(json_output.dumps(json_report(report, output, found)))
        return
    from sqlwa.views.terminal import wide_console

    print_summary(report, output)
    if found is not None:
        wide_console().print(commit_table(*found))


def parsed_events(
    traces: tuple[Path, ...], fmt: str, lenient: bool, table: outputs.Staged | None, status: Console
) -> tuple[pl.DataFrame | pl.LazyFrame | None, dict]:
    """The parse report, and the events where they are needed: written to ``table`` (if
    given), and kept for the commit figures unless the trace marks no commit. With
    ``table``, traces are streamed (parsed and written row group by row group, in
    bounded memory; the Rust parser's formats with neither Polars nor pyarrow imported
    unless the trace marks commits, Perfetto traces through an external sort by time);
    parses without ``table`` are read whole."""
    from sqlwa.analysis import traceformat

    names = ", ".join(str(p) for p in traces[:3]) + (f" and {len(traces) - 3} more" if len(traces) > 3 else "")
    if table is not None:
        doing = f"parsing {names} into {table.target.name}"
        with status.status(doing) as live, writing_output(table):
            if traceformat.is_perfetto(list(traces), fmt):
                from sqlwa.analysis import perfetto

                # A minute or more for a phone's long trace: the status line says how far.
                report = perfetto.parse_to_parquet(
                    traces[0], table.part, lenient=lenient, progress=lambda text: live.update(f"{doing}: {text}")
                )
            else:
                report = traceformat.parse_to_parquet(traces, table.part, format=fmt, lenient=lenient)
        if "marker" not in report["per_kind"]:
            return None, report
        from sqlwa.results import rundir

        # Scanned, not read: the commit figures read only the rows and columns they tally.
        return rundir.scan_parquet(table.part), report
    from sqlwa.analysis import traceparse

    with status.status(f"parsing {names}"):
        events, report = traceparse.parse(traces, format=fmt, lenient=lenient)
    return events, report


#: The per-commit figures the summary shows, means over the measured commits.
COMMIT_FIGURES = (*SYSCALL_COMMIT_COLUMNS, *BLOCK_COMMIT_COLUMNS)


def commit_section(commits: pl.DataFrame, source: str, skipped_markers: int) -> dict:
    import polars as pl

    measured = commits.filter(~pl.col("warmup"))
    columns = [c for c in COMMIT_FIGURES if c in measured.columns]
    means = measured.select(pl.col(columns).cast(pl.Float64).mean()).row(0, named=True) if measured.height else {}
    return {
        "source": source,
        "count": commits.height,
        "measured": measured.height,
        "skipped_markers": skipped_markers,
        "per_commit": means,
    }


def commit_table(commits: pl.DataFrame, source: str, skipped_markers: int) -> Table:
    from rich.table import Table

    section = commit_section(commits, source, skipped_markers)
    skipped = f"; {skipped_markers:,} markers out of order skipped (--lenient)" if skipped_markers else ""
    title = f"{section['measured']} commits ({source}{skipped}), mean per commit"
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("per commit", justify="right")
    for name, value in section["per_commit"].items():
        table.add_row(name, "" if value is None else f"{value:,.2f}")
    return table


def json_report(report: dict, output: Path | None, found: tuple[pl.DataFrame, str, int] | None = None) -> dict:
    """The report as --json prints it: what each device completed first, then its stages,
    then the rest of the parser's counts."""
    return {
        "completed": report["completed"],
        "stages": report["stages"],
        **report,
        "commits": None if found is None else commit_section(*found),
        "files": [{"path": str(path), "format": fmt} for path, fmt in report["files"]],
        "output": str(output) if output else None,
    }


@contextmanager
def writing_output(table: outputs.Staged) -> Iterator[None]:
    """The parser's failure to write ``table`` (a missing directory, a full disk) said as
    :func:`sqlwa.errors.writing` says it, naming the output; its errors reading the traces
    pass through."""
    try:
        yield
    except OSError as exc:
        if exc.filename != str(table.part):
            raise
        with writing(table.target, table.what):
            raise


def print_summary(report: dict, output: Path | None) -> None:
    from sqlwa.views.terminal import wide_console

    console = wide_console()
    formats = sorted({fmt for _, fmt in report["files"]})
    console.print(
        f"[bold]{report['events']:,}[/] events from {len(report['files'])} file(s) ({', '.join(formats)})"
        + (f" → {output}" if output else "")
    )
    # What each device completed comes first: it is what blkparse's summary and btt lead
    # with, and the only per-operation total that counts each request once.
    if report["completed"]:
        console.print(completed_table(report["completed"]))
    if report["stages"]:
        console.print(stages_table(report["stages"]))
    if set(report["per_kind"]) - {"block"}:
        console.print(count_table("kind", report["per_kind"]))
    if report["lost_events"]:
        console.print(f"[red]the tracer lost {report['lost_events']:,} events[/]")
    if report.get("unwrapped_times"):
        console.print(
            f"[yellow]{report['unwrapped_times']:,} times blkparse printed wrapped around (events before its first) "
            f"unwrapped: every time moved on by {report['time_shift_ns']:,} ns, the earliest event at 0[/]"
        )
    if report["bad_records"]:
        console.print(f"[yellow]{report['bad_records']:,} bad records skipped (--lenient); first:[/]")
        for message in report["bad_messages"][:5]:
            console.print(f"  {message}", markup=False)


def by_device(devices: dict) -> list[tuple[str, dict]]:
    """The report's per-device entries (keyed "major,minor"), in device number order."""
    return sorted(devices.items(), key=lambda kv: tuple(int(n) for n in kv[0].split(",")))


def in_order(names: dict, order: tuple[str, ...] | dict) -> list[str]:
    """``names``' keys in ``order``'s order, any others after them, alphabetically."""
    known = [name for name in order if name in names]
    return known + sorted(set(names) - set(known))


def device_label(device: str) -> str:
    return f"{device} (none named)" if device == "0,0" else device


def device_table(title: str, what: str, count: str) -> Table:
    """An empty table of device, ``what``, ``count`` and bytes (the numbers right-aligned)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("device")
    table.add_column(what)
    table.add_column(count, justify="right")
    table.add_column("bytes", justify="right")
    return table


def completed_table(completed: dict) -> Table:
    """Per device and operation, the requests the device completed (action C, each
    request once) and their bytes."""
    table = device_table("completed per device (C: each request once)", "operation", "requests")
    for device, per_op in by_device(completed):
        if not per_op:
            table.add_row(device, "(none completed)", "0", "0")
        for n, op in enumerate(in_order(per_op, BLOCK_OPERATIONS)):
            done = per_op[op]
            table.add_row(device if n == 0 else "", op, f"{done['requests']:,}", f"{done['bytes']:,}")
    return table


def stages_table(stages: dict) -> Table:
    """Per device, the events of each stage a request passes (one request is counted at
    each of its stages), with their bytes, in the order a request passes them."""
    table = device_table("stages per device (events; a request is counted at each)", "stage", "events")
    for device, per_stage in by_device(stages):
        for n, letter in enumerate(in_order(per_stage, BLOCK_STAGES)):
            stage = per_stage[letter]
            what = f"{letter} {BLOCK_STAGES[letter]}" if letter in BLOCK_STAGES else letter or "(none)"
            table.add_row(device_label(device) if n == 0 else "", what, f"{stage['events']:,}", f"{stage['bytes']:,}")
    return table


def count_table(title: str, counts: dict) -> Table:
    """Events per value, the most frequent first."""
    from rich.table import Table

    table = Table(title=f"per {title}", title_justify="left")
    table.add_column(title)
    table.add_column("events", justify="right")
    for key, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        table.add_row(key or "(none)", f"{n:,}")
    return table
