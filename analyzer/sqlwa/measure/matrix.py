"""Sweeps: every combination of scenario × filesystem × encryption × FUSE layer × profile
× dm-crypt × journal × sync (× repeat), each cell a fresh run through :func:`sqlwa.runner.execute`,
all of them in one results store.

Layout of a matrix directory::

    DIR/results.sqlite                        the store (see sqlwa.store)
    DIR/runs/<scenario>-<stack>-<journal>-<sync>-r<N>/   summary.json, commits.parquet,
                                              trace.txt and events.parquet (lab runs)

``<stack>`` is the filesystem and its layers joined by ``+``: ``ext4``, ``ext4+dm-crypt``,
``ext4+fscrypt+fuse-passthrough``, ``ext4+fscrypt+profile-android-ext4``.

A profile cell takes the profile's filesystem, encryption and FUSE layer, except where
the sweep's own axis was given explicitly (the shared stack's ``profile_overrides``): as
with ``sqlwa run --profile``, an option given explicitly wins.

A cell is one frozen value, :class:`Cell`: its scenario, its
:class:`~sqlwa.lab.stack.StackSpec` (the profile applied once) and its
:class:`~sqlwa.measure.engine.RunSettings`, made from the plan's axes and handed as they
are to the run request; the store's columns, its key, label and directory name are
derived from it.

A cell that cannot run here (a filesystem this kernel lacks, an encryption the
filesystem has not, no /dev/fuse) is *skipped* with the reason; a cell that fails is
recorded as *failed* with the error; the sweep goes on either way. Without root (or
without tracefs) every plain cell runs at the VFS level only, in a scratch directory, and
the filesystem axis collapses to ``none``; cells with layers are skipped, saying why.
A sweep that names its filesystems (``--fs``) is refused without root instead, as
``sqlwa run --fs`` is.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from sqlwa import _system, outputs
from sqlwa.capture import tracing
from sqlwa.catalogue import (
    DEFAULT_FRAME_BUDGET_MS,
    DEFAULT_JOURNALS,
    DEFAULT_SYNCS,
    FRAME_RATES,
    NO_LAB_FS,
    NO_LAYER,
    has_layers,
    run_label,
    stack_label,
)
from sqlwa.errors import Interrupted, SqlwaError, UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import devmapper, encryption, filesystem, fuse, layers, profiles
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine, runner
from sqlwa.measure import shard as sharding
from sqlwa.measure.lab_capture import CaptureOptions
from sqlwa.measure.request import Output
from sqlwa.results import rundir, store
from sqlwa.vm import kernel as vm_kernel
from sqlwa.vm import machine

DEFAULT_FILESYSTEMS = ("ext4",)

# The layers in a cell's stack name, from the disk up, each with its tag: the encryptions'
# modes have names of their own (dm-crypt's and fscrypt's differ), FUSE layers and profiles
# are tagged (``fuse-``, ``profile-``), so names stay unique.
NAMED_LAYERS = (("crypt", ""), ("encrypt", ""), ("fuse", "fuse-"), ("profile", "profile-"))


@dataclass(frozen=True)
class Cell:
    """One run of a sweep as the option parsing made it: its scenario, its stack (the
    profile applied; a layer not asked for is the StackSpec default), its SQLite
    settings and which repeat it is. The run request takes these values as they are,
    and the store's columns are derived from them (:meth:`config`)."""

    scenario: str
    stack: StackSpec
    settings: engine.RunSettings
    repeat: int = 1

    def __hash__(self) -> int:  # RunSettings is no frozen value; the key names the cell alone
        return hash(self.key)

    @property
    def config(self) -> store.RunConfig:
        """The cell's configuration as the store's columns hold it."""
        return store.RunConfig.of_stack(self.scenario, self.stack, self.settings.journal, self.settings.sync)

    @property
    def row(self) -> dict[str, str | int]:
        """The cell as the store's row names it: its configuration's columns and its repeat."""
        return {**self.config.columns(), "repeat": self.repeat}

    @property
    def stack_name(self) -> str:
        """The filesystem and its layers as the cell's key and directory name spell them:
        parts joined by ``+`` (no name of a filesystem, mode or profile has one)."""
        columns = self.config.columns()
        layers = [f"{tag}{columns[key]}" for key, tag in NAMED_LAYERS if columns[key] != NO_LAYER]
        return "+".join([columns["fs"], *layers])

    @property
    def config_key(self) -> str:
        return f"{self.scenario}/{self.stack_name}/{self.settings.journal}/{self.settings.sync}"

    @property
    def key(self) -> str:
        """The run key in the store: configuration and repeat."""
        return f"{self.config_key}/r{self.repeat}"

    @property
    def dirname(self) -> str:
        stem = Path(self.scenario).stem if engine.looks_like_path(self.scenario) else self.scenario
        return f"{stem}-{self.stack_name}-{self.settings.journal}-{self.settings.sync}-r{self.repeat}"

    @property
    def label(self) -> str:
        return run_label(self.row)

    @property
    def layered(self) -> bool:
        return has_layers(self.row)

    def record(self, run_dir: Path) -> store.RunRecord:
        """What the store keeps of this cell, as it starts: an ok run until it is not."""
        return store.RunRecord(
            run_key=self.key,
            config=self.config,
            txns=self.settings.length.txns,
            run_dir=run_dir,
            place=store.CellPlace(self.config_key, self.repeat),
            started_at=time.time(),
        )


