"""``sqlwa run --fs``: per-commit syscall and block figures against independent truth.

- syscalls: strace of the same run. The engine's marker writes show up in strace as
  ``write(fd, "sqlwa txn_begin i=K ...")``, so strace's own log cuts into commit windows
  and the fsync-family and pwrite64 calls (and pwrite bytes) of the SQL thread between
  them are counted per commit.
- block: a deliberately simple tally of the raw trace.txt written here (regular
  expressions over the text, no sqlwa code), in the same marker windows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa, sqlwa_as_nobody
from sqlwa.results import store
from trace_truth import marker_times_ns, strace_per_commit, tally_block_per_commit, write_bytes_since_commit

pytestmark = pytest.mark.root


def lab_run(tmp_path: Path, *args: str, prefix: list[str] | None = None) -> tuple[dict, pl.DataFrame]:
    out = tmp_path / "out"
    cmd = [*(prefix or []), sys.executable, "-m", "sqlwa", "run", *args, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    return summary, pl.read_parquet(out / "commits.parquet")


# ----------------------------------------------------------------------------- strace truth


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("journal,sync", [("delete", "full"), ("wal", "full"), ("truncate", "normal")])
def test_syscalls_per_commit_equal_strace(tmp_path, journal, sync):
    log = tmp_path / "strace.log"
    prefix = ["strace", "-f", "-s", "64", "-o", str(log), "-e", "trace=write,pwrite64,fsync,fdatasync,sync_file_range"]
    summary, commits = lab_run(tmp_path, "--fs", "ext4", "-j", journal, "--sync", sync, "--txns", "40", prefix=prefix)
    truth = strace_per_commit(log, summary["config"]["tid"])
    assert len(truth) > 0 or sync == "off"
    for column in ("fsync_calls", "pwrite_calls", "pwrite_bytes"):
        measured = dict(zip(commits["index"].to_list(), commits[column].to_list()))
        for index, count in measured.items():
            assert count == truth.get(index, Counter())[column], (column, index, count, truth.get(index))


@pytest.mark.parametrize("fs", ["ext4", "xfs"])
def test_block_per_commit_equals_independent_tally(tmp_path, fs):
    summary, commits = lab_run(tmp_path, "--fs", fs, "-j", "delete", "--sync", "full", "--txns", "40")
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    trace = tmp_path / "out" / "trace.txt"
    truth = tally_block_per_commit(trace, dev)
    assert sum(t["bytes"] for t in truth.values()) > 0
    for row in commits.iter_rows(named=True):
        t = truth.get(row["index"], Counter())
        assert row["write_bytes"] == t["bytes"], row["index"]
        assert row["write_requests"] == t["writes"], row["index"]
        assert row["flush_requests"] == t["flush"], row["index"]
    measured = commits.filter(~pl.col("warmup"))
    since_first = write_bytes_since_commit(trace, dev, measured["index"].min())
    assert summary["amortized"]["write_bytes"] == since_first
    # The store's (and the matrix table's) whole-stack amplification: those bytes over the
    # bytes the app asked to store (MobiBench: a row of a 100-byte value and an 8-byte id
    # into each of its three tables per commit).
    assert (measured["logical_bytes"] == 324).all()
    block_over_logical = store.run_metrics(summary, commits)["block_over_logical"]
    assert block_over_logical == pytest.approx(since_first / (324 * measured.height))
    assert_latency_agrees_with_kernel(summary, commits, marker_times_ns(trace))


def assert_latency_agrees_with_kernel(summary: dict, commits: pl.DataFrame, kernel: dict) -> None:
    """The engine's clock readings against the kernel's timestamps of the marker lines they
    precede (capture sets the trace clock to the engine's CLOCK_MONOTONIC).

    Exact, whatever the load: each reading lies after the previous marker was written and
    before its own marker was (one µs of slack for the printed truncation). Close, not
    exact: a reading and its marker write are apart by the write itself (under 1 µs
    measured here), unless the thread is preempted in between, which a loaded 2-core
    machine does now and then (72 µs seen once in CI; 7 commits of 50 beside the flake
    finder's CPU and disk load) -- a preemption lasts a scheduler slice, not 50 µs, so
    the commits it hits are not the rule: at least half must match the kernel's latency
    within 50 µs (a clock or marker in the wrong place misses on every commit), and the
    summary's middle quantiles the kernel's within 50 µs or
    the largest gap of a measured commit, whichever is more (a quantile of latencies each
    within d of the kernel's is within d of the kernel's quantile; one preempted commit at
    the p90's rank moved it 50-plus µs once, on a machine running a long lab run beside)."""
    us = 1000
    previous_end = 0
    close = 0
    for row in commits.sort("index").iter_rows(named=True):
        i = row["index"]
        begin, end = kernel[("txn_begin", i)], kernel[("txn_end", i)]
        assert previous_end <= row["start_ns"] < begin + us, i
        assert begin <= row["end_ns"] < end + us, i
        previous_end = end
        close += abs(row["latency_ns"] - (end - begin)) <= 50 * us
    assert close >= 0.5 * commits.height, f"{close} of {commits.height} commits within 50 µs of the kernel's latency"
    measured = commits.filter(~pl.col("warmup"))
    kernel_ms = pl.Series([(kernel[("txn_end", i)] - kernel[("txn_begin", i)]) / 1e6 for i in measured["index"]])
    widest_gap_ms = (measured["latency_ns"] / 1e6 - kernel_ms).abs().max()
    for name, q in (("p50", 0.5), ("p90", 0.9)):
        expected = kernel_ms.quantile(q, "linear")
        assert summary["latency_ms"][name] == pytest.approx(expected, abs=max(0.05, widest_gap_ms)), name
        assert summary["latency_ms"][name] == pytest.approx((measured["latency_ns"] / 1e6).quantile(q, "linear"))
    # The tail is where a preempted marker write lands, so it is checked against the
    # per-commit latencies (themselves bracketed by the kernel above).
    engine_ms = measured["latency_ns"] / 1e6
    assert summary["latency_ms"]["p99"] == pytest.approx(engine_ms.quantile(0.99, "linear"))
    assert summary["latency_ms"]["max"] == pytest.approx(engine_ms.max())


# ----------------------------------------------------------------------------- filesystems


@pytest.mark.parametrize("fs", ["ext4", "ext4-journal", "ext4-writeback", "xfs", "btrfs"])
def test_every_lab_filesystem_measures_all_levels(tmp_path, fs):
    summary, commits = lab_run(tmp_path, "--fs", fs, "-j", "wal", "--sync", "full", "--txns", "20")
    assert summary["levels"] == ["vfs", "syscall", "block"]
    pc = summary["per_commit"]
    assert pc["fsync_calls"] == pytest.approx(1)  # WAL + FULL: one WAL sync per commit
    assert pc["flush_requests"] >= 1 and pc["write_bytes"] > 0
    assert pc["amortized_write_bytes"] >= pc["write_bytes"]
    assert summary["trace"]["lost_events"] == 0
    assert summary["config"]["fs"] == fs


def test_tmpfs_has_no_block_level(tmp_path):
    summary, _ = lab_run(tmp_path, "--fs", "tmpfs", "--txns", "10")
    assert "block" not in summary["levels"] and "syscall" in summary["levels"]
    assert "write_bytes" not in summary["per_commit"]


def test_unavailable_filesystem_is_skipped_with_reason(tmp_path):
    if "f2fs" in Path("/proc/filesystems").read_text():
        pytest.skip("this kernel has f2fs")
    proc = sqlwa("run", "--fs", "f2fs", "--txns", "5", "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2
    assert "f2fs" in proc.stderr and "fix:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.root
def test_without_root_says_what_is_missing():
    with sqlwa_as_nobody("run", "--fs", "ext4", "--txns", "5", "--out", "{dir}/o", prefix="sqlwa-test-nonroot-") as (
        proc,
        _,
    ):
        assert proc.returncode == 2, proc.stderr
        assert "needs root" in proc.stderr and "--vm" in proc.stderr and "Traceback" not in proc.stderr


def test_buffer_kb_sets_the_ring_buffer_the_run_records(tmp_path):
    summary, _ = lab_run(tmp_path, "--fs", "ext4", "-n", "5", "--buffer-kb", "256")
    assert summary["trace"]["buffer_kb_per_cpu"] == 256
