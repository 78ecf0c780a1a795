"""``sqlwa export``: a run as a Perfetto trace, for ui.perfetto.dev and trace processor, or
a run's or a matrix's table as CSV, for a spreadsheet."""

from __future__ import annotations

from pathlib import Path

import click

from sqlwa import outputs
from sqlwa.errors import UsageError
from sqlwa.outputs import allow_system_option


@click.command("export")
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The file to write (by convention NAME.perfetto-trace, or NAME.csv).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(("perfetto", "csv")),
    default="perfetto",
    show_default=True,
    help="perfetto: a lab run as a Perfetto trace; csv: a run's commits (one row per transaction, as "
    "commits.parquet) or a matrix's configurations (means, sd over repeats and runs, as `matrix --json`).",
)
@allow_system_option
def export_command(run: Path, output: Path, output_format: str, allow_system_dir: bool) -> None:
    """Write a lab run (sqlwa run --fs …) as a Perfetto trace, or a table as CSV.

    Open it in https://ui.perfetto.dev (drag the file in) or query it with trace
    processor. It holds a 'commits' track (a slice per transaction with its index,
    latency, bytes and fsyncs as args), SQLite's xSync/xTruncate/xDelete on the SQL
    thread, that thread's syscalls (a slice from entry to exit where the run traced the
    exit: fsync, fdatasync, sync_file_range and openat, so their durations; an instant
    at the entry where it did not: pwrite64, ftruncate, unlink), each device's block
    requests from issue to completion (category, sector, bytes, flags as args) with
    cache flushes marked, and counters of the bytes written per category. The run's raw events are in
    it too, as Perfetto's ftrace data source records them: `sqlwa parse` reads the file
    back into the same per-commit figures.

    With --format csv: a run directory gives its commits, one row per transaction (the
    columns of commits.parquet); a matrix directory its configurations, one row each: the
    runs (repeats) and commits, every metric's mean (latency quantiles over the commits
    pooled) and its sample standard deviation over the runs (METRIC_sd, empty for one run).

    \b
    Examples:
      sqlwa export out/ext4-wal -o wal.perfetto-trace
      sqlwa parse wal.perfetto-trace              the round trip
      sqlwa export m1 --format csv -o m1.csv      a matrix's table for a spreadsheet"""
    from sqlwa.results import rundir
    from sqlwa.views import perfetto_export

    if output_format == "csv":
        export_csv(run, output, allow_system_dir)
        return
    if not (run / rundir.SUMMARY_FILE).is_file() and not (run / rundir.RUNNING_FILE).exists():
        raise UsageError(
            f"{run} is not a run directory: no summary.json", "pass a directory written by `sqlwa run --out`"
        )
    target = outputs.check_file(output, "-o", allow_system=allow_system_dir, reads=(run,))
    # Written beside the output and renamed into place: a failed export leaves no half trace.
    with outputs.replacing(target, "the Perfetto trace") as f:
        counts = perfetto_export.export(run, f)
    click.echo(
        f"{output}: {counts.commits} commits, {counts.vfs_calls} VFS calls, {counts.syscalls} syscalls, "
        f"{counts.block.requests} block requests ({counts.block.flushes} cache flushes) "
        f"on {', '.join(counts.block.devices) or 'no device'}, "
        f"{counts.ftrace_events:,} raw events"
        + (f" ({counts.skipped_events} without an ftrace form left out)" if counts.skipped_events else "")
    )


def export_csv(source: Path, output: Path, allow_system_dir: bool) -> None:
    """A matrix's configurations table, or a run's commits, as CSV."""
    from sqlwa.results import store
    from sqlwa.views import csv_output

    table = store.load_results(source)  # refuses what is neither a matrix nor a finished run
    target = outputs.check_file(output, "-o", allow_system=allow_system_dir, reads=(source,))
    if (store.results_dir(source) / store.STORE_FILE).exists():
        frame, what = csv_output.configurations(table, store.load_latencies(source)), "configurations"
    else:
        frame, what = csv_output.commits(source), "commits"
    with outputs.replacing(target, "the CSV table") as f:
        frame.write_csv(f)
    click.echo(f"{output}: {frame.height} {what}, {frame.width} columns")