@dataclass(frozen=True)
class Axes:
    """What a sweep crosses, each a comma-separated option: every combination is a cell."""

    scenarios: tuple[str, ...] = ("mobibench-insert",)
    filesystems: tuple[str, ...] = DEFAULT_FILESYSTEMS
    encrypts: tuple[str, ...] = (encryption.NO_ENCRYPTION,)
    fuses: tuple[str, ...] = (fuse.NO_FUSE,)
    profiles: tuple[str, ...] = (profiles.NO_PROFILE,)
    crypts: tuple[str, ...] = (devmapper.NO_CRYPT,)
    journals: tuple[str, ...] = DEFAULT_JOURNALS
    syncs: tuple[str, ...] = DEFAULT_SYNCS


@dataclass(frozen=True)
class Runs:
    """How a sweep runs each configuration, beside its settings and stack."""

    repeat: int = 1  # --repeat: runs per configuration
    # -n of the cells of these journal modes, instead of the settings' txns (sqlwa demo: WAL's
    # cells run long enough to reach their first checkpoint, the rollback journals' repeat
    # from the first)
    journal_txns: tuple[tuple[str, int], ...] = ()
    frame_rate: int | None = None  # --frame-rate: every run's frame budget is one frame of it


@dataclass(frozen=True)
class Invocation:
    """What this command does with the matrix, not what the matrix is."""

    shard: sharding.Shard | None = None  # --shard K/N: only this part of the cells (sqlwa.measure.shard)
    resume: bool = False  # --resume: continue the store in --out
    allow_system_dir: bool = False  # --allow-system-dir: --out may be in /etc, /usr …


AXIS_NAMES = tuple(f.name for f in dataclasses.fields(Axes))
RUNS_FIELDS = tuple(f.name for f in dataclasses.fields(Runs))
# The RunSettings a sweep's options set for every cell alike (journal and sync are axes).
SHARED_SETTINGS = ("txns", "warmup", "from_db", "timing", "strict")


