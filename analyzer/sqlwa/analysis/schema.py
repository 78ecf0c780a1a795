"""summary.json's layout as types: the writer (:func:`sqlwa.analysis.summary.build_summary`)
builds a :class:`Summary`, the readers (:func:`sqlwa.results.rundir.summary`,
:attr:`sqlwa.Run.summary`) return one, and docs/reference/outputs.md's table of its keys
is generated from these classes (docs/hooks.py), each key's line its docstring here.

The layout is versioned by ``schema_version`` (:data:`SUMMARY_SCHEMA_VERSION`), raised
when a key is renamed or removed or changes its meaning; keys are added without, as
``NotRequired`` ones (a summary written before a key existed lacks it, and readers take
its absence as none). A key only some runs have (a lab run's, a replay's) is
``NotRequired`` too. :func:`check_summary` walks the classes over a parsed summary.json
and names every key that is missing, unknown, or of another type.

This module has no ``from __future__ import annotations``: Python 3.11's TypedDict
cannot tell ``NotRequired`` keys from required ones when its annotations are strings.
"""

import ast
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, Union, get_args, get_origin, get_type_hints, is_typeddict

#: The version of summary.json's layout (its ``schema_version`` key); not the results
#: store's schema (:data:`sqlwa.results.store.STORE_SCHEMA_VERSION`).
SUMMARY_SCHEMA_VERSION = 1

#: A JSON object whose keys this schema leaves to the section's own writer (a report of
#: the trace parser, a layer's self-description): any keys, any values.
JsonObject = dict[str, Any]


# ------------------------------------------------------------------ config


class HostSharing(TypedDict):
    other_runs: list[int]
    """The pids of other sqlwa runs whose measuring overlapped this run's."""
    load_average_1m: list[float | None]
    """The 1-minute load average at the run's start and at its end."""
    cpus: int
    """The host's CPUs."""


class FsEncryptionPolicy(TypedDict):
    version: int
    """The fscrypt policy's version."""
    contents_mode: int
    """fscrypt's mode number of the contents cipher (1: AES-256-XTS, 9: Adiantum)."""
    filenames_mode: int
    """Its mode number of the file-name cipher (4: AES-256-CTS, 9: Adiantum)."""
    flags: int
    """The policy's flags."""


class FsEncryption(TypedDict):
    mode: str
    """The ``--encrypt`` mode."""
    what: str
    """The mode in words."""
    policy: FsEncryptionPolicy | None
    """The policy as the kernel reports it on the data directory (null: none read)."""
    contents_driver: str | None
    """The crypto driver serving the contents cipher."""
    filenames_driver: str | None
    """The crypto driver serving the file-name cipher."""


class FuseLayer(TypedDict):
    layer: str
    """The ``--fuse`` layer."""
    what: str
    """The layer in words."""
    daemon: str
    """The FUSE daemon's program."""
    daemon_version: str | None
    """The daemon's version line."""
    comm: str
    """The daemon's thread name, by which the trace tells its syscalls from SQLite's."""
    pid: int | None
    """The daemon's pid."""
    mountpoint: str
    """Where the FUSE filesystem is mounted (SQLite's directory)."""
    lower: str
    """The directory on the lab filesystem the daemon serves."""
    requested: JsonObject
    """The options asked of the kernel (``writeback_cache``, ``passthrough``)."""
    granted: JsonObject | None
    """What the kernel granted at FUSE_INIT (sqlwa-fuse reports it; bindfs does not)."""
    spec: JsonObject
    """The layer's whole definition (``sqlwa.lab.fuse``)."""


class DmCrypt(TypedDict):
    mode: str
    """The ``--crypt`` mode."""
    what: str
    """The mode in words."""
    device: str | None
    """The dm device's path."""
    dev: str | None
    """Its MAJOR:MINOR."""
    table: str | None
    """Its table as dmsetup shows it (keys masked)."""
    cipher: str | None
    """The cipher of the table."""
    key_bits: int
    """The key's size."""
    offset_sectors: int | None
    """Where the mapped sectors start on the disk."""
    crypto_api: str
    """The kernel crypto API name of the cipher."""
    driver: str | None
    """The driver serving it."""


