"""One measurement run, from request to the files in the output directory.

A run without ``--fs`` measures the VFS level only, in a scratch directory (a fresh
temporary one, or one made inside ``--dir``) that is removed afterwards. A run with
``--fs`` makes a fresh lab filesystem, traces block requests, the SQL thread's syscalls
and the engine's markers in one tracefs instance, and cuts the trace into commit windows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa import _system, outputs
from sqlwa.analysis import (
    closing,
    metrics,
    phases,
    stream,
)
from sqlwa.analysis.summary import ColumnFrame, build_summary, with_vfs_totals
from sqlwa.capture import tracing
from sqlwa.capture.estimate import check_capture_room
from sqlwa.catalogue import NO_LAB_FS
from sqlwa.durability import explore
from sqlwa.errors import (
    Interrupted,
    OutputStuck,
    ScenarioError,
    UsageError,
    interruption,
    writing,
)
from sqlwa.lab import devmapper, filesystem, stack
from sqlwa.lab.scratch import SCRATCH_PREFIX, check_scratch_parent, make_owned_dir, scratch_dir
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import commit_stream, engine, environment, lab_capture
from sqlwa.measure.analyse import LabContext, TraceAnalysis, analyse_trace, unparsed_loss, write_trace_tables
from sqlwa.results import rundir
from sqlwa.vm import kernel as vm_kernel
from sqlwa.vm import machine

ProgressFn = lab_capture.ProgressFn
GUEST_STRACE_FILE = "guest.strace"  # --guest-strace: the guest program's syscalls, by strace
KEPT_IMAGE_FILE = "lab.img"  # --keep-image: the lab's disk as the run left it
ENGINE_COMMITS_FILE = ".engine-commits.parquet"  # a streamed analysis' input, removed after it
CRASH_IMAGE_ROOM = 4  # the lab's image, its write log, the durable base and one crash state


@dataclass
class RunRequest:
    scenario: str = "mobibench-insert"
    settings: engine.RunSettings = field(default_factory=engine.RunSettings)
    stack: StackSpec = StackSpec()  # the lab filesystem and its layers, on this host or in the VM lab
    out_dir: Path = Path("sqlwa-out")
    dir: Path | None = None
    keep_db: bool = False
    allow_loss: bool = False
    buffer_kb: int = tracing.DEFAULT_BUFFER_KB
    frame_budget_ms: float = metrics.DEFAULT_FRAME_BUDGET_MS
    guest_strace: bool = False  # with vm: strace the guest's program into OUT/guest.strace
    keep_image: bool = False  # copy the lab's image into OUT/lab.img before it is removed (tests)
    crash: explore.CrashOptions | None = None  # sqlwa crash: log the writes, judge crash states
    allow_system_dir: bool = False  # --allow-system-dir: --out (and --dir) may be in /etc, /usr …
    part_of: Path | None = None  # a matrix's cell: the matrix directory its out_dir lies in
    # sqlwa run: a Ctrl-C or SIGTERM between measured commits ends the workload there and
    # what was measured is analysed and written, marked partial (RunOutcome.partial)
    keep_measured: bool = False


@dataclass
class RunOutcome:
    summary: dict
    frame: pl.DataFrame | None  # None: the run's commits.parquet, read when asked for
    out_dir: Path
    kept_database: Path | None = None  # where --keep-db left the database
    # a run a signal stopped between its commits (RunRequest.keep_measured): what
    # summary.json's "stopped" says, for the caller to report and exit 130 with
    partial: str | None = None

    @property
    def commits(self) -> pl.DataFrame:
        """The per-commit table; a VFS-only run's, and a long lab run's, is read from its
        commits.parquet when asked for (the run itself never held it whole)."""
        return self.frame if self.frame is not None else rundir.commits(self.out_dir)


def check_out_dir(request: RunRequest, create: bool = False) -> Path:
    """The run's output directory, if sqlwa may write a run there (:func:`sqlwa.outputs.check_dir`):
    new, empty, or holding a sqlwa run; made when ``create``."""
    return outputs.check_dir(
        request.out_dir,
        "output directory",
        outputs.holds_a_run,
        "run",
        allow_system=request.allow_system_dir,
        create=create,
        part_of=request.part_of,
    )


def run_config(request: RunRequest, info: dict, work_dir: Path, measured: int) -> dict:
    """The run's configuration for summary.json. Journal mode and sync level are what SQLite
    read back after set-up (``pragmas``), not what was asked (``settings``)."""
    fs = environment.filesystem_of(work_dir)
    s = request.settings
    replayed = replay_config(info)
    return {
        **replayed,
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
        # other sqlwa runs measuring at the same time, and the load (None: not known)
        "host_sharing": info.get("host_sharing"),
        **environment.machine_facts(),
    }


def replay_config(info: dict) -> dict:
    """A replayed log's section of the configuration (``replay``), without the per-commit
    database list (its figures per database are there)."""
    if "replay" not in info:
        return {}
    replayed = {key: value for key, value in info["replay"].items() if key != "commit_database"}
    return {"replay": replayed}


def write_outputs(
    out_dir: Path,
    summary: dict,
    commits: pl.DataFrame | pl.LazyFrame,
    analysis: TraceAnalysis | None = None,
    abandoned: threading.Event | None = None,
) -> None:
    """The run's tables, then summary.json, which says the run is complete (a streamed
    analysis wrote its commits.parquet and writes.parquet as it went). A run given up
    meanwhile (``abandoned``: :func:`keep_what_was_measured`) is not completed."""
    with writing(out_dir, "the run's results into"):
        if isinstance(commits, pl.DataFrame):
            rundir.write_parquet(commits, out_dir / rundir.COMMITS_FILE)
        if analysis is not None:
            write_trace_tables(out_dir, analysis)
        if abandoned is not None and abandoned.is_set():
            raise Interrupted("given up while its results were written")
        rundir.finish(out_dir, summary)


@contextmanager
def output_dir(request: RunRequest) -> Iterator[Path]:
    """The run's output directory, locked against other writers and marked unfinished
    (an earlier run's files removed) until :func:`write_outputs` completes it. A directory
    this run made is removed again when the workload proves bad input mid-run (a replayed
    statement failing under --strict): bad input leaves nothing behind."""
    made = not request.out_dir.exists()
    out_dir = check_out_dir(request, create=True)
    try:
        # Held until everything is written: a second writer would mix its markers into
        # this run's trace and its files with this run's.
        with _system.locks.directory_lock(out_dir, "sqlwa run"):
            with writing(out_dir, "the run's files into"):
                rundir.begin(out_dir)
            yield out_dir
    except ScenarioError:
        if made:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def execute(request: RunRequest, progress: ProgressFn | None = None, guest: machine.Guest | None = None) -> RunOutcome:
    """Run the request's workload and write summary.json and commits.parquet. SIGTERM
    ends it with :class:`Interrupted` in every phase, as Ctrl-C does with
    KeyboardInterrupt, so the caller can say what was left unfinished. A ``--vm`` run
    uses ``guest`` when given (a matrix boots one for all its cells), else boots its own."""
    engine.check_settings(request.settings)  # refused before any directory or lab is made
    refuse_duration_of_replay(request)
    check_out_dir(request)  # and where it writes, before anything is measured
    guard = _system.signals.SignalGuard()  # the lab and capture install their own inside this one
    guard.install()
    try:
        if request.stack.vm:
            return execute_in_vm(request, progress, guest)
        if request.stack.fs:
            return execute_in_lab(request, progress)
        return execute_vfs_only(request, progress)
    finally:
        guard.restore()


def refuse_duration_of_replay(request: RunRequest) -> None:
    """A replayed SQL log runs to its end (or -n): --duration is refused before anything
    is made, as the engine would refuse it once the run had begun."""
    scenario = Path(request.scenario)
    if (
        request.settings.duration_s is not None
        and engine.looks_like_path(request.scenario)
        and scenario.is_file()
        and engine.has_log_header(scenario)
    ):
        raise UsageError(
            f"--duration bounds a scenario's run, and {scenario} is a SQL log, replayed to its end",
            "give -n to stop the replay after that many transactions, or leave --duration out",
        )


def execute_vfs_only(request: RunRequest, progress: ProgressFn | None = None) -> RunOutcome:
    refuse_lab_options_without_lab(request)
    check_scratch_parent(request.dir, request.allow_system_dir)
    scenario = engine.load_scenario(request.scenario)
    with output_dir(request) as out_dir, scratch_dir(request.dir, request.keep_db) as work_dir:
        lab_capture.watch(progress, work_dir)
        # The records leave the engine in chunks, written as they come (bounded memory)
        # to a file in the scratch directory, which only a finished run moves to out_dir.
        journal = request.settings.journal
        with commit_stream.CommitWriter(work_dir, journal, request.frame_budget_ms) as writer:
            with _system.sharing.measuring() as shared:
                info = engine.run_workload_chunked(
                    scenario,
                    request.settings,
                    work_dir,
                    writer.add,
                    chunk_commits(),
                    progress=progress,
                    keep_measured=request.keep_measured,
                )
                sharing = shared()
            engine.raise_if_nothing_measured(info, writer.measured)
            if info["pragmas"]["journal_mode"] != journal:  # the phases were given for `journal`
                raise AssertionError(f"SQLite ran journal_mode {info['pragmas']['journal_mode']}, not {journal}")
            commits_path = out_dir / rundir.COMMITS_FILE
            with writing(out_dir, "the run's results into"):
                writer.finish(commits_path)
        stopped = stop_section(dict(info), request.settings, writer.measured, writer.measured_span_ns)
        config = run_config(request, {**dict(info), "host_sharing": sharing}, work_dir, writer.measured)
        summary = writer.summary(
            config,
            levels=["vfs"],
            device_not_measured=device_not_measured(config["dir_fs"]),
            stopped=stopped,
            **engine_sections(dict(info)),
        )
        with writing(out_dir, "the run's results into"):
            rundir.finish(out_dir, summary)
    kept = work_dir if request.keep_db else None
    return RunOutcome(summary=summary, frame=None, out_dir=out_dir, kept_database=kept, partial=stopped.get("partial"))


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
        "txns_asked": settings.txns,
        "duration_s_asked": settings.duration_s,
        "measured_s": round(measured_span_ns / 1e9, 3),
    }
    interruption = engine.interruption_of(info)
    if interruption is None:
        return section
    what = f"{interruption} after {measured}" + (f" of {settings.txns}" if settings.txns else "") + " commits"
    if settings.duration_s:
        what += f" ({section['measured_s']:g} s of the {settings.duration_s:g} s asked)"
    section["partial"] = what
    return section


def chunk_commits() -> int:
    """Commit records per chunk the engine hands over; ``SQLWA_CHUNK_COMMITS`` sets it
    (tests force tiny chunks)."""
    return int(os.environ.get("SQLWA_CHUNK_COMMITS", commit_stream.CHUNK_COMMITS))


def device_not_measured(dir_fs: str) -> str:
    """The one line a run without a lab filesystem carries beside its latency and frame
    misses: they include a device whose writes and flushes were not counted (or, on tmpfs,
    no device at all), and the way to measure one."""
    timed = (
        "are of memory (tmpfs), no device"
        if dir_fs == "tmpfs"
        else f"include the {dir_fs} directory's device, whose writes were not counted"
    )
    return f"device not measured: latency and frame misses {timed}; to measure a device, run as root with --fs ext4"


def refuse_lab_options_without_lab(request: RunRequest) -> None:
    """--fill, --mkfs-opts, --mount-opts, --encrypt, --fuse, --crypt and --device-delay shape
    a lab filesystem; without --fs there is none, and ignoring them would measure something
    else than was asked."""
    given = [*request.stack.lab_options_given, *(["--keep-image"] if request.keep_image else [])]
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
    assert request.stack.fs is not None, "a lab run names its filesystem"
    spec = filesystem.FILESYSTEMS.get(request.stack.fs)
    # before root: a kernel without device-mapper cannot have it as any user (--vm can)
    has_device = spec is None or spec.mkfs_tool is not None
    devmapper.check_crypt(request.stack.crypt, request.stack.fs, has_device)
    devmapper.check_delay(request.stack.device_delay_ms, request.stack.crypt, request.stack.fs, has_device)
    filesystem.require_lab_host(request.stack.fs)
    filesystem.require_filesystem(request.stack.fs)
    tracing.require_tracefs()


def lab_config(request: RunRequest, info: dict, fs: dict, measured: int) -> dict:
    config = run_config(request, info, Path(fs["mountpoint"]), measured)
    del config["dir_fs"]  # the lab's filesystem is the fs
    config.update(
        fs=request.stack.fs,
        encrypt=request.stack.encrypt,
        profile=request.stack.profile_record(),
        fuse=request.stack.fuse,
        crypt=request.stack.crypt,
        device_delay_ms=request.stack.device_delay_ms,
        fs_source="lab: fresh filesystem on a loop device" if fs["loop_device"] else "lab: fresh tmpfs",
        mount_options=fs["mount_options"],
        lab=fs,
    )
    return config


def execute_in_lab(request: RunRequest, progress: ProgressFn | None = None) -> RunOutcome:
    preflight_lab(request)
    scenario = engine.load_scenario(request.scenario)
    assert request.stack.fs is not None, "a lab run names its filesystem"
    # Made (and so its options and size checked) before the output directory: a refused
    # option leaves nothing behind.
    workspace = lab_capture.crash_workspace() if request.crash else contextlib.nullcontext(None)
    check_capture_room(request.settings.txns, request.out_dir, request.settings.duration_s)
    with workspace as crash_dir:
        lab = lab_in(request, crash_dir)
        with output_dir(request) as out_dir:
            return measure_in_lab(request, scenario, lab, out_dir, progress, crash_dir)


def lab_in(request: RunRequest, crash_dir: Path | None) -> filesystem.LabFilesystem:
    assert request.stack.fs is not None, "a lab run names its filesystem"
    return stack.lab_filesystem(
        request.stack,
        keep_image=request.out_dir / KEPT_IMAGE_FILE if request.keep_image else None,
        write_log=crash_dir / lab_capture.WRITE_LOG_FILE if crash_dir else None,
    )


def measure_in_lab(
    request: RunRequest,
    scenario,
    lab: filesystem.LabFilesystem,
    out_dir: Path,
    progress: ProgressFn | None,
    crash_dir: Path | None = None,
) -> RunOutcome:
    options = lab_capture.CaptureOptions(
        allow_loss=request.allow_loss, buffer_kb=request.buffer_kb, keep_measured=request.keep_measured
    )
    # The engine's records leave it in chunks into this file (opened before the capture
    # begins), which the analysis reads a chunk at a time: none is held whole.
    with engine_records(lab) as commits:
        signalled = _system.signals.received_count()
        try:
            with _system.sharing.measuring() as shared:
                capture = capture_of(request, scenario, lab, out_dir, options, progress, commits, crash_dir)
                capture.info["host_sharing"] = shared()
        except OutputStuck as exc:
            # the trace's last part could not be written: a run a signal ended (its engine
            # took the first as the end of the workload) ends unfinished, as an interrupted one
            signum = _system.signals.received_since(signalled)
            if signum is None:
                raise
            raise not_kept(interruption_text(signum), exc) from None
        if request.keep_measured and engine.interruption_of(capture.info) is not None:
            return keep_what_was_measured(request, capture, out_dir)
        return analyse_capture(request, capture, out_dir)


def capture_of(
    request: RunRequest,
    scenario,
    lab: filesystem.LabFilesystem,
    out_dir: Path,
    options: lab_capture.CaptureOptions,
    progress: ProgressFn | None,
    commits: commit_stream.EngineCommits,
    crash_dir: Path | None,
) -> lab_capture.LabCapture:
    """The lab's capture of the run: with its device's writes logged for ``sqlwa crash``."""
    if request.crash is not None and crash_dir is not None:
        return lab_capture.capture_with_crash(
            request.settings,
            scenario,
            lab,
            out_dir,
            options,
            request.crash,
            crash_dir,
            progress,
            progress,
            commits=commits,
        )
    return lab_capture.capture_in_lab(request.settings, scenario, lab, out_dir, options, progress, commits)


@contextmanager
def engine_records(lab: filesystem.LabFilesystem) -> Iterator[commit_stream.EngineCommits]:
    """The file a lab run's engine records go to as it runs, in a fresh sqlwa scratch
    directory beside the lab's image (``sqlwa lab cleanup`` removes a killed run's), not
    in OUT: the SQL thread writes it, and an OUT that fills up or stops taking writes
    must stop the capture's drain, which says so, never the workload in mid-commit.
    Removed with its directory afterwards."""
    workdir = Path(lab.workdir)
    # made and locked as one step; a full or unwritable workdir said in one line
    with _system.signals.held_back(), writing(workdir, "the engine's per-commit table into"):
        directory, ownership = make_owned_dir(SCRATCH_PREFIX, workdir)
    try:
        with writing(directory, "the engine's per-commit table into"):
            commits = commit_stream.EngineCommits(directory / ENGINE_COMMITS_FILE)
        with commits:  # the file removed on the way out, its directory below
            yield commits
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        _system.ownership.release_ownership(ownership)


def keep_what_was_measured(request: RunRequest, capture: lab_capture.LabCapture, out_dir: Path) -> RunOutcome:
    """A lab run a signal ended between its measured commits: what was measured, analysed
    and written as a finished run's (summary.json's ``stopped.partial``), in a thread of
    its own while this one watches OUT (:class:`~sqlwa._system.writable.WriteProbe`). An
    OUT that takes no writes (a frozen filesystem) would hold the run in the kernel, past
    every further Ctrl-C: the writing is then given up and the run ends unfinished, its
    lab long taken down. A second Ctrl-C (or SIGTERM) gives it up at once, as well."""
    abandoned = threading.Event()  # the run is over: the thread, if it ever goes on, finishes nothing
    probe = _system.writable.WriteProbe(out_dir)
    try:
        return _system.signals.call_watched(
            lambda: analyse_capture(request, capture, out_dir, abandoned=abandoned),
            probe.stuck,
            "keeping what was measured",
        )
    except OutputStuck as exc:
        raise not_kept(str(engine.interruption_of(capture.info)), exc) from None
    except (Interrupted, KeyboardInterrupt) as exc:
        again = (exc.args[0] if exc.args else "") or "interrupted"
        raise Interrupted(f"{again} again while analysing; the raw capture stays in {out_dir}") from None
    finally:
        abandoned.set()


def interruption_text(signum: int) -> str:
    """What a signal's interruption says ("interrupted" for Ctrl-C, "terminated by SIGTERM")."""
    exc = interruption(signum)
    return str(exc.args[0]) if exc.args else "interrupted"


