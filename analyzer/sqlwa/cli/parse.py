"""``sqlwa parse``: turn block traces into one Parquet event table and summarise them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sqlwa.catalogue import BLOCK_COMMIT_COLUMNS, SYSCALL_COMMIT_COLUMNS, TRACE_FORMATS
from sqlwa.errors import UsageError, writing

if TYPE_CHECKING:  # imported where a parse runs: `sqlwa parse --help` needs none of them
    import polars as pl
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
@click.option("--lenient", is_flag=True, help="Skip and count unparsable records instead of failing.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the parse report as JSON instead of the tables: the files and their formats, event, "
    "lost and bad-record counts, events per action/operation/kind, and block bytes per action and "
    "operation (bytes_per_action, bytes_per_operation).",
)
def parse(
    traces: tuple[Path, ...],
    fmt: str,
    output: Path | None,
    commits_output: Path | None,
    lenient: bool,
    as_json: bool,
) -> None:
    """Read block traces captured anywhere (phones, servers) into one event table.

    TRACE is a blktrace capture (the per-CPU files NAME.blktrace.N, or just NAME),
    blkparse's text output, ftrace text (block tracepoints, the blk tracer, or a
    sqlwa run's trace.txt), or a Perfetto trace (`adb shell perfetto` on a phone, or
    `sqlwa export`). It prints what the trace holds per action and operation (reads,
    writes, cache flushes, FUA) and, with -o, writes every event to Parquet for
    Polars, pandas or `sqlwa.parse()` in a notebook.

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

    from sqlwa.analysis import traceparse, windows
    from sqlwa.results import rundir
    from sqlwa.views import json_output
    from sqlwa.views.terminal import wide_console

    for path in (output, commits_output):
        if path is not None and path.parent and not path.parent.exists():
            raise UsageError(f"output directory {path.parent} does not exist")
    # A spinner on stderr (a terminal only): big traces take seconds to parse and write.
    status = Console(stderr=True)
    names = ", ".join(str(p) for p in traces[:3]) + (f" and {len(traces) - 3} more" if len(traces) > 3 else "")
    with status.status(f"parsing {names}"):
        events, report = traceparse.parse(traces, format=fmt, lenient=lenient)
    if output is not None:
        with status.status(f"writing {report['events']:,} events to {output}"):
            with writing(output, "the event table"):
                rundir.write_parquet(events, output)
    found = windows.trace_commits(events)
    if commits_output is not None:
        if found is None:
            raise UsageError(
                "--commits: the trace marks no commit (no sqlwa markers, no Android SQLite slices)",
                "record the atrace category 'database' with the app (see the README's Perfetto config)",
            )
        with writing(commits_output, "the per-commit table"):
            rundir.write_parquet(found[0], commits_output)
    if as_json:
        click.echo(json_output.dumps(json_report(events, report, output, found)))
        return
    print_summary(events, report, output)
    if found is not None:
        wide_console().print(commit_table(*found))


#: The per-commit figures the summary shows, means over the measured commits.
COMMIT_FIGURES = (*SYSCALL_COMMIT_COLUMNS, *BLOCK_COMMIT_COLUMNS)


def commit_section(commits: pl.DataFrame, source: str) -> dict:
    import polars as pl

    measured = commits.filter(~pl.col("warmup"))
    columns = [c for c in COMMIT_FIGURES if c in measured.columns]
    means = measured.select(pl.col(columns).cast(pl.Float64).mean()).row(0, named=True) if measured.height else {}
    return {"source": source, "count": commits.height, "measured": measured.height, "per_commit": means}


def commit_table(commits: pl.DataFrame, source: str) -> Table:
    from rich.table import Table

    section = commit_section(commits, source)
    table = Table(title=f"{section['measured']} commits ({source}), mean per commit", title_justify="left")
    table.add_column("figure")
    table.add_column("per commit", justify="right")
    for name, value in section["per_commit"].items():
        table.add_row(name, "" if value is None else f"{value:,.2f}")
    return table


def json_report(
    events: pl.DataFrame, report: dict, output: Path | None, found: tuple[pl.DataFrame, str] | None = None
) -> dict:
    import polars as pl

    block = events.lazy().filter(pl.col("kind") == "block")
    return {
        **report,
        "commits": None if found is None else commit_section(*found),
        "files": [{"path": str(path), "format": fmt} for path, fmt in report["files"]],
        "output": str(output) if output else None,
        "bytes_per_action": block_bytes(block, "action"),
        "bytes_per_operation": block_bytes(block, "operation"),
    }


def block_bytes(block: pl.LazyFrame, column: str) -> dict[str, int]:
    import polars as pl

    sums = block.group_by(column).agg(pl.col("bytes").sum()).collect()
    return {str(k): int(v) for k, v in zip(sums[column].cast(pl.String).to_list(), sums["bytes"].to_list())}


def print_summary(events: pl.DataFrame, report: dict, output: Path | None) -> None:
    import polars as pl

    from sqlwa.views.terminal import wide_console

    console = wide_console()
    formats = sorted({fmt for _, fmt in report["files"]})
    console.print(
        f"[bold]{report['events']:,}[/] events from {len(report['files'])} file(s) ({', '.join(formats)})"
        + (f" → {output}" if output else "")
    )
    # Lazy: only the grouping column and bytes of the block rows are read, not a copy of
    # every column of them (a second on ten million events).
    block = events.lazy().filter(pl.col("kind") == "block")
    console.print(count_table("action", report["per_action"], block, "action"))
    console.print(count_table("operation", report["per_operation"], block, "operation"))
    if set(report["per_kind"]) - {"block"}:
        console.print(count_table("kind", report["per_kind"], None, None))
    if report["lost_events"]:
        console.print(f"[red]the tracer lost {report['lost_events']:,} events[/]")
    if report["bad_records"]:
        console.print(f"[yellow]{report['bad_records']:,} bad records skipped (--lenient); first:[/]")
        for message in report["bad_messages"][:5]:
            console.print(f"  {message}", markup=False)


def count_table(title: str, counts: dict, block: pl.LazyFrame | None, column: str | None) -> Table:
    import polars as pl
    from rich.table import Table

    table = Table(title=f"per {title}", title_justify="left")
    table.add_column(title)
    table.add_column("events", justify="right")
    if block is not None and column is not None:
        table.add_column("bytes", justify="right")
        # Grouped by the categorical codes; only the few groups' names become strings.
        sums = block.group_by(column).agg(pl.col("bytes").sum()).collect()
        byte_sums = dict(zip(sums[column].cast(pl.String).to_list(), sums["bytes"].to_list()))
    for key, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        row = [key or "(none)", f"{n:,}"]
        if block is not None:
            row.append(f"{byte_sums.get(key, 0):,}")
        table.add_row(*row)
    return table
