"""The results store: every run of a sweep in one SQLite file, ``DIR/results.sqlite``.

Tables (schema version in ``PRAGMA user_version``, upgraded by :data:`MIGRATIONS`):

* ``runs`` — one row per run (or per failed / skipped matrix cell): its configuration,
  its environment (kernel, SQLite version and compile options, filesystem and mount
  options, tool version, machine), its status, the headline figures per commit (one
  column per :data:`sqlwa.catalogue.METRICS` entry), the paths of its run directory and
  of its event table (``events.parquet``, when the run wrote one: saving never parses a
  trace), and the whole ``summary.json``. A figure of a layer that was not measured is
  NULL, never 0.
* ``commits`` — per-commit metrics of every run (one row per transaction).

Many processes may write at once (parallel sweeps into one store, ``sqlwa run --store``):
the file is in WAL mode, every connection waits up to :data:`BUSY_TIMEOUT_MS` for a
lock, and every write is one ``BEGIN IMMEDIATE`` transaction, so a run appears whole or
not at all.

A store is also a file people pass around (a shard from a CI artifact, a sweep in a bug
report), read by sqlwa running as root: readers open it as a foreign file
(:func:`connect_readonly`). Its schema may hold tables and their indexes only (no view,
trigger or virtual table runs code of the store's when a reader queries ``runs``), a
value may be no larger than sqlwa writes, queries are bounded in time (and a signal
still stops them), every JSON text is parsed without recursion limits being reached
(:func:`check_row`), and a path a row names resolves inside the store's directory
(:func:`contained`).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from sqlwa import _system, inputs, outputs
from sqlwa.analysis import metrics
from sqlwa.catalogue import CONFIG_KEYS, LAYER_KEYS, METRICS, NO_LAB_FS, NO_LAYER, config_values, layers_of
from sqlwa.errors import UsageError
from sqlwa.outputs import SQLITE_MAGIC, STORE_FILE  # what a store directory looks like
from sqlwa.results import findings, rundir

if TYPE_CHECKING:  # read, not imported: the store's readers need no lab
    from sqlwa.lab.stack import StackSpec

BUSY_TIMEOUT_MS = 60_000

# Per-commit columns kept in the store (names from sqlwa.catalogue's per-commit columns),
# in the commits table's column order; a column of an unmeasured layer stays NULL.
COMMIT_COLUMNS = (
    "warmup",
    "start_ns",
    "latency_ns",
    "logical_bytes",
    "vfs_write_calls",
    "vfs_write_bytes",
    "vfs_sync_calls",
    "fsync_calls",
    "fdatasync_calls",
    "pwrite_calls",
    "pwrite_bytes",
    "write_requests",
    "write_bytes",
    "flush_requests",
    "fua_writes",
    "cpu_user_ns",
    "cpu_sys_ns",
)

# Frozen history: the metric columns (catalogue.METRICS names) as version 1 made them. A
# metric added to the catalogue gets its column from a new migration, never from here.
V1_METRICS = (
    "logical_bytes_per_commit",
    "vfs_write_calls_per_commit",
    "vfs_write_kib_per_commit",
    "vfs_sync_calls_per_commit",
    "fsync_calls_per_commit",
    "pwrite_kib_per_commit",
    "block_write_requests_per_commit",
    "block_write_kib_per_commit",
    "write_kib_per_commit",
    "flushes_per_commit",
    "fua_per_commit",
    "block_over_logical",
    "block_over_vfs",
    "vfs_over_logical",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "frame_budget_misses",
)

SCHEMA_V1 = f"""
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    run_key TEXT NOT NULL UNIQUE,      -- cell + repeat for matrix runs, the run dir otherwise
    cell TEXT, repeat INTEGER, status TEXT NOT NULL, reason TEXT,
    scenario TEXT, fs TEXT, journal TEXT, sync TEXT, txns INTEGER,
    levels TEXT, commits INTEGER, lost_events INTEGER,
    run_dir TEXT, events_path TEXT, started_at REAL, finished_at REAL,
    kernel TEXT, machine TEXT, hostname TEXT,
    sqlite_version TEXT, sqlite_source_id TEXT, sqlite_compile_options TEXT,
    fs_type TEXT, fs_source TEXT, mount_options TEXT, mkfs_options TEXT, tool_version TEXT,
    config_json TEXT, summary_json TEXT,
    {", ".join(f"{name} REAL" for name in V1_METRICS)}
);
CREATE TABLE commits (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    warmup INTEGER, start_ns INTEGER, latency_ns INTEGER, logical_bytes INTEGER,
    vfs_write_calls INTEGER, vfs_write_bytes INTEGER, vfs_sync_calls INTEGER,
    fsync_calls INTEGER, fdatasync_calls INTEGER, pwrite_calls INTEGER, pwrite_bytes INTEGER,
    write_requests INTEGER, write_bytes INTEGER, flush_requests INTEGER, fua_writes INTEGER,
    PRIMARY KEY (run_id, idx)
);
"""

# Version 2: look-ups by configuration (check, compare and report group by it).
SCHEMA_V2 = "CREATE INDEX runs_by_config ON runs (scenario, fs, journal, sync, status);"

# Version 3: frame-budget misses as a share too (the attribution stage reports a share).
SCHEMA_V3 = "ALTER TABLE runs ADD COLUMN frame_budget_miss_pct REAL;"

# Version 4: the plan of the sweep that fills the store (one row), so that `sqlwa matrix
# --resume` can refuse to continue it with another plan.
SCHEMA_V4 = "CREATE TABLE matrix_plan (id INTEGER PRIMARY KEY CHECK (id = 1), plan_json TEXT NOT NULL);"

# Version 5: the layers on the filesystem (--encrypt, --fuse, --profile) are part of a
# configuration. Runs stored earlier get what their own config says (a matrix had no
# layers then, a run directory saved into a store may have), else none.
SCHEMA_V5 = """
ALTER TABLE runs ADD COLUMN encrypt TEXT;
ALTER TABLE runs ADD COLUMN fuse TEXT;
ALTER TABLE runs ADD COLUMN profile TEXT;
UPDATE runs SET
    encrypt = coalesce(json_extract(config_json, '$.encrypt'), 'none'),
    fuse = coalesce(json_extract(config_json, '$.fuse'), 'none'),
    profile = coalesce(json_extract(config_json, '$.profile.name'), 'none');
