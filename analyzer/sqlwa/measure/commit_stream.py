"""A run's commit records written as the engine hands them over, and its summary from
running aggregates: the memory of a VFS-only run does not grow with its length.

The engine hands the records over in chunks (``_native.run_workload(commits=…)``); each
chunk gets the per-commit columns a run's table has (latency, CPU, VFS totals, WAF,
phase), is appended to the run's Parquet file as row groups (pyarrow's writer: nothing
of it is kept) and added to running sums, from which :meth:`CommitWriter.summary`
gives the figures :func:`sqlwa.analysis.summary.build_summary` computes from a whole
frame. Only the measured commits' latency and CPU time are kept whole (16 bytes a
commit), for their exact quantiles.

A lab run's records go the same way into :class:`EngineCommits`: the engine's own table
(what the trace's analysis joins its figures onto), appended a chunk at a time to a file
that the analysis reads a chunk of commit windows at a time.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, cast

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from sqlwa import _system
from sqlwa.analysis import metrics, phases
from sqlwa.analysis.summary import KIND_FIELDS, SUMMARY_SCHEMA_VERSION, Summary, with_vfs_totals
from sqlwa.catalogue import CPU_COMMIT_COLUMNS, DATABASE_FILE_KINDS, FILE_KINDS, VFS_COMMIT_COLUMNS
from sqlwa.errors import writing
from sqlwa.measure import engine

CHUNK_COMMITS = engine.CHUNK_COMMITS  # commit records per chunk the engine hands over
PARTIAL_FILE = ".sqlwa-commits.parquet"  # in the run's scratch directory, until the run ends
#: summary.json's per-commit means of a VFS-only run: its ``per_commit``, ``vfs_by_file``
MEAN_COLUMNS = (
    *VFS_COMMIT_COLUMNS,
    *CPU_COMMIT_COLUMNS,
    *(f"vfs_{kind}_{field}" for kind in FILE_KINDS for field in KIND_FIELDS),
)
PHASE_COLUMNS = tuple(dict.fromkeys(column for column, _, level in phases.PHASE_FIGURES.values() if level == "vfs"))


class AppendedParquet:
    """A Parquet file written a table at a time (:meth:`append`), through a file opened by
    sqlwa, not named to pyarrow: it reads a path as a URI, in UTF-8, and --dir need not
    be. Used as a context manager, the file is removed on the way out (what is kept of it
    was moved or read by then)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO | None = None
        self.writer: pq.ParquetWriter | None = None

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def open(self) -> None:
        """The file made (empty) now, before the first table."""
        self.file = open(self.path, "wb")  # closed by close()

    def append(self, table: pa.Table) -> None:
        if self.file is None:
            self.open()
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.file, table.schema, compression="zstd")
        self.writer.write_table(table)

    def close(self) -> None:
        """The Parquet writer and its file, closed (the file is whole once both are)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.file is not None:
            self.file.close()
            self.file = None


class CommitWriter(AppendedParquet):
    """Takes the engine's chunks (:meth:`add`), appends each with the table's per-commit
    columns to a Parquet file in the scratch directory ``work_dir`` and adds it to the
    running sums; :meth:`finish` moves the file to the run's commits.parquet and
    :meth:`summary` gives summary.json. Used as a context manager: the partial file is
    removed on the way out when the run did not finish (Ctrl-C, SIGTERM, a failure)."""

    def __init__(self, work_dir: Path, journal: str, budget_ms: float = metrics.DEFAULT_FRAME_BUDGET_MS) -> None:
        super().__init__(work_dir / PARTIAL_FILE)
        self.journal = journal
        self.commits = 0
        self.measured = 0
        # in WAL mode: a commit of an earlier chunk checkpointed (phases.with_phases)
        self.checkpointed = False
        self.sums = dict.fromkeys(MEAN_COLUMNS, 0)
        self.latency_total = 0  # the measured commits' latency_ns, summed
        self.first_start_ns: int | None = None  # of the measured commits: the first's start
        self.last_end_ns: int | None = None  # and the last's end
        # the measured commits' latency and CPU time in ms, chunk by chunk (for quantiles)
        self.latency: list[pl.Series] = []
        self.cpu: list[pl.Series] = []
        self.budget_ms = budget_ms  # the frame budget, whose misses are summed as the run goes
        self.misses = self.dropped = 0
        # phase -> [commits, first index, last index, sums of PHASE_COLUMNS]
        self.phases: dict[str, list] = {}

    def __enter__(self) -> CommitWriter:
        return self

    def add(self, columns: Mapping[str, Any]) -> None:
        """One chunk of records, as the engine's columns: written and counted whole, a
        signal held back until it is (the engine then ends a run that keeps what was
        measured at this chunk's last commit)."""
        with _system.signals.held_back(), writing(self.path, "the run's per-commit records"):
            self.add_whole(columns)

    def add_whole(self, columns: Mapping[str, Any]) -> None:
        frame = with_vfs_totals(engine.WorkloadResult.from_raw({"info": {}, "commits": columns}).commits)
        # in WAL mode the run's first checkpoint may have been in an earlier chunk
        frame = phases.with_phases(metrics.with_waf(frame), self.journal, checkpointed_before=self.checkpointed)
        self.checkpointed = self.checkpointed or (self.journal == "wal" and phases.checkpointed(frame))
        self.append(frame.to_arrow())
        self.tally(frame)

    def tally(self, frame: pl.DataFrame) -> None:
        """The chunk's part of the run's sums."""
        measured = frame.filter(~pl.col("warmup"))
        self.commits += frame.height
        self.measured += measured.height
        for name, value in measured.select([pl.col(c).sum() for c in MEAN_COLUMNS]).row(0, named=True).items():
            self.sums[name] += value
        self.latency_total += int(measured["latency_ns"].sum())
        if measured.height:
            start, end = int(measured["start_ns"].min()), int(measured["end_ns"].max())  # type: ignore[arg-type]
            self.first_start_ns = start if self.first_start_ns is None else min(self.first_start_ns, start)
            self.last_end_ns = end if self.last_end_ns is None else max(self.last_end_ns, end)
        # as sqlwa.analysis.metrics computes them: latency_ms, cpu_ms, frame_budget_misses
        latency = measured["latency_ns"].cast(pl.Float64)
        self.latency.append(latency / 1e6)
        self.cpu.append(measured["cpu_ns"].cast(pl.Float64) / 1e6)
        budget_ns = self.budget_ms * 1e6
        self.misses += int((latency > budget_ns).sum())
        self.dropped += int(((latency / budget_ns).ceil() - 1).clip(lower_bound=0).sum())
        groups = frame.group_by("phase").agg(
            pl.len().alias("commits"),
            pl.col("index").min().alias("first"),
            pl.col("index").max().alias("last"),
            *[pl.col(c).sum() for c in PHASE_COLUMNS],
        )
        for row in groups.iter_rows(named=True):
            seen = self.phases.get(row["phase"])
            sums = [row[c] for c in PHASE_COLUMNS]
            if seen is None:
                self.phases[row["phase"]] = [row["commits"], row["first"], row["last"], sums]
            else:
                seen[0] += row["commits"]
                seen[1], seen[2] = min(seen[1], row["first"]), max(seen[2], row["last"])
                seen[3] = [a + b for a, b in zip(seen[3], sums, strict=True)]

    @property
    def measured_span_ns(self) -> int:
        """From the first measured commit's start to the last one's end (0 for none)."""
        if self.first_start_ns is None or self.last_end_ns is None:
            return 0
        return self.last_end_ns - self.first_start_ns

    def finish(self, commits_path: Path) -> None:
        """The run's table, whole, moved to ``commits_path``."""
        assert self.writer is not None, "an engine run that returns has at least one commit"
        self.close()
        shutil.move(self.path, commits_path)

    def summary(self, config: dict[str, Any], levels: list[str], **sections: Any) -> Summary:
        """:func:`sqlwa.analysis.summary.build_summary` of the table written, from the
        running sums (means: sums over counts) and the measured commits' latency and CPU
        time (quantiles as :mod:`sqlwa.analysis.metrics` computes them)."""
        count = self.measured

        def mean(name: str) -> float:
            return self.sums[name] / count if count else 0.0

        vfs_by_file: dict[str, dict[str, float]] = {}
        for kind in FILE_KINDS:
            figures = {field: mean(f"vfs_{kind}_{field}") for field in KIND_FIELDS}
            if kind in DATABASE_FILE_KINDS or any(figures.values()):
                vfs_by_file[kind] = figures
        totals = pl.DataFrame(
            {"logical_bytes": [self.sums["logical_bytes"]], "vfs_write_bytes": [self.sums["vfs_write_bytes"]]}
        )
        summary: dict[str, Any] = {
            "schema_version": SUMMARY_SCHEMA_VERSION,
            "config": config,
            "levels": levels,
            "commits": count,
            "warmup_commits": self.commits - count,
            "per_commit": {name: mean(name) for name in (*VFS_COMMIT_COLUMNS, *CPU_COMMIT_COLUMNS)},
            "vfs_by_file": vfs_by_file,
            "latency_ms": self.latency_ms(),
            "cpu_ms": self.cpu_ms(),
            "frame_budget_misses": self.frame_budget_misses(),
            "waf": metrics.run_waf(totals, None),
            "phases": self.phases_section(levels),
        }
        summary.update(sections)
        return cast(Summary, summary)  # of the schema's keys: checked of real runs by the tests

    def latency_ms(self) -> dict[str, float]:
        """:func:`sqlwa.analysis.metrics.latency_ms` of the latencies kept (freed after)."""
        if self.measured == 0:
            return metrics.latency_ms(pl.DataFrame({"latency_ns": []}))
        ms, self.latency = pl.concat(self.latency), []
        return {**quantiles(ms), "max": float(cast(float, ms.max()))}

    def frame_budget_misses(self) -> dict:
        """:func:`sqlwa.analysis.metrics.frame_budget_misses` from the sums."""
        if self.measured == 0:
            return metrics.frame_budget_misses(pl.DataFrame({"latency_ns": []}), self.budget_ms)
        return {
            "budget_ms": self.budget_ms,
            "commits": self.misses,
            "share": self.misses / self.measured,
            "dropped_frames": self.dropped,
            "dropped_frames_per_1000_commits": self.dropped * 1000 / self.measured,
        }

    def cpu_ms(self) -> dict[str, float]:
        """:func:`sqlwa.analysis.metrics.cpu_ms` from the sums and the CPU times kept."""
        if self.measured == 0:
            return metrics.cpu_ms(pl.DataFrame({"latency_ns": []}))
        ms, self.cpu = pl.concat(self.cpu), []
        latency = float(self.latency_total)
        return {
            **quantiles(ms),
            "max": float(cast(float, ms.max())),
            "user_mean": self.sums["cpu_user_ns"] / self.measured / 1e6,
            "sys_mean": self.sums["cpu_sys_ns"] / self.measured / 1e6,
            "share_of_latency": float(self.sums["cpu_ns"]) / latency if latency else 0.0,
        }

    def phases_section(self, levels: list[str]) -> dict:
        """:func:`sqlwa.analysis.phases.phases_section` from the sums by phase."""
        entries = []
        for name in phases.PHASES:
            seen = self.phases.get(name)
            if seen is None:
                continue
            commits, first, last, sums = seen
            entry: dict = {
                "phase": name,
                "label": phases.PHASE_LABELS[name],
                "commits": commits,
                "first_index": int(first),
                "last_index": int(last),
            }
            by_column = dict(zip(PHASE_COLUMNS, sums, strict=True))
            for figure, (column, scale, level) in phases.PHASE_FIGURES.items():
                if level in levels and column in by_column:
                    entry[figure] = by_column[column] / commits * scale
            entries.append(entry)
        return {"basis": "means over each phase's commits, inside their commit windows", "phases": entries}


def quantiles(ms: pl.Series) -> dict[str, float]:
    """The quantiles :mod:`sqlwa.analysis.metrics` reports, of a series of milliseconds."""
    return {
        name: float(cast(float, ms.quantile(q, interpolation="linear")))
        for name, q in metrics.LATENCY_QUANTILES.items()
    }


class EngineCommits(AppendedParquet):
    """A lab run's engine records as they come (:meth:`add`, the engine's chunks),
    appended as the engine's columns to the Parquet file ``path``, a row group per chunk,
    nothing of them kept; :func:`engine_table` reads them back as the table the trace's
    analysis is given. The file is opened here, before the capture begins: the SQL
    thread, whose syscalls the capture traces, then only writes to it (``write(2)``, which
    the capture leaves out). A chunk is written by pyarrow alone, in the SQL thread: no
    Polars, whose worker threads, still busy when the next transaction began, delayed its
    first marker by more than 50 µs (measured: each first commit after a chunk of 3).
    Used as a context manager, the file is removed on the way out (the analysis has read
    it by then, or the run failed)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.open()
        self.commits = 0
        self.measured = 0

    def __enter__(self) -> EngineCommits:
        return self

    def add(self, columns: Mapping[str, Any]) -> None:
        """One chunk of the engine's columns, written whole (a signal held back until it is)."""
        with _system.signals.held_back(), writing(self.path, "the engine's per-commit table to"):
            table = pa.table(dict(columns))
            self.append(table)
            self.commits += table.num_rows
            self.measured += table.num_rows - sum(columns["warmup"])
        # the earlier chunks' Python lists, freed: their pages go back, not kept in glibc's
        # arenas through the run (this chunk's are freed when the engine lets it go)
        _system.memory.release_freed()


def engine_table(path: str | Path) -> pl.LazyFrame:
    """The engine's records in :class:`EngineCommits`' file as the table the trace's
    analysis is given (:meth:`sqlwa.measure.engine.WorkloadResult.from_raw`'s, with the
    VFS totals), a scan: read a chunk of commits at a time."""
    return with_vfs_totals(pl.scan_parquet(path).with_columns(engine.derived_columns()))
