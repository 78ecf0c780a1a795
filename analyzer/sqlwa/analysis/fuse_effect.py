"""What a FUSE layer did to each commit: the daemon's syscalls beside SQLite's.

The capture traces the SQL thread's syscalls and those of every thread named as the
daemon (its comm, ``fuse-<token>``), so both sides of the layer are in one trace. Per
commit, the daemon's fsync, fdatasync, pwrite64 … are tallied like SQLite's
(``fuse_<column>`` in commits.parquet), and the summary's ``fuse`` section sets the two
side by side and says in words what changed where the trace shows it ("the FUSE layer
turned fdatasync into fsync"). What the layer costs the device (requests, flushes,
commits/s) shows against a run without it: the block figures of this run already
include the daemon's requests.
"""

from __future__ import annotations

import polars as pl

from sqlwa.analysis import windows
from sqlwa.catalogue import FUSE_SYSCALL_COMMIT_COLUMNS

#: The calls the section counts by name, per commit, on either side of the layer.
CALLS = ("fsync", "fdatasync", "sync_file_range", "pwrite64", "ftruncate", "openat")


def daemon_entries(events: pl.DataFrame | pl.LazyFrame, comm: str) -> pl.DataFrame:
    return (
        events.lazy()
        .filter((pl.col("kind") == "syscall_enter") & (pl.col("comm").cast(pl.String) == comm))
        .with_columns(pl.col("name").cast(pl.String))
        .collect()
    )


def daemon_syscalls_per_commit(events: pl.DataFrame | pl.LazyFrame, wins: pl.DataFrame, comm: str) -> pl.DataFrame:
    """The daemon's syscall tallies per commit, as ``fuse_<column>``."""
    tallies = [t.name.prefix("fuse_") for t in windows.syscall_tallies()]
    return windows.per_window(daemon_entries(events, comm), wins, tallies, FUSE_SYSCALL_COMMIT_COLUMNS)


def calls_per_commit(rows: pl.DataFrame, wins: pl.DataFrame) -> dict[str, float]:
    """Mean calls per measured commit by name, and pwrite64's bytes."""
    measured = wins.filter(~pl.col("warmup"))
    inside = windows.assign_windows(rows, measured).filter(pl.col("commit").is_not_null())
    commits = max(measured.height, 1)
    name = pl.col("name")
    figures = inside.select(
        *[(name == call).sum().alias(call) for call in CALLS],
        pl.when(name == "pwrite64").then(pl.col("aux")).otherwise(0).sum().alias("pwrite64_bytes"),
    ).row(0, named=True)
    return {key: (value or 0) / commits for key, value in figures.items()}


def changes(sqlite: dict[str, float], daemon: dict[str, float]) -> list[str]:
    """What the layer did to SQLite's calls, in words, only where the counts show it."""
    said = []
    if sqlite["fdatasync"] and not daemon["fdatasync"] and daemon["fsync"]:
        said.append(
            f"the FUSE layer turned fdatasync into fsync: SQLite's {sqlite['fdatasync']:.2f} fdatasync per commit "
            f"reached the lab filesystem as {daemon['fsync']:.2f} fsync"
        )
    elif sqlite["fdatasync"] and daemon["fdatasync"]:
        said.append(
            f"the FUSE layer passed fdatasync on as fdatasync ({sqlite['fdatasync']:.2f} → {daemon['fdatasync']:.2f} "
            "per commit)"
        )
    sqlite_syncs, daemon_syncs = _syncs(sqlite), _syncs(daemon)
    if daemon_syncs != sqlite_syncs:
        said.append(f"syncs per commit: {sqlite_syncs:.2f} from SQLite, {daemon_syncs:.2f} from the daemon")
    if sqlite["pwrite64"] and not daemon["pwrite64"]:
        said.append("no write went through the daemon (the kernel wrote to the lower file, or held the pages)")
    elif sqlite["pwrite64"] != daemon["pwrite64"] or sqlite["pwrite64_bytes"] != daemon["pwrite64_bytes"]:
        said.append(
            f"SQLite's {sqlite['pwrite64']:.2f} pwrite64 ({sqlite['pwrite64_bytes'] / 1024:.1f} KiB) per commit "
            f"became {daemon['pwrite64']:.2f} ({daemon['pwrite64_bytes'] / 1024:.1f} KiB) in the daemon"
        )
    return said


def _syncs(calls: dict[str, float]) -> float:
    return calls["fsync"] + calls["fdatasync"] + calls["sync_file_range"]


def fuse_section(events: pl.DataFrame | pl.LazyFrame, wins: pl.DataFrame, tid: int | None, layer: dict) -> dict:
    """summary.json's ``fuse``: the layer as the lab describes it, both sides' calls per
    measured commit, and the changes in words."""
    sqlite = calls_per_commit(windows.syscall_entries(events, tid), wins)
    daemon = calls_per_commit(daemon_entries(events, layer["comm"]), wins)
    return {
        **layer,
        "sqlite_calls_per_commit": sqlite,
        "daemon_calls_per_commit": daemon,
        "changes": changes(sqlite, daemon),
    }