DROP INDEX runs_by_config;
CREATE INDEX runs_by_config ON runs (scenario, fs, encrypt, fuse, profile, journal, sync, status);
"""

# Version 6: the SQL thread's CPU time, per commit (user and system) and per run (the mean
# of user + system). Runs saved before it keep NULL there: they did not measure it.
SCHEMA_V6 = """
ALTER TABLE commits ADD COLUMN cpu_user_ns INTEGER;
ALTER TABLE commits ADD COLUMN cpu_sys_ns INTEGER;
ALTER TABLE runs ADD COLUMN cpu_ms_per_commit REAL;
"""

# Version 7: dm-crypt under the filesystem (--crypt) is a layer of the configuration too.
# Runs stored earlier get what their own config says (a run directory saved into a store
# may have had it), else none.
SCHEMA_V7 = """
ALTER TABLE runs ADD COLUMN crypt TEXT;
UPDATE runs SET crypt = coalesce(json_extract(config_json, '$.crypt'), 'none');
DROP INDEX runs_by_config;
CREATE INDEX runs_by_config ON runs (scenario, fs, encrypt, fuse, profile, crypt, journal, sync, status);
"""

# Version 8: what a `sqlwa crash` run found of its crash states. NULL for other runs:
# they tried none.
SCHEMA_V8 = """
ALTER TABLE runs ADD COLUMN crash_states INTEGER;
ALTER TABLE runs ADD COLUMN lost_commits INTEGER;
ALTER TABLE runs ADD COLUMN corrupt_states INTEGER;
ALTER TABLE runs ADD COLUMN unmountable_states INTEGER;
"""

#: MIGRATIONS[i] upgrades a store from version i to version i + 1.
MIGRATIONS = (SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8)
#: The results store's schema version (``PRAGMA user_version``); not summary.json's
#: (:data:`sqlwa.analysis.summary.SUMMARY_SCHEMA_VERSION`).
STORE_SCHEMA_VERSION = len(MIGRATIONS)


# --------------------------------------------------------------------------- connection


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating and migrating if needed) the store at ``path``; a store that cannot be
    made or set up (a read-only or full filesystem) is one UsageError naming it."""
    conn = None
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA trusted_schema = OFF")  # no function runs from the schema's text
        set_wal_mode(conn)
        migrate(conn)
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        fix = (
            "make room on that filesystem, or choose another --out"
            if full_disk(exc, path)
            else "choose a writable directory"
        )
        raise UsageError(f"cannot open results store {path}: {exc}", fix) from None
    return conn


#: Less room than this beside a store that failed with an I/O error: the disk is full.
NEARLY_FULL_BYTES = 1 << 20


def full_disk(exc: sqlite3.Error, path: Path) -> bool:
    """Whether SQLite failed for want of room: SQLITE_FULL, or an I/O error (what it reports
    when creating the database's first pages fails with ENOSPC) on a filesystem with less
    than :data:`NEARLY_FULL_BYTES` left."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL:
        return True
    if code is None or code & 0xFF != sqlite3.SQLITE_IOERR:
        return False
    try:
        return _system.mounts.free_space(str(Path(path).parent))[0] < NEARLY_FULL_BYTES
    except OSError:
        return False


def set_wal_mode(conn: sqlite3.Connection) -> None:
    # Switching to WAL needs a moment of exclusive access; under a burst of new writers
    # the busy handler is not always consulted for it, so retry briefly.
    for attempt in range(100):
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            time.sleep(0.05)


def close(conn: sqlite3.Connection) -> None:
    """Close a writer's connection, leaving the store in rollback-journal mode when no
    other connection has it open: readers open it read-only, and a read-only connection
    to a WAL database makes -wal and -shm files beside it that it cannot remove. The
    next writer switches it to WAL again (:func:`connect`)."""
    try:
        conn.execute("PRAGMA busy_timeout = 0")  # another connection: leave it in WAL, at once
        conn.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error:
        pass
    conn.close()


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One atomic write; BEGIN IMMEDIATE takes the write lock up front, so two writers
    never both read-then-write and deadlock on the upgrade."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a failed COMMIT (a full disk) may have ended it already
            conn.execute("ROLLBACK")
        raise


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the store to :data:`STORE_SCHEMA_VERSION`; concurrent openers migrate once."""
    if schema_version(conn) == STORE_SCHEMA_VERSION:
        return
    with write_transaction(conn):
        current = schema_version(conn)  # re-read under the lock: another writer may have won
        if current > STORE_SCHEMA_VERSION:
            raise UsageError(
                f"results store has schema version {current}, newer than this sqlwa ({STORE_SCHEMA_VERSION})",
                "upgrade sqlwa",
            )
        for version in range(current, STORE_SCHEMA_VERSION):
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {STORE_SCHEMA_VERSION}")


# --------------------------------------------------------------------------- figures