class DmDelay(TypedDict):
    delay_ms: int
    """The ``--device-delay`` each write and cache flush is held."""
    delayed: list[str]
    """The operations delayed."""
    device: str | None
    """The dm device's path."""
    dev: str | None
    """Its MAJOR:MINOR."""
    table: str | None
    """Its table as the kernel reports it."""
    offset_sectors: int | None
    """Where the filesystem's sectors lie on the disk."""


class Ecryptfs(TypedDict):
    lower_dir: str
    """The eCryptfs lower directory."""
    mountpoint: str
    """Where eCryptfs is mounted."""
    mount_options: str
    """Its mount options."""
    cipher: str
    """Its cipher and key size."""
    header_bytes: int
    """The header it puts in front of each file."""
    crypto_api: str
    """The kernel crypto API name of the cipher."""
    driver: str | None
    """The driver serving it."""


class WriteLog(TypedDict):
    target: str
    """The dm log-writes target recording the device's writes (``sqlwa crash``)."""


class LabDescription(TypedDict):
    fs: str
    """The lab filesystem (``--fs``)."""
    fs_type: str
    """Its kernel type."""
    image_size: int | None
    """The loop image's bytes (null: tmpfs)."""
    tmpfs_size: int | None
    """A tmpfs lab's size in bytes."""
    loop_device: str | None
    """The loop device (null: tmpfs)."""
    dev: str | None
    """The traced device, MAJOR:MINOR."""
    loop_direct_io: bool | None
    """Whether the loop device does direct I/O to its image."""
    mkfs_cmd: list[str] | None
    """The mkfs command run."""
    mkfs_version: str | None
    """The mkfs tool's version line."""
    mount_opts: list[str]
    """The mount options asked."""
    mount_options: str
    """The mount options in effect, as /proc/self/mountinfo has them."""
    mountpoint: str
    """Where the lab filesystem was mounted."""
    fill: JsonObject | None
    """How the filesystem was filled before the run (``--fill``; null: not)."""
    kernel: str
    """The kernel the lab ran on."""
    encryption: NotRequired[FsEncryption | None]
    """fscrypt (``--encrypt``), null: none."""
    fuse: NotRequired[FuseLayer | None]
    """The FUSE layer (``--fuse``), null: none."""
    fs_device: NotRequired[str | None]
    """The device the filesystem is made on (the dm device under ``--crypt``)."""
    crypt: NotRequired[DmCrypt | None]
    """dm-crypt (``--crypt``), null: none."""
    write_log: NotRequired[WriteLog | None]
    """The write log of a ``sqlwa crash`` run, null: none."""
    delay: NotRequired[DmDelay | None]
    """dm-delay (``--device-delay``), null: none."""
    ecryptfs: NotRequired[Ecryptfs | None]
    """eCryptfs (``--encrypt ecryptfs``), null: none."""


