"""What a target measured, made into the run's files: summary.json's configuration and
sections (:func:`run_config`, :func:`stop_section`, …) for every target, and a lab
capture analysed and written whole (:func:`analyse_capture`), on the host, for every
target that captures a trace."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, cast

import polars as pl

from sqlwa.analysis import closing, phases, stream
from sqlwa.analysis.schema import Durability, Summary
from sqlwa.analysis.summary import ColumnFrame, build_summary, with_vfs_totals
from sqlwa.errors import Interrupted, writing
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import analyse, commit_stream, engine, environment, lab_capture
from sqlwa.measure.request import RunOutcome, RunRequest
from sqlwa.results import rundir

ENGINE_COMMITS_FILE = ".engine-commits.parquet"  # a streamed analysis' input, removed after it
#: The facts of where the run happened that summary.json's config lists right after the
#: scenario (the rest of a target's description follows the machine's facts).
PLACE_FIRST = ("fs", "dir_fs", "fs_source", "mount_options")


def run_config(request: RunRequest, info: dict, measured: int, place: dict) -> dict:
    """The run's configuration for summary.json, with ``place``, the target's description
    of where it ran. Journal mode and sync level are what SQLite read back after set-up
    (``pragmas``), not what was asked (``settings``)."""
    s = request.settings
    return {
        **replay_config(info),
        "scenario": info["scenario"],
        "scenario_source": request.scenario,
        **{key: place[key] for key in PLACE_FIRST if key in place},
        "journal": info["pragmas"]["journal_mode"],
        "sync": engine.SYNC_MODES[int(info["pragmas"]["synchronous"])],
        "txns": measured,
        "warmup": s.length.warmup,
        "seed": info["seed"],
        "settings": s.as_dict(),
        "pragmas": info["pragmas"],
        "sqlite_version": info["sqlite_version"],
        "sqlite_source_id": info["sqlite_source_id"],
        "sqlite_compile_options": info["sqlite_compile_options"],
        "vfs_counting": info["vfs_counting"],
        "pid": info["pid"],
        "tid": info["tid"],
        # other sqlwa runs measuring at the same time, and the load (None: not known)
        "host_sharing": info.get("host_sharing"),
        **environment.machine_facts(),
        # the rest of the place's description; a fact it shares with the machine's (a
        # guest's kernel and CPUs) takes that one's place
        **place,
    }


def replay_config(info: dict) -> dict:
    """A replayed log's section of the configuration (``replay``), without the per-commit
    database list (its figures per database are there)."""
    if "replay" not in info:
        return {}
    replayed = {key: value for key, value in info["replay"].items() if key != "commit_database"}
    return {"replay": replayed}


def stack_config(stack: StackSpec) -> dict:
    """The stack a lab run asked for, as summary.json's config records it: the layers by
    the names they were chosen by, the profile by its record (config.lab says what was
    made of them)."""
    layers = stack.layers
    return {
        "fs": stack.volume.fs,
        "encrypt": layers.encrypt,
        "profile": stack.profile_record(),
        "fuse": layers.fuse,
        "crypt": layers.crypt,
        "device_delay_ms": layers.device_delay_ms,
    }


def lab_place(stack: StackSpec, described: dict) -> dict:
    """A lab's description of where the run happened (:func:`run_config`'s ``place``): the
    stack asked for and the lab made of it (``described``: its own description)."""
    return {
        **stack_config(stack),
        "fs_source": "lab: fresh filesystem on a loop device" if described["loop_device"] else "lab: fresh tmpfs",
        "mount_options": described["mount_options"],
        "lab": described,
    }


def engine_sections(info: dict, traced: dict | None = None) -> dict:
    """summary.json's ``wrote_nothing`` and ``close`` (:mod:`sqlwa.analysis.closing`):
    the engine's figures, with the trace's of the closing (``traced``) in a lab run."""
    return {"wrote_nothing": closing.wrote_nothing_section(info), "close": closing.close_section(info, traced)}


def measured_span_ns(measured: pl.DataFrame | ColumnFrame) -> int:
    """From the first measured commit's start to the last one's end (0 for none)."""
    if measured.height == 0:
        return 0
    return int(measured["end_ns"].cast(pl.Int64).max()) - int(measured["start_ns"].cast(pl.Int64).min())  # type: ignore[arg-type]


def stop_section(info: dict, settings: engine.RunSettings, measured: int, measured_span_ns: int) -> dict:
    """summary.json's ``stopped``: what bounded the run's transactions (``by``: "txns",
    "duration", "interrupted", a replay's "log"), what was asked, how long the ``measured``
    commits took (from the first's start to the last's end), and for a run a signal
    stopped between its commits ``partial``: "interrupted after N of M commits" (one so
    stopped before its first measured commit was not kept: engine.raise_if_nothing_measured)."""
    section: dict[str, Any] = {
        "by": info.get("stopped_by"),
        "txns_asked": settings.length.txns,
        "duration_s_asked": settings.length.duration_s,
        "measured_s": round(measured_span_ns / 1e9, 3),
    }
    interruption = engine.interruption_of(info)
    if interruption is None:
        return section
    txns, duration_s = settings.length.txns, settings.length.duration_s
    what = f"{interruption} after {measured}" + (f" of {txns}" if txns else "") + " commits"
    if duration_s:
        what += f" ({section['measured_s']:g} s of the {duration_s:g} s asked)"
    section["partial"] = what
    return section


def write_outputs(
    out_dir: Path,
    summary: Summary,
    commits: pl.DataFrame | pl.LazyFrame,
    analysis: analyse.TraceAnalysis | None = None,
    abandoned: threading.Event | None = None,
) -> None:
    """The run's tables, then summary.json, which says the run is complete (a streamed
    analysis wrote its commits.parquet and writes.parquet as it went). A run given up
    meanwhile (``abandoned``: :func:`sqlwa.measure.targets.host_lab.keep_what_was_measured`)
    is not completed."""
    with writing(out_dir, "the run's results into"):
        if isinstance(commits, pl.DataFrame):
            rundir.write_parquet(commits, out_dir / rundir.COMMITS_FILE)
        if analysis is not None:
            analyse.write_trace_tables(out_dir, analysis)
        if abandoned is not None and abandoned.is_set():
            raise Interrupted("given up while its results were written")
        rundir.finish(out_dir, summary)


def analyse_capture(
    request: RunRequest,
    capture: lab_capture.LabCapture,
    out_dir: Path,
    place: dict,
    abandoned: threading.Event | None = None,
) -> RunOutcome:
    """The analysing half of a lab run, on the host whichever target captured it:
    summary.json, the commits and the trace tables from a :class:`LabCapture`.
    ``place`` is the target's description of where it ran (:func:`run_config`);
    ``abandoned`` as for :func:`write_outputs`."""
    analysis, analysis_s = analysed(request, capture, out_dir)
    amortized, sections = analysis.amortized, analysis.sections
    frame: pl.DataFrame | None = None
    if isinstance(analysis.commits, pl.DataFrame):
        frame = phases.with_phases(analysis.commits, capture.records.info["pragmas"]["journal_mode"])
    commits = frame if frame is not None else ColumnFrame(analysis.commits.lazy())
    if capture.daemon_cpu is not None:  # measured whether or not the syscall level was captured
        assert capture.lab.fuse is not None, "only a FUSE daemon's CPU time is measured"
        sections.setdefault("fuse", dict(capture.lab.fuse))["daemon_cpu"] = capture.daemon_cpu
    measured = commits.filter(~pl.col("warmup")).height
    span_ns = measured_span_ns(commits.filter(~pl.col("warmup")))
    sections["stopped"] = stopped = stop_section(capture.records.info, request.settings, measured, span_ns)
    sections.update(engine_sections(capture.records.info, analysis.close))
    trace = {
        **capture.trace.described,
        "parse": analysis.parse_report,
        "unparsed_lines": analysis.parse_report.get("bad_records", 0),
        # The trace's parse and per-commit analysis, wall clock (bench/scale.py reads it).
        "analysis_s": round(analysis_s, 3),
    }
    loss = capture.trace.loss_error()
    if loss is None and not request.capture.allow_loss:
        loss = analyse.unparsed_loss(analysis.parse_report, Path(capture.trace.path))
    summary = build_summary(
        run_config(request, capture.records.info, measured, place),
        commits,
        levels=capture.trace.levels,
        frame_budget_ms=request.frame_budget_ms,
        amortized_bytes=amortized["write_bytes"] if amortized else None,
        trace=trace,
        **sections,
    )
    if capture.durability is not None:
        summary["durability"] = with_checkpoint_reach(capture.durability, summary)
    if amortized is not None:
        summary["per_commit"]["amortized_write_bytes"] = amortized["write_bytes"] / max(amortized["commits"], 1)
        summary["amortized"] = amortized
    write_outputs(out_dir, summary, frame if frame is not None else analysis.commits, analysis, abandoned)
    if loss is not None:
        raise loss
    return RunOutcome(summary=summary, frame=frame, out_dir=out_dir, partial=stopped.get("partial"))


def analysed(
    request: RunRequest, capture: lab_capture.LabCapture, out_dir: Path
) -> tuple[analyse.TraceAnalysis, float]:
    """The capture's trace analysed into ``out_dir`` (its events.parquet, and the commits
    and writes of a streamed analysis), and how long that took (seconds, wall clock)."""
    with writing(out_dir, "the run's results into"):
        (out_dir / rundir.LAYOUT_FILE).write_text(json.dumps(capture.lab.layout) + "\n")
    context = analyse.LabContext.of(capture.lab, request.settings)
    spilled = out_dir / ENGINE_COMMITS_FILE
    engine_commits = engine_commits_of(capture, spilled, stream.streamable(context))
    started = time.perf_counter()
    analysis = analyse.analyse_trace(
        Path(capture.trace.path),
        engine_commits,
        capture.lab.dev,
        capture.trace.levels,
        context,
        events_path=out_dir / rundir.EVENTS_FILE,
        commits_path=out_dir / rundir.COMMITS_FILE,
        phases_of=capture.records.info["pragmas"]["journal_mode"],
    )
    del engine_commits
    spilled.unlink(missing_ok=True)
    return analysis, time.perf_counter() - started


def with_checkpoint_reach(durability: dict, summary: Summary) -> Durability:
    """A crash run's ``durability`` with ``wal_checkpoint``: in WAL mode, whether its
    commits reached SQLite's first checkpoint (before one, synchronous=NORMAL has synced
    nothing, so every commit is at risk whatever the filesystem does) and the ``-n``
    that would (:func:`sqlwa.analysis.phases.wal_checkpoint_reach`)."""
    reach = phases.wal_checkpoint_reach(summary)
    if reach is None:
        return cast(Durability, durability)
    outside = summary.get("checkpoint", {}).get("outside_commits")
    reach.update(sync=summary["config"].get("sync"), outside_commits=outside)
    return cast(Durability, {**durability, "wal_checkpoint": reach})


def engine_commits_of(capture: lab_capture.LabCapture, spilled: Path, streamable: bool) -> pl.DataFrame | pl.LazyFrame:
    """The engine's per-commit table the trace's analysis is given: a scan of the file its
    chunks went to as the run went (``commits_file``), read a chunk of commits at a time by
    a streamed analysis; or, from a guest's records (``columns``), a frame, written to
    ``spilled`` and scanned for a streamed analysis."""
    if capture.records.commits_file is not None:
        return commit_stream.engine_table(capture.records.commits_file)
    result = engine.WorkloadResult.from_raw({"info": capture.records.info, "commits": capture.records.columns})
    # The frame has them now: the engine's per-commit lists of Python ints (hundreds of
    # bytes a commit) are not kept through the analysis.
    capture.records.columns = {}
    engine_commits = with_vfs_totals(result.commits)
    del result
    if not streamable:
        return engine_commits
    with writing(spilled, "the engine's per-commit table to"):
        rundir.write_parquet(engine_commits, spilled)
    return pl.scan_parquet(spilled)
