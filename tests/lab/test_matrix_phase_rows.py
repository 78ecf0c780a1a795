"""The matrix table's rows per phase (#44, item 7): ext4 WAL/FULL's whole-run flushes per
commit were 2.00 at -n 200, 1.62 at 500 and 1.32 at 1000, with no word of why. The
figures each phase row shows are held to the runs' own commits.parquet rows, the phase
of each commit worked out here from its raw counters (a measured commit that wrote the
database file ran a checkpoint: in WAL mode nothing else writes it; before the first,
WAL growth; after it, steady state), the runs' rows pooled."""

from __future__ import annotations

import os
import re
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa

pytestmark = pytest.mark.root

FIGURES = {"VFS xSync": "vfs_sync_calls", "fsync": "fsync_calls", "flushes": "flush_requests"}


def raw_phases(commits: pl.DataFrame) -> pl.DataFrame:
    """One run's measured commits with the phase each was in."""
    measured = commits.filter(~pl.col("warmup")).sort("index")
    wrote_db = measured["vfs_db_write_calls"] > 0
    first = next((i for i, wrote in enumerate(wrote_db) if wrote), None)
    phases = [
        "checkpoint" if wrote else ("WAL growth" if first is None or i < first else "steady state")
        for i, wrote in enumerate(wrote_db)
    ]
    return measured.with_columns(pl.Series("phase", phases))


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> tuple[Path, str]:
    """Two ext4 WAL/FULL runs of 400 commits (the first checkpoint comes at about 307),
    and the table `sqlwa matrix` printed, on a console wide enough for a row a line."""
    out = tmp_path_factory.mktemp("phase-rows") / "m"
    proc = sqlwa(
        "matrix", "--fs", "ext4", "-j", "wal", "--sync", "full", "-n", "400", "--repeat", "2",
        "--image-size", "64M", "--out", str(out), env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    return out, proc.stdout


def table_rows(stdout: str) -> tuple[list[str], dict[str, list[str]]]:
    """The first table's header (its column labels' words joined) and rows by their first cell."""
    first = stdout.split("└", 1)[0]
    lines = [line for line in first.splitlines() if line.startswith(("│", "┃"))]
    split = [[cell.strip() for cell in re.split("[│┃]", line)[1:-1]] for line in lines]
    heads = [row for row, line in zip(split, lines) if line.startswith("┃")]
    header = [" ".join(part for part in parts if part) for parts in zip(*heads)]
    return header, {row[0]: row for row, line in zip(split, lines) if line.startswith("│")}


def test_each_phase_row_is_its_commits_pooled_over_the_runs(matrix):
    out, stdout = matrix
    header, rows = table_rows(stdout)
    raw = pl.concat(raw_phases(pl.read_parquet(run / "commits.parquet")) for run in sorted((out / "runs").iterdir()))
    assert set(raw["phase"]) == {"WAL growth", "checkpoint", "steady state"}  # 400 commits pass the first
    for (phase,), of_phase in raw.group_by("phase"):
        cells = rows[str(phase)]
        assert cells[header.index("commits")] == f"{of_phase.height:,}"
        for label, column in FIGURES.items():
            assert cells[header.index(label)].split(" ± ")[0] == f"{of_phase[column].mean():,.2f}", (phase, label)

    # SQLite's WAL/FULL on ext4: a growing WAL costs a flush more a commit (its size changes)
    # (and the journal's own commits now and then: a few hundredths more)
    def flushes(phase: str) -> float:
        return float(rows[phase][header.index("flushes")].split(" ± ")[0])

    assert 1.95 <= flushes("WAL growth") <= 2.1 and 0.95 <= flushes("steady state") <= 1.1
    assert "a row per phase below its whole-run row" in " ".join(stdout.split())


def test_a_rollback_journal_has_no_phase_rows(tmp_path):
    proc = sqlwa("matrix", "--vfs-only", "-j", "delete", "--sync", "full", "-n", "5", "-o", str(tmp_path / "m"),
                 env={**os.environ, "COLUMNS": "400"})  # fmt: skip
    _, rows = table_rows(proc.stdout)
    assert list(rows) == ["mobibench-insert none delete/full"]
    assert "a row per phase" not in proc.stdout