@dataclass
class MatrixPlan:
    out_dir: Path
    axes: Axes = Axes()
    # what every cell's stack shares: image size, dm-delay, the VM lab and its kernel, and
    # the axes given explicitly (profile_overrides: they beat a profile's values, as with
    # ``sqlwa run --profile``); the layers of the axes are each cell's own
    stack: StackSpec = StackSpec()
    # what every cell's settings share (SHARED_SETTINGS); journal and sync are each cell's
    settings: engine.RunSettings = field(default_factory=engine.RunSettings)
    runs: Runs = Runs()
    lab: bool = True  # False: VFS level only, no lab filesystem
    lab_unavailable: str | None = None  # why not, when the lab is off for lack of root or tracefs
    invocation: Invocation = Invocation()

    def stack_of(self, fs: str, encrypt: str, fuse_layer: str, profile: str, crypt: str) -> StackSpec:
        """What one combination of the stack axes runs on: a profile fills in what the
        sweep's axes do not override (its mkfs and mount options too: no axes of a sweep),
        applied here once; a plain stack of a VFS-only sweep has no lab filesystem."""
        chosen = None if profile == profiles.NO_PROFILE else profile
        stack = self.stack.replace(fs=fs, encrypt=encrypt, fuse=fuse_layer, crypt=crypt, profile=chosen).with_profile()
        if not self.lab and not has_layers(stack.flat()):
            return stack.replace(fs=None)
        return stack

    def settings_of(self, journal: str, sync: str) -> engine.RunSettings:
        """A cell's settings: the sweep's, in its journal and sync mode."""
        from_db = self.settings.replay.from_db
        return self.settings.replace(
            journal=journal,
            sync=sync,
            txns=self.txns_of(journal),
            # absolute: a --vm guest sees the host's files at the same paths, not the working directory
            from_db=str(Path(from_db).resolve()) if from_db else None,
        )

    def txns_of(self, journal: str) -> int | None:
        """The measured transactions of a cell of this journal mode."""
        return dict(self.runs.journal_txns).get(journal, self.settings.length.txns)

    def cells(self) -> list[Cell]:
        """The cells this sweep runs: all of them, or its shard's part."""
        return sharding.part(self.all_cells(), self.invocation.shard)

    def all_cells(self) -> list[Cell]:
        """Every cell of the matrix, whatever part of it a shard runs."""
        axes = self.axes
        stack_axes = (axes.filesystems, axes.encrypts, axes.fuses, axes.profiles, axes.crypts)
        stacks = [self.stack_of(*combination) for combination in itertools.product(*stack_axes)]
        cells = [
            Cell(scenario, stack, self.settings_of(journal, sync), r)
            for scenario in axes.scenarios
            for stack in stacks
            for journal in axes.journals
            for sync in axes.syncs
            for r in range(1, self.runs.repeat + 1)
        ]
        return list({cell.key: cell for cell in cells}.values())  # an axis value given twice is one cell


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


def lab_unavailable_reason(plan: MatrixPlan) -> str | None:
    """Why block and syscall levels cannot be measured here, or None when they can. Lab
    filesystems the sweep names (--fs given) are refused here as `sqlwa run --fs` refuses
    them; only the default filesystem falls back to the VFS level."""
    if "fs" in plan.stack.profile_overrides:
        filesystem.require_lab_host(",".join(plan.axes.filesystems))
    if not _system.processes.is_root():
        return "the block and syscall levels need root (loop devices, mkfs, mount, tracefs): run it with sudo"
    tracing.mount_if_absent()
    availability = tracing.tracefs_available()
    if not availability.available:
        return f"the block and syscall levels need tracefs: {availability.reason} ({availability.hint})"
    return None


# Each axis of names: what the plan calls it, its option, what one value is, and the choices.
NAMED_AXES = (
    ("journals", "-j", "journal mode", engine.JOURNAL_MODES),
    ("syncs", "--sync", "sync mode", tuple(engine.SYNC_MODES)),
    ("encrypts", "--encrypt", "encryption", encryption.CHOICES),
    ("fuses", "--fuse", "FUSE layer", fuse.CHOICES),
    ("profiles", "--profile", "profile", (profiles.NO_PROFILE, *profiles.PROFILES)),
    ("crypts", "--crypt", "dm-crypt mode", devmapper.CHOICES),
)


