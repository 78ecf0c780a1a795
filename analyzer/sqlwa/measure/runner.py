"""One measurement run, from request to the files in the output directory.

A run without ``--fs`` measures the VFS level only, in a scratch directory (a fresh
temporary one, or one made inside ``--dir``) that is removed afterwards. A run with
``--fs`` makes a fresh lab filesystem, traces block requests, the SQL thread's syscalls
and the engine's markers in one tracefs instance, and cuts the trace into commit windows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa import _system
from sqlwa.analysis import attribution, fuse_effect, metrics, traceparse, windows
from sqlwa.analysis.summary import build_summary, with_vfs_totals
from sqlwa.capture import tracing
from sqlwa.catalogue import NO_LAB_FS
from sqlwa.errors import TraceLossError, UsageError, writing
from sqlwa.lab import encryption, filesystem, fslayout, fuse
from sqlwa.lab.scratch import check_scratch_parent, scratch_dir
from sqlwa.measure import engine, environment
from sqlwa.results import rundir

ProgressFn = Callable[[int, int], None]


@dataclass
class RunRequest:
    scenario: str = "mobibench-insert"
    settings: engine.RunSettings = field(default_factory=engine.RunSettings)
    out_dir: Path = Path("sqlwa-out")
    dir: Path | None = None
    keep_db: bool = False
    fs: str | None = None
    image_size: str = "1G"
    mkfs_opts: str = ""
    mount_opts: str = ""
    fill_pct: float = 0
    encrypt: str = encryption.NO_ENCRYPTION
    profile: dict | None = None  # the --profile the lab options came from, if any
    fuse: str = fuse.NO_FUSE
    allow_loss: bool = False
    buffer_kb: int = tracing.DEFAULT_BUFFER_KB
    frame_budget_ms: float = metrics.DEFAULT_FRAME_BUDGET_MS


@dataclass
class RunOutcome:
    summary: dict
    commits: pl.DataFrame
    out_dir: Path
    kept_database: Path | None = None  # where --keep-db left the database


def ensure_writable_dir(path: Path, what: str) -> Path:
    """Create ``path`` if needed and prove we can write there, or explain why not. Never
    on a kernel interface (/proc, /sys, tracefs, /dev …): a mkdir there is not a folder."""
    interface = _system.kernel_interface_at(path)
    if interface is not None:
        raise UsageError(
            f"{what} {path} is on {interface}, a kernel interface, not storage",
            "write the output to a directory on a disk filesystem",
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{what} {path} cannot be created: {exc.strerror}",
            f"choose a writable {what}",
        ) from None
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path} is not a writable directory", f"choose a writable {what}")
    return path


def run_config(request: RunRequest, info: dict, work_dir: Path, measured: int) -> dict:
    """The run's configuration for summary.json. Journal mode and sync level are what SQLite
    read back after set-up (``pragmas``), not what was asked (``settings``)."""
    fs = environment.filesystem_of(work_dir)
    s = request.settings
    return {
        "scenario": info["scenario"],
        "scenario_source": request.scenario,
        "fs": NO_LAB_FS,
        "dir_fs": fs["type"],
        "fs_source": f"existing {fs['type']} directory (no lab filesystem)",
        "mount_options": fs["options"],
        "journal": info["pragmas"]["journal_mode"],
        "sync": engine.SYNC_MODES[int(info["pragmas"]["synchronous"])],
        "txns": measured,
        "warmup": s.warmup,
        "seed": info["seed"],
        "settings": s.as_dict(),
        "pragmas": info["pragmas"],
        "sqlite_version": info["sqlite_version"],
        "sqlite_source_id": info["sqlite_source_id"],
        "sqlite_compile_options": info["sqlite_compile_options"],
        "vfs_counting": info["vfs_counting"],
        "pid": info["pid"],
        "tid": info["tid"],
        **environment.machine_facts(),
    }


def write_outputs(out_dir: Path, summary: dict, commits: pl.DataFrame, analysis: TraceAnalysis | None = None) -> None:
    """The run's tables, then summary.json, which says the run is complete."""
    with writing(out_dir, "the run's results into"):
        rundir.write_parquet(commits, out_dir / rundir.COMMITS_FILE)
        if analysis is not None:
            write_trace_tables(out_dir, analysis)
        rundir.finish(out_dir, summary)


