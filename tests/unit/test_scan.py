"""``sqlwa.scan`` and ``Run.scan_events``/``scan_commits``: lazy frames over the event
tables on disk (#21). A scan collects to what pyarrow reads from the same file (an
independent Parquet reader); a filter and select run inside the Parquet scan (Polars'
projection and predicate pushdown, read from the query plan), so only those columns and
the matching rows are materialised. What that saves in memory is bench/lazy_scan.py's
figure, not a test's."""

from __future__ import annotations

import re
import shutil

import polars as pl
import pyarrow.parquet as pq
import pytest

import sqlwa
from helpers import REPO
from sqlwa.results import rundir

KEKS = REPO / "traces" / "samples" / "blktrace-keks" / "keks"
SAMPLE_RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"


@pytest.fixture(scope="module")
def event_table(tmp_path_factory):
    """The keks sample's event table, written as ``sqlwa parse -o`` writes it."""
    path = tmp_path_factory.mktemp("scan") / "keks.parquet"
    rundir.write_parquet(sqlwa.parse(KEKS).events, path)
    return path


def pyarrow_read(path) -> pl.DataFrame:
    return pl.from_arrow(pq.read_table(path))


def test_a_scan_collects_to_what_pyarrow_reads(event_table):
    scanned = sqlwa.scan(event_table)
    assert isinstance(scanned, pl.LazyFrame)
    collected = scanned.collect()
    assert collected.height > 1000
    assert collected.equals(pyarrow_read(event_table))


def test_a_filter_and_select_run_inside_the_parquet_scan(event_table):
    issued_writes = (pl.col("action") == "D") & (pl.col("operation") == "write")
    query = sqlwa.scan(event_table).filter(issued_writes).select("time_ns", "sector", "bytes")
    plan = query.explain()
    # the scan reads the three selected columns and the two filtered on, of all 30
    width = len(pq.read_schema(event_table).names)
    assert "Parquet SCAN" in plan, plan
    assert re.search(rf"PROJECT 5/{width} COLUMNS", plan), plan
    assert re.search(r"SELECTION: .*action.*operation", plan), plan
    assert "FILTER" not in plan, plan  # no filter left above the scan
    truth = pyarrow_read(event_table).filter(issued_writes).select("time_ns", "sector", "bytes")
    assert truth.height > 0 and query.collect().equals(truth)


def test_a_runs_tables_scan_to_what_pyarrow_reads(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(SAMPLE_RUN, run_dir)
    # a lab run writes its parsed trace beside trace.txt; the sample predates that
    rundir.write_parquet(sqlwa.load(run_dir).events, run_dir / rundir.EVENTS_FILE)
    run = sqlwa.load(run_dir)
    assert run.scan_events().collect().equals(pyarrow_read(run_dir / rundir.EVENTS_FILE))
    assert sqlwa.scan(run_dir).collect().equals(pyarrow_read(run_dir / rundir.EVENTS_FILE))
    assert run.scan_commits().collect().equals(pyarrow_read(run_dir / rundir.COMMITS_FILE))


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (KEKS.with_name("keks.blktrace.0"), "is not a Parquet file"),  # a raw trace: parse it first
        (REPO / "no-such.parquet", "does not exist"),
        (SAMPLE_RUN, "has no events.parquet"),  # a run with only its trace.txt
        (SAMPLE_RUN.parent, "is a matrix"),
    ],
)
def test_what_cannot_be_scanned_is_one_usage_error(source, says):
    with pytest.raises(sqlwa.UsageError, match=says):
        sqlwa.scan(source)


def test_a_damaged_parquet_fails_at_the_scan_not_at_collect(event_table, tmp_path):
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(event_table.read_bytes()[:4096])  # a Parquet head without its footer
    with pytest.raises(sqlwa.UsageError, match="damaged"):
        sqlwa.scan(cut)
