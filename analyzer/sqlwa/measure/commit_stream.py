"""A run's commit records written as the engine hands them over, and its summary from
the written file: the memory of a VFS-only run does not grow with its length.

The engine hands the records over in chunks (``_native.run_workload(commits=…)``); each
chunk gets the per-commit columns a run's table has (latency, CPU, VFS totals, WAF,
phase) and goes to a part file in a scratch directory; at the end the parts are joined,
streamed, into the run's ``commits.parquet``, and :func:`summary_of` computes
summary.json's figures from a scan of it (polars lazy: only the latency and CPU columns
are held whole, for their exact quantiles), the same figures
:func:`sqlwa.analysis.summary.build_summary` computes from a frame in memory.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa.analysis import metrics, phases
from sqlwa.analysis.summary import KIND_FIELDS, SUMMARY_SCHEMA_VERSION, with_vfs_totals
from sqlwa.catalogue import (
    BLOCK_COMMIT_COLUMNS,
    CPU_COMMIT_COLUMNS,
    DATABASE_FILE_KINDS,
    FILE_KINDS,
    FUSE_SYSCALL_COMMIT_COLUMNS,
    SYSCALL_COMMIT_COLUMNS,
    VFS_COMMIT_COLUMNS,
)
from sqlwa.measure import engine
from sqlwa.results import rundir

#: Commit records per chunk the engine hands over (~1 KB each while in Python).
CHUNK_COMMITS = 8192
PARTS_DIR = ".sqlwa-commit-parts"  # in the run's scratch directory


class CommitWriter:
    """Takes the engine's chunks (:meth:`add`), writes each with the table's per-commit
    columns as a part file in ``parts_dir``, and joins the parts into the run's
    commits.parquet (:meth:`finish`). Used as a context manager: the parts are removed
    on the way out, whether the run ended well or not (Ctrl-C, SIGTERM, a failure)."""

    def __init__(self, parts_dir: Path, journal: str) -> None:
        self.parts_dir = parts_dir
        self.journal = journal
        self.parts: list[Path] = []
        self.commits = 0
        self.measured = 0
        # in WAL mode: a commit of an earlier chunk checkpointed (phases.with_phases)
        self.checkpointed = False

    def __enter__(self) -> CommitWriter:
        self.parts_dir.mkdir()
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.parts_dir, ignore_errors=True)

    def add(self, columns: Mapping[str, Any]) -> None:
        """One chunk of records, as the engine's columns."""
        frame = with_vfs_totals(engine.WorkloadResult.from_raw({"info": {}, "commits": columns}).commits)
        frame = phases.with_phases(metrics.with_waf(frame), self.journal)
        if self.journal == "wal":
            if self.checkpointed:  # the run's first checkpoint was in an earlier chunk
                growth = pl.col("phase") == "wal_growth"
                frame = frame.with_columns(
                    pl.when(growth)
                    .then(pl.lit("steady"))
                    .otherwise(pl.col("phase"))
                    .cast(phases.PHASE_TYPE)
                    .alias("phase")
                )
            self.checkpointed = self.checkpointed or bool(frame.select(phases.wrote_database().any()).item())
        path = self.parts_dir / f"part-{len(self.parts):06d}.parquet"
        rundir.write_parquet(frame, path)
        self.parts.append(path)
        self.commits += frame.height
        self.measured += frame.height - int(frame["warmup"].sum())

    def finish(self, commits_path: Path) -> None:
        """The parts joined, streamed, into ``commits_path``, in the engine's order."""
        assert self.parts, "an engine run that returns has at least one commit"
        pl.scan_parquet(self.parts).sink_parquet(commits_path)


def _mean(column: str) -> pl.Expr:
    return pl.col(column).mean().alias(column)


def summary_of(
    config: dict,
    commits_path: Path,
    levels: list[str],
    frame_budget_ms: float = metrics.DEFAULT_FRAME_BUDGET_MS,
    **sections: Any,
) -> dict:
    """:func:`sqlwa.analysis.summary.build_summary` of the per-commit table in
    ``commits_path``, from a scan of it: running sums and means, the exact quantiles of
    latency and CPU time (their columns alone held in memory)."""
    scan = pl.scan_parquet(commits_path)
    names = scan.collect_schema().names()
    measured = scan.filter(~pl.col("warmup"))
    captured = [
        n
        for n in (*CPU_COMMIT_COLUMNS, *SYSCALL_COMMIT_COLUMNS, *FUSE_SYSCALL_COMMIT_COLUMNS, *BLOCK_COMMIT_COLUMNS)
        if n in names
    ]
    mean_names = [*VFS_COMMIT_COLUMNS, *captured]
    kind_names = [f"vfs_{kind}_{field}" for kind in FILE_KINDS for field in KIND_FIELDS]
    means = measured.select([_mean(n) for n in dict.fromkeys([*mean_names, *kind_names])]).collect(engine="streaming")
    counts = scan.select(pl.len().alias("commits"), (~pl.col("warmup")).sum().alias("measured")).collect(
        engine="streaming"
    )
    total, count = int(counts["commits"][0]), int(counts["measured"][0])

    def mean(name: str) -> float:
        value = means[name][0]
        return 0.0 if count == 0 or value is None else float(value)

    vfs_by_file: dict[str, dict[str, float]] = {}
    for kind in FILE_KINDS:
        figures = {field: mean(f"vfs_{kind}_{field}") for field in KIND_FIELDS}
        if kind in DATABASE_FILE_KINDS or any(figures.values()):
            vfs_by_file[kind] = figures
    summary: dict = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "config": config,
        "levels": levels,
        "commits": count,
        "warmup_commits": total - count,
        "per_commit": {name: mean(name) for name in mean_names},
        "vfs_by_file": vfs_by_file,
        "latency_ms": latency_ms(measured, count),
        **({"cpu_ms": cpu_ms(measured, count)} if "cpu_ns" in names else {}),
        "frame_budget_misses": frame_budget_misses(measured, count, frame_budget_ms),
        "waf": run_waf(measured, names),
    }
    if "phase" in names:
        summary["phases"] = phases_section(scan, levels, names)
    summary.update(sections)
    return summary


