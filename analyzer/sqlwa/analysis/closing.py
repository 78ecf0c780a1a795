"""What a run did outside its commits that is not a commit either: transactions that
wrote nothing, and the closing of its connections (the close checkpoint).

- A transaction that changed no page of a database file (an UPDATE or DELETE matching
  no row, a write only to a TEMP table, a row rewritten unchanged) makes no journal, WAL
  frame or sync: the engine judges each by the VFS (no xWrite, xTruncate or xSync of the
  database, its journal or its WAL, no journal or WAL deleted) and counts it apart
  (``info["wrote_nothing"]``), never as a commit, so every per-commit figure is of the
  transactions that wrote. SQLite's own counters cannot tell: ``total_changes()`` counts a
  TEMP table's rows, and the pager's data version moves at every write transaction's end.
- Closing a connection outside every transaction is measured between the engine's
  ``close_begin`` and ``close_end`` markers (``info["close"]``): in WAL mode the last
  connection to close a database checkpoints the WAL into it and deletes the WAL
  (SQLite's ``sqlite3WalClose``), syncing both. Its figures are totals (it is no commit):
  the VFS calls, and in a lab run the SQL thread's syscalls and the device's requests
  issued inside those windows.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from sqlwa.analysis import windows
from sqlwa.catalogue import BLOCK_COMMIT_COLUMNS, SYSCALL_COMMIT_COLUMNS

#: The label the terminal and the report give the closing.
CLOSE_LABEL = "close checkpoint (connections closing, after the last commit)"
#: The VFS counters the sections keep per file kind.
KIND_FIELDS = ("write_calls", "write_bytes", "sync_calls", "truncate_calls", "delete_calls")


def vfs_figures(vfs: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The engine's per-kind VFS counts as the sections keep them: the totals, and the
    kinds with a call."""
    kinds = {
        kind: {field: int(counts.get(field, 0)) for field in KIND_FIELDS}
        for kind, counts in vfs.items()
        if any(counts.get(field, 0) for field in KIND_FIELDS)
    }
    totals = {f"vfs_{field}": sum(int(c.get(field, 0)) for c in vfs.values()) for field in KIND_FIELDS}
    return {**totals, "by_file": kinds}


def wrote_nothing_section(info: dict) -> dict[str, Any]:
    """summary.json's ``wrote_nothing`` (an engine that did not report it: zero)."""
    empty = info.get("wrote_nothing") or {}
    return {
        "basis": "transactions that changed no database file (the VFS saw no write, truncate or sync of the "
        "database, its journal or WAL): not commits, left out of every per-commit figure",
        "transactions": int(empty.get("transactions", 0)),
        "statements": int(empty.get("statements", 0)),
        "time_ms": empty.get("time_ns", 0) / 1e6,
        **vfs_figures(empty.get("vfs") or {}),
        "first": list(empty.get("first") or []),
    }


def close_section(info: dict, traced: dict | None = None) -> dict[str, Any]:
    """summary.json's ``close``: the engine's VFS figures of the closing and, from the
    trace when there is one (:func:`trace_figures`), its syscalls and block requests."""
    close = info.get("close") or {}
    return {
        "label": CLOSE_LABEL,
        "basis": "totals between the close_begin and close_end markers (no commit)",
        "connections": int(close.get("connections", 0)),
        "time_ms": close.get("time_ns", 0) / 1e6,
        **vfs_figures(close.get("vfs") or {}),
        **(traced or {}),
    }


def close_windows(events: windows.Events) -> pl.DataFrame:
    """One row per connection closed: ``index`` (0-based), ``win_start_ns``, ``win_end_ns``
    (a ``close_begin`` followed by its ``close_end``)."""
    marks = windows.markers(events).filter(pl.col("event").is_in(["close_begin", "close_end"]))
    pairs = (
        marks.with_row_index("row")
        .sort("time_ns", "row")
        .with_columns(pl.col("event").shift(-1).alias("next_event"), pl.col("time_ns").shift(-1).alias("win_end_ns"))
        .filter((pl.col("event") == "close_begin") & (pl.col("next_event") == "close_end"))
    )
    return pairs.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("index"),
        pl.col("time_ns").alias("win_start_ns"),
        "win_end_ns",
    )


def trace_figures(events: windows.Events, dev: tuple[int, int] | None, levels: list[str]) -> dict[str, Any]:
    """The SQL thread's syscalls (level ``syscall``) and the device's issued requests
    (level ``block``) inside the close windows, summed: ``{"syscalls": …, "block": …}``."""
    spans = close_windows(events)
    found: dict[str, Any] = {}
    if "syscall" in levels:
        rows = windows.syscall_entries(in_windows(events, spans), windows.run_tid(events))
        per = windows.per_window(rows, spans, windows.syscall_tallies(), SYSCALL_COMMIT_COLUMNS)
        found["syscalls"] = summed(per, SYSCALL_COMMIT_COLUMNS)
    if "block" in levels and dev is not None:
        rows = windows.block_issues(in_windows(events, spans), dev, windows.TALLIED)
        per = windows.per_window(rows, spans, windows.block_tallies(), BLOCK_COMMIT_COLUMNS)
        found["block"] = summed(per, BLOCK_COMMIT_COLUMNS)
    return found


def in_windows(events: windows.Events, spans: pl.DataFrame) -> pl.LazyFrame:
    """The events from the first window's start to the last one's end (a scan reads only
    that stretch's row groups)."""
    lazy = events.lazy()
    if spans.height == 0:
        return lazy.filter(pl.lit(False))
    lo, hi = spans["win_start_ns"].min(), spans["win_end_ns"].max()
    return lazy.filter(pl.col("time_ns").is_between(lo, hi))


def summed(per: pl.DataFrame, columns: tuple[str, ...]) -> dict[str, int]:
    return {column: int(per[column].sum()) if per.height else 0 for column in columns}