class Config(TypedDict):
    scenario: str
    """The scenario's name (a replay: the log's)."""
    scenario_source: str
    """The scenario as given (a name, a file)."""
    fs: str
    """The lab filesystem, or ``none`` without one."""
    fs_source: str
    """Where SQLite's files lay, in words."""
    mount_options: str
    """The mount options of that filesystem."""
    journal: str
    """The journal mode SQLite read back after set-up."""
    sync: str
    """The synchronous level SQLite read back after set-up."""
    txns: int
    """The measured commits."""
    warmup: int | None
    """The warm-up transactions asked."""
    seed: int
    """The workload's seed."""
    pragmas: dict[str, str]
    """The pragmas as SQLite read them back."""
    sqlite_version: str
    """The SQLite that ran."""
    sqlite_source_id: str
    """Its source id."""
    sqlite_compile_options: list[str]
    """Its compile options."""
    vfs_counting: bool
    """Whether the counting VFS was in place."""
    pid: int
    """The engine's process."""
    tid: int
    """The SQL thread."""
    kernel: str
    """The kernel the run measured on."""
    machine: str
    """The machine's architecture."""
    cpus: int
    """The CPUs of the machine (a ``--vm`` run: the guest's)."""
    python: str
    """The Python sqlwa ran on."""
    tool_version: str
    """sqlwa's version."""
    settings: NotRequired[JsonObject]
    """The run settings as asked (``RunSettings.as_dict()``: flat)."""
    hostname: NotRequired[str]
    """Which machine (a sharded sweep runs on many)."""
    host_sharing: NotRequired[HostSharing | None]
    """Whether the run measured alone on its host; null: not known."""
    dir_fs: NotRequired[str]
    """A run without a lab filesystem: the type of its directory's filesystem."""
    replay: NotRequired[JsonObject]
    """A replay: what it did with the log (``ReplaySummary`` of ``_native.pyi``, without
    ``commit_database``)."""
    encrypt: NotRequired[str]
    """A lab run's ``--encrypt``."""
    profile: NotRequired[JsonObject | None]
    """A lab run's ``--profile``: the profile, its source, the options overridden."""
    fuse: NotRequired[str]
    """A lab run's ``--fuse``."""
    crypt: NotRequired[str]
    """A lab run's ``--crypt``."""
    device_delay_ms: NotRequired[int | None]
    """A lab run's ``--device-delay``."""
    lab: NotRequired[LabDescription]
    """A lab run's filesystem and the layers on it."""
    vm: NotRequired[JsonObject]
    """A ``--vm`` run's guest: its kernel, accelerator, memory, CPUs, boot time."""


# ------------------------------------------------------------------ figures per commit


class PerCommit(TypedDict):
    logical_bytes: float
    """The bytes of the rows the commit changed."""
    vfs_write_calls: float
    """SQLite's xWrite calls."""
    vfs_write_bytes: float
    """The bytes of those calls."""
    vfs_sync_calls: float
    """SQLite's xSync calls."""
    cpu_user_ns: NotRequired[float]
    """The SQL thread's user CPU time."""
    cpu_sys_ns: NotRequired[float]
    """Its system CPU time."""
    cpu_ns: NotRequired[float]
    """Their sum."""
    fsync_calls: NotRequired[float]
    """fsync, fdatasync and sync_file_range syscalls of the SQL thread."""
    fdatasync_calls: NotRequired[float]
    """fdatasync syscalls."""
    pwrite_calls: NotRequired[float]
    """pwrite64 and write syscalls."""
    pwrite_bytes: NotRequired[float]
    """Their bytes."""
    ftruncate_calls: NotRequired[float]
    """ftruncate syscalls."""
    unlink_calls: NotRequired[float]
    """unlink and unlinkat syscalls."""
    fuse_fsync_calls: NotRequired[float]
    """``fsync_calls`` of the FUSE daemon's threads (``--fuse``)."""
    fuse_fdatasync_calls: NotRequired[float]
    """``fdatasync_calls`` of the FUSE daemon."""
    fuse_pwrite_calls: NotRequired[float]
    """``pwrite_calls`` of the FUSE daemon."""
    fuse_pwrite_bytes: NotRequired[float]
    """``pwrite_bytes`` of the FUSE daemon."""
    fuse_ftruncate_calls: NotRequired[float]
    """``ftruncate_calls`` of the FUSE daemon."""
    fuse_unlink_calls: NotRequired[float]
    """``unlink_calls`` of the FUSE daemon."""
    write_requests: NotRequired[float]
    """Write requests the device was issued inside the commit."""
    write_bytes: NotRequired[float]
    """Their bytes."""
    flush_requests: NotRequired[float]
    """Cache flushes (a flush request, or a write with PREFLUSH)."""
    fua_writes: NotRequired[float]
    """Writes with FUA."""
    read_requests: NotRequired[float]
    """Read requests."""
    read_bytes: NotRequired[float]
    """Their bytes."""
    discard_requests: NotRequired[float]
    """Discard requests."""
    amortized_write_bytes: NotRequired[float]
    """Every block byte from the first measured commit to the end, per commit."""