def _per_commit(summary: Mapping[str, Any], name: str) -> float | None:
    return summary.get("per_commit", {}).get(name)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _kib(value: float | None) -> float | None:
    return None if value is None else value / 1024


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def run_metrics(summary: Mapping[str, Any], commits: pl.DataFrame | None) -> dict[str, float | None]:
    """The headline figures of one run (one value per :data:`sqlwa.catalogue.METRICS`
    entry); a figure of an unmeasured layer is None."""
    levels = set(summary.get("levels", []))
    pc = summary.get("per_commit", {})
    syscall = "syscall" in levels
    block = "block" in levels
    amortized = pc.get("amortized_write_bytes", pc.get("write_bytes")) if block else None
    latency = summary.get("latency_ms", {})
    figures = {
        "logical_bytes_per_commit": pc.get("logical_bytes"),
        "vfs_write_calls_per_commit": pc.get("vfs_write_calls"),
        "vfs_write_kib_per_commit": _kib(pc.get("vfs_write_bytes")),
        "vfs_sync_calls_per_commit": pc.get("vfs_sync_calls"),
        "fsync_calls_per_commit": pc.get("fsync_calls") if syscall else None,
        "pwrite_kib_per_commit": _kib(pc.get("pwrite_bytes")) if syscall else None,
        "block_write_requests_per_commit": pc.get("write_requests") if block else None,
        "block_write_kib_per_commit": _kib(pc.get("write_bytes")) if block else None,
        "write_kib_per_commit": _kib(amortized),
        "flushes_per_commit": pc.get("flush_requests") if block else None,
        "fua_per_commit": pc.get("fua_writes") if block else None,
        "block_over_logical": _ratio(amortized, pc.get("logical_bytes")),
        "block_over_vfs": _ratio(amortized, pc.get("vfs_write_bytes")),
        "vfs_over_logical": _ratio(pc.get("vfs_write_bytes"), pc.get("logical_bytes")),
        "p50_ms": latency.get("p50"),
        "p99_ms": latency.get("p99"),
        "p999_ms": latency.get("p99.9", latency.get("p999")),
        "max_ms": latency.get("max"),
        "cpu_ms_per_commit": _ms(pc.get("cpu_ns")),
        "frame_budget_misses": None,
        "frame_budget_miss_pct": None,
        **crash_figures(summary.get("durability")),
    }
    # The run's own budget (`--frame-budget-ms`), so the store and summary.json agree.
    recorded = summary.get("frame_budget_misses")
    default = metrics.DEFAULT_FRAME_BUDGET_MS
    budget_ms = recorded.get("budget_ms", default) if isinstance(recorded, dict) else default
    figures.update(latency_figures(commits, budget_ms))
    return figures


def crash_figures(durability: dict | None) -> dict[str, float | None]:
    """The crash states' figures of a `sqlwa crash` run (None for any other run)."""
    if durability is None:
        return dict.fromkeys(("crash_states", "lost_commits", "corrupt_states", "unmountable_states"))
    return {
        "crash_states": durability["states"],
        "lost_commits": durability["lost_commits"]["max"],
        "corrupt_states": durability["corrupt_states"],
        "unmountable_states": durability["unmountable_states"],
    }


def latency_figures(
    commits: pl.DataFrame | None, budget_ms: float = metrics.DEFAULT_FRAME_BUDGET_MS
) -> dict[str, float]:
    """p99.9 and frame-budget misses straight from the measured commits' latencies."""
    if commits is None or "latency_ns" not in commits.columns:
        return {}
    measured = commits.filter(~pl.col("warmup"))
    if measured.height == 0:
        return {"frame_budget_misses": 0.0, "frame_budget_miss_pct": 0.0}
    misses = metrics.frame_budget_misses(measured, budget_ms)
    return {
        "p999_ms": metrics.latency_ms(measured)["p99.9"],
        "frame_budget_misses": float(misses["commits"]),
        "frame_budget_miss_pct": misses["share"] * 100,
    }


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class RunConfig:
    """A run's configuration as the store's columns hold it (:data:`CONFIG_KEYS`), each
    layer it lacks ``none``: the runs of one configuration are its repeats."""

    scenario: str
    fs: str
    journal: str
    sync: str
    encrypt: str = NO_LAYER
    fuse: str = NO_LAYER
    profile: str = NO_LAYER
    crypt: str = NO_LAYER

    @classmethod
    def of_stack(cls, scenario: str, stack: StackSpec, journal: str, sync: str) -> RunConfig:
        """The columns of a run on ``stack`` (its profile applied): the one place a stack
        becomes them. No lab filesystem is fs ``none``, no profile ``none``."""
        return cls(
            scenario=scenario,
            fs=stack.volume.fs or NO_LAB_FS,
            journal=journal,
            sync=sync,
            encrypt=stack.layers.encrypt,
            fuse=stack.layers.fuse,
            profile=stack.profile or NO_LAYER,
            crypt=stack.layers.crypt,
        )

    def columns(self) -> dict[str, str]:
        """The :data:`CONFIG_KEYS` columns, in their order."""
        values = asdict(self)
        return {key: values[key] for key in CONFIG_KEYS}


@dataclass(frozen=True)
class CellPlace:
    """Where a matrix's run sits in it: its configuration's key and which repeat it is."""

    cell: str
    repeat: int = 1


@dataclass
class RunRecord:
    """What the store keeps about one run or one matrix cell that did not run; the row's
    ``finished_at`` is when it is saved."""

    run_key: str
    config: RunConfig
    status: str = "ok"  # ok | failed | skipped
    reason: str | None = None
    txns: int | None = None
    run_dir: Path | None = None
    place: CellPlace | None = None  # None: a lone run (no cell, repeat 1)
    started_at: float | None = None


def _relative(path: Path | None, base: Path) -> str | None:
    """Paths inside the store's directory are kept relative, so the directory can move."""
    if path is None:
        return None
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(Path(path).resolve())