def check_axes(plan: MatrixPlan) -> None:
    """Refuse unknown modes, layers and scenarios, layers a VFS-only sweep cannot have,
    and two cells that would share a directory, before any cell runs."""
    for name, option, what, choices in NAMED_AXES:
        for value in getattr(plan.axes, name):
            if value not in choices:
                raise UsageError(f"unknown {what} {value!r} ({option})", f"choose from: {', '.join(choices)}")
    if plan.lab:
        for fs in plan.axes.filesystems:
            if fs not in filesystem.FILESYSTEMS:
                raise UsageError(f"unknown filesystem {fs!r}", f"choose from: {', '.join(filesystem.FILESYSTEMS)}")
    elif plan.lab_unavailable is None:  # --vfs-only was asked for, with layers it excludes
        layered = [cell for cell in plan.all_cells() if cell.layered]
        if layered:
            raise UsageError(
                f"--vfs-only has no lab filesystem, and {stack_label(layered[0].row)} needs one",
                "leave --vfs-only out, or the --encrypt, --fuse, --profile and --crypt axes",
            )
    for scenario in plan.axes.scenarios:
        engine.load_scenario(scenario)  # raises ScenarioError with its own fix
    from_db = plan.settings.replay.from_db
    if from_db is not None and not Path(from_db).is_file():
        raise UsageError(f"--from {from_db}: no such database file", "give the app's database file")
    engine.check_settings(engine.RunSettings(replay=engine.Replay(timing=plan.settings.replay.timing)))
    if not plan.stack.machine.vm:
        for crypt in plan.axes.crypts:  # a host without device-mapper: the fix is --vm, for every cell alike
            layers.check(StackSpec.from_flat(fs="ext4", crypt=crypt), has_device=True)
    check_device_delay(plan)
    if plan.stack.machine.vm:
        runner.guest_kernel(plan.stack.machine.kernel)  # a kernel that cannot be had is a mistake in the axes too
    check_dirnames(plan)


def check_device_delay(plan: MatrixPlan) -> None:
    """--device-delay is the same for every cell: refused for them all at once."""
    delay_ms = plan.stack.layers.device_delay_ms
    if delay_ms is None:
        return
    if not plan.lab:
        reason = plan.lab_unavailable or "--vfs-only"
        raise UsageError(
            f"--device-delay delays a lab filesystem's device, and this sweep has none ({reason})",
            "add --vm, or leave --device-delay out",
        )
    for crypt in plan.axes.crypts:
        cell = StackSpec.from_flat(fs="ext4", crypt=crypt, device_delay_ms=delay_ms)
        layers.check(cell, has_device=True, host=not plan.stack.machine.vm)


def check_dirnames(plan: MatrixPlan) -> None:
    """Two scenario files of one name in different directories would write one cell directory."""
    shared = [name for name, count in Counter(cell.dirname for cell in plan.all_cells()).items() if count > 1]
    if shared:
        raise UsageError(
            f"two cells would write the same directory runs/{shared[0]}: scenarios of one file name",
            "rename one of the scenario files",
        )