class VfsKindFigures(TypedDict):
    write_calls: float
    """xWrite calls."""
    write_bytes: float
    """Their bytes."""
    sync_calls: float
    """xSync calls."""
    truncate_calls: float
    """xTruncate calls."""
    delete_calls: float
    """xDelete calls."""


#: A quantile's key that is no Python identifier, so a class of its own (the functional
#: syntax) that the sections with it extend; its line is in :data:`FUNCTIONAL_KEY_DOCS`.
P999 = TypedDict("P999", {"p99.9": float})


class LatencyMs(P999):
    p50: float
    """The commits' median latency."""
    p90: float
    """Their 90th percentile."""
    p99: float
    """Their 99th percentile."""
    max: float
    """The longest."""


class CpuMs(P999):
    p50: float
    """The SQL thread's median CPU time per commit."""
    p90: float
    """Its 90th percentile."""
    p99: float
    """Its 99th percentile."""
    max: float
    """The most."""
    user_mean: float
    """The mean user time."""
    sys_mean: float
    """The mean system time."""
    share_of_latency: float
    """CPU time over latency, summed over the run (the rest is waiting)."""


class FrameBudgetMisses(TypedDict):
    budget_ms: float
    """One frame (``--frame-rate``)."""
    commits: int
    """Commits longer than a frame."""
    share: float
    """Their share of the measured commits."""
    dropped_frames: NotRequired[int]
    """Frames such commits drop (a lower bound)."""
    dropped_frames_per_1000_commits: NotRequired[float]
    """The same per 1,000 measured commits."""


class Waf(TypedDict):
    vfs_over_logical: float | None
    """SQLite's bytes written over the rows' bytes."""
    block_bytes: NotRequired[Literal["in_window", "amortized"]]
    """Which block bytes the ratios below are of."""
    block_over_vfs: NotRequired[float | None]
    """The device's bytes over SQLite's."""
    block_over_logical: NotRequired[float | None]
    """The device's bytes over the rows'."""
    in_window_block_over_vfs: NotRequired[float | None]
    """As ``block_over_vfs``, of the bytes inside commit windows."""
    in_window_block_over_logical: NotRequired[float | None]
    """As ``block_over_logical``, of the bytes inside commit windows."""
    amortized_block_over_vfs: NotRequired[float | None]
    """``block_over_vfs`` under its earlier name."""
    amortized_block_over_logical: NotRequired[float | None]
    """``block_over_logical`` under its earlier name."""


class PhaseEntry(TypedDict):
    phase: Literal["warmup", "wal_growth", "checkpoint", "steady"]
    """The phase."""
    label: str
    """It in words."""
    commits: int
    """Its commits."""
    first_index: int
    """Its first commit."""
    last_index: int
    """Its last commit."""
    vfs_write_kib_per_commit: NotRequired[float]
    """The mean of ``per_commit.vfs_write_bytes`` over the phase, in KiB."""
    vfs_sync_calls_per_commit: NotRequired[float]
    """Of ``vfs_sync_calls``."""
    fsync_calls_per_commit: NotRequired[float]
    """Of ``fsync_calls``."""
    block_write_requests_per_commit: NotRequired[float]
    """Of ``write_requests``."""
    block_write_kib_per_commit: NotRequired[float]
    """Of ``write_bytes``, in KiB."""
    flushes_per_commit: NotRequired[float]
    """Of ``flush_requests``."""


class Phases(TypedDict):
    basis: str
    """What the figures are, in words."""
    phases: list[PhaseEntry]
    """Every phase the run's commits went through, in order."""


# ------------------------------------------------------------------ the run's bounds


class Stopped(TypedDict):
    by: Literal["txns", "duration", "log", "interrupted"] | None
    """What ended the transactions."""
    txns_asked: int | None
    """``-n``."""
    duration_s_asked: float | None
    """``--duration``."""
    measured_s: float
    """The first measured commit's start to the last one's end."""
    partial: NotRequired[str]
    """An interrupted run: after how many commits."""


