"""What one run is asked to do (:class:`RunRequest`), what it gives back
(:class:`RunOutcome`), and the output directory it writes into: the values the runner,
every target (:mod:`sqlwa.measure.targets`) and their callers share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from sqlwa import _system, outputs
from sqlwa.analysis import metrics
from sqlwa.analysis.schema import Summary
from sqlwa.durability import explore
from sqlwa.errors import ScenarioError, writing
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine
from sqlwa.measure.lab_capture import CaptureOptions
from sqlwa.results import rundir


@dataclass(frozen=True)
class Output:
    """Where a run writes and what it leaves behind there: checked together before
    anything is measured (:func:`check_out_dir`)."""

    out_dir: Path = Path("sqlwa-out")
    dir: Path | None = None  # --dir: a VFS-only run's scratch directory's parent
    keep_db: bool = False  # --keep-db: a VFS-only run's database is left in its scratch directory
    allow_system_dir: bool = False  # --allow-system-dir: --out (and --dir) may be in /etc, /usr …
    part_of: Path | None = None  # a matrix's cell: the matrix directory its out_dir lies in


@dataclass(frozen=True)
class LabDebug:
    """What a lab run leaves behind for looking into it (or for tests), besides its results."""

    guest_strace: bool = False  # with vm: strace the guest's program into OUT/guest.strace
    keep_image: bool = False  # copy the lab's image into OUT/lab.img before it is removed (tests)


@dataclass
class RunRequest:
    scenario: str = "mobibench-insert"
    settings: engine.RunSettings = field(default_factory=engine.RunSettings)
    stack: StackSpec = StackSpec()  # the lab filesystem and its layers, on this host or in the VM lab
    output: Output = Output()
    # how the trace is taken; sqlwa run's keep_measured: a Ctrl-C or SIGTERM between measured
    # commits ends the workload there and what was measured is analysed and written, marked
    # partial (RunOutcome.partial)
    capture: CaptureOptions = field(default_factory=CaptureOptions)
    frame_budget_ms: float = metrics.DEFAULT_FRAME_BUDGET_MS
    crash: explore.CrashOptions | None = None  # sqlwa crash: log the writes, judge crash states
    debug: LabDebug = LabDebug()


@dataclass
class RunOutcome:
    summary: Summary
    frame: pl.DataFrame | None  # None: the run's commits.parquet, read when asked for
    out_dir: Path
    kept_database: Path | None = None  # where --keep-db left the database
    # a run a signal stopped between its commits (CaptureOptions.keep_measured): what
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
        request.output.out_dir,
        "output directory",
        outputs.holds_a_run,
        "run",
        allow_system=request.output.allow_system_dir,
        create=create,
        part_of=request.output.part_of,
    )


@contextmanager
def output_dir(request: RunRequest) -> Iterator[Path]:
    """The run's output directory, locked against other writers and marked unfinished
    (an earlier run's files removed) until :func:`sqlwa.results.rundir.finish` completes
    it. A directory this run made is removed again when the workload proves bad input
    mid-run (a replayed statement failing under --strict): bad input leaves nothing behind."""
    made = not request.output.out_dir.exists()
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
