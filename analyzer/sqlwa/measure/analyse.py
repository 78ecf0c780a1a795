"""The analysis of a lab run's trace: the raw capture parsed into one event table, cut
into commit windows and joined onto the engine's per-commit records, with the block bytes
by category, the checkpoints and the findings (:func:`analyse_trace`).

Every target's capture is analysed here, on the host (a VM lab guest's too): what the
analysis needs to know of the lab comes with the capture
(:class:`sqlwa.measure.lab_capture.LabFacts`), beside the SQLite settings of the run
(:class:`LabContext`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa import _system
from sqlwa.analysis import (
    attribution,
    closing,
    device_time,
    fuse_effect,
    metrics,
    remap,
    stream,
    traceformat,
    traceparse,
    windows,
)
from sqlwa.analysis.schema import Amortized
from sqlwa.capture import drain
from sqlwa.errors import TraceLossError, UsageError, writing
from sqlwa.measure import engine
from sqlwa.measure.lab_capture import LabFacts
from sqlwa.results import rundir


@dataclass(frozen=True)
class LabContext(LabFacts):
    """What attribution needs to know about the run besides the trace: the lab's facts,
    and the journal mode and sync level the run asked for."""

    journal: str
    sync: str

    @classmethod
    def of(cls, lab: LabFacts, settings: engine.RunSettings) -> LabContext:
        return cls(**vars(lab), journal=settings.journal, sync=settings.sync)


@dataclass
class TraceAnalysis:
    commits: pl.DataFrame | pl.LazyFrame  # a scan of the written file when streamed
    parse_report: dict
    amortized: Amortized | None
    sections: dict
    events: pl.DataFrame | pl.LazyFrame  # a scan of events.parquet when written already
    writes: pl.DataFrame | pl.LazyFrame | None  # block writes with their attribution category
    # the syscalls and block requests of the connections' closing (closing.trace_figures)
    close: dict | None = None


def analyse_trace(
    trace_path: Path,
    commits: pl.DataFrame | pl.LazyFrame,
    dev,
    levels: list[str],
    context: LabContext | None = None,
    events_path: Path | None = None,
    commits_path: Path | None = None,
    phases_of: str | None = None,
) -> TraceAnalysis:
    """Per-commit syscall and block figures from the raw capture, joined onto ``commits``;
    with ``context`` also the block bytes by category and the checkpoints.

    With ``events_path`` the capture is parsed row group by row group into that Parquet
    file (bounded memory) and analysed from a scan of it: each step reads only its rows'
    columns (the block requests of the device, the SQL thread's syscalls, the markers),
    never the whole event table; without, the whole table is parsed into memory. Both
    give the same figures (tests/lab/test_streamed_analysis.py).

    With ``commits_path`` too, the analysis walks the commit windows and the events
    together, chunk by chunk (:mod:`sqlwa.analysis.stream`), in memory that does not
    grow with the run: the per-commit table goes into ``commits_path`` (with ``phases_of``,
    the journal mode, its ``phase`` column too) and the attributed writes beside it."""
    # Lenient: a damaged line must not throw the run away; it is counted and, like lost
    # events, fails the run unless --allow-loss (see unparsed_loss).
    events: pl.DataFrame | pl.LazyFrame
    done: TraceAnalysis | None = None
    if events_path is None:
        events, report = traceparse.parse(trace_path, format="ftrace", lenient=True)
    else:
        with writing(events_path, "the run's event table to"):
            report = parse_capture(trace_path, events_path)
        events = pl.scan_parquet(events_path)
        if commits_path is not None and stream.streamable(context):
            try:
                done = analyse_streamed(events, report, commits, dev, levels, context, commits_path, phases_of)
            except stream.MarkersOutOfOrder:
                pass  # analysed whole, which says which markers
    if done is None:
        done = analyse_events(events, report, commits.lazy().collect(), dev, levels, context)
    return dataclasses.replace(done, close=closing.trace_figures(events, dev, levels))


def analyse_streamed(
    events: pl.LazyFrame,
    report: dict,
    commits: pl.DataFrame | pl.LazyFrame,
    dev,
    levels: list[str],
    context: LabContext | None,
    commits_path: Path,
    phases_of: str | None,
) -> TraceAnalysis:
    """:func:`analyse_events` chunk by chunk (:mod:`sqlwa.analysis.stream`)."""
    with writing(commits_path, "the run's per-commit table to"):
        done = stream.analyse(
            events,
            commits,
            dev,
            levels,
            context,
            commits_path.parent,
            commits_path,
            commits_path.parent / rundir.WRITES_FILE,
            phases_of=phases_of,
        )
    return TraceAnalysis(done.commits, report, done.amortized, done.sections, events, done.writes)


#: Rows per row group of events.parquet joined from the capture's parts (the streamed
#: analysis reads a chunk's time range by skipping the row groups outside it).
EVENTS_ROW_GROUP = 1 << 16
JOIN_BATCH = 1 << 14


def join_parts(parts: list[Path], target: Path) -> None:
    """The capture's Parquet parts (one schema) into one file, a batch at a time, one
    thread: bounded memory (Polars' sink of the same parts took some 300 MB at 10^5
    commits, as much as the rest of the analysis). A part that is not Parquet, or not of
    the first part's columns, raises :class:`PartsDamaged`; a failed write its OSError."""
    import pyarrow as pa  # here: the CLI's start-up does not import pyarrow
    import pyarrow.parquet as pq

    writer = None
    # Files opened here, not paths handed to pyarrow: it reads a path as a URI, in UTF-8,
    # and a directory's name need not be.
    with contextlib.ExitStack() as files:
        out = files.enter_context(open(target, "wb"))
        try:
            for part in parts:
                try:
                    source = pq.ParquetFile(files.enter_context(open(part, "rb")), pre_buffer=False)
                    if writer is None:
                        writer = pq.ParquetWriter(out, source.schema_arrow, compression="zstd")
                    for batch in source.iter_batches(batch_size=JOIN_BATCH, use_threads=False):
                        writer.write_batch(batch, row_group_size=EVENTS_ROW_GROUP)
                except (pa.ArrowException, ValueError) as exc:
                    raise PartsDamaged(f"{part.name}: {exc}") from None
        finally:
            if writer is not None:
                writer.close()


class PartsDamaged(Exception):
    """A capture part that cannot be joined into events.parquet."""


def parse_capture(trace_path: Path, events_path: Path) -> dict:
    """The run's capture into the Parquet file ``events_path``, row group by row group;
    returns the parse report. A long run's capture is the parts its drain made as it went
    (:class:`sqlwa.capture.drain.Drain`) and the text after the last: that text becomes the
    last part, the parts are joined into ``events_path`` (streamed) and then removed with
    the text, whose events are all in the table."""
    parts = drain.parts_of(trace_path)
    if not parts:
        return traceformat.parse_to_parquet(trace_path, events_path, format="ftrace", lenient=True)
    reports = []
    for part in parts:
        with rundir.reading(drain.report_path(part)):
            reports.append(json.loads(drain.report_path(part).read_text()))
    # numbered after the highest part, not by their count: a gap must not overwrite one
    last = drain.part_path(trace_path, drain.part_number(parts[-1]) + 1)
    reports.append(drain.convert_segment(trace_path, last))
    try:
        join_parts([*parts, last], events_path)
        _system.memory.release_freed()
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, PartsDamaged) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise UsageError(
            f"the capture's parts in {trace_path.parent} are damaged or not sqlwa's: {detail}",
            "re-run the measurement that writes them",
        ) from None
    for part in [*parts, last]:
        part.unlink()
        drain.report_path(part).unlink()
    trace_path.unlink()
    return traceformat.merge_reports(reports)