class FirstEmpty(TypedDict):
    line: int | None
    """A replay: the log's line."""
    statement: str
    """Its first statement."""
    statements: int
    """Its statements."""


class WroteNothing(TypedDict):
    basis: str
    """What these transactions are, in words."""
    transactions: int
    """Transactions that changed no database file."""
    statements: int
    """Their statements."""
    time_ms: float
    """Their time."""
    vfs_write_calls: int
    """Their xWrite calls (temp files)."""
    vfs_write_bytes: int
    """Their bytes."""
    vfs_sync_calls: int
    """Their xSync calls."""
    vfs_truncate_calls: int
    """Their xTruncate calls."""
    vfs_delete_calls: int
    """Their xDelete calls."""
    by_file: dict[str, VfsKindFigures]
    """The same by file kind, of the kinds with a call."""
    first: list[FirstEmpty]
    """The first five, by their first statement."""


class Close(TypedDict):
    label: str
    """The closing, in words."""
    basis: str
    """What the figures are (totals, no commit)."""
    connections: int
    """Connections closed."""
    time_ms: float
    """The closing's time."""
    vfs_write_calls: int
    """xWrite calls."""
    vfs_write_bytes: int
    """Their bytes."""
    vfs_sync_calls: int
    """xSync calls."""
    vfs_truncate_calls: int
    """xTruncate calls."""
    vfs_delete_calls: int
    """xDelete calls."""
    by_file: dict[str, VfsKindFigures]
    """The same by file kind, of the kinds with a call."""
    syscalls: NotRequired[dict[str, int]]
    """A lab run: the SQL thread's syscalls (the ``fsync_calls`` … of ``per_commit``)."""
    block: NotRequired[dict[str, int]]
    """A lab run: the device's issued requests (the ``write_requests`` … of ``per_commit``)."""


# ------------------------------------------------------------------ the trace


class TraceLevel(TypedDict):
    captured: bool
    """Whether the level was captured."""
    reason: str | None
    """Why (not)."""
    events: list[str]
    """The tracepoints it enabled."""


class Trace(TypedDict):
    events: int
    """Lines the capture read."""
    lost_events: int | None
    """Events the ring buffers lost."""
    file: str
    """The raw capture."""
    instance: str
    """The tracefs instance."""
    clock: str
    """The trace clock."""
    buffer_kb_per_cpu: int
    """The ring buffer per CPU."""
    levels: dict[str, TraceLevel]
    """Each level: captured or why not."""
    event_counts: dict[str, int]
    """Events by tracepoint."""
    parse: JsonObject
    """The trace parser's report (as ``sqlwa parse --json``'s)."""
    parts: NotRequired[int]
    """A long run's capture parts (0: the whole trace.txt)."""
    unparsed_lines: NotRequired[int]
    """Lines of the trace that could not be parsed."""
    analysis_s: NotRequired[float]
    """The trace's parse and per-commit analysis, wall clock."""


# ------------------------------------------------------------------ the lab's sections


class PhaseMs(TypedDict):
    mean: float | None
    """Mean (null: no request)."""
    p50: float | None
    """Median."""
    p90: float | None
    """90th percentile."""
    p99: float | None
    """99th percentile."""
    max: float | None
    """Most."""


class RequestTimes(TypedDict):
    count: int
    """Requests."""
    q2d_ms: PhaseMs
    """Queued to issued."""
    d2c_ms: PhaseMs
    """Issued to completed."""


class DeviceShare(TypedDict):
    of_all_commits: float | None
    """The device's busy time over the commits' time, summed."""
    p50: float | None
    """Its median per commit."""
    p90: float | None
    """Its 90th percentile."""
    max: float | None
    """Its most."""


class DeviceTime(TypedDict):
    requests: int
    """Requests issued inside measured commits."""
    count: int
    """Those timed."""
    q2d_ms: PhaseMs
    """Queued to issued."""
    d2c_ms: PhaseMs
    """Issued to completed."""
    by_operation: dict[str, RequestTimes]
    """The same by operation."""
    device_share: DeviceShare
    """The device's share of the commits' latency."""


