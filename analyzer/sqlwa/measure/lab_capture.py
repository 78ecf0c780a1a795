"""The measuring half of a lab run: the workload on a fresh lab filesystem inside one
trace capture, and what the analysis needs to know of it (:class:`LabCapture`).

Kept apart from the analysing half (:mod:`sqlwa.measure.report`), because this half also runs
inside the VM lab's guest (:mod:`sqlwa.vm.guest`): nothing here imports polars or
pyarrow, which take tens of seconds to import in a guest under TCG. A
:class:`LabCapture` goes from the guest to the host as JSON.

On the host the engine's records leave it in chunks, into a :class:`CommitSink` (the
host lab's :class:`sqlwa.measure.commit_stream.EngineCommits`, a Parquet file the analysis
reads a chunk at a time), so the run's memory does not grow with its length; the guest
gives none and takes the records whole, into :attr:`EngineRecords.columns`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlwa import _system
from sqlwa.capture import tracing
from sqlwa.durability import explore, reference, verdict
from sqlwa.errors import TraceLossError, hint_of
from sqlwa.lab import filesystem, fslayout, scratch
from sqlwa.measure import engine

ProgressFn = engine.ProgressFn


def watch(progress: ProgressFn | None, directory: Path, capture: tracing.TraceCapture | None = None) -> None:
    """Tell a progress display that has a ``watch`` method (``sqlwa run``'s) where the run
    writes (its disk use is shown) and, in a lab, the capture (its events so far)."""
    told = getattr(progress, "watch", None)
    if told is not None:
        told(directory, capture)


class CommitSink(Protocol):
    """Where a lab run's engine records go as the run goes (a chunk of the engine's
    columns at a time), and how many it took."""

    path: Path  # the file they are in, once the run is done
    commits: int  # records taken so far
    measured: int  # of which not warm-up

    def add(self, columns: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass
class CaptureOptions:
    """How the capture is taken (the rest of a run's options shape the lab or the report)."""

    allow_loss: bool = False
    buffer_kb: int = tracing.DEFAULT_BUFFER_KB
    keep_measured: bool = False  # a signal between measured commits ends the workload, kept


@dataclass(frozen=True)
class LabFacts:
    """What the analysis of a capture needs to know of the lab it was taken in, besides
    the trace (:class:`sqlwa.measure.analyse.LabContext`): read while the lab was up
    (:func:`lab_facts`), and sent with the capture from a guest."""

    fs_type: str  # the kernel's name of the filesystem
    layout: dict  # fslayout.probe(): where the filesystem keeps its own journal
    dev: tuple[int, int] | None  # the traced block device (major, minor); None for tmpfs
    mapped_dev: tuple[int, int] | None  # the dm device the filesystem is on (--crypt, --device-delay)
    mapped_offset: int | None  # with --device-delay: its table's offset (no remap events to follow)
    fuse: dict | None  # the FUSE layer as the lab describes it, with --fuse
    files_by_sync: bool  # eCryptfs: its files have no extents of their own

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> LabFacts:
        """The inverse of :func:`dataclasses.asdict` (JSON has no tuples)."""
        devices = {key: tuple(values[key]) if values[key] else None for key in ("dev", "mapped_dev")}
        return cls(**{**values, **devices})


def lab_facts(fs: filesystem.MountedLab, described: dict) -> LabFacts:
    """The lab's facts for the analysis, from what it says of itself (``described``:
    :meth:`~sqlwa.lab.filesystem.MountedLab.describe`) and where it keeps its own journal,
    in the sectors of the device it is on (the dm-crypt target's with --crypt): read while
    it is still mounted."""
    return LabFacts(
        fs_type=described["fs_type"],
        layout=fslayout.probe(fs.spec.kernel_type, fs.fs_device),
        dev=fs.dev,
        mapped_dev=fs.mapped_dev,
        mapped_offset=(described.get("delay") or {}).get("offset_sectors"),
        fuse=described["fuse"],
        files_by_sync=described.get("ecryptfs") is not None,
    )


@dataclass
class EngineRecords:
    """What the engine gave back of a lab run: its run information and its per-commit
    records, whole (a guest's) or in the :class:`CommitSink`'s file (the host lab's)."""

    info: dict  # the engine's run information
    columns: dict  # the engine's per-commit records, column by column ({} with commits_file)
    commits_file: str | None = None  # the engine's records, in the CommitSink's Parquet file


@dataclass
class CapturedTrace:
    """The trace a lab run took: where it is, what it says of itself, the levels it
    captured, and whether it lost events."""

    levels: list[str]  # the levels the trace captured, "vfs" first
    described: dict  # TraceCapture.describe()
    path: str
    loss: dict | None = None  # {"message", "hint"} when events were lost and that was not allowed

    def loss_error(self) -> TraceLossError | None:
        return TraceLossError(self.loss["message"], self.loss["hint"]) if self.loss else None


@dataclass
class LabCapture:
    """One lab run's raw measurement: the engine's records, the lab and the trace."""

    records: EngineRecords
    lab: LabFacts  # what the analysis needs to know of the lab
    fs: dict  # LabFilesystem.describe(): summary.json's config.lab
    trace: CapturedTrace
    daemon_cpu: dict | None = None  # the FUSE daemon's CPU time over the workload (daemon_cpu_section)
    durability: dict | None = None  # sqlwa crash: the crash states' verdicts (durability.explore)

    def as_dict(self) -> dict[str, Any]:
        """The capture as the guest sends it: one flat JSON object, its keys in this order
        (the form it had before its parts were values of their own)."""
        return {
            "info": self.records.info,
            "columns": self.records.columns,
            "lab": dataclasses.asdict(self.lab),
            "fs": self.fs,
            "levels": self.trace.levels,
            "trace": self.trace.described,
            "trace_path": self.trace.path,
            "loss": self.trace.loss,
            "daemon_cpu": self.daemon_cpu,
            "durability": self.durability,
            "commits_file": self.records.commits_file,
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> LabCapture:
        """The inverse of :meth:`as_dict`."""
        return cls(
            records=EngineRecords(values["info"], values["columns"], values["commits_file"]),
            lab=LabFacts.from_dict(values["lab"]),
            fs=values["fs"],
            trace=CapturedTrace(values["levels"], values["trace"], values["trace_path"], values["loss"]),
            daemon_cpu=values["daemon_cpu"],
            durability=values["durability"],
        )

    def to_json(self) -> str:
        return json.dumps(self.as_dict()) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LabCapture:
        return cls.from_dict(json.loads(text))


def capture_in_lab(
    settings: engine.RunSettings,
    scenario: engine.Scenario,
    lab: filesystem.LabFilesystem,
    out_dir: Path,
    options: CaptureOptions,
    progress: ProgressFn | None = None,
    commits: CommitSink | None = None,
) -> LabCapture:
    """Make the lab, run the workload in it inside one capture, and take it down again.
    The engine's records go to ``commits`` as the run goes, when given."""
    with lab as fs:
        info, columns, cap, loss, daemon_cpu = capture_run(settings, scenario, out_dir, fs, options, progress, commits)
        described = fs.describe()
        facts = lab_facts(fs, described)
    return LabCapture(
        records=EngineRecords(dict(info), columns, str(commits.path) if commits is not None else None),
        lab=facts,
        fs=described,
        trace=CapturedTrace(
            levels=trace_levels(cap),
            described=cap.describe(),
            path=str(cap.trace_path),
            loss={"message": str(loss), "hint": hint_of(loss)} if loss else None,
        ),
        daemon_cpu=daemon_cpu,
    )


def capture_run(
    settings: engine.RunSettings,
    scenario: engine.Scenario,
    out_dir: Path,
    fs: filesystem.MountedLab,
    options: CaptureOptions,
    progress: ProgressFn | None,
    commits: CommitSink | None = None,
) -> tuple[dict, dict, tracing.TraceCapture, TraceLossError | None, dict | None]:
    """Run the workload inside one capture; returns (the engine's run information, its
    records' columns ({} when they went to ``commits``), capture, loss error or None, the
    FUSE daemon's CPU time over the workload or None)."""
    dev = fs.dev
    loss = None
    daemon_cpu = None
    info: dict = {}
    columns: dict = {}
    cap = tracing.TraceCapture(
        out_dir,
        dev=dev,
        mapped_dev=fs.mapped_dev,
        pid=threading.get_native_id(),
        comms=[fs.fuse.comm] if fs.fuse else [],  # the daemon's threads, those it starts later too
        allow_loss=options.allow_loss,
        buffer_kb=options.buffer_kb,
    )
    try:
        with cap:
            # extents markers: which block ranges belong to which file (attribution);
            # only with a block device to attribute (tmpfs has no FIEMAP either)
            mapped = settings.instruments.count_vfs and dev is not None
            # FUSE answers no FIEMAP: the files' blocks are those of the lower files it serves
            lower = fs.fuse.lower if fs.fuse else None
            settings = settings.replace(map_extents=mapped, extents_from=lower)
            daemon_before = fs.fuse.cpu_time() if fs.fuse else None
            watch(progress, out_dir, cap)
            progress = mapping_lower_files(progress, fs, scenario, Path(cap.marker_path)) if mapped else progress
            if commits is None:
                raw = engine.run_workload_raw(
                    scenario,
                    settings,
                    Path(fs.data_dir),
                    marker_path=Path(cap.marker_path),
                    progress=progress,
                    keep_measured=options.keep_measured,
                )
                info, columns = dict(raw["info"]), raw["commits"]
                del raw
                transactions, measured = len(columns["index"]), sum(not warmup for warmup in columns["warmup"])
            else:
                info = dict(
                    engine.run_workload_chunked(
                        scenario,
                        settings,
                        Path(fs.data_dir),
                        commits.add,
                        engine.chunk_commits(),
                        marker_path=Path(cap.marker_path),
                        progress=progress,
                        keep_measured=options.keep_measured,
                    )
                )
                commits.close()  # whole now: the analysis reads it
                transactions, measured = commits.commits, commits.measured
            engine.raise_if_nothing_measured(info, measured)
            interruption = engine.interruption_of(info)
            if interruption is not None:
                say_keeping(interruption, measured, out_dir)
            # Inside the capture: deferred writeback and journal commits are part of the bill.
            fs.sync()
            if fs.fuse and daemon_before is not None:
                daemon_cpu = daemon_cpu_section(daemon_before, fs.fuse.cpu_time(), transactions)
            if mapped:
                # FUSE's and eCryptfs's files have no extents: their lower files have
                for db_path in engine.database_paths(info):
                    lower_db = fs.fuse.lower_path(db_path) if fs.fuse else Path(fs.mappable_path(str(db_path)))
                    map_after_writeback(Path(cap.marker_path), lower_db)
    except TraceLossError as exc:
        loss = exc
    return info, columns, cap, loss, daemon_cpu


def say_keeping(interruption: str, measured: int, out_dir: Path) -> None:
    """Said the moment the engine took a signal as the end of its workload: ending the
    trace and analysing what was measured take seconds more (minutes after a day-long
    run), and whoever pressed Ctrl-C must know why sqlwa goes on and how to stop it now."""
    print(
        f"sqlwa: {interruption} after {measured:,} measured commits: ending the trace, then analysing them "
        f"(Ctrl-C again stops at once, keeping the raw capture so far in {out_dir})",
        file=sys.stderr,
        flush=True,
    )


def daemon_cpu_section(before: _system.processes.CpuTime, after: _system.processes.CpuTime, transactions: int) -> dict:
    """summary.json's ``fuse.daemon_cpu``: the daemon's CPU time (every thread) from just
    before the workload to after the final syncfs, so the schema, the warm-up and the
    sync's share are in it too; ``per_transaction_ms`` spreads it over every transaction."""
    user, sys = after.user_ns - before.user_ns, after.sys_ns - before.sys_ns
    return {
        "user_ms": user / 1e6,
        "sys_ms": sys / 1e6,
        "per_transaction_ms": (user + sys) / 1e6 / max(transactions, 1),
        "transactions": transactions,
        "resolution_ms": _system.processes.process_cpu_tick_ns() / 1e6,
        "window": "from before the workload's first statement to after the final syncfs",
    }


def mapping_lower_files(
    progress: ProgressFn | None, fs: filesystem.MountedLab, scenario: engine.Scenario, marker_path: Path
) -> ProgressFn | None:
    """eCryptfs: the engine's own ``extents ... at=end`` markers fail there (no FIEMAP);
    this progress function writes them for the lower files when the engine reports its
    last transaction done, which it does before it closes the database: the WAL, which
    SQLite deletes at close, still exists then."""
    if fs.ecryptfs is None:
        return progress
    lower_dbs = [Path(fs.mappable_path(str(Path(fs.data_dir) / name))) for name in scenario.database_files]

    def report(done: int, total: int | None) -> None:
        if done == total:
            for lower_db in lower_dbs:
                engine.map_database_files(marker_path, lower_db, "end")
        if progress is not None:
            progress(done, total)

    return report


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


# --------------------------------------------------------------------------- sqlwa crash

WRITE_LOG_FILE = "writes.log"


@contextmanager
def crash_workspace(workdir: str | None = None) -> Iterator[Path]:
    """A private directory for a crash run's write log, reference snapshots and state
    images (on the lab's scratch filesystem, which must have holes), removed afterwards:
    a scratch directory, so ``sqlwa lab cleanup`` knows whose it is and undoes the mounts
    and loop devices of a killed run's states."""
    with scratch.scratch_dir(Path(workdir) if workdir else None, keep=False) as path:
        yield path


def capture_with_crash(
    settings: engine.RunSettings,
    scenario: engine.Scenario,
    lab: filesystem.LabFilesystem,
    out_dir: Path,
    options: CaptureOptions,
    crash: explore.CrashOptions,
    workspace: Path,
    progress: ProgressFn | None = None,
    state_progress: ProgressFn | None = None,
    stage: Callable[[str], None] | None = None,
    commits: CommitSink | None = None,
) -> LabCapture:
    """A lab capture whose device writes are logged (``lab`` made with ``write_log`` in
    ``workspace``), the engine marking the log at every commit; then every crash state
    of the log judged against the database as of each commit (``stage`` is told
    ``explore`` when that begins, the lab gone)."""
    assert lab.log_writes is not None and lab.write_log is not None, "a crash run's lab logs its writes"
    marked = settings.replace(dm_mark=lab.log_writes.name)
    capture = capture_in_lab(marked, scenario, lab, out_dir, options, progress, commits)
    db_path = Path(capture.records.info["db_path"])
    data_dir = Path(lab.fuse.lower_path(db_path)) if lab.fuse else db_path
    target = verdict.Target(
        lab.spec.kernel_type,
        tuple(lab.mount_opts),
        str(data_dir.relative_to(lab.mountpoint)),
    )
    if stage is not None:
        stage("explore")
    if crash.keep_log:
        shutil.copyfile(lab.write_log, out_dir / WRITE_LOG_FILE)
    ref = reference_snapshots(scenario, settings, workspace)
    capture.durability = explore.explore(
        Path(lab.write_log), lab.image_size, target, ref, crash, workspace, state_progress
    )
    return capture


def reference_snapshots(
    scenario: engine.Scenario, settings: engine.RunSettings, workspace: Path
) -> reference.Reference:
    """The database as of each commit, from an untraced run of the same workload with a
    snapshot after every commit (synchronous=OFF: durability does not change content)."""
    snapshots = workspace / "snapshots"
    run_dir = workspace / "reference-run"
    snapshots.mkdir()
    quiet = settings.replace(sync="off", count_vfs=False, snapshot_dir=str(snapshots), dm_mark=None)
    raw = engine.run_workload_raw(scenario, quiet, run_dir)
    warmup = sum(1 for flag in raw["commits"]["warmup"] if flag)
    return reference.from_snapshots(snapshots, len(raw["commits"]["index"]), warmup)