@contextmanager
def output_dir(path: Path) -> Iterator[Path]:
    """The run's output directory, locked against other writers and marked unfinished
    (an earlier run's files removed) until :func:`write_outputs` completes it."""
    out_dir = ensure_writable_dir(path, "output directory")
    # Held until everything is written: a second writer would mix its markers into this
    # run's trace and its files with this run's.
    with _system.directory_lock(out_dir, "sqlwa run"):
        with writing(out_dir, "the run's files into"):
            rundir.begin(out_dir)
        yield out_dir


def execute(request: RunRequest, progress: ProgressFn | None = None) -> RunOutcome:
    """Run the request's workload and write summary.json and commits.parquet. SIGTERM
    ends it with :class:`Interrupted` in every phase, as Ctrl-C does with
    KeyboardInterrupt, so the caller can say what was left unfinished."""
    engine.check_settings(request.settings)  # refused before any directory or lab is made
    guard = _system.SignalGuard()  # the lab and capture install their own inside this one
    guard.install()
    try:
        if request.fs:
            return execute_in_lab(request, progress)
        return execute_vfs_only(request, progress)
    finally:
        guard.restore()


def execute_vfs_only(request: RunRequest, progress: ProgressFn | None = None) -> RunOutcome:
    refuse_lab_options_without_lab(request)
    check_scratch_parent(request.dir)
    scenario = engine.load_scenario(request.scenario)
    with output_dir(request.out_dir) as out_dir, scratch_dir(request.dir, request.keep_db) as work_dir:
        result = engine.run_workload(scenario, request.settings, work_dir, progress=progress)
        commits = metrics.with_waf(with_vfs_totals(result.commits))
        measured = commits.filter(~pl.col("warmup")).height
        config = run_config(request, result.info, work_dir, measured)
        summary = build_summary(config, commits, levels=["vfs"], frame_budget_ms=request.frame_budget_ms)
        write_outputs(out_dir, summary, commits)
    kept = work_dir if request.keep_db else None
    return RunOutcome(summary=summary, commits=commits, out_dir=out_dir, kept_database=kept)


def refuse_lab_options_without_lab(request: RunRequest) -> None:
    """--fill, --mkfs-opts, --mount-opts, --encrypt and --fuse shape a lab filesystem; without --fs
    there is none, and ignoring them would measure something else than was asked."""
    given = [
        flag
        for flag, value in (
            ("--fill", request.fill_pct),
            ("--mkfs-opts", request.mkfs_opts),
            ("--mount-opts", request.mount_opts),
            ("--encrypt", request.encrypt != encryption.NO_ENCRYPTION),
            ("--fuse", request.fuse != fuse.NO_FUSE),
        )
        if value
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)} shape{'s' if len(given) == 1 else ''} a lab filesystem, and this run has none",
            "add --fs ext4 (or another lab filesystem), or leave them out",
        )


def preflight_lab(request: RunRequest) -> None:
    """Say everything a lab run lacks before anything is made."""
    if request.dir is not None:
        raise UsageError("--dir and --fs exclude each other", "use --fs for a lab run, or --dir for a VFS-only run")
    if request.keep_db:
        raise UsageError(
            "--keep-db keeps a VFS-only run's database; a lab filesystem is removed after the run",
            "leave --keep-db out, or leave --fs out",
        )
    assert request.fs is not None, "a lab run names its filesystem"
    filesystem.require_root(f"--fs {request.fs} (loop devices, mkfs, mount and tracefs)")
    filesystem.require_filesystem(request.fs)
    tracing.require_tracefs()


def lab_config(request: RunRequest, info: dict, fs: dict, measured: int) -> dict:
    config = run_config(request, info, Path(fs["mountpoint"]), measured)
    del config["dir_fs"]  # the lab's filesystem is the fs
    config.update(
        fs=request.fs,
        encrypt=request.encrypt,
        profile=request.profile,
        fuse=request.fuse,
        fs_source="lab: fresh filesystem on a loop device" if fs["loop_device"] else "lab: fresh tmpfs",
        mount_options=fs["mount_options"],
        lab=fs,
    )
    return config


