"""summary.json: the per-run figures, computed from the per-commit table.

The names here are a contract later stages extend: :class:`sqlwa.analysis.schema.Summary`
types every key (docs/reference/outputs.md's "summary.json" tables are made from it).
Per-commit figures are means over measured (non-warm-up) commits.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import polars as pl

from sqlwa.analysis import metrics, phases
from sqlwa.analysis.schema import SUMMARY_SCHEMA_VERSION, Summary
from sqlwa.catalogue import (
    BLOCK_COMMIT_COLUMNS,
    CPU_COMMIT_COLUMNS,
    DATABASE_FILE_KINDS,
    FILE_KINDS,
    FUSE_SYSCALL_COMMIT_COLUMNS,
    SYSCALL_COMMIT_COLUMNS,
    VFS_COMMIT_COLUMNS,
)

__all__ = ["SUMMARY_SCHEMA_VERSION", "ColumnFrame", "Summary", "build_summary", "with_vfs_totals"]
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)
KIND_FIELDS = ("write_calls", "write_bytes", "sync_calls", "truncate_calls", "delete_calls")


def vfs_total(field: str) -> pl.Expr:
    """Sum of one VFS counter over every file kind, per commit."""
    return pl.sum_horizontal([pl.col(f"vfs_{kind}_{field}") for kind in FILE_KINDS])


def with_vfs_totals(commits: Frame) -> Frame:
    """Add vfs_write_calls / vfs_write_bytes / vfs_sync_calls columns (all file kinds)."""
    return commits.with_columns(
        vfs_total("write_calls").alias("vfs_write_calls"),
        vfs_total("write_bytes").alias("vfs_write_bytes"),
        vfs_total("sync_calls").alias("vfs_sync_calls"),
    )


def mean_of(frame: pl.DataFrame, column: str) -> float:
    if frame.height == 0:
        return 0.0
    return float(cast(float, frame[column].mean()))


def per_commit_means(measured: pl.DataFrame) -> dict[str, float]:
    """Means of the per-commit columns; CPU, syscall and block ones only when measured:
    an absent level is absent, never 0."""
    levels = (*CPU_COMMIT_COLUMNS, *SYSCALL_COMMIT_COLUMNS, *FUSE_SYSCALL_COMMIT_COLUMNS, *BLOCK_COMMIT_COLUMNS)
    captured = (n for n in levels if n in measured.columns)
    names = [*VFS_COMMIT_COLUMNS, *captured]
    return {name: mean_of(measured, name) for name in names}


def vfs_by_file(measured: pl.DataFrame) -> dict[str, dict[str, float]]:
    """Per-commit means by file kind; temp/other appear only when SQLite used them."""
    result: dict[str, dict[str, float]] = {}
    for kind in FILE_KINDS:
        figures = {field: mean_of(measured, f"vfs_{kind}_{field}") for field in KIND_FIELDS}
        if kind in DATABASE_FILE_KINDS or any(figures.values()):
            result[kind] = figures
    return result


class ColumnFrame:
    """A per-commit table read one column at a time from a lazy frame (a scan of a long
    lab run's commits.parquet, :mod:`sqlwa.analysis.stream`): the summary's functions read
    it as they read a DataFrame (``height``, ``columns``, ``frame[column]``, ``filter``),
    and only the column being read is in memory, never the whole table."""

    def __init__(self, lazy: pl.LazyFrame) -> None:
        self.lazy = lazy
        self._height: int | None = None

    @property
    def height(self) -> int:
        if self._height is None:
            self._height = int(self.lazy.select(pl.len()).collect().item())
        return self._height

    @property
    def columns(self) -> list[str]:
        return self.lazy.collect_schema().names()

    def __getitem__(self, name: str) -> pl.Series:
        return self.lazy.select(name).collect().to_series().rechunk()  # one chunk, as a frame's column

    def filter(self, *predicates: pl.Expr) -> ColumnFrame:
        return ColumnFrame(self.lazy.filter(*predicates))


def build_summary(
    config: dict[str, Any],
    commits: pl.DataFrame | ColumnFrame,
    levels: list[str],
    frame_budget_ms: float = metrics.DEFAULT_FRAME_BUDGET_MS,
    amortized_bytes: int | None = None,
    **sections: Any,
) -> Summary:
    """The summary.json document for one run; ``sections`` adds later stages' parts (keys
    of :class:`~sqlwa.analysis.schema.Summary`). ``commits`` may be a :class:`ColumnFrame`:
    what is read of it is read as of a frame. The sections' own functions return plain
    dicts: the document is a :class:`Summary` by construction, which the tests check of
    real runs (:func:`sqlwa.analysis.schema.check_summary`), not at each run."""
    measured = cast(pl.DataFrame, commits.filter(~pl.col("warmup")))
    summary: dict[str, Any] = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "config": config,
        "levels": levels,
        "commits": measured.height,
        "warmup_commits": commits.height - measured.height,
        "per_commit": per_commit_means(measured),
        "vfs_by_file": vfs_by_file(measured),
        "latency_ms": metrics.latency_ms(measured),
        **({"cpu_ms": metrics.cpu_ms(measured)} if "cpu_ns" in measured.columns else {}),
        "frame_budget_misses": metrics.frame_budget_misses(measured, frame_budget_ms),
        "waf": metrics.run_waf(measured, amortized_bytes),
    }
    if "phase" in commits.columns:
        summary["phases"] = phases.phases_section(cast(pl.DataFrame, commits), levels)
    summary.update(sections)
    return cast(Summary, summary)