def analyse_events(
    events: pl.DataFrame | pl.LazyFrame,
    report: dict,
    commits: pl.DataFrame,
    dev,
    levels: list[str],
    context: LabContext | None = None,
) -> TraceAnalysis:
    """:func:`analyse_trace` of an event table in memory or a scan of one."""
    wins = windows.commit_windows(events)
    joined = commits.join(wins.drop("warmup"), on="index", how="left")
    amortized = None
    sections: dict[str, Any] = {}
    tid = windows.run_tid(events)
    if "syscall" in levels:
        joined = joined.join(windows.syscalls_per_commit(events, wins, tid), on="index", how="left")
        if context is not None and context.fuse is not None:
            daemon = fuse_effect.daemon_syscalls_per_commit(events, wins, context.fuse["comm"])
            joined = joined.join(daemon, on="index", how="left")
            sections["fuse"] = fuse_effect.fuse_section(events, wins, tid, context.fuse)
    attributed = None
    if "block" in levels:
        joined = joined.join(windows.block_per_commit(events, wins, dev), on="index", how="left")
        amortized = windows.amortized_write_bytes(events, wins, dev)
        requests = device_time.requests(events, dev)
        joined = joined.join(device_time.busy_per_commit(requests, wins), on="index", how="left")
        sections["device_time"] = device_time.section(requests, wins, joined)
        if context is not None:
            attributed = attribution.attribute(
                events,
                wins,
                dev,
                tid,
                context.journal,
                context.fs_type,
                context.layout,
                daemon=context.fuse["comm"] if context.fuse else None,
                mapped=context.mapped_dev,
                files_by_sync=context.files_by_sync,
                mapped_offset=context.mapped_offset,
            )
            if context.mapped_dev is not None:
                sections["remap"] = remap_section(events, dev, context)
            per_commit = attribution.bytes_per_commit(attributed, wins)
            joined = joined.join(per_commit, on="index", how="left")
            sections["bytes_by_category"] = attribution.summary_section(attributed, wins, per_commit)
    if context is not None:
        found = metrics.checkpoints(events, attributed, context.journal)
        if attributed is not None:  # bytes only where the block level was captured
            joined = metrics.with_checkpoint_columns(joined, found)
        measured = joined.filter(~pl.col("warmup"))
        sections["checkpoint"] = metrics.checkpoint_summary(found, measured, context.journal)
        sections["findings"] = metrics.consistency_findings(measured, context.sync)
    return TraceAnalysis(metrics.with_waf(joined), report, amortized, sections, events, attributed)