# What makes two sweeps the same plan, each with the option that sets it.
PLAN_OPTIONS = {
    "scenarios": "-s",
    "filesystems": "--fs",
    "encrypts": "--encrypt",
    "fuses": "--fuse",
    "profiles": "--profile",
    "crypts": "--crypt",
    "profile_overrides": "--profile overridden by",
    "journals": "-j",
    "syncs": "--sync",
    "repeat": "--repeat",
    "txns": "-n",
    "journal_txns": "-n of a journal mode",
    "warmup": "--warmup",
    "from_db": "--from",
    "timing": "--timing",
    "strict": "--strict",
    "lab": "--vfs-only",
    "image_size": "--image-size",
    "vm": "--vm",
    "kernel": "--kernel",
    "device_delay_ms": "--device-delay",
    "frame_rate": "--frame-rate",
    "shard": "--shard",
}
# The PLAN_OPTIONS that are the stack every cell shares (MatrixPlan.stack).
PLAN_STACK_OPTIONS = ("image_size", "vm", "kernel", "device_delay_ms")
# Where the plan keeps each of PLAN_OPTIONS: the part of MatrixPlan named (the plan itself
# for the one not listed, lab).
PLAN_PARTS = {
    **dict.fromkeys(AXIS_NAMES, "axes"),
    **dict.fromkeys(("profile_overrides", *PLAN_STACK_OPTIONS), "stack"),
    **dict.fromkeys(SHARED_SETTINGS, "settings"),
    **dict.fromkeys(RUNS_FIELDS, "runs"),
    "shard": "invocation",
}
# What a plan stored before an option existed meant by leaving it out.
PLAN_DEFAULTS = {
    "vm": False,
    "kernel": vm_kernel.DEBIAN,
    "device_delay_ms": None,
    "frame_rate": None,
    "from_db": None,
    "timing": None,
    "strict": False,
    "shard": None,
}


# What a plan recorded before the layer axes existed had, in effect: no layers.
PLAN_BEFORE_LAYERS = {
    "encrypts": [NO_LAYER],
    "fuses": [NO_LAYER],
    "profiles": [NO_LAYER],
    "profile_overrides": [],
    "crypts": [NO_LAYER],
}


def plan_value(plan: MatrixPlan, key: str):
    """One of PLAN_OPTIONS, from the part of the plan that keeps it."""
    part = PLAN_PARTS.get(key)
    if part == "stack":  # the stack's flat view: its fields by name, whichever group keeps them
        return plan.stack.flat()[key]
    if part == "settings":
        return plan.settings.setting(key)
    return getattr(plan if part is None else getattr(plan, part), key)


def plan_record(plan: MatrixPlan) -> dict:
    """The plan as the store keeps it (JSON values); VFS-only sweeps have no filesystems.
    The keys of its cells too: a store that lacks some of them is a partial matrix."""
    record = {key: plan_value(plan, key) for key in PLAN_OPTIONS}
    record.update({key: list(record[key]) for key, value in record.items() if isinstance(value, tuple)})
    if not plan.lab:
        record["filesystems"], record["image_size"] = [NO_LAB_FS], None
    if record["profiles"] == [profiles.NO_PROFILE]:
        record["profile_overrides"] = []  # nothing to override: the same plan whatever was given
    shard = plan.invocation.shard
    record["shard"] = str(shard) if shard else None
    record["journal_txns"] = ",".join(f"{journal}={n}" for journal, n in plan.runs.journal_txns) or None
    record["cell_keys"] = [cell.key for cell in plan.cells()]
    if shard is not None:  # what `sqlwa merge` needs to know whether every shard is there
        record["matrix_cell_keys"] = [cell.key for cell in plan.all_cells()]
    return record


def plan_text(key: str, value) -> str:
    if key == "lab":
        return "VFS level only" if not value else "lab filesystems"
    if key == "profile_overrides":
        return ", ".join(f"--{option}" for option in value) or "no axis"
    if value is None:
        return "not given"
    return ",".join(value) if isinstance(value, list) else str(value)


def plan_differences(before: dict, now: dict) -> list[str]:
    """'-n 300 (it was started with 50)' for every option of ``now`` that ``before`` set otherwise."""
    before = {**PLAN_BEFORE_LAYERS, **before}
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


def check_out_dir(plan: MatrixPlan, create: bool = False) -> Path:
    """The matrix directory, if sqlwa may write a matrix there: new, empty, or holding a
    matrix's store; never a run directory (readers would then show the matrix, not the run)."""
    if outputs.holds_a_run(plan.out_dir):
        raise UsageError(
            f"--out directory {plan.out_dir} holds a sqlwa run, not a matrix: readers would show the matrix instead",
            "choose a new or empty --out directory",
        )
    return outputs.check_dir(
        plan.out_dir,
        "--out directory",
        outputs.holds_a_matrix,
        "matrix",
        allow_system=plan.invocation.allow_system_dir,
        create=create,
    )


