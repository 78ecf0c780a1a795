"""Sweeps: every combination of scenario × filesystem × journal × sync (× repeat), each
cell a fresh run through :func:`sqlwa.runner.execute`, all of them in one results store.

Layout of a matrix directory::

    DIR/results.sqlite                        the store (see sqlwa.store)
    DIR/runs/<scenario>-<fs>-<journal>-<sync>-r<N>/   summary.json, commits.parquet,
                                              trace.txt and events.parquet (lab runs)

A cell that cannot run here (a filesystem this kernel lacks) is *skipped* with the
reason; a cell that fails is recorded as *failed* with the error; the sweep goes on
either way. Without root (or without tracefs) every cell runs at the VFS level only,
in a scratch directory, and the filesystem axis collapses to ``none``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqlwa import _system
from sqlwa.capture import tracing
from sqlwa.catalogue import NO_LAB_FS, run_label
from sqlwa.errors import Interrupted, SqlwaError, UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import filesystem
from sqlwa.measure import engine, runner
from sqlwa.results import rundir, store
from sqlwa.vm import kernel as vm_kernel
from sqlwa.vm import machine

DEFAULT_FILESYSTEMS = ("ext4",)
DEFAULT_JOURNALS = ("delete", "truncate", "persist", "wal")
DEFAULT_SYNCS = ("normal", "full")


@dataclass(frozen=True)
class Cell:
    scenario: str
    fs: str
    journal: str
    sync: str
    repeat: int = 1

    @property
    def config_key(self) -> str:
        return f"{self.scenario}/{self.fs}/{self.journal}/{self.sync}"

    @property
    def key(self) -> str:
        """The run key in the store: configuration and repeat."""
        return f"{self.config_key}/r{self.repeat}"

    @property
    def dirname(self) -> str:
        stem = Path(self.scenario).stem if engine.looks_like_path(self.scenario) else self.scenario
        return f"{stem}-{self.fs}-{self.journal}-{self.sync}-r{self.repeat}"

    @property
    def label(self) -> str:
        return run_label(asdict(self))


@dataclass
class MatrixPlan:
    out_dir: Path
    scenarios: tuple[str, ...] = ("mobibench-insert",)
    filesystems: tuple[str, ...] = DEFAULT_FILESYSTEMS
    journals: tuple[str, ...] = DEFAULT_JOURNALS
    syncs: tuple[str, ...] = DEFAULT_SYNCS
    repeat: int = 1
    txns: int | None = None
    warmup: int | None = None
    lab: bool = True  # False: VFS level only, no lab filesystem
    resume: bool = False
    image_size: str = "1G"
    vm: bool = False  # every cell in one VM lab guest
    kernel: str = vm_kernel.DEBIAN  # the guest's kernel, with vm

    def cells(self) -> list[Cell]:
        filesystems = self.filesystems if self.lab else (NO_LAB_FS,)
        return [
            Cell(scenario, fs, journal, sync, r)
            for scenario in self.scenarios
            for fs in filesystems
            for journal in self.journals
            for sync in self.syncs
            for r in range(1, self.repeat + 1)
        ]


@dataclass
class CellResult:
    cell: Cell
    status: str  # ok | failed | skipped | done-earlier
    reason: str | None = None
    seconds: float = 0.0
    lost_events: int = 0


@dataclass
class MatrixOutcome:
    plan: MatrixPlan
    results: list[CellResult] = field(default_factory=list)

    def with_status(self, *statuses: str) -> list[CellResult]:
        return [r for r in self.results if r.status in statuses]


def lab_unavailable_reason() -> str | None:
    """Why block and syscall levels cannot be measured here, or None when they can."""
    if not _system.is_root():
        return "the block and syscall levels need root (loop devices, mkfs, mount, tracefs): run it with sudo"
    availability = tracing.tracefs_available()
    if not availability.available:
        return f"the block and syscall levels need tracefs: {availability.reason} ({availability.hint})"
    return None


def check_axes(plan: MatrixPlan) -> None:
    """Refuse unknown journal / sync modes and scenarios before any cell runs."""
    for journal in plan.journals:
        if journal not in engine.JOURNAL_MODES:
            raise UsageError(f"unknown journal mode {journal!r}", f"choose from: {', '.join(engine.JOURNAL_MODES)}")
    for sync in plan.syncs:
        if sync not in engine.SYNC_MODES:
            raise UsageError(f"unknown sync mode {sync!r}", f"choose from: {', '.join(engine.SYNC_MODES)}")
    if plan.lab:
        for fs in plan.filesystems:
            if fs not in filesystem.FILESYSTEMS:
                raise UsageError(f"unknown filesystem {fs!r}", f"choose from: {', '.join(filesystem.FILESYSTEMS)}")
    for scenario in plan.scenarios:
        engine.load_scenario(scenario)  # raises ScenarioError with its own fix


# What makes two sweeps the same plan, each with the option that sets it.
PLAN_OPTIONS = {
    "scenarios": "-s",
    "filesystems": "--fs",
    "journals": "-j",
    "syncs": "--sync",
    "repeat": "--repeat",
    "txns": "-n",
    "warmup": "--warmup",
    "lab": "--vfs-only",
    "image_size": "--image-size",
    "vm": "--vm",
    "kernel": "--kernel",
}
# What a plan stored before an option existed meant by leaving it out.
PLAN_DEFAULTS = {"vm": False, "kernel": vm_kernel.DEBIAN}


def plan_record(plan: MatrixPlan) -> dict:
    """The plan as the store keeps it (JSON values); VFS-only sweeps have no filesystems."""
    record = {key: getattr(plan, key) for key in PLAN_OPTIONS}
    record.update({key: list(record[key]) for key in ("scenarios", "filesystems", "journals", "syncs")})
    if not plan.lab:
        record["filesystems"], record["image_size"] = [NO_LAB_FS], None
    return record


def plan_text(key: str, value) -> str:
    if key == "lab":
        return "VFS level only" if not value else "lab filesystems"
    if value is None:
        return "not given"
    return ",".join(value) if isinstance(value, list) else str(value)


def plan_differences(before: dict, now: dict) -> list[str]:
    """'-n 300 (it was started with 50)' for every option of ``now`` that ``before`` set otherwise."""
    return [
        f"{PLAN_OPTIONS[key]} {plan_text(key, now[key])} (it was started with {plan_text(key, before.get(key))})"
        for key in PLAN_OPTIONS
        if before.get(key, PLAN_DEFAULTS.get(key)) != now[key]
    ]


def check_resumed_plan(conn, plan: MatrixPlan) -> None:
    """A resumed sweep must be the one that was started: another plan would mix cells of
    different sizes into one store and forget the cells of the first."""
    before = store.recorded_plan(conn)
    differences = [] if before is None else plan_differences(before, plan_record(plan))
    if differences:
        raise UsageError(
            f"{plan.out_dir} holds a matrix of another plan: {'; '.join(differences)}",
            "resume with the options it was started with, or choose a new --out for the new plan",
        )


def open_store(plan: MatrixPlan):
    """The matrix's store; an existing, non-empty one is only continued with --resume,
    and only with the plan it was started with."""
    runner.ensure_writable_dir(plan.out_dir, "--out directory")
    path = plan.out_dir / store.STORE_FILE
    existed = path.exists()
    conn = store.connect(path)
    try:
        if existed and conn.execute("SELECT count(*) FROM runs").fetchone()[0]:
            if not plan.resume:
                raise UsageError(
                    f"{plan.out_dir} already holds a matrix",
                    "add --resume to continue it (cells already done are skipped), or choose a new --out",
                )
            check_resumed_plan(conn, plan)
        store.record_plan(conn, plan_record(plan))
    except BaseException:
        conn.close()
        raise
    return conn


def request_for(cell: Cell, plan: MatrixPlan, run_dir: Path) -> runner.RunRequest:
    settings = engine.RunSettings(journal=cell.journal, sync=cell.sync, txns=plan.txns, warmup=plan.warmup)
    return runner.RunRequest(
        scenario=cell.scenario,
        settings=settings,
        out_dir=run_dir,
        fs=None if cell.fs == NO_LAB_FS else cell.fs,
        image_size=plan.image_size,
        vm=plan.vm,
        kernel=plan.kernel,
        # Keep a lossy run: the store records its loss and `sqlwa check` fails it,
        # unless the policy allows loss. Throwing the measurement away helps nobody.
        allow_loss=True,
    )


def error_text(exc: BaseException) -> str:
    message = exc.args[0] if exc.args else type(exc).__name__
    hint = hint_of(exc)
    return f"{message} (fix: {hint})" if hint else str(message)


def run_cell(
    conn, cell: Cell, plan: MatrixPlan, progress: runner.ProgressFn | None, guest: machine.Guest | None = None
) -> CellResult:
    """Run one cell and record it in the store, whatever happens (except interruption)."""
    run_dir = plan.out_dir / "runs" / cell.dirname
    record = store.RunRecord(
        run_key=cell.key,
        status="ok",
        scenario=cell.scenario,
        fs=cell.fs,
        journal=cell.journal,
        sync=cell.sync,
        cell=cell.config_key,
        repeat=cell.repeat,
        txns=plan.txns,
        run_dir=run_dir,
        started_at=time.time(),
    )
    started = time.monotonic()
    try:
        outcome = runner.execute(request_for(cell, plan, run_dir), progress=progress, guest=guest)
    except Interrupted:
        raise
    except UnsupportedFilesystem as exc:
        return record_failure(conn, cell, record, "skipped", error_text(exc), plan, started)
    except SqlwaError as exc:
        return record_failure(conn, cell, record, "failed", error_text(exc), plan, started)
    record.txns = outcome.summary.get("commits")
    record.finished_at = time.time()
    store.save_run(conn, record, outcome.summary, outcome.commits, base=plan.out_dir)
    lost = (outcome.summary.get("trace") or {}).get("lost_events") or 0
    return CellResult(cell, "ok", seconds=time.monotonic() - started, lost_events=lost)


def record_failure(
    conn, cell: Cell, record: store.RunRecord, status: str, reason: str, plan: MatrixPlan, started: float
) -> CellResult:
    record.status, record.reason, record.finished_at = status, reason, time.time()
    record.run_dir = None
    store.save_run(conn, record, base=plan.out_dir)
    return CellResult(cell, status, reason=reason, seconds=time.monotonic() - started)


CellStart = Callable[[int, Cell], None]
CellDone = Callable[[CellResult], None]


def run_matrix(
    plan: MatrixPlan,
    on_start: CellStart | None = None,
    on_done: CellDone | None = None,
    progress: runner.ProgressFn | None = None,
) -> MatrixOutcome:
    """Run every cell of ``plan`` in order; returns what happened to each."""
    check_axes(plan)
    runner.ensure_writable_dir(plan.out_dir, "--out directory")
    # One sweep at a time: a second one's cells would land in this one's store and runs.
    with _system.directory_lock(plan.out_dir, "sqlwa matrix"):
        return run_cells(plan, on_start, on_done, progress)


def run_cells(
    plan: MatrixPlan, on_start: CellStart | None, on_done: CellDone | None, progress: runner.ProgressFn | None
) -> MatrixOutcome:
    conn = open_store(plan)
    # One guest for every cell of a --vm sweep: a boot costs seconds under TCG, and each
    # cell still gets a fresh lab filesystem inside it.
    booted = runner.booted_guest(plan.kernel, plan.out_dir, plan.image_size) if plan.vm else nullcontext()
    try:
        with booted as guest:
            return run_each_cell(conn, plan, MatrixOutcome(plan), guest, on_start, on_done, progress)
    finally:
        conn.close()


def run_each_cell(
    conn,
    plan: MatrixPlan,
    outcome: MatrixOutcome,
    guest: machine.Guest | None,
    on_start: CellStart | None,
    on_done: CellDone | None,
    progress: runner.ProgressFn | None,
) -> MatrixOutcome:
    done = store.done_keys(conn) if plan.resume else set()
    for number, cell in enumerate(plan.cells(), start=1):
        if on_start:
            on_start(number, cell)
        if cell.key in done and rundir.is_complete(plan.out_dir / "runs" / cell.dirname):
            result = CellResult(cell, "done-earlier")
        else:
            try:
                result = run_cell(conn, cell, plan, progress, guest)
            except (Interrupted, KeyboardInterrupt) as exc:
                # The lab cleaned up after itself; the cells before this one are stored.
                raise Interrupted(
                    f"{(exc.args[0] if exc.args else '') or 'interrupted'} in cell {number} "
                    f"({cell.label}); continue with the same command plus --resume"
                ) from None
        outcome.results.append(result)
        if on_done:
            on_done(result)
    return outcome