def remap_section(events: pl.DataFrame | pl.LazyFrame, dev, context: LabContext) -> dict:
    """summary.json's ``remap``: how writes were followed from the disk to the dm device,
    and the offsets the kernel's remap events showed (none for the bios dm-delay delays)."""
    assert context.mapped_dev is not None
    return {
        "followed_by": "block_bio_remap" if context.mapped_offset is None else "table offset",
        "table_offset_sectors": context.mapped_offset,
        "disk_offsets_sectors": remap.disk_offsets(events, dev, context.mapped_dev),
    }


def unparsed_loss(report: dict, trace_path: Path) -> TraceLossError | None:
    bad = report.get("bad_records", 0)
    if not bad:
        return None
    return TraceLossError(
        f"{bad} line(s) of the trace could not be parsed, so some events are unaccounted for "
        f"(raw capture kept in {trace_path})",
        "re-run; if it recurs, report the lines (sqlwa parse --lenient shows them); --allow-loss keeps such runs",
    )


def write_trace_tables(out_dir: Path, analysis: TraceAnalysis) -> None:
    """Parsed events and attributed writes, so no reader parses or attributes again."""
    if isinstance(analysis.events, pl.DataFrame):  # else parsed into events.parquet already
        rundir.write_parquet(analysis.events, out_dir / rundir.EVENTS_FILE)
    if isinstance(analysis.writes, pl.DataFrame):  # else written by the streamed analysis
        rundir.write_parquet(analysis.writes, out_dir / rundir.WRITES_FILE)