class BytesByCategory(TypedDict):
    per_commit: dict[str, float]
    """Foreground (in-window) bytes per measured commit, by category."""
    amortized_total: dict[str, int]
    """Every byte from the first measured commit to the end, by category."""
    amortized_per_commit: dict[str, float]
    """Those per measured commit."""
    total_bytes: int
    """Their sum."""
    unattributed_share: float
    """The share no file or role could be given."""
    writeback_by_file: dict[str, int]
    """Writeback bytes by file."""
    run_total: dict[str, int]
    """Every byte of the run, warm-up included, by category."""


class Checkpoint(TypedDict):
    applies: bool
    """WAL mode: whether checkpoints happen at all."""
    count: int
    """Checkpoints (syncs of the database in WAL mode)."""
    in_commits: int
    """Those inside a commit."""
    outside_commits: int
    """Those outside (the close)."""
    commits_that_ran_one: list[int]
    """The commits that ran one."""
    bytes_total: int | None
    """Their bytes (null: the block level was not captured)."""
    charged_per_commit: float | None
    """Checkpoint bytes charged to the commit that ran it, per commit."""
    spread_per_commit: float | None
    """Checkpoint bytes spread over the commits that filled the WAL, per commit."""


class Finding(TypedDict):
    check: str
    """The disagreement between layers."""
    what: str
    """It in words."""
    commits: int
    """Commits showing it."""
    share: float
    """Their share."""
    examples: list[int]
    """Up to 10 of them."""


class FuseEffect(FuseLayer):
    # the layer as the lab describes it (FuseLayer's keys), and the calls on both sides
    sqlite_calls_per_commit: NotRequired[dict[str, float]]
    """SQLite's syscalls per measured commit."""
    daemon_calls_per_commit: NotRequired[dict[str, float]]
    """The daemon's."""
    changes: NotRequired[list[str]]
    """What the layer changed, in words."""
    daemon_cpu: NotRequired[JsonObject]
    """The daemon's CPU time over the run, every thread."""


class Remap(TypedDict):
    followed_by: Literal["block_bio_remap", "table offset"]
    """How writes were followed from the disk to the dm device."""
    table_offset_sectors: int | None
    """dm-delay's table offset."""
    disk_offsets_sectors: list[int]
    """The offsets the remap events showed."""


class Amortized(TypedDict):
    commits: int
    """The measured commits."""
    write_requests: int
    """Every write request from the first measured commit to the end."""
    write_bytes: int
    """Their bytes."""
    flush_requests: int
    """Cache flushes in that span."""


class Durability(TypedDict):
    states: int
    """Crash states judged."""
    images_mounted: int
    """Images built and mounted."""
    acknowledged: dict[str, int]
    """What SQLite had acknowledged by the last crash point, by phase."""
    outcomes: dict[str, int]
    """States by outcome."""
    lost_commits: JsonObject
    """Acknowledged commits lost: the most, the states losing any, their distribution."""
    corrupt_states: int
    """States with a corrupt or foreign database."""
    unmountable_states: int
    """States that did not mount."""
    first: JsonObject
    """The first state of each bad outcome, and what made the difference."""
    by_kind: dict[str, int]
    """States by kind."""
    log: dict[str, int]
    """The write log: entries, writes, flushes, FUA writes, discards, sector size."""
    options: JsonObject
    """The options of the exploration."""
    seconds: float
    """Its time."""
    states_per_minute: float | None
    """Its pace."""
    method: str
    """How states were made and judged, in words."""
    wal_checkpoint: NotRequired[JsonObject]
    """WAL mode: whether the commits reached SQLite's first checkpoint."""


# ------------------------------------------------------------------ the document