def environment_columns(summary: Mapping[str, Any]) -> dict:
    cfg = summary.get("config", {})
    lab = cfg.get("lab") or {}
    return {
        "kernel": cfg.get("kernel"),
        "machine": cfg.get("machine"),
        "hostname": cfg.get("hostname") or platform.node(),  # older runs: the machine saving them
        "sqlite_version": cfg.get("sqlite_version"),
        "sqlite_source_id": cfg.get("sqlite_source_id"),
        "sqlite_compile_options": json.dumps(cfg.get("sqlite_compile_options")),
        "fs_type": lab.get("fs_type", cfg.get("dir_fs", cfg.get("fs"))),
        "fs_source": cfg.get("fs_source"),
        "mount_options": cfg.get("mount_options"),
        "mkfs_options": json.dumps({"cmd": lab.get("mkfs_cmd"), "version": lab.get("mkfs_version")}) if lab else None,
        "tool_version": cfg.get("tool_version"),
        "config_json": json.dumps(cfg),
    }


def event_table(run_dir: Path | None) -> Path | None:
    """The run's events.parquet when it has one. Lab runs write it themselves; the store
    only records where it is and never parses a trace to make one (readers derive the
    events of an older run directory from its trace.txt, see :mod:`.rundir`)."""
    if run_dir is None:
        return None
    path = Path(run_dir) / rundir.EVENTS_FILE
    return path if path.is_file() else None


def record_row(record: RunRecord, summary: Mapping[str, Any] | None, commits: pl.DataFrame | None, base: Path) -> dict:
    """The runs-table row of ``record``; paths relative to ``base``. Writes nothing."""
    cell, repeat = (record.place.cell, record.place.repeat) if record.place else (None, 1)
    row = {
        "run_key": record.run_key,
        "cell": cell,
        "repeat": repeat,
        "status": record.status,
        "reason": record.reason,
        **record.config.columns(),
        "txns": record.txns,
        "run_dir": _relative(record.run_dir, base),
        "started_at": record.started_at,
        "finished_at": time.time(),
    }
    if summary is not None:
        trace = summary.get("trace") or {}
        row.update(
            levels=json.dumps(summary.get("levels", [])),
            commits=summary.get("commits"),
            lost_events=trace.get("lost_events") if trace else None,
            events_path=_relative(event_table(record.run_dir), base),
            summary_json=json.dumps(summary),
            **environment_columns(summary),
            **run_metrics(summary, commits),
        )
    return row


def commit_rows(run_id: int, commits: pl.DataFrame) -> list[tuple]:
    present = [c for c in COMMIT_COLUMNS if c in commits.columns]
    frame = commits.select(
        pl.col("index"),
        *[pl.col(c).cast(pl.Int64) for c in present],
        *[pl.lit(None, dtype=pl.Int64).alias(c) for c in COMMIT_COLUMNS if c not in present],
    ).select("index", *COMMIT_COLUMNS)
    return [(run_id, *row) for row in frame.iter_rows()]


def save_run(
    conn: sqlite3.Connection,
    record: RunRecord,
    summary: Mapping[str, Any] | None = None,
    commits: pl.DataFrame | None = None,
    base: Path | None = None,
) -> int:
    """Insert or replace one run (and its commits) atomically; returns its id."""
    row = record_row(record, summary, commits, base or Path("."))
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    try:
        with write_transaction(conn):
            conn.execute("DELETE FROM runs WHERE run_key = ?", (record.run_key,))
            run_id = conn.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", tuple(row.values())).lastrowid
            assert run_id is not None, "an INSERT into a rowid table sets lastrowid"
            if commits is not None:
                # by name: columns a migration added come last in the table, not in COMMIT_COLUMNS' order
                columns = ", ".join(("run_id", "idx", *COMMIT_COLUMNS))
                placeholders = ", ".join("?" for _ in range(len(COMMIT_COLUMNS) + 2))
                rows = commit_rows(run_id, commits)
                conn.executemany(f"INSERT INTO commits ({columns}) VALUES ({placeholders})", rows)
    except sqlite3.Error as exc:  # a disk that filled during the sweep: one line, not a traceback
        path = database_file(conn)
        fix = "make room on that filesystem, or choose another --out" if full_disk(exc, path) else "check the disk"
        raise UsageError(f"cannot record {record.run_key} in the results store {path}: {exc}", fix) from None
    return run_id


def database_file(conn: sqlite3.Connection) -> Path:
    """The file of ``conn``'s main database."""
    return Path(conn.execute("PRAGMA database_list").fetchone()[2])


def run_dir_record(run_dir: Path, config: Mapping[str, Any]) -> RunRecord:
    """The record of a lone run directory (not a matrix cell), from its configuration."""
    return RunRecord(
        run_key=str(run_dir.resolve()),
        config=RunConfig(**config_values(config)),
        txns=config.get("txns"),
        run_dir=run_dir,
    )


def save_run_dir(store_path: Path, run_dir: Path, record: RunRecord | None = None) -> int:
    """Add the run in ``run_dir`` (summary.json + commits.parquet) to the store at ``store_path``."""
    summary = rundir.summary(run_dir)
    commits = rundir.commits(run_dir)
    record = record or run_dir_record(run_dir, summary["config"])
    conn = connect(store_path)
    try:
        return save_run(conn, record, summary, commits, base=store_path.parent)
    finally:
        close(conn)


def record_plan(conn: sqlite3.Connection, plan: dict) -> None:
    """Keep the plan of the sweep that fills this store (replacing any earlier one)."""
    with write_transaction(conn):
        conn.execute("INSERT OR REPLACE INTO matrix_plan (id, plan_json) VALUES (1, ?)", (json.dumps(plan),))


