"""sqlwa's vocabulary, in one place: the headline metrics (name, level, unit, label,
direction), the per-commit columns, the file kinds, what counts as a cache flush, and the
configuration keys and labels runs are told apart by.

Store, report, check, compare, the CLI's tables and the Python API read names from here
rather than spelling them again. This module sits low in the import layering: it imports
only the native core (whose lists it passes on), so every stage can read it, and the
command line's options can take their choices and defaults from it without importing
Polars (which :func:`is_flush` imports when it is called).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from sqlwa import _native

if TYPE_CHECKING:
    import polars as pl

# ------------------------------------------------------------------ levels

#: The layers a run measures: ``vfs`` always; ``syscall`` and ``block`` only on a lab
#: filesystem with tracefs; ``crash``, the crash states of the device's writes, only in a
#: ``sqlwa crash`` run.
LEVELS = ("vfs", "syscall", "block", "crash")
Level: TypeAlias = Literal["vfs", "syscall", "block", "crash"]

# ------------------------------------------------------------------ file kinds

#: The kinds of file the engine's counting VFS tells apart, in its column order
#: (``vfs_<kind>_<counter>`` in commits.parquet).
FILE_KINDS = _native.FILE_KINDS

#: The database's own files: the kinds the engine maps with FIEMAP (``extents``
#: markers), so attribution can name them as the cause of a block write, and the kinds
#: summary.json's ``vfs_by_file`` always lists (``temp``/``other`` only when used).
DATABASE_FILE_KINDS = ("db", "journal", "wal", "shm")

# ------------------------------------------------------------------ defaults

# The defaults the command line shows in its help and the API's functions take: here,
# where the CLI reads them without importing the analysis (and Polars) behind them.

#: One frame at 60 Hz, ms: a commit longer than this misses the frame budget.
DEFAULT_FRAME_BUDGET_MS = 16.67
#: ``--frame-rate`` presets: a display's refresh rate (Hz) → its frame, ms, rounded as the
#: default is (60 Hz is the default budget exactly).
FRAME_RATES = {60: DEFAULT_FRAME_BUDGET_MS, 90: 11.11, 120: 8.33}
#: Monte Carlo draws per commit for a predicted latency, and their seed.
DEFAULT_DRAWS = 200
DEFAULT_SEED = 0
#: The sweep of ``sqlwa matrix``: PRAGMA journal_mode × synchronous.
DEFAULT_JOURNALS = ("delete", "truncate", "persist", "wal")
DEFAULT_SYNCS = ("normal", "full")
#: The size of a lab filesystem's image.
DEFAULT_IMAGE_SIZE = "1G"
#: The VM lab's default guest kernel: Debian's current one (:mod:`sqlwa.vm.kernel` fetches it).
DEBIAN_KERNEL = "debian"
#: The trace formats ``sqlwa parse`` and :func:`sqlwa.parse` read (auto: detected).
TRACE_FORMATS = ("auto", "blktrace", "blkparse", "ftrace", "perfetto")
#: The block operations a parse names, in the order ``sqlwa parse`` lists what completed.
BLOCK_OPERATIONS = ("write", "read", "flush", "discard", "secure_erase", "write_zeroes", "none")
#: The stages of a block request (blkparse's action letters), in the order a request
#: passes them, then the events of the queue itself: ``sqlwa parse`` lists each device's
#: events per stage in this order, with these words.
BLOCK_STAGES = {
    "A": "remapped",
    "Q": "queued",
    "X": "split",
    "B": "bounced",
    "M": "back-merged",
    "F": "front-merged",
    "G": "got a request",
    "S": "slept for a request",
    "I": "inserted",
    "D": "issued",
    "R": "requeued",
    "C": "completed",
    "T": "aborted",
    "P": "plug",
    "U": "unplug",
    "UT": "unplug (timer)",
    "m": "message",
    "?": "other block event",
}

# ------------------------------------------------------------------ cache flushes


def is_flush() -> pl.Expr:
    """What counts as a device cache flush, over rows of the event table: a standalone
    flush request or a request carrying the preflush flag (REQ_PREFLUSH, the ``F`` in
    front of RWBS). Per-commit ``flush_requests``, the ``flushes_per_commit`` metric and
    the ▼ marks of the timeline all count this."""
    import polars as pl

    return (pl.col("operation") == "flush") | pl.col("preflush")


# ------------------------------------------------------------------ per-commit columns

#: commits.parquet's per-commit figures, by the level that measures them (each a count or
#: a byte total inside the commit window). A column of an unmeasured level is absent.
VFS_COMMIT_COLUMNS = ("logical_bytes", "vfs_write_calls", "vfs_write_bytes", "vfs_sync_calls")
SYSCALL_COMMIT_COLUMNS = (
    "fsync_calls",  # fsync + fdatasync + sync_file_range
    "fdatasync_calls",
    "pwrite_calls",
    "pwrite_bytes",
    "ftruncate_calls",
    "unlink_calls",
)
#: The same figures for a FUSE daemon's threads (``--fuse``), beside SQLite's.
FUSE_SYSCALL_COMMIT_COLUMNS = tuple(f"fuse_{name}" for name in SYSCALL_COMMIT_COLUMNS)
BLOCK_COMMIT_COLUMNS = (
    "write_requests",
    "write_bytes",
    "flush_requests",  # see is_flush()
    "fua_writes",
    "read_requests",
    "read_bytes",
    "discard_requests",
)
#: The commit itself: warm-up flag, start (CLOCK_MONOTONIC ns) and latency (ns).
COMMIT_TIMING_COLUMNS = ("warmup", "start_ns", "latency_ns")
#: CPU time of the SQL thread inside the commit window, ns: user, system and their sum
#: (``cpu_ns``, exact; the user/system split is the kernel's, sampled at scheduler ticks).
#: Measured by the engine in every run; absent in runs of sqlwa before it did.
CPU_COMMIT_COLUMNS = ("cpu_user_ns", "cpu_sys_ns", "cpu_ns")

# ------------------------------------------------------------------ headline metrics

#: Which way a metric improves. Every cost (calls, bytes, flushes, amplification,
#: latency, missed frames) is ``"lower"``; the workload's own payload is ``None``: it is
#: what was asked for, neither better nor worse.
Better: TypeAlias = Literal["lower", "higher"] | None


@dataclass(frozen=True)
class Metric:
    """One headline figure of a run: a column of the store's runs table, a cell of the
    report's table, a limit ``max_<name>`` in a check policy, a row of ``sqlwa compare``."""

    name: str
    level: Level  # the layer that must be measured for it; NULL in the store otherwise
    unit: str  # of the value as stored, e.g. "KiB", "ms", "calls"
    label: str  # short, for table headers and axes
    description: str  # one line: what it counts
    better: Better = "lower"
    digits: int = 2  # decimals a table shows
    # Read off a clock, so it varies from run to run of one configuration: the gate holds
    # it with the spread of repeats and a significance test, never as an exact count.
    timing: bool = False

    @property
    def direction(self) -> str:
        """Which way is better, in words."""
        return {"lower": "lower is better", "higher": "higher is better", None: "neither better nor worse"}[self.better]

    def worse(self, delta: float) -> bool:
        """A change of ``delta`` (new − old) is for the worse."""
        if self.better is None:
            return False
        return delta > 0 if self.better == "lower" else delta < 0

    def improved(self, delta: float) -> bool:
        """A change of ``delta`` (new − old) is for the better."""
        return delta != 0 and self.better is not None and not self.worse(delta)