def _quantiles(column: pl.Expr) -> list[pl.Expr]:
    return [column.quantile(q, interpolation="linear").alias(name) for name, q in metrics.LATENCY_QUANTILES.items()]


def latency_ms(measured: pl.LazyFrame, count: int) -> dict[str, float]:
    """:func:`sqlwa.analysis.metrics.latency_ms` of a scan."""
    if count == 0:
        return {name: 0.0 for name in (*metrics.LATENCY_QUANTILES, "max")}
    ms = pl.col("latency_ns").cast(pl.Float64) / 1e6
    row = measured.select(*_quantiles(ms), ms.max().alias("max")).collect(engine="streaming").row(0, named=True)
    return {name: float(value) for name, value in row.items()}


def cpu_ms(measured: pl.LazyFrame, count: int) -> dict[str, float]:
    """:func:`sqlwa.analysis.metrics.cpu_ms` of a scan."""
    if count == 0:
        return {name: 0.0 for name in (*metrics.LATENCY_QUANTILES, "max", "user_mean", "sys_mean", "share_of_latency")}
    ms = pl.col("cpu_ns").cast(pl.Float64) / 1e6
    row = (
        measured.select(
            *_quantiles(ms),
            ms.max().alias("max"),
            pl.col("latency_ns").sum().alias("latency"),
            pl.col("cpu_ns").sum().alias("cpu"),
            pl.col("cpu_user_ns").mean().alias("user_mean"),
            pl.col("cpu_sys_ns").mean().alias("sys_mean"),
        )
        .collect(engine="streaming")
        .row(0, named=True)
    )
    latency = float(row["latency"])
    figures = {name: float(row[name]) for name in metrics.LATENCY_QUANTILES}
    return {
        **figures,
        "max": float(row["max"]),
        "user_mean": float(row["user_mean"]) / 1e6,
        "sys_mean": float(row["sys_mean"]) / 1e6,
        "share_of_latency": float(row["cpu"]) / latency if latency else 0.0,
    }


def frame_budget_misses(measured: pl.LazyFrame, count: int, budget_ms: float) -> dict:
    """:func:`sqlwa.analysis.metrics.frame_budget_misses` of a scan."""
    if count == 0:
        return metrics.frame_budget_misses(pl.DataFrame({"latency_ns": []}, schema={"latency_ns": pl.Int64}), budget_ms)
    latency = pl.col("latency_ns").cast(pl.Float64)
    frames = ((latency / (budget_ms * 1e6)).ceil() - 1).clip(lower_bound=0)
    row = (
        measured.select((latency > budget_ms * 1e6).sum().alias("misses"), frames.sum().alias("dropped"))
        .collect(engine="streaming")
        .row(0, named=True)
    )
    misses, dropped = int(row["misses"]), int(row["dropped"])
    return {
        "budget_ms": budget_ms,
        "commits": misses,
        "share": misses / count,
        "dropped_frames": dropped,
        "dropped_frames_per_1000_commits": dropped * 1000 / count,
    }


def run_waf(measured: pl.LazyFrame, names: list[str]) -> dict:
    """:func:`sqlwa.analysis.metrics.run_waf` of a scan without amortized block bytes."""
    sums = ["logical_bytes", "vfs_write_bytes", *(["write_bytes"] if "write_bytes" in names else [])]
    row = measured.select([pl.col(n).sum() for n in sums]).collect(engine="streaming")
    return metrics.run_waf(row, None)


def phases_section(scan: pl.LazyFrame, levels: list[str], names: list[str]) -> dict:
    """:func:`sqlwa.analysis.phases.phases_section` of a scan: one group per phase."""
    figures = {
        figure: (column, scale)
        for figure, (column, scale, level) in phases.PHASE_FIGURES.items()
        if level in levels and column in names
    }
    columns = dict.fromkeys(column for column, _ in figures.values())
    groups = (
        scan.group_by("phase")
        .agg(
            pl.len().alias("commits"),
            pl.col("index").min().alias("first_index"),
            pl.col("index").max().alias("last_index"),
            *[pl.col(c).mean().alias(f"mean_{c}") for c in columns],
        )
        .collect(engine="streaming")
    )
    by_phase = {row["phase"]: row for row in groups.iter_rows(named=True)}
    entries = []
    for name in phases.PHASES:
        row = by_phase.get(name)
        if row is None or not row["commits"]:
            continue
        entry: dict = {
            "phase": name,
            "label": phases.PHASE_LABELS[name],
            "commits": row["commits"],
            "first_index": int(row["first_index"]),
            "last_index": int(row["last_index"]),
        }
        for figure, (column, scale) in figures.items():
            entry[figure] = float(row[f"mean_{column}"]) * scale
        entries.append(entry)
    return {"basis": "means over each phase's commits, inside their commit windows", "phases": entries}
