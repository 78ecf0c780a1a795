"""The lab run's analysis from a scan of the streamed events.parquet equals, frame for
frame, the analysis of the whole event table parsed into memory (the analysis every lab
test checks against its own truth, the raw trace read with regular expressions).

Each run here is a real lab run (root); its raw ``trace.txt`` is analysed twice, once each
way, with the run's own commits, layout and settings, and the per-commit tables, the
attributed writes and the summary sections must be equal. The runs cover the analysis'
branches: WAL and rollback journals, ext4, xfs and btrfs (its log tree, its chunk map),
a FUSE layer (the daemon's syscalls) and dm-crypt (writes followed through remaps).
``SQLWA_STREAM_EQUALITY_COMMITS`` (e.g. 100000) adds a run of that many commits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sqlwa.measure import runner
from sqlwa.results import rundir

pytestmark = pytest.mark.root

CASES = {
    "ext4-wal": ["--fs", "ext4", "-j", "wal", "--sync", "full", "-n", "400"],
    "ext4-delete": ["--fs", "ext4", "-j", "delete", "--sync", "full", "-n", "60"],
    "xfs-wal-normal": ["--fs", "xfs", "-j", "wal", "--sync", "normal", "-n", "200"],
    "btrfs-truncate": ["--fs", "btrfs", "-j", "truncate", "--sync", "full", "-n", "40"],
    "ext4-fuse": ["--fs", "ext4", "--fuse", "passthrough", "-j", "wal", "-n", "40"],
    "ext4-crypt": ["--fs", "ext4", "--crypt", "dm-crypt", "-j", "wal", "-n", "40"],
}
LONG = int(os.environ.get("SQLWA_STREAM_EQUALITY_COMMITS", "0"))
if LONG:
    CASES[f"ext4-wal-{LONG}"] = ["--fs", "ext4", "-j", "wal", "--sync", "full", "-n", str(LONG)]


def lab_run(out: Path, args: list[str]) -> None:
    size = [] if LONG and str(LONG) in args else ["--image-size", "320M"]
    cmd = [sys.executable, "-m", "sqlwa", "run", *size, *args, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 2 and "Invalid value" not in proc.stderr and ("--fuse" in args or "--crypt" in args):
        pytest.skip(f"this host cannot: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]


def engine_commits(out: Path) -> pl.DataFrame:
    """The engine's own columns of the run's commits (what the analysis is given)."""
    commits = pl.read_parquet(out / rundir.COMMITS_FILE)
    engine = ["index", "warmup", "start_ns", "end_ns", "logical_bytes", "statements", "latency_ns"]
    cpu = [c for c in ("cpu_user_ns", "cpu_sys_ns", "cpu_ns") if c in commits.columns]
    return commits.select(*engine, *cpu, pl.col("^vfs_.*$"))


def device(text: str) -> tuple[int, int]:
    major, minor = text.split(":")
    return int(major), int(minor)


def context_of(out: Path) -> tuple[runner.LabContext, tuple[int, int], list[str]]:
    """What the run's analysis was given besides the trace, from what the run recorded."""
    summary = json.loads((out / "summary.json").read_text())
    config, lab = summary["config"], summary["config"]["lab"]
    target = lab.get("crypt") or lab.get("delay")
    context = runner.LabContext(
        config["journal"],
        config["sync"],
        lab["fs_type"],
        json.loads((out / rundir.LAYOUT_FILE).read_text()),
        lab.get("fuse"),
        mapped_dev=device(target["dev"]) if target else None,
        mapped_offset=(lab.get("delay") or {}).get("offset_sectors"),
        files_by_sync=lab.get("ecryptfs") is not None,
    )
    return context, device(lab["dev"]), summary["levels"]


@pytest.mark.parametrize("case", list(CASES))
def test_streamed_analysis_equals_whole_table(case, tmp_path):
    out = tmp_path / case
    lab_run(out, CASES[case])
    assert_streamed_equals_whole(out, tmp_path)


#: Run directories made earlier (with their trace.txt), os.pathsep between them: a 10^5-commit
#: run takes many minutes to make, and its analysis compares as any other.
EARLIER = [Path(p) for p in os.environ.get("SQLWA_STREAM_EQUALITY_RUNS", "").split(os.pathsep) if p]


