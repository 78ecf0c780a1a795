"""The phases a run's commits went through, and the per-commit means of each.

A mean over a whole WAL run depends on its length: until the first checkpoint SQLite
appends to a growing WAL (ext4 FULL: 2 cache flushes a commit, the file's size changes
with each), after it SQLite writes the WAL again from its start (1 flush, the size no
longer changes), and the commit that runs a checkpoint copies pages into the database.
``-n 200`` and ``-n 500`` mix these in other proportions, so their means differ while
no commit did. Each commit is given one phase, in this order:

* ``warmup``: the commits the run marks as warm-up;
* ``checkpoint``: in WAL mode, a commit during which SQLite wrote the database file
  (VFS counters: in WAL mode only a checkpoint writes it);
* ``wal_growth``: in WAL mode, measured commits before the first checkpoint commit;
* ``steady``: the rest: after the first checkpoint in WAL mode, every measured commit of
  a rollback journal (whose commits all do the same work).

The per-phase figures are means over the phase's commits of what happened inside their
commit windows (the same columns as ``per_commit``); bytes written outside every
commit (deferred writeback, the final syncfs) belong to no phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

import polars as pl

PHASES = ("warmup", "wal_growth", "checkpoint", "steady")
PHASE_TYPE = pl.Enum(PHASES)
PHASE_LABELS = {
    "warmup": "warm-up",
    "wal_growth": "WAL growth (before the first checkpoint)",
    "checkpoint": "checkpoint commits",
    "steady": "steady state",
}
PHASE_SHORT = {"warmup": "warm-up", "wal_growth": "WAL growth", "checkpoint": "checkpoint", "steady": "steady state"}
#: The phases a gate compares, most representative first (warm-up is never compared).
COMPARED_PHASES = ("steady", "wal_growth")

#: Per-phase figure → (per-commit column, scale, level that measures it). Names are the
#: store's metric names (:data:`sqlwa.catalogue.METRICS`), so gates can match them.
PHASE_FIGURES = {
    "vfs_write_kib_per_commit": ("vfs_write_bytes", 1 / 1024, "vfs"),
    "vfs_sync_calls_per_commit": ("vfs_sync_calls", 1.0, "vfs"),
    "fsync_calls_per_commit": ("fsync_calls", 1.0, "syscall"),
    "block_write_requests_per_commit": ("write_requests", 1.0, "block"),
    "block_write_kib_per_commit": ("write_bytes", 1 / 1024, "block"),
    "flushes_per_commit": ("flush_requests", 1.0, "block"),
}


def wrote_database() -> pl.Expr:
    """SQLite wrote the main database file inside the commit (VFS level)."""
    return pl.col("vfs_db_write_calls") > 0


def with_phases(commits: pl.DataFrame, journal: str, checkpointed_before: bool = False) -> pl.DataFrame:
    """``commits`` with a ``phase`` column (see the module's docstring);
    ``checkpointed_before``: a commit before these (an earlier chunk of a run handed over
    in chunks) checkpointed, so none of these is in the WAL's growth."""
    ordered = commits.sort("index")
    if journal != "wal":
        phase = pl.when(pl.col("warmup")).then(pl.lit("warmup")).otherwise(pl.lit("steady"))
        return ordered.with_columns(phase.cast(PHASE_TYPE).alias("phase"))
    checkpointed = wrote_database()
    # a checkpoint ran in an earlier commit (warm-up ones included: they reset the WAL too)
    after_first = (checkpointed.cast(pl.Int8).cum_max().shift(1).fill_null(0) > 0) | pl.lit(checkpointed_before)
    phase = (
        pl.when(pl.col("warmup"))
        .then(pl.lit("warmup"))
        .when(checkpointed)
        .then(pl.lit("checkpoint"))
        .when(after_first)
        .then(pl.lit("steady"))
        .otherwise(pl.lit("wal_growth"))
    )
    return ordered.with_columns(phase.cast(PHASE_TYPE).alias("phase"))


def checkpointed(commits: pl.DataFrame) -> bool:
    """Whether any of ``commits`` wrote the database file (a WAL checkpoint)."""
    return bool(commits.select(wrote_database().any()).item())


def phase_entry(name: str, rows: pl.DataFrame, levels: list[str]) -> dict:
    """One phase's commits, the index range they span and the means of its figures
    (only those of levels the run measured)."""
    entry: dict = {
        "phase": name,
        "label": PHASE_LABELS[name],
        "commits": rows.height,
        "first_index": int(cast(int, rows["index"].min())),
        "last_index": int(cast(int, rows["index"].max())),
    }
    for figure, (column, scale, level) in PHASE_FIGURES.items():
        if level in levels and column in rows.columns:
            entry[figure] = float(cast(float, rows[column].mean())) * scale
    return entry


def phases_section(commits: pl.DataFrame, levels: list[str]) -> dict:
    """summary.json's ``phases``: every phase the run's commits went through, in order
    (``commits`` carries ``phase``: :func:`with_phases`)."""
    entries = []
    for name in PHASES:
        rows = commits.filter(pl.col("phase") == name)
        if rows.height:
            entries.append(phase_entry(name, rows, levels))
    return {"basis": "means over each phase's commits, inside their commit windows", "phases": entries}


def phase_figures(summary: Mapping[str, Any]) -> dict[str, dict]:
    """A run's phases by name (empty for a run analysed before phases were reported)."""
    section = summary.get("phases") or {}
    return {entry["phase"]: entry for entry in section.get("phases", [])}


def measured_mix(summary: Mapping[str, Any]) -> dict[str, float]:
    """The share of the run's measured commits in each phase (warm-up left out)."""
    measured = {name: e["commits"] for name, e in phase_figures(summary).items() if name != "warmup"}
    total = sum(measured.values())
    return {name: count / total for name, count in measured.items()} if total else {}


#: A WAL frame's header (https://www.sqlite.org/fileformat.html#the_write_ahead_log):
#: each page SQLite appends to the WAL is this many bytes more.
WAL_FRAME_HEADER = 24
#: SQLite's default PRAGMA wal_autocheckpoint, in pages.
DEFAULT_WAL_AUTOCHECKPOINT = 1000


def _pragma_int(summary: Mapping[str, Any], name: str, default: int) -> int:
    value = ((summary.get("config") or {}).get("pragmas") or {}).get(name)
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def wal_checkpoint_reach(summary: Mapping[str, Any]) -> dict | None:
    """Whether a WAL run's commits reached SQLite's first automatic checkpoint (a commit
    that leaves the WAL at ``wal_autocheckpoint`` pages or more runs one), and when they
    did not, how far off it was: the pages its commits appended to the WAL (their VFS
    bytes over the frame size: before a checkpoint SQLite writes no other file), the
    measured commits' pages per commit, and ``txns_to_first``, the ``-n`` that would
    reach it at that rate (an estimate: the setup's frames are not counted, and a
    B-tree's growth moves the rate a little). None for a rollback journal, or a run
    without phases or VFS figures."""
    if (summary.get("config") or {}).get("journal") != "wal":
        return None
    found = phase_figures(summary)
    if not found or any("vfs_write_kib_per_commit" not in entry for entry in found.values()):
        return None
    limit = _pragma_int(summary, "wal_autocheckpoint", DEFAULT_WAL_AUTOCHECKPOINT)
    reach: dict = {"reached": "checkpoint" in found or "steady" in found, "wal_autocheckpoint": limit}
    if reach["reached"] or "wal_growth" not in found:
        return reach
    frame = _pragma_int(summary, "page_size", 4096) + WAL_FRAME_HEADER
    pages = sum(entry["vfs_write_kib_per_commit"] * 1024 * entry["commits"] for entry in found.values()) / frame
    growth = found["wal_growth"]
    per_commit = growth["vfs_write_kib_per_commit"] * 1024 / frame
    reach.update(wal_pages=round(pages, 1), pages_per_commit=round(per_commit, 3))
    if limit > 0 and per_commit > 0:
        reach["txns_to_first"] = growth["commits"] + max(1, math.ceil((limit - pages) / per_commit))
    return reach