def recorded_plan(conn: sqlite3.Connection) -> dict | None:
    """The plan :func:`record_plan` kept; None for a store an older sqlwa filled."""
    row = conn.execute("SELECT plan_json FROM matrix_plan WHERE id = 1").fetchone()
    if row is None:
        return None
    plan = parsed_json(row[0], "the sweep's plan (matrix_plan)")
    if not isinstance(plan, dict):
        raise rundir.Damaged("the sweep's plan (matrix_plan) is not a JSON object")
    return plan


def parsed_json(text: object, what: str) -> object:
    """``text`` (a store's JSON column) parsed, or :class:`rundir.Damaged`: text that is
    no JSON, nested too deeply for the parser, or with integers no column holds."""
    if not isinstance(text, str):
        raise rundir.Damaged(f"{what} is a {type(text).__name__}, not JSON text")
    try:
        return inputs.parse_json(text.encode())
    except ValueError as exc:
        raise rundir.Damaged(f"{what} is not JSON sqlwa can read: {str(exc)[:100]}") from None


@dataclass(frozen=True)
class Partial:
    """A matrix whose sweep stopped before every cell of its plan ran (Ctrl-C, a kill)."""

    cells_run: int
    cells_planned: int

    def __str__(self) -> str:
        return f"partial: {self.cells_run} of {self.cells_planned} cells"

    @property
    def what_to_do(self) -> str:
        return "finish it with its sqlwa matrix command plus --resume"

    def as_json(self) -> dict:
        return {"cells_run": self.cells_run, "cells_planned": self.cells_planned}


@dataclass(frozen=True)
class PartialRun:
    """A run a signal stopped between its commits, its measured commits kept: what its
    summary.json's ``stopped.partial`` says ("interrupted after N of M commits")."""

    interrupted: str

    def __str__(self) -> str:
        return f"partial run: {self.interrupted}"

    @property
    def what_to_do(self) -> str:
        return "its figures are those of the commits measured before the signal; run it again for all"

    def as_json(self) -> dict:
        return {"interrupted": self.interrupted}


def partial_of(path: Path) -> Partial | PartialRun | None:
    """How much of its plan the matrix in ``path`` has run, when not all of it, or what
    stopped the run in ``path`` before it finished; None for a whole matrix or run, or a
    store whose plan does not list its cells (an older sqlwa's). A failed or skipped cell
    counts as run: its row says what happened."""
    path = results_dir(path)
    if not (path / STORE_FILE).exists():
        return partial_run(path)
    with rundir.reading(path / STORE_FILE), connect_readonly(path / STORE_FILE) as conn:
        plan = recorded_plan(conn) if schema_version(conn) >= 4 else None
        run = {row[0] for row in conn.execute("SELECT run_key FROM runs")}
    keys = plan.get("cell_keys") if isinstance(plan, dict) else None
    if not isinstance(keys, list):
        return None
    planned = {key for key in keys if isinstance(key, str)}
    done = len(planned & run)
    return Partial(done, len(planned)) if done < len(planned) else None


def partial_run(run_dir: Path) -> PartialRun | None:
    """The run in ``run_dir`` when a signal stopped it and its measured commits were kept."""
    if not (run_dir / rundir.SUMMARY_FILE).is_file():
        return None
    stopped = rundir.summary(run_dir).get("stopped")
    interrupted = stopped.get("partial") if isinstance(stopped, dict) else None
    return PartialRun(interrupted) if isinstance(interrupted, str) else None


def say_if_partial(path: Path) -> None:
    """A note on stderr when ``path`` is a partial matrix or run: the figures read from it
    are those of the cells (or commits) that ran."""
    partial = partial_of(path)
    if partial is not None:
        print(f"note: {path} is a {partial} ({partial.what_to_do})", file=sys.stderr)


# --------------------------------------------------------------------------- reading