def capture_run(request: RunRequest, scenario, out_dir: Path, fs: filesystem.LabFilesystem, progress):
    """Run the workload inside one capture; returns (result, capture, loss error or None,
    the FUSE daemon's CPU time over the workload or None)."""
    dev = fs.dev
    loss = None
    daemon_cpu = None
    cap = tracing.TraceCapture(
        out_dir,
        dev=dev,
        pid=threading.get_native_id(),
        comms=[fs.fuse.comm] if fs.fuse else [],  # the daemon's threads, those it starts later too
        allow_loss=request.allow_loss,
        buffer_kb=request.buffer_kb,
    )
    try:
        with cap:
            # extents markers: which block ranges belong to which file (attribution);
            # only with a block device to attribute (tmpfs has no FIEMAP either)
            mapped = request.settings.count_vfs and dev is not None
            # FUSE answers no FIEMAP: the files' blocks are those of the lower files it serves
            lower = fs.fuse.lower if fs.fuse else None
            settings = dataclasses.replace(request.settings, map_extents=mapped, extents_from=lower)
            daemon_before = fs.fuse.cpu_time() if fs.fuse else None
            result = engine.run_workload(
                scenario, settings, Path(fs.data_dir), marker_path=Path(cap.marker_path), progress=progress
            )
            # Inside the capture: deferred writeback and journal commits are part of the bill.
            fs.sync()
            if fs.fuse and daemon_before is not None:
                daemon_cpu = daemon_cpu_section(daemon_before, fs.fuse.cpu_time(), result.commits.height)
            if mapped:
                db_path = Path(result.info["db_path"])
                map_after_writeback(Path(cap.marker_path), fs.fuse.lower_path(db_path) if fs.fuse else db_path)
    except TraceLossError as exc:
        loss = exc
    return result, cap, loss, daemon_cpu


def daemon_cpu_section(before: _system.CpuTime, after: _system.CpuTime, transactions: int) -> dict:
    """summary.json's ``fuse.daemon_cpu``: the daemon's CPU time (every thread) from just
    before the workload to after the final syncfs, so the schema, the warm-up and the
    sync's share are in it too; ``per_transaction_ms`` spreads it over every transaction."""
    user, sys = after.user_ns - before.user_ns, after.sys_ns - before.sys_ns
    return {
        "user_ms": user / 1e6,
        "sys_ms": sys / 1e6,
        "per_transaction_ms": (user + sys) / 1e6 / max(transactions, 1),
        "transactions": transactions,
        "resolution_ms": _system.process_cpu_tick_ns() / 1e6,
        "window": "from before the workload's first statement to after the final syncfs",
    }


def map_after_writeback(marker_path: Path, db_path: Path) -> None:
    """``extents`` markers ``at=syncfs`` for the run's files, after the final syncfs.

    Data only in delayed allocation (synchronous=OFF, or WAL frames between checkpoints)
    has no blocks at the engine's end/close mapping; the syncfs gives it blocks and writes
    it there, so it is mapped after the syncfs, not before: forcing each file's writeback
    earlier (FIEMAP_FLAG_SYNC at end) would move that writeback into the SQL thread and
    ahead of close, changing when and in what order the bytes reach the device. FIEMAP
    afterwards only reads where they went."""
    engine.map_database_files(marker_path, db_path, "syncfs")


def trace_levels(cap: tracing.TraceCapture) -> list[str]:
    levels = ["vfs"]
    for level in ("syscall", "block"):
        if cap.levels.get(level) and cap.levels[level].captured:
            levels.append(level)
    return levels


@dataclasses.dataclass
class LabContext:
    """What attribution needs to know about the run besides the trace."""

    journal: str
    sync: str
    fs_type: str
    layout: dict
    fuse: dict | None = None  # the FUSE layer as the lab describes it, with --fuse