def _metrics(*metrics: Metric) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


#: The per-run headline figures, in the order the store's runs table, the report's table
#: and its legend show them. Per commit: means over measured (non-warm-up) commits.
METRICS: Mapping[str, Metric] = _metrics(
    Metric(
        "logical_bytes_per_commit",
        "vfs",
        "B",
        "logical B",
        "payload the app asked to store, bytes",
        better=None,
        digits=0,
    ),
    Metric("vfs_write_calls_per_commit", "vfs", "calls", "VFS writes", "SQLite xWrite calls, all files"),
    Metric("vfs_write_kib_per_commit", "vfs", "KiB", "VFS KiB", "SQLite xWrite KiB, all files", digits=1),
    Metric("vfs_sync_calls_per_commit", "vfs", "calls", "VFS xSync", "SQLite xSync calls, all files"),
    Metric("fsync_calls_per_commit", "syscall", "calls", "fsync", "fsync + fdatasync + sync_file_range syscalls"),
    Metric("pwrite_kib_per_commit", "syscall", "KiB", "pwrite KiB", "pwrite64 KiB", digits=1),
    Metric(
        "block_write_requests_per_commit",
        "block",
        "requests",
        "block writes",
        "block write requests inside the commit window",
    ),
    Metric(
        "block_write_kib_per_commit",
        "block",
        "KiB",
        "block KiB in window",
        "block KiB written inside the commit window",
        digits=1,
    ),
    Metric(
        "write_kib_per_commit",
        "block",
        "KiB",
        "block KiB",
        "block KiB written from the first commit to the end / commits (writeback included)",
        digits=1,
    ),
    Metric(
        "flushes_per_commit", "block", "flushes", "flushes", "device cache flushes (flush requests + preflush flags)"
    ),
    Metric("fua_per_commit", "block", "writes", "FUA", "FUA writes (force unit access: past the device cache)"),
    Metric(
        "block_over_logical",
        "block",
        "×",
        "block/logical",
        "amortized block bytes / logical bytes (whole-stack write amplification)",
        digits=0,
    ),
    Metric(
        "block_over_vfs",
        "block",
        "×",
        "block/VFS",
        "amortized block bytes / VFS bytes (the filesystem's share)",
        digits=1,
    ),
    Metric("vfs_over_logical", "vfs", "×", "VFS/logical", "VFS bytes / logical bytes (SQLite's share)", digits=1),
    Metric("p50_ms", "vfs", "ms", "p50 ms", "commit latency p50, ms", digits=3, timing=True),
    Metric("p99_ms", "vfs", "ms", "p99 ms", "commit latency p99, ms", digits=3, timing=True),
    Metric("p999_ms", "vfs", "ms", "p99.9 ms", "commit latency p99.9, ms", digits=3, timing=True),
    Metric("max_ms", "vfs", "ms", "max ms", "commit latency max, ms", digits=3, timing=True),
    Metric(
        "cpu_ms_per_commit",
        "vfs",
        "ms",
        "CPU ms",
        "CPU time of the SQL thread inside the commit window (user + system), mean, ms",
        digits=3,
        timing=True,
    ),
    Metric(
        "frame_budget_misses",
        "vfs",
        "commits",
        "frame misses",
        "measured commits slower than the run's frame budget (default one 60 Hz frame, 16.67 ms), count",
        digits=0,
        timing=True,
    ),
    Metric(
        "frame_budget_miss_pct",
        "vfs",
        "%",
        "frame misses %",
        "the same as a share of measured commits, %",
        digits=1,
        timing=True,
    ),
    Metric(
        "crash_states", "crash", "states", "crash states", "crash states tried (sqlwa crash)", better=None, digits=0
    ),
    Metric(
        "lost_commits",
        "crash",
        "commits",
        "lost commits",
        "acknowledged commits lost in the worst crash state whose database was sound",
        digits=0,
    ),
    Metric(
        "corrupt_states",
        "crash",
        "states",
        "corrupt states",
        "crash states whose database SQLite refused or found corrupt, or whose rows were no commit's",
        digits=0,
    ),
    Metric(
        "unmountable_states", "crash", "states", "unmountable", "crash states whose filesystem did not mount", digits=0
    ),
)