def done_keys(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT run_key FROM runs WHERE status = 'ok'")}


#: The largest value a reader takes from a store: sqlwa writes none larger (a run's
#: summary_json is a summary.json, within :data:`sqlwa.inputs.SUMMARY_LIMIT`); SQLite
#: refuses to read one past it (SQLITE_LIMIT_LENGTH: "string or blob too big").
VALUE_LIMIT = inputs.SUMMARY_LIMIT
#: How long the queries of one reader's connection may take together. A store of the
#: largest sweeps is read in seconds; what takes longer is no store of sqlwa's.
QUERY_TIME_LIMIT_S = 120.0
#: How often SQLite asks whether to go on (virtual machine instructions): about every
#: millisecond, so a deadline or a signal is obeyed at once.
PROGRESS_STEPS = 10_000
#: What a store's schema may hold: sqlwa makes tables and indexes, nothing else.
SCHEMA_KINDS = ("table", "index")


@contextmanager
def connect_readonly(path: Path, *, time_limit_s: float = QUERY_TIME_LIMIT_S) -> Iterator[sqlite3.Connection]:
    """The store at ``path`` opened for reading only, as a foreign file, closed after the
    block: readers never create, migrate or write a store, nor create a file beside it,
    and nothing in it can make a query run code of its own, for long, or into memory.

    The store, and its -wal and -shm where present, must be regular files (symlinks are
    followed: a reader's own copy may be a link). The connection is ``mode=ro`` and
    ``query_only``, with ``trusted_schema`` off; a value larger than :data:`VALUE_LIMIT`
    is refused; its queries together may take ``time_limit_s`` (a progress handler, which
    also lets Ctrl-C and SIGTERM stop a query at once); the schema must hold only tables
    and indexes (:func:`check_schema`). Each refusal is a :class:`rundir.Damaged` or
    :class:`UsageError` naming the store, for :func:`rundir.reading`.

    A read-only SQLite URI (``mode=ro``) writes nothing into the database, but on a WAL
    database whose ``-shm`` or ``-wal`` is missing (a matrix that was killed, a copied
    directory, a store left in WAL mode) SQLite creates them beside it; ``immutable=1``
    would not, but it also skips the WAL and with it the commits not yet checkpointed.
    There the store is read from a private copy of the database and its WAL, in a
    temporary directory, instead. A store in rollback mode, or a WAL store with both
    files (a matrix is writing it), is opened in place."""
    path = Path(os.path.realpath(path))
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    for each in (path, wal, shm):
        if each == path or os.path.lexists(each):
            inputs.check_input(each, "results store")
    if not in_wal_mode(path) or (wal.exists() and shm.exists()):
        yield from _opened(f"{path.as_uri()}?mode=ro", path, time_limit_s)
        return
    with tempfile.TemporaryDirectory(prefix="sqlwa-store-") as private:
        copy = Path(private) / path.name
        shutil.copyfile(path, copy)
        if wal.exists():
            shutil.copyfile(wal, f"{copy}-wal")
        yield from _opened(f"{copy.as_uri()}?mode=ro", path, time_limit_s)


def in_wal_mode(path: Path) -> bool:
    """Whether the database header says WAL (its read and write format versions are 2)."""
    with open(path, "rb") as f:
        header = f.read(20)
    return header.startswith(SQLITE_MAGIC) and header[18:20] == b"\x02\x02"


class QueryDeadline:
    """The progress handler of a reader's connection: stop once ``limit_s`` have passed.
    A signal's handler runs inside it (the only Python code that runs while SQLite does)
    and its exception is dropped by the sqlite3 module, which then stops the query as
    "interrupted": :meth:`stopped` tells the two apart and gives what to raise."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.deadline = time.monotonic() + limit_s
        self.signals_before = _system.signals.received_count()

    def __call__(self) -> bool:
        return time.monotonic() > self.deadline

    def stopped(self, exc: sqlite3.OperationalError, store: Path) -> BaseException | None:
        """What ``exc`` means when the handler stopped the query (None when it did not)."""
        if str(exc) != "interrupted":
            return None
        if self():
            return UsageError(
                f"a query of the results store {store} ran past {self.limit_s:g} s: it is no store of sqlwa's",
                "pass a store written by `sqlwa matrix` or `sqlwa merge`",
            )
        return _system.signals.interruption_received(self.signals_before)


def _opened(uri: str, store: Path, time_limit_s: float) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.row_factory = sqlite3.Row
    deadline = QueryDeadline(time_limit_s)
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, VALUE_LIMIT)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA trusted_schema = OFF")
        conn.set_progress_handler(deadline, PROGRESS_STEPS)
        check_schema(conn)
        yield conn
    except sqlite3.OperationalError as exc:
        stopped = deadline.stopped(exc, store)
        if stopped is None:
            raise
        raise stopped from None
    except sqlite3.DataError as exc:
        if "too big" not in str(exc):
            raise
        raise rundir.Damaged(f"it holds a value larger than the {inputs.size_text(VALUE_LIMIT)} sqlwa writes") from None
    finally:
        conn.close()


def check_schema(conn: sqlite3.Connection) -> None:
    """Refuse a schema with anything but tables and indexes: a view or a virtual table
    named like sqlwa's tables would run its own query (a recursive one, for ever) where a
    reader asks for rows, a trigger its own statements."""
    for kind, name, rootpage in conn.execute("SELECT type, name, rootpage FROM sqlite_schema"):
        if kind not in SCHEMA_KINDS:
            raise rundir.Damaged(f"it holds a {kind} ({name}); a sqlwa store holds tables and indexes only")
        if not rootpage:  # a table without pages of its own is a virtual one, whatever its text
            raise rundir.Damaged(f"it holds a virtual table ({name}); a sqlwa store holds tables and indexes only")


def check_foreign(path: Path) -> None:
    """Read the store at ``path`` as a foreign one (:func:`connect_readonly`) before a
    writer opens it (``sqlwa matrix --resume`` of a store that may have come from
    elsewhere): its schema, its plan. Nothing for an empty file (a sweep just begun)."""
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        return
    with rundir.reading(path), connect_readonly(path) as conn:
        found = conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'matrix_plan'").fetchone()
        if found is not None:
            recorded_plan(conn)


def check_readable(conn: sqlite3.Connection) -> None:
    """Refuse a store SQLite finds damaged, one that holds no sqlwa results, or one of a
    newer sqlwa; an older one is read as it is (its missing columns read as NULL)."""
    problem = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    if problem != "ok":
        raise rundir.Damaged(problem)
    version = schema_version(conn)
    if version == 0:
        raise rundir.Damaged("it holds no sqlwa results (schema version 0)")
    if version > STORE_SCHEMA_VERSION:
        raise UsageError(
            f"results store has schema version {version}, newer than this sqlwa ({STORE_SCHEMA_VERSION})",
            "upgrade sqlwa",
        )


# What a runs-table value may be, by the column's declared type.
VALUE_TYPES: dict[str, tuple[type, ...]] = {
    "INTEGER": (int, type(None)),
    "REAL": (int, float, type(None)),
    "TEXT": (str, type(None)),
}


#: The runs-table columns that hold JSON text.
JSON_COLUMNS = ("levels", "summary_json", "config_json", "sqlite_compile_options", "mkfs_options")


def check_row(row: dict, declared: dict[str, str]) -> None:
    """A runs-table row holds what its columns declare, JSON sqlwa can parse where it keeps
    JSON (every reader after this parses it as it likes), and readable ``levels``."""
    for name, value in row.items():
        allowed = VALUE_TYPES.get(declared.get(name, ""), (object,))
        if not isinstance(value, allowed):
            raise rundir.Damaged(f"run {row.get('id')}: {name} holds a {type(value).__name__}")
    parsed = {
        name: parsed_json(row[name], f"run {row.get('id')}'s {name}")
        for name in JSON_COLUMNS
        if row.get(name) is not None
    }
    # The shapes are checked on what was parsed above: a summary may be megabytes of JSON.
    findings.check_stored(parsed.get("summary_json", {}))
    levels = parsed.get("levels", [])
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        raise rundir.Damaged(f"run {row.get('id')}: levels is not a list of names")


def contained(base: Path, value: str) -> Path | None:
    """Where the path ``value`` a store's row names is (relative to the store's directory
    ``base``, or absolute), symlinks resolved, if that is strictly inside ``base``; None
    if it is anywhere else (``base`` itself, above it, beside it, through a symlink out)."""
    root = Path(os.path.realpath(base))
    found = Path(os.path.realpath(root / value))
    return found if root in found.parents else None


def runs_frame(conn: sqlite3.Connection, base: Path) -> pl.DataFrame:
    """Every run as a Polars frame; paths made absolute against ``base`` and checked
    (:func:`readable_paths`)."""
    declared = {r["name"]: r["type"] for r in conn.execute("PRAGMA table_info(runs)")}
    rows = [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY id")]
    if not rows:
        return pl.DataFrame()
    for row in rows:
        check_row(row, declared)
        readable_paths(row, base)
        for name in METRICS:  # columns a newer schema added, read from an older store
            row.setdefault(name, None)
        older_layers(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def readable_paths(row: dict, base: Path) -> None:
    """The row's run_dir and events_path, absolute, where readers may open them: a run
    directory inside the store's directory ``base``, or outside it only where it holds a
    finished sqlwa run (one saved into the store from elsewhere, :func:`save_run_dir`);
    its event table inside the store's directory or the run's. A successful run naming
    anything else is refused: a store from elsewhere names no directory of this machine
    for readers to read. Another run's path that is not readable is left out (a failed
    cell's directory is never read)."""
    run_dir = None if row.get("run_dir") is None else _run_dir_to_read(base, row["run_dir"])
    events = None if row.get("events_path") is None else contained(base, row["events_path"])
    if events is None and run_dir is not None and row.get("events_path") is not None:
        table = Path(os.path.realpath(Path(base) / row["events_path"]))
        events = table if run_dir in table.parents else None
    if run_dir is not None:
        refuse_links_out(run_dir, row)
    for key, found in (("run_dir", run_dir), ("events_path", events)):
        if found is None and row.get(key) is not None and row.get("status") == "ok":
            raise rundir.Damaged(
                f"run {row.get('run_key')}'s {key} is {row[key]}, outside the store's directory and no sqlwa run's: "
                "sqlwa reads a store's runs only there"
            )
        row[key] = None if found is None else str(found)