def not_kept(interrupted: str, stuck: OutputStuck) -> Interrupted:
    """A run a signal stopped whose outputs could not be written: it ends unfinished,
    saying why in the one line (the CLI adds that OUT holds no finished run)."""
    return Interrupted(f"{interrupted}; {stuck}, so what was measured is not kept")


def analyse_capture(
    request: RunRequest,
    capture: lab_capture.LabCapture,
    out_dir: Path,
    abandoned: threading.Event | None = None,
    **config_extra,
) -> RunOutcome:
    """The analysing half of a lab run, on the host also for a run in the VM lab:
    summary.json, the commits and the trace tables from a :class:`LabCapture`.
    ``config_extra`` goes into the summary's config (``vm`` for a guest's run);
    ``abandoned`` as for :func:`write_outputs`."""
    with writing(out_dir, "the run's results into"):
        (out_dir / rundir.LAYOUT_FILE).write_text(json.dumps(capture.lab.layout) + "\n")
    fs_facts = capture.fs
    context = LabContext.of(capture.lab, request.settings)
    engine_commits = engine_commits_of(capture, out_dir / ENGINE_COMMITS_FILE, stream.streamable(context))
    spilled = out_dir / ENGINE_COMMITS_FILE
    started = time.perf_counter()
    analysis = analyse_trace(
        Path(capture.trace_path),
        engine_commits,
        capture.lab.dev,
        capture.levels,
        context,
        events_path=out_dir / rundir.EVENTS_FILE,
        commits_path=out_dir / rundir.COMMITS_FILE,
        phases_of=capture.info["pragmas"]["journal_mode"],
    )
    del engine_commits
    spilled.unlink(missing_ok=True)
    analysis_s = time.perf_counter() - started
    amortized, sections = analysis.amortized, analysis.sections
    frame: pl.DataFrame | None = None
    if isinstance(analysis.commits, pl.DataFrame):
        frame = phases.with_phases(analysis.commits, capture.info["pragmas"]["journal_mode"])
    commits = frame if frame is not None else ColumnFrame(analysis.commits.lazy())
    if capture.daemon_cpu is not None:  # measured whether or not the syscall level was captured
        assert capture.lab.fuse is not None, "only a FUSE daemon's CPU time is measured"
        sections.setdefault("fuse", dict(capture.lab.fuse))["daemon_cpu"] = capture.daemon_cpu
    measured = commits.filter(~pl.col("warmup")).height
    span_ns = measured_span_ns(commits.filter(~pl.col("warmup")))
    sections["stopped"] = stopped = stop_section(capture.info, request.settings, measured, span_ns)
    sections.update(engine_sections(capture.info, analysis.close))
    config = {**lab_config(request, capture.info, fs_facts, measured), **config_extra}
    trace = {
        **capture.trace,
        "parse": analysis.parse_report,
        "unparsed_lines": analysis.parse_report.get("bad_records", 0),
        # The trace's parse and per-commit analysis, wall clock (bench/scale.py reads it).
        "analysis_s": round(analysis_s, 3),
    }
    loss = capture.loss_error()
    if loss is None and not request.allow_loss:
        loss = unparsed_loss(analysis.parse_report, Path(capture.trace_path))
    summary = build_summary(
        config,
        commits,
        levels=capture.levels,
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


def with_checkpoint_reach(durability: dict, summary: dict) -> dict:
    """A crash run's ``durability`` with ``wal_checkpoint``: in WAL mode, whether its
    commits reached SQLite's first checkpoint (before one, synchronous=NORMAL has synced
    nothing, so every commit is at risk whatever the filesystem does) and the ``-n``
    that would (:func:`sqlwa.analysis.phases.wal_checkpoint_reach`)."""
    reach = phases.wal_checkpoint_reach(summary)
    if reach is None:
        return durability
    outside = (summary.get("checkpoint") or {}).get("outside_commits")
    reach.update(sync=summary["config"].get("sync"), outside_commits=outside)
    return {**durability, "wal_checkpoint": reach}


def engine_commits_of(capture: lab_capture.LabCapture, spilled: Path, streamable: bool) -> pl.DataFrame | pl.LazyFrame:
    """The engine's per-commit table the trace's analysis is given: a scan of the file its
    chunks went to as the run went (``commits_file``), read a chunk of commits at a time by
    a streamed analysis; or, from a guest's records (``columns``), a frame, written to
    ``spilled`` and scanned for a streamed analysis."""
    if capture.commits_file is not None:
        return commit_stream.engine_table(capture.commits_file)
    result = engine.WorkloadResult.from_raw({"info": capture.info, "commits": capture.columns})
    # The frame has them now: the engine's per-commit lists of Python ints (hundreds of
    # bytes a commit) are not kept through the analysis.
    capture.columns = {}
    engine_commits = with_vfs_totals(result.commits)
    del result
    if not streamable:
        return engine_commits
    with writing(spilled, "the engine's per-commit table to"):
        rundir.write_parquet(engine_commits, spilled)
    return pl.scan_parquet(spilled)


def execute_in_vm(
    request: RunRequest, progress: ProgressFn | None = None, guest: machine.Guest | None = None
) -> RunOutcome:
    """The lab run in a qemu guest: the guest measures into the output directory, which
    it shares with the host, and the host analyses. Needs no root on the host."""
    preflight_vm(request)
    engine.load_scenario(request.scenario)  # a bad scenario is refused here, before a guest boots
    # a missing qemu or a kernel that cannot be had is refused before OUT exists
    kernel = guest_kernel(request.stack.kernel) if guest is None else None
    with output_dir(request) as out_dir:
        if kernel is not None:
            strace_to = out_dir / GUEST_STRACE_FILE if request.guest_strace else None
            # a crash run keeps its write log and a state's images beside the lab's in guest RAM
            room = CRASH_IMAGE_ROOM if request.crash else 1
            with booted_guest(kernel, out_dir, request.stack.image_size, strace_to, room) as own:
                with _system.sharing.measuring() as shared:  # on the host: the guest's CPUs are its
                    capture, facts = own.capture(guest_request(request, out_dir), progress), own.facts
                    capture.info["host_sharing"] = shared()
        else:
            assert guest is not None
            with _system.sharing.measuring() as shared:
                capture, facts = guest.capture(guest_request(request, out_dir), progress), guest.facts
                capture.info["host_sharing"] = shared()
        guest_facts = {"kernel": capture.fs["kernel"], "cpus": facts.cpus}
        return analyse_capture(request, capture, out_dir, vm=facts.describe(), **guest_facts)


def guest_kernel(choice: str) -> vm_kernel.GuestKernel:
    """The ``--kernel`` a guest boots, once qemu is known to be there."""
    machine.qemu_binary()
    return vm_kernel.resolve(choice)


@contextmanager
def booted_guest(
    kernel: vm_kernel.GuestKernel, share: Path, image_size: str, strace_to: Path | None = None, room: int = 1
) -> Iterator[machine.Guest]:
    """A VM lab guest sharing ``share`` (the runs' output directories lie in it), with
    its control directory a scratch directory removed afterwards; memory for ``room``
    images of ``image_size``."""
    image_bytes = filesystem.parse_size(image_size) * room
    with scratch_dir(None, keep=False) as ctl, machine.Guest(kernel, ctl, share, image_bytes, strace_to) as guest:
        yield guest


def preflight_vm(request: RunRequest) -> None:
    """What the host can refuse before a guest boots (the guest checks the lab's options again)."""
    if request.dir is not None or request.keep_db:
        raise UsageError(
            "--dir and --keep-db are for a VFS-only run on this host; a --vm run measures in the guest's lab",
            "leave --dir and --keep-db out",
        )
    if request.settings.duration_s is not None:
        raise UsageError(
            "--duration is for a run on this host; a --vm run's time limits follow its transactions",
            "give -n instead, or leave --vm out",
        )
    if request.stack.device_delay_ms is not None:
        devmapper.check_delay_with(request.stack.device_delay_ms, request.stack.crypt)


def guest_request(request: RunRequest, out_dir: Path) -> dict:
    """What the guest program (sqlwa.vm.guest) needs, as JSON; paths absolute, since the
    guest sees the host's files at the same paths but not its working directory."""
    scenario = request.scenario
    if engine.looks_like_path(scenario):
        scenario = str(Path(scenario).resolve())
    settings = request.settings.as_dict()
    if from_db := settings.get("from_db"):  # a replayed log's snapshot (the CLI resolves it; the API may not)
        settings["from_db"] = str(Path(from_db).resolve())
    return {
        "scenario": scenario,
        "settings": settings,
        "stack": request.stack.as_dict(),
        "keep_image": str((out_dir / KEPT_IMAGE_FILE).resolve()) if request.keep_image else None,
        "out_dir": str(out_dir.resolve()),
        "allow_loss": request.allow_loss,
        "buffer_kb": request.buffer_kb,
        "crash": dataclasses.asdict(request.crash) if request.crash else None,
    }