# ------------------------------------------------------------------ consistency findings

#: summary.json's ``findings``: per-commit disagreements between layers, found by
#: :func:`sqlwa.analysis.metrics.consistency_findings`, each with the level whose
#: counters it compares with the syscall level's (a run that did not measure it cannot
#: have the finding, and has not shown it is free of it either).
FINDINGS: Mapping[str, Level] = {
    "xsync_without_fsync": "syscall",
    "fsync_without_xsync": "syscall",
    "fsync_flushed_nothing": "block",
    "flush_without_fsync": "block",
    "more_fsyncs_than_flushes": "block",
}

#: The findings that mean a commit was not made durable: a sync SQLite asked for never
#: became a syscall, or an fsync returned without a cache flush reaching the device (e.g.
#: ext4 mounted ``barrier=0``). Such commits are cheap because they may be lost on power
#: loss, so fewer flushes there are no gain.
DURABILITY_FINDINGS = ("xsync_without_fsync", "fsync_flushed_nothing")

# ------------------------------------------------------------------ configurations

#: The layers a run may put around its lab filesystem, as the summary's config names
#: them: ``--encrypt``, ``--fuse``, the ``--profile`` they came from, and ``--crypt``
#: (dm-crypt under the filesystem).
LAYER_KEYS = ("encrypt", "fuse", "profile", "crypt")
#: A layer that is not there (and a run from before sqlwa had layers).
NO_LAYER = "none"
#: What a configuration is: runs with equal values are repeats of one configuration.
CONFIG_KEYS = ("scenario", "fs", *LAYER_KEYS, "journal", "sync")
# The fs of a run without a lab filesystem (no --fs), in `run` and `matrix --vfs-only`
# alike; the filesystem its directory happened to be on is config["dir_fs"].
NO_LAB_FS = "none"