def refuse_linked_runs(out_dir: Path) -> None:
    """A continued sweep writes its cells in ``runs/`` of its --out: that directory, and
    each cell's in it, must be its own, not a symlink (a shard from elsewhere), through
    which the cells would be written wherever it leads."""
    runs = out_dir / "runs"
    linked: list[Path] = []
    if runs.is_symlink():
        linked = [runs]
    elif runs.is_dir():
        linked = sorted(p for p in runs.iterdir() if p.is_symlink())
    if linked:
        raise UsageError(
            f"{linked[0]} is a symlink: a sweep writes its cells only inside its --out directory {out_dir}",
            "resume only a sweep sqlwa wrote here, or choose a new --out",
        )


def open_store(plan: MatrixPlan):
    """The matrix's store; an existing, non-empty one is only continued with --resume,
    and only with the plan it was started with."""
    check_out_dir(plan, create=True)
    path = plan.out_dir / store.STORE_FILE
    existed = path.exists()
    if existed:  # a store to continue may have come from elsewhere: read it as readers do first
        store.check_foreign(path)
        refuse_linked_runs(plan.out_dir)
    conn = store.connect(path)
    try:
        if existed and conn.execute("SELECT count(*) FROM runs").fetchone()[0]:
            if not plan.invocation.resume:
                raise UsageError(
                    f"{plan.out_dir} already holds a matrix",
                    "add --resume to continue it (cells already done are skipped), or choose a new --out",
                )
            with rundir.reading(path):
                check_resumed_plan(conn, plan)
        store.record_plan(conn, plan_record(plan))
    except BaseException:
        store.close(conn)
        raise
    return conn


def request_for(cell: Cell, plan: MatrixPlan, run_dir: Path) -> runner.RunRequest:
    """The run of ``cell``: its stack and settings as they are, in its directory of the matrix."""
    frame_rate = plan.runs.frame_rate
    return runner.RunRequest(
        scenario=cell.scenario,
        settings=cell.settings,
        stack=cell.stack,
        output=Output(out_dir=run_dir, allow_system_dir=plan.invocation.allow_system_dir, part_of=plan.out_dir),
        # Keep a lossy run: the store records its loss and `sqlwa check` fails it,
        # unless the policy allows loss. Throwing the measurement away helps nobody.
        capture=CaptureOptions(allow_loss=True),
        frame_budget_ms=FRAME_RATES[frame_rate] if frame_rate else DEFAULT_FRAME_BUDGET_MS,
    )


