"""``sqlwa export``: a run as a Perfetto trace, for ui.perfetto.dev and trace processor."""

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
    help="The Perfetto trace to write (by convention NAME.perfetto-trace).",
)
@allow_system_option
def export_command(run: Path, output: Path, allow_system_dir: bool) -> None:
    """Write a lab run (sqlwa run --fs …) as a Perfetto trace.

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

    \b
    Examples:
      sqlwa export out/ext4-wal -o wal.perfetto-trace
      sqlwa parse wal.perfetto-trace              the round trip"""
    from sqlwa.results import rundir
    from sqlwa.views import perfetto_export

    if not (run / rundir.SUMMARY_FILE).is_file() and not (run / rundir.RUNNING_FILE).exists():
        raise UsageError(
            f"{run} is not a run directory: no summary.json", "pass a directory written by `sqlwa run --out`"
        )
    target = outputs.check_file(output, "-o", allow_system=allow_system_dir)
    # Written beside the output and renamed into place: a failed export leaves no half trace.
    with outputs.replacing(target, "the Perfetto trace") as f:
        counts = perfetto_export.export(run, f)
    click.echo(
        f"{output}: {counts.commits} commits, {counts.vfs_calls} VFS calls, {counts.syscalls} syscalls, "
        f"{counts.requests} block requests ({counts.flushes} cache flushes) on {', '.join(counts.devices) or 'no device'}, "
        f"{counts.ftrace_events:,} raw events"
        + (f" ({counts.skipped_events} without an ftrace form left out)" if counts.skipped_events else "")
    )