def refuse_links_out(run_dir: Path, row: dict) -> None:
    """A run's directory whose files lead nowhere else: a symlink in it to a file
    outside (a crafted store's ``commits.parquet`` -> another database) would have its
    readers read that file."""
    try:
        entries = [entry.name for entry in os.scandir(run_dir) if entry.is_symlink()]
    except OSError:
        return  # no directory to read (a failed cell's): its readers say so, if they read it
    for name in entries:
        if contained(run_dir, name) is None:
            raise rundir.Damaged(
                f"run {row.get('run_key')}'s {name} is a symlink out of its directory: sqlwa reads a run's own files only"
            )


def _run_dir_to_read(base: Path, value: str) -> Path | None:
    inside = contained(base, value)
    if inside is not None:
        return inside
    found = Path(os.path.realpath(Path(base) / value))
    return found if outputs.holds_a_run(found) and rundir.is_complete(found) else None


def older_layers(row: dict) -> None:
    """The layers a row read from an older store has no column for (all of them before
    version 5, ``crypt`` before 7), from the run's own config as the migration would set
    them; the layer columns it has are kept (a skipped cell has no config to read)."""
    if any(key not in row for key in LAYER_KEYS):
        config = json.loads(row.get("config_json") or "{}")
        for key, value in layers_of(config if isinstance(config, dict) else {}).items():
            row.setdefault(key, value)


def single_run_frame(run_dir: Path) -> pl.DataFrame:
    """A run directory (summary.json + commits.parquet) as a one-row runs frame."""
    summary = rundir.summary(run_dir)  # first: it refuses an unfinished run
    commits = rundir.commits(run_dir)  # every run writes it: one without it is damaged
    return pl.DataFrame([run_dir_row(run_dir, summary, commits)], infer_schema_length=None)


def run_dir_row(run_dir: Path, summary: Mapping[str, Any], commits: pl.DataFrame | None) -> dict:
    """The runs-frame row of a run directory already read, its paths absolute."""
    record = run_dir_record(run_dir, summary.get("config", {}))
    row = record_row(record, summary, commits, run_dir)
    row["run_dir"] = str(run_dir.resolve())
    events = event_table(run_dir)
    row["events_path"] = str(events.resolve()) if events is not None else None
    return row


def results_dir(path: Path) -> Path:
    path = Path(path)
    return path.parent if path.is_file() and path.suffix == ".sqlite" else path


LATENCY_SCHEMA = {**{key: pl.String for key in CONFIG_KEYS}, "run_key": pl.String, "latency_ns": pl.Int64}