def without_lab(cell: Cell, plan: MatrixPlan) -> str | None:
    """Why a cell with layers cannot run in a sweep that has no lab filesystem."""
    if plan.lab or not cell.layered:
        return None
    return (
        f"{stack_label(cell.row)} needs a lab filesystem, and this sweep has none: {plan.lab_unavailable} "
        f"(fix: run the sweep as root with tracefs mounted)"
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
    record = cell.record(run_dir)
    started = time.monotonic()
    missing_lab = without_lab(cell, plan)
    if missing_lab:
        return record_failure(conn, cell, record, "skipped", missing_lab, plan, started)
    try:
        outcome = runner.execute(request_for(cell, plan, run_dir), progress=progress, guest=guest)
    except Interrupted:
        raise
    except UnsupportedFilesystem as exc:
        return record_failure(conn, cell, record, "skipped", error_text(exc), plan, started)
    except SqlwaError as exc:
        return record_failure(conn, cell, record, "failed", error_text(exc), plan, started)
    record.txns = outcome.summary.get("commits")
    store.save_run(conn, record, outcome.summary, outcome.commits, base=plan.out_dir)
    lost = outcome.summary.get("trace", {}).get("lost_events") or 0
    return CellResult(cell, "ok", seconds=time.monotonic() - started, lost_events=lost)


def record_failure(
    conn, cell: Cell, record: store.RunRecord, status: str, reason: str, plan: MatrixPlan, started: float
) -> CellResult:
    record.status, record.reason = status, reason
    if status == "skipped" and record.run_dir is not None:
        rundir.discard_unstarted(record.run_dir)  # e.g. a cipher found missing once the lab was up
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
    on_ready: Callable[[], None] | None = None,
) -> MatrixOutcome:
    """Run every cell of ``plan`` in order; returns what happened to each. ``on_ready`` is
    called once the store is open, before the first cell (a store that cannot be made is
    then the one thing said)."""
    check_axes(plan)
    kernel = (
        runner.guest_kernel(plan.stack.machine.kernel) if plan.stack.machine.vm else None
    )  # refused before --out exists
    check_out_dir(plan, create=True)
    # One sweep at a time: a second one's cells would land in this one's store and runs.
    with _system.locks.directory_lock(plan.out_dir, "sqlwa matrix"):
        return run_cells(plan, kernel, on_start, on_done, progress, on_ready)


def run_cells(
    plan: MatrixPlan,
    kernel: vm_kernel.GuestKernel | None,
    on_start: CellStart | None,
    on_done: CellDone | None,
    progress: runner.ProgressFn | None,
    on_ready: Callable[[], None] | None = None,
) -> MatrixOutcome:
    conn = open_store(plan)
    if on_ready is not None:
        on_ready()
    # One guest for every cell of a --vm sweep: a boot costs seconds under TCG, and each
    # cell still gets a fresh lab filesystem inside it.
    booted = runner.booted_guest(kernel, plan.out_dir, plan.stack.volume.image_size) if kernel else nullcontext()
    try:
        with booted as guest:
            return run_each_cell(conn, plan, MatrixOutcome(plan), guest, on_start, on_done, progress)
    finally:
        store.close(conn)


def run_each_cell(
    conn,
    plan: MatrixPlan,
    outcome: MatrixOutcome,
    guest: machine.Guest | None,
    on_start: CellStart | None,
    on_done: CellDone | None,
    progress: runner.ProgressFn | None,
) -> MatrixOutcome:
    done = store.done_keys(conn) if plan.invocation.resume else set()
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
                partial = store.partial_of(plan.out_dir)
                raise Interrupted(
                    f"{(exc.args[0] if exc.args else '') or 'interrupted'} in cell {number} "
                    f"({cell.label}), the matrix {partial or 'partial'}; continue with the same command plus --resume"
                ) from None
        outcome.results.append(result)
        if on_done:
            on_done(result)
    return outcome


def plan_document(plan: MatrixPlan) -> dict:
    """``sqlwa matrix --plan``: the cells the command would run (one shard's with
    ``--shard``), each with its id, run key, directory and settings."""
    from sqlwa.measure import environment

    every = plan.all_cells()
    shard = plan.invocation.shard
    shards = sharding.shards_by_id([sharding.cell_id(c) for c in every], shard.count) if shard else {}
    cells = []
    for cell in plan.cells():
        entry: dict[str, str | int] = {"id": sharding.cell_id(cell), "key": cell.key, "dir": f"runs/{cell.dirname}"}
        entry["label"] = cell.label
        entry.update({name: cell.row[name] for name in sharding.ID_FIELDS})
        if shard is not None:
            entry["shard"] = shards[str(entry["id"])]
        cells.append(entry)
    return {
        "sqlwa_version": environment.tool_version(),
        "lab": plan.lab,
        "lab_unavailable": plan.lab_unavailable,
        "shard": str(shard) if shard else None,
        "cells_in_matrix": len(every),
        "cells_in_shard": len(cells) if shard else None,
        "cells": cells,
    }