def layers_of(config: Mapping[str, Any]) -> dict[str, str]:
    """A run's layers from its summary's config: its encryption, its FUSE layer, the
    name of its profile and its dm-crypt, ``none`` for each it lacks (a run without a
    lab, or one made before sqlwa had layers, records none of them)."""
    profile = config.get("profile")
    if isinstance(profile, Mapping):  # summary.json records the whole profile
        profile = profile.get("name")
    return {
        "encrypt": str(config.get("encrypt") or NO_LAYER),
        "fuse": str(config.get("fuse") or NO_LAYER),
        "profile": str(profile or NO_LAYER),
        "crypt": str(config.get("crypt") or NO_LAYER),
    }


def config_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's :data:`CONFIG_KEYS` values from its summary's config: ``?`` for a key it
    lacks, ``none`` for a layer it lacks (:func:`layers_of`)."""
    layers = layers_of(config)
    return {key: layers[key] if key in LAYER_KEYS else config.get(key, "?") for key in CONFIG_KEYS}


def stack_label(row: Mapping[str, Any]) -> str:
    """The filesystem and the layers around it, from the disk up: ``ext4``,
    ``ext4+dm-crypt``, ``ext4+fscrypt+fuse:passthrough``; with a profile, its name first:
    ``android-ext4 (ext4+fscrypt)``."""
    parts = [str(row["fs"])]
    if _present(row, "crypt"):
        parts.append(str(row["crypt"]))
    if _present(row, "encrypt"):
        parts.append(str(row["encrypt"]))
    if _present(row, "fuse"):
        parts.append(f"fuse:{row['fuse']}")
    stack = "+".join(parts)
    return f"{row['profile']} ({stack})" if _present(row, "profile") else stack


def _present(row: Mapping[str, Any], layer: str) -> bool:
    return row.get(layer) not in (None, NO_LAYER)


def has_layers(row: Mapping[str, Any]) -> bool:
    """Whether a configuration has any layer on its filesystem."""
    return any(_present(row, key) for key in LAYER_KEYS)


def config_label(row: Mapping[str, Any]) -> str:
    """``scenario stack journal/sync``: how tables, checks and figures name a configuration
    (a plain one: ``mobibench-insert ext4 wal/full``)."""
    return f"{row['scenario']} {stack_label(row)} {row['journal']}/{row['sync']}"


def run_label(row: Mapping[str, Any]) -> str:
    """:func:`config_label` plus ``#N`` for a repeat after the first."""
    return config_label(row) + (f" #{row['repeat']}" if (row.get("repeat") or 1) > 1 else "")


def config_key(row: Mapping[str, Any]) -> tuple:
    """The configuration a row belongs to (:data:`CONFIG_KEYS` values), for matching."""
    return tuple(row[key] for key in CONFIG_KEYS)