@pytest.mark.skipif(not EARLIER, reason="SQLWA_STREAM_EQUALITY_RUNS names no run directory")
@pytest.mark.parametrize("out", EARLIER, ids=str)
def test_streamed_analysis_of_an_earlier_run(out, tmp_path):
    assert_streamed_equals_whole(out, tmp_path)


def assert_streamed_equals_whole(out: Path, tmp_path: Path) -> None:
    context, dev, levels = context_of(out)
    commits = runner.with_vfs_totals(engine_commits(out))
    trace = out / rundir.TRACE_FILE
    whole = runner.analyse_trace(trace, commits, dev, levels, context)
    streamed = runner.analyse_trace(trace, commits, dev, levels, context, events_path=tmp_path / "events.parquet")
    assert isinstance(whole.events, pl.DataFrame) and isinstance(streamed.events, pl.LazyFrame)
    assert whole.commits.height == commits.height > 0
    assert_frame_equal(streamed.commits, whole.commits)
    assert whole.writes is not None and streamed.writes is not None
    assert_frame_equal(streamed.writes, whole.writes)
    assert streamed.sections == whole.sections
    assert streamed.amortized == whole.amortized
    parsed = {k: v for k, v in whole.parse_report.items() if k != "files"}
    assert {k: v for k, v in streamed.parse_report.items() if k != "files"} == parsed
    # the streamed table is the whole one, row for row
    assert_frame_equal(streamed.events.collect(), whole.events)
    # and the figures are real: the block level saw the run's writes
    assert whole.writes.height > 0
    # and they are the run's own (its commits.parquet, from the whole-table analysis
    # when it was made, or from the streamed one now)
    recorded = pl.read_parquet(out / rundir.COMMITS_FILE)
    common = [c for c in streamed.commits.columns if c in recorded.columns]
    assert_frame_equal(streamed.commits.select(common), recorded.select(common))


def test_a_long_capture_kept_in_parts(tmp_path):
    """A run longer than a segment (made small here) keeps its capture in parts as it is
    drained; the analysis joins them into events.parquet, which then holds every event the
    drain counted in the text it drained (per tracepoint, by the lines' own names), and
    nothing else of the capture is left."""
    out = tmp_path / "parts"
    env = {**os.environ, "SQLWA_TRACE_SEGMENT_BYTES": str(1 << 20)}
    cmd = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M"]
    # a small ring buffer: drained while the run goes, not only at its end
    cmd += ["-j", "wal", "--sync", "full", "-n", "1500", "--buffer-kb", "512", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trace = json.loads((out / "summary.json").read_text())["trace"]
    assert trace["parts"] >= 2
    assert not (out / rundir.TRACE_FILE).exists() and not list(out.glob("trace.*"))
    events = pl.read_parquet(out / rundir.EVENTS_FILE)
    assert events.height == trace["events"] == trace["parse"]["events"] > 0
    counts = trace["event_counts"]
    block = events.filter(pl.col("kind") == "block")
    assert block.filter(pl.col("action") == "D").height == counts["block_rq_issue"]
    assert block.filter(pl.col("action") == "C").height == counts["block_rq_complete"]
    assert events.filter(pl.col("kind") == "marker").height == counts["tracing_mark_write"]
    pwrites = events.filter((pl.col("kind") == "syscall_enter") & (pl.col("name") == "pwrite64"))
    assert pwrites.height == counts["sys_enter_pwrite64"] > 1500
    # and the run is re-analysable from it: its commit windows are the run's commits
    commits = pl.read_parquet(out / rundir.COMMITS_FILE)
    assert commits["win_start_ns"].null_count() == 0 and commits.height == 1500 + 10


def test_a_long_run_without_room_is_refused(tmp_path):
    """Before a long run its capture's size is estimated and checked against the free
    space (here more than any disk holds): one line, exit 2, nothing made."""
    out = tmp_path / "huge"
    cmd = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "-n", str(10**9), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "capture estimate: ~25,000,000,000 trace events" in proc.stderr
    refusal = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(refusal) == 1 and "MiB free, and this run's capture needs about" in refusal[0]
    assert "Traceback" not in proc.stderr and not out.exists()
