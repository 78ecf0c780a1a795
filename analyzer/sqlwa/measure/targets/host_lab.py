"""A run on a fresh lab filesystem of this host (``--fs``, root): its block requests, the
SQL thread's syscalls and the engine's markers in one tracefs instance
(:mod:`sqlwa.measure.lab_capture`), the trace cut into commit windows on the way out
(:func:`sqlwa.measure.report.analyse_capture`). ``sqlwa crash`` logs the lab's device
writes as well and judges the crash states of the log."""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlwa import _system
from sqlwa.capture import tracing
from sqlwa.capture.estimate import check_capture_room
from sqlwa.errors import Interrupted, OutputStuck, UsageError, interruption, writing
from sqlwa.lab import filesystem, layers, stack
from sqlwa.lab.scratch import SCRATCH_PREFIX, make_owned_dir
from sqlwa.measure import commit_stream, engine, lab_capture, report
from sqlwa.measure.request import RunOutcome, RunRequest
from sqlwa.measure.targets import KEPT_IMAGE_FILE, ProgressFn


@dataclass
class Lab:
    """What a host lab run makes before its output directory: the lab (its options and
    size checked, nothing set up yet) and a crash run's workspace."""

    fs: filesystem.LabFilesystem
    crash_dir: Path | None  # sqlwa crash: the write log's, snapshots' and states' directory


@dataclass
class HostLab:
    """A lab filesystem on this host, traced with tracefs."""

    request: RunRequest

    def preflight(self) -> None:
        preflight_lab(self.request)

    @contextmanager
    def prepared(self) -> Iterator[Lab]:
        request = self.request
        check_capture_room(request.settings.length.txns, request.output.out_dir, request.settings.length.duration_s)
        workspace = lab_capture.crash_workspace() if request.crash else contextlib.nullcontext(None)
        with workspace as crash_dir:
            # Made (and so its options and size checked) before the output directory: a
            # refused option leaves nothing behind.
            yield Lab(lab_in(request, crash_dir), crash_dir)

    def measure(self, scenario: engine.Scenario, made: Lab, out_dir: Path, progress: ProgressFn | None) -> RunOutcome:
        request = self.request
        # The engine's records leave it in chunks into this file (opened before the capture
        # begins), which the analysis reads a chunk at a time: none is held whole.
        with engine_records(made.fs) as commits:
            signalled = _system.signals.received_count()
            try:
                with _system.sharing.measuring() as shared:
                    capture = capture_of(request, scenario, made, out_dir, progress, commits)
                    capture.records.info["host_sharing"] = shared()
            except OutputStuck as exc:
                # the trace's last part could not be written: a run a signal ended (its engine
                # took the first as the end of the workload) ends unfinished, as an interrupted one
                signum = _system.signals.received_since(signalled)
                if signum is None:
                    raise
                raise not_kept(interruption_text(signum), exc) from None
            if request.capture.keep_measured and engine.interruption_of(capture.records.info) is not None:
                return keep_what_was_measured(request, capture, out_dir, self.describe(capture))
            return report.analyse_capture(request, capture, out_dir, self.describe(capture))

    def describe(self, capture: lab_capture.LabCapture) -> dict:
        """Where the run happened: the stack asked for, and the lab on this host made of it."""
        return report.lab_place(self.request.stack, capture.fs)


def preflight_lab(request: RunRequest) -> None:
    """Say everything a lab run lacks before anything is made."""
    if request.output.dir is not None:
        raise UsageError("--dir and --fs exclude each other", "use --fs for a lab run, or --dir for a VFS-only run")
    if request.output.keep_db:
        raise UsageError(
            "--keep-db keeps a VFS-only run's database; a lab filesystem is removed after the run",
            "leave --keep-db out, or leave --fs out",
        )
    fs = request.stack.volume.fs
    assert fs is not None, "a lab run names its filesystem"
    spec = filesystem.FILESYSTEMS.get(fs)
    # before root: a kernel without device-mapper cannot have it as any user (--vm can)
    has_device = spec is None or spec.mkfs_tool is not None
    layers.check(request.stack, has_device)
    filesystem.require_lab_host(fs)
    filesystem.require_filesystem(fs)
    tracing.require_tracefs()


def lab_in(request: RunRequest, crash_dir: Path | None) -> filesystem.LabFilesystem:
    return stack.lab_filesystem(
        request.stack,
        keep_image=request.output.out_dir / KEPT_IMAGE_FILE if request.debug.keep_image else None,
        write_log=crash_dir / lab_capture.WRITE_LOG_FILE if crash_dir else None,
    )


def capture_of(
    request: RunRequest,
    scenario: engine.Scenario,
    lab: Lab,
    out_dir: Path,
    progress: ProgressFn | None,
    commits: commit_stream.EngineCommits,
) -> lab_capture.LabCapture:
    """The lab's capture of the run: with its device's writes logged for ``sqlwa crash``."""
    options = request.capture
    if request.crash is not None and lab.crash_dir is not None:
        return lab_capture.capture_with_crash(
            request.settings,
            scenario,
            lab.fs,
            out_dir,
            options,
            request.crash,
            lab.crash_dir,
            progress,
            progress,
            commits=commits,
        )
    return lab_capture.capture_in_lab(request.settings, scenario, lab.fs, out_dir, options, progress, commits)


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
            commits = commit_stream.EngineCommits(directory / report.ENGINE_COMMITS_FILE)
        with commits:  # the file removed on the way out, its directory below
            yield commits
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        _system.ownership.release_ownership(ownership)


def keep_what_was_measured(
    request: RunRequest, capture: lab_capture.LabCapture, out_dir: Path, place: dict
) -> RunOutcome:
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
            lambda: report.analyse_capture(request, capture, out_dir, place, abandoned=abandoned),
            probe.stuck,
            "keeping what was measured",
        )
    except OutputStuck as exc:
        raise not_kept(str(engine.interruption_of(capture.records.info)), exc) from None
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
