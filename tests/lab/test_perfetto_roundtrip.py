"""A fresh lab run through Perfetto and back: ``sqlwa export`` of the run, then ``sqlwa
parse --commits`` of the trace, gives the per-commit figures the run itself recorded in
commits.parquet (and the trace decodes with Perfetto's own protos)."""

from __future__ import annotations

import polars as pl
import pytest

from helpers import sqlwa
from perfetto_traces import read_trace, track_slices

pytestmark = [pytest.mark.root, pytest.mark.tracefs]

FIGURES = [
    "index",
    "warmup",
    "fsync_calls",
    "fdatasync_calls",
    "pwrite_calls",
    "pwrite_bytes",
    "ftruncate_calls",
    "unlink_calls",
    "write_requests",
    "write_bytes",
    "flush_requests",
    "fua_writes",
]


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_export_then_parse_gives_the_runs_per_commit_figures(tmp_path, journal):
    run = tmp_path / "run"
    sqlwa("run", "--fs", "ext4", "-n", "20", "-j", journal, "--out", str(run))
    trace = tmp_path / "run.perfetto-trace"
    sqlwa("export", str(run), "-o", str(trace))
    commits_file = tmp_path / "commits.parquet"
    proc = sqlwa("parse", str(trace), "--commits", str(commits_file))
    assert "commits (sqlwa markers)" in proc.stdout
    ints = [pl.col(c).cast(pl.Int64) for c in FIGURES if c != "warmup"]
    recorded = pl.read_parquet(run / "commits.parquet").select(FIGURES).with_columns(ints)
    read_back = pl.read_parquet(commits_file).select(FIGURES).with_columns(ints)
    assert read_back.equals(recorded)
    assert recorded["fsync_calls"].sum() > 0 and recorded["write_bytes"].sum() > 0
    _, slices, _ = track_slices(read_trace(trace.read_bytes()))
    assert sum(s.track == "commits" for s in slices) == recorded.height