class Summary(TypedDict):
    schema_version: int
    """The layout's version (:data:`SUMMARY_SCHEMA_VERSION`)."""
    config: Config
    """The run's configuration."""
    levels: list[str]
    """The layers measured (``vfs``, ``syscall``, ``block``); an absent one was not captured."""
    commits: int
    """Measured commits (a transaction that changed a database file)."""
    warmup_commits: int
    """Warm-up commits."""
    per_commit: PerCommit
    """Means per measured commit."""
    vfs_by_file: dict[str, VfsKindFigures]
    """Means per measured commit by file kind (temp, other: only when used)."""
    latency_ms: LatencyMs
    """The commits' latency."""
    frame_budget_misses: FrameBudgetMisses
    """Commits longer than one frame."""
    waf: Waf
    """Write amplification: ratios of sums over measured commits."""
    cpu_ms: NotRequired[CpuMs]
    """The SQL thread's CPU time per commit."""
    phases: NotRequired[Phases]
    """The phases the commits went through, and each one's means."""
    device_not_measured: NotRequired[str]
    """A run without a lab filesystem: the line saying its times include an uncounted device."""
    stopped: NotRequired[Stopped]
    """What ended the transactions."""
    wrote_nothing: NotRequired[WroteNothing]
    """Transactions that changed no database file: not commits."""
    close: NotRequired[Close]
    """The closing of the run's connections, outside every transaction."""
    trace: NotRequired[Trace]
    """A lab run: the capture."""
    device_time: NotRequired[DeviceTime]
    """The block level: the device's request times inside measured commits."""
    bytes_by_category: NotRequired[BytesByCategory]
    """The block level: where the bytes went."""
    remap: NotRequired[Remap]
    """A dm device under the filesystem: how its writes were followed."""
    checkpoint: NotRequired[Checkpoint]
    """A lab run: WAL checkpoints."""
    findings: NotRequired[list[Finding]]
    """A lab run: per-commit disagreements between layers."""
    fuse: NotRequired[FuseEffect]
    """``--fuse``: the layer and what it changed."""
    amortized: NotRequired[Amortized]
    """The block level: every request from the first measured commit to the end."""
    durability: NotRequired[Durability]
    """``sqlwa crash``: the crash states and what they kept."""


#: The lines of the keys declared in the functional syntax (no identifiers), and the key
#: each follows in the document (a base class's keys come first in the class).
FUNCTIONAL_KEY_DOCS = {"p99.9": "The 99.9th percentile."}
FUNCTIONAL_KEY_AFTER = {"p99.9": "p99"}


# ------------------------------------------------------------------ reading the classes


@dataclass(frozen=True)
class Field:
    """One key of a section: its type, whether every summary has it, and its line."""

    name: str
    type: Any
    required: bool
    doc: str