@dataclass
class TraceAnalysis:
    commits: pl.DataFrame
    parse_report: dict
    amortized: dict | None
    sections: dict
    events: pl.DataFrame
    writes: pl.DataFrame | None  # block writes with their attribution category


def analyse_trace(
    cap: tracing.TraceCapture, commits: pl.DataFrame, dev, levels: list[str], context: LabContext | None = None
) -> TraceAnalysis:
    """Per-commit syscall and block figures from the raw capture, joined onto ``commits``;
    with ``context`` also the block bytes by category and the checkpoints."""
    # Lenient: a damaged line must not throw the run away; it is counted and, like lost
    # events, fails the run unless --allow-loss (see unparsed_loss).
    events, report = traceparse.parse(cap.trace_path, format="ftrace", lenient=True)
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
        if context is not None:
            daemon_comm = context.fuse["comm"] if context.fuse else None
            attributed = attribution.attribute(
                events, wins, dev, tid, context.journal, context.fs_type, context.layout, daemon_comm
            )
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
    rundir.write_parquet(analysis.events, out_dir / rundir.EVENTS_FILE)
    if analysis.writes is not None:
        rundir.write_parquet(analysis.writes, out_dir / rundir.WRITES_FILE)


def execute_in_lab(request: RunRequest, progress: ProgressFn | None = None) -> RunOutcome:
    preflight_lab(request)
    scenario = engine.load_scenario(request.scenario)
    assert request.fs is not None, "a lab run names its filesystem"
    # Made (and so its options and size checked) before the output directory: a refused
    # option leaves nothing behind.
    lab = filesystem.LabFilesystem(
        request.fs,
        image_size=request.image_size,
        mkfs_opts=request.mkfs_opts,
        mount_opts=request.mount_opts,
        fill_pct=request.fill_pct,
        encrypt=request.encrypt,
        fuse_layer=request.fuse,
    )
    with output_dir(request.out_dir) as out_dir:
        return measure_in_lab(request, scenario, lab, out_dir, progress)


def measure_in_lab(
    request: RunRequest, scenario, lab: filesystem.LabFilesystem, out_dir: Path, progress: ProgressFn | None
) -> RunOutcome:
    with lab as fs:
        result, cap, loss, daemon_cpu = capture_run(request, scenario, out_dir, fs, progress)
        fs_facts = fs.describe()
        dev = fs.dev
        # read while still mounted: the fs's own journal/metadata location for attribution
        layout = fslayout.probe(fs.spec.kernel_type, fs.loop_device)
    with writing(out_dir, "the run's results into"):
        (out_dir / rundir.LAYOUT_FILE).write_text(json.dumps(layout) + "\n")
    levels = trace_levels(cap)
    context = LabContext(request.settings.journal, request.settings.sync, fs_facts["fs_type"], layout, fs_facts["fuse"])
    analysis = analyse_trace(cap, with_vfs_totals(result.commits), dev, levels, context)
    commits, amortized, sections = analysis.commits, analysis.amortized, analysis.sections
    if daemon_cpu is not None:  # measured whether or not the syscall level was captured
        sections.setdefault("fuse", dict(fs_facts["fuse"]))["daemon_cpu"] = daemon_cpu
    measured = commits.filter(~pl.col("warmup")).height
    config = lab_config(request, result.info, fs_facts, measured)
    trace = {
        **cap.describe(),
        "parse": analysis.parse_report,
        "unparsed_lines": analysis.parse_report.get("bad_records", 0),
    }
    if loss is None and not request.allow_loss:
        loss = unparsed_loss(analysis.parse_report, cap.trace_path)
    summary = build_summary(
        config,
        commits,
        levels=levels,
        frame_budget_ms=request.frame_budget_ms,
        amortized_bytes=amortized["write_bytes"] if amortized else None,
        trace=trace,
        **sections,
    )
    if amortized is not None:
        summary["per_commit"]["amortized_write_bytes"] = amortized["write_bytes"] / max(amortized["commits"], 1)
        summary["amortized"] = amortized
    write_outputs(out_dir, summary, commits, analysis)
    if loss is not None:
        raise loss
    return RunOutcome(summary=summary, commits=commits, out_dir=out_dir)