def load_latencies(path: Path) -> pl.DataFrame:
    """Every measured (non-warm-up) commit's latency of the successful runs in a matrix or
    run directory: the configuration keys, ``run_key`` and ``latency_ns``."""
    path = results_dir(path)
    if (path / STORE_FILE).exists():
        with rundir.reading(path / STORE_FILE):
            with connect_readonly(path / STORE_FILE) as conn:
                query = (
                    f"SELECT {', '.join(config_columns(conn))}, r.run_key, c.latency_ns FROM commits c "
                    "JOIN runs r ON r.id = c.run_id WHERE r.status = 'ok' AND NOT c.warmup AND c.latency_ns IS NOT NULL"
                )
                return pl.DataFrame([tuple(r) for r in conn.execute(query)], schema=LATENCY_SCHEMA, orient="row")
    row = load_results(path).row(0, named=True)  # refuses what is not a finished run
    commits = rundir.commits(path).filter(~pl.col("warmup"))
    return commits.select(
        *[pl.lit(str(row[key])).alias(key) for key in CONFIG_KEYS],
        pl.lit(row["run_key"]).alias("run_key"),
        pl.col("latency_ns").cast(pl.Int64),
    )


# Each layer's column: the store version that added it and where its migration took it
# from in the run's config.
LAYER_COLUMNS = {
    "encrypt": (5, "$.encrypt"),
    "fuse": (5, "$.fuse"),
    "profile": (5, "$.profile.name"),
    "crypt": (7, "$.crypt"),
}


def config_columns(conn: sqlite3.Connection) -> list[str]:
    """The configuration keys as columns of ``runs r``; a layer a store is too old to
    have a column for comes from each run's config, as its migration would set it."""
    version = schema_version(conn)
    older = {
        key: f"coalesce(json_extract(r.config_json, '{path}'), '{NO_LAYER}')"
        for key, (since, path) in LAYER_COLUMNS.items()
        if version < since
    }
    return [older.get(key, f"r.{key}") for key in CONFIG_KEYS]


def load_results(path: Path) -> pl.DataFrame:
    """The runs of a matrix directory (its results.sqlite) or of one run directory."""
    path = Path(path)
    if not rundir.polars_can_name(Path(os.path.realpath(path))):  # realpath: a symlink loop is no error
        # The runs frame keeps each run's directory as text, which Polars holds as UTF-8.
        raise UsageError(
            f"{path}: sqlwa reads results only where their path is UTF-8 text",
            "rename the directory (or link to it) with a UTF-8 name",
        )
    path = results_dir(path)
    if (path / STORE_FILE).exists():
        with rundir.reading(path / STORE_FILE):
            with connect_readonly(path / STORE_FILE) as conn:
                check_readable(conn)
                return runs_frame(conn, path)
    if (path / rundir.SUMMARY_FILE).exists() or (path / rundir.RUNNING_FILE).exists():
        return single_run_frame(path)
    raise UsageError(
        f"{path} holds neither {STORE_FILE} nor summary.json",
        "pass a directory written by `sqlwa matrix --out` or `sqlwa run --out`",
    )


def config_means(runs: pl.DataFrame, latencies: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per configuration (:data:`sqlwa.catalogue.CONFIG_KEYS`) over its successful runs:
    the mean of every figure across repeats, the repeats counted and lost events summed.
    With ``latencies`` (:func:`load_latencies`) the latency quantiles are those of all
    the configuration's commits pooled: a mean of each repeat's p99 is no p99.
    ``<metric>_sd``: the sample standard deviation (n - 1) of the runs' own values, as
    hyperfine shows a spread (null for one run): of each run's p99 for p99_ms too."""
    ok = runs.filter(pl.col("status") == "ok") if runs.height else runs
    if ok.height == 0:
        return ok
    figures = [m for m in METRICS if m in ok.columns]
    means = ok.group_by(CONFIG_KEYS, maintain_order=True).agg(
        pl.len().alias("repeats"),
        pl.col("levels").first(),
        pl.col("commits").sum(),
        pl.col("lost_events").fill_null(0).sum().alias("lost_events"),
        pl.col("run_dir").first(),
        *[pl.col(m).cast(pl.Float64).mean() for m in figures],
        *[pl.col(m).cast(pl.Float64).std(ddof=1).alias(sd_column(m)) for m in figures],
    )
    if latencies is None or latencies.height == 0:
        return means
    pooled = pooled_latency(latencies)
    keys = means.select(*[pl.col(k).cast(pl.String) for k in CONFIG_KEYS])
    return means.with_columns(
        keys.join(pooled, on=list(CONFIG_KEYS), how="left", maintain_order="left").select(
            *POOLED_QUANTILES, "max_ms", "mean_ms", sd_column("mean_ms")
        )
    )


def sd_column(metric: str) -> str:
    """The column of :func:`config_means` holding the spread of ``metric`` over the runs."""
    return f"{metric}_sd"


# The latency figures pooled over repeats, by the quantile of metrics.latency_ms they are.
POOLED_QUANTILES = {"p50_ms": 0.50, "p99_ms": 0.99, "p999_ms": 0.999}


def pooled_latency(latencies: pl.DataFrame) -> pl.DataFrame:
    """Per configuration: the quantiles (linear, as each run's), maximum and mean of all
    commits; ``mean_ms_sd``, the sample standard deviation of each run's own mean (null
    for one run), as every other figure's spread."""
    ms = pl.col("latency_ns").cast(pl.Float64) / 1e6
    per_run = (
        latencies.group_by([*CONFIG_KEYS, "run_key"])
        .agg(ms.mean().alias("run_mean"))
        .group_by(CONFIG_KEYS)
        .agg(pl.col("run_mean").std(ddof=1).alias(sd_column("mean_ms")))
    )
    pooled = latencies.group_by(CONFIG_KEYS).agg(
        *[ms.quantile(q, interpolation="linear").alias(name) for name, q in POOLED_QUANTILES.items()],
        ms.max().alias("max_ms"),
        ms.mean().alias("mean_ms"),
    )
    return pooled.join(per_run, on=list(CONFIG_KEYS), how="left").select(
        *CONFIG_KEYS, *POOLED_QUANTILES, "max_ms", "mean_ms", sd_column("mean_ms")
    )