@cache
def key_docs() -> dict[str, dict[str, str]]:
    """Each class's keys' docstrings (the string after a key's annotation), read from
    this module's source: class name → key → its line."""
    tree = ast.parse(Path(__file__).read_text())
    docs: dict[str, dict[str, str]] = {}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        # a section extending another of this module's (FuseEffect: FuseLayer) has its keys' lines
        own = docs.setdefault(cls.name, {})
        for base in cls.bases:
            if isinstance(base, ast.Name):
                own.update(docs.get(base.id, {}))
        for node, after in zip(cls.body, [*cls.body[1:], None]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                text = (
                    after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else ""
                )
                own[node.target.id] = " ".join(str(text).split())
    return docs


@cache
def fields(cls: type) -> tuple[Field, ...]:
    """The keys of a section (a TypedDict of this module), in the document's order."""
    hints = get_type_hints(cls)
    docs = {**FUNCTIONAL_KEY_DOCS, **key_docs().get(cls.__name__, {})}
    names = [name for name in hints if name not in FUNCTIONAL_KEY_AFTER]
    for name, after in FUNCTIONAL_KEY_AFTER.items():
        if name in hints:
            names.insert(names.index(after) + 1 if after in names else len(names), name)
    required = cls.__required_keys__  # type: ignore[attr-defined]
    return tuple(Field(name, hints[name], name in required, docs.get(name, "")) for name in names)


def sections(root: type = Summary) -> dict[type, str]:
    """``root`` and every section under it, each once with the path where it is first
    named (``config.lab``), in that order."""
    found: dict[type, str] = {}

    def visit(kind: Any, path: str) -> None:
        if is_typeddict(kind):
            if kind in found:
                return
            found[kind] = path
            for field in fields(kind):
                visit(field.type, f"{path}.{field.name}" if path else field.name)
        for arg in get_args(kind):
            visit(arg, f"{path}.*" if get_origin(kind) is dict else path)

    visit(root, "")
    return found


# ------------------------------------------------------------------ the check


def check_summary(summary: object) -> list[str]:
    """Every way ``summary`` (a parsed summary.json) departs from :class:`Summary`: a
    required key missing, a key the schema does not know, a value of another type; each
    as ``path: what``. An empty list: the summary is of the schema's shape."""
    problems: list[str] = []
    check_value(summary, Summary, "summary", problems)
    return problems


def check_value(value: object, kind: Any, path: str, problems: list[str]) -> None:
    """Append to ``problems`` what in ``value`` (at ``path``) is not of type ``kind``."""
    if is_typeddict(kind):
        check_section(value, kind, path, problems)
        return
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        check_union(value, args, path, problems)
        return
    if origin is Literal:
        if value not in args:
            problems.append(f"{path}: {value!r}, not one of {', '.join(map(repr, args))}")
        return
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{path}: {json_type(value)}, not a list")
            return
        for i, item in enumerate(value):
            check_value(item, args[0], f"{path}[{i}]", problems)
        return
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{path}: {json_type(value)}, not an object")
            return
        for key, item in value.items():
            check_value(item, args[1], f"{path}.{key}", problems)
        return
    if not is_a(value, kind):
        problems.append(f"{path}: {json_type(value)}, not {type_name(kind)}")


def check_union(value: object, arms: tuple[Any, ...], path: str, problems: list[str]) -> None:
    """A value of one of ``arms``; else what is wrong with it as the arm of its own JSON
    type (an object as the section it should be), or that it is of none of them."""
    for arm in arms:
        found: list[str] = []
        check_value(value, arm, path, found)
        if not found:
            return
        if container_of(arm) is type(value):
            problems.extend(found)
            return
    problems.append(f"{path}: {json_type(value)}, not {' or '.join(type_name(arm) for arm in arms)}")


def container_of(kind: Any) -> type | None:
    """The JSON container a type is (a section or an object: dict; a list: list)."""
    if is_typeddict(kind) or get_origin(kind) is dict:
        return dict
    return list if get_origin(kind) is list else None


def check_section(value: object, kind: type, path: str, problems: list[str]) -> None:
    if not isinstance(value, dict):
        problems.append(f"{path}: {json_type(value)}, not an object ({kind.__name__})")
        return
    known = {field.name: field for field in fields(kind)}
    for field in known.values():
        if field.name in value:
            check_value(value[field.name], field.type, f"{path}.{field.name}", problems)
        elif field.required:
            problems.append(f"{path}.{field.name}: missing")
    problems.extend(f"{path}.{key}: a key {kind.__name__} does not have" for key in value if key not in known)


def is_a(value: object, kind: Any) -> bool:
    """Whether a JSON value is of a plain type (a float may be written as an integer)."""
    if kind in (object, Any):
        return True
    if kind is None or kind is type(None):
        return value is None
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(kind, type) and isinstance(value, kind)


def json_type(value: object) -> str:
    """A value as JSON names its type."""
    if value is None:
        return "null"
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }
    return next((name for t, name in names.items() if type(value) is t), type(value).__name__)


def type_name(kind: Any, section: Callable[[type], str] | None = None) -> str:
    """A type as the reference page writes it: ``integer``, ``list of string``, ``string
    or null``; a section by its class name, or as ``section`` writes it (a link)."""
    if is_typeddict(kind):
        return section(kind) if section is not None else kind.__name__
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(arm, section) for arm in args)
    if origin is Literal:
        return " or ".join(f'"{arg}"' for arg in args)
    if origin is list:
        return f"list of {type_name(args[0], section)}"
    if origin is dict:
        return f"object of {type_name(args[1], section)}"
    plain = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null", object: "any"}
    return plain.get(kind, getattr(kind, "__name__", str(kind)))
