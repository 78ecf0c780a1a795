"""The lab run's analysis from a scan of the streamed events.parquet equals, frame for
frame, the analysis of the whole event table parsed into memory (the analysis every lab
test checks against its own truth, the raw trace read with regular expressions).

Each run here is a real lab run (root); its raw ``trace.txt`` is analysed twice, once each
way, with the run's own commits, layout and settings, and the per-commit tables, the
attributed writes and the summary sections must be equal. The runs cover the analysis'
branches: WAL and rollback journals, ext4, xfs and btrfs (its log tree, its chunk map),
a FUSE layer (the daemon's syscalls) and dm-crypt (writes followed through remaps).
``SQLWA_STREAM_EQUALITY_COMMITS`` (e.g. 100000) adds a run of that many commits.

The chunked analysis (:mod:`sqlwa.analysis.stream`, commit windows and events walked
together a chunk at a time) is compared too, with chunks of a few commits so that their
edges are crossed many times, and with the default; and lab runs made with such chunks
are checked against strace and an independent tally of the raw trace (the truth
tests/lab/test_run_lab.py checks the run against).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sqlwa.analysis import phases, stream
from sqlwa.analysis.summary import ColumnFrame, build_summary, with_vfs_totals
from sqlwa.measure import analyse
from sqlwa.measure.lab_capture import LabFacts
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


def context_of(out: Path) -> tuple[analyse.LabContext, tuple[int, int], list[str]]:
    """What the run's analysis was given besides the trace, from what the run recorded."""
    summary = json.loads((out / "summary.json").read_text())
    config, lab = summary["config"], summary["config"]["lab"]
    target = lab.get("crypt") or lab.get("delay")
    facts = LabFacts(
        fs_type=lab["fs_type"],
        layout=json.loads((out / rundir.LAYOUT_FILE).read_text()),
        dev=device(lab["dev"]),
        mapped_dev=device(target["dev"]) if target else None,
        mapped_offset=(lab.get("delay") or {}).get("offset_sectors"),
        fuse=lab.get("fuse"),
        files_by_sync=lab.get("ecryptfs") is not None,
    )
    context = analyse.LabContext(**vars(facts), journal=config["journal"], sync=config["sync"])
    return context, device(lab["dev"]), summary["levels"]


@pytest.mark.parametrize("case", list(CASES))
def test_streamed_analysis_equals_whole_table(case, tmp_path, monkeypatch):
    out = tmp_path / case
    lab_run(out, CASES[case])
    assert_streamed_equals_whole(out, tmp_path, monkeypatch)


#: Run directories made earlier (with their trace.txt), os.pathsep between them: a 10^5-commit
#: run takes many minutes to make, and its analysis compares as any other.
EARLIER = [Path(p) for p in os.environ.get("SQLWA_STREAM_EQUALITY_RUNS", "").split(os.pathsep) if p]


@pytest.mark.skipif(not EARLIER, reason="SQLWA_STREAM_EQUALITY_RUNS names no run directory")
@pytest.mark.parametrize("out", EARLIER, ids=str)
def test_streamed_analysis_of_an_earlier_run(out, tmp_path, monkeypatch):
    assert_streamed_equals_whole(out, tmp_path, monkeypatch)


def assert_streamed_equals_whole(out: Path, tmp_path: Path, monkeypatch) -> None:
    context, dev, levels = context_of(out)
    commits = with_vfs_totals(engine_commits(out))
    trace = out / rundir.TRACE_FILE
    if not trace.exists():  # a run long enough to keep its capture in parts: its events.parquet
        assert_chunked_equals_whole(out, tmp_path, monkeypatch, commits)
        return
    whole = analyse.analyse_trace(trace, commits, dev, levels, context)
    streamed = analyse.analyse_trace(trace, commits, dev, levels, context, events_path=tmp_path / "events.parquet")
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
    assert_chunked_equals_whole(out, tmp_path, monkeypatch, commits)


def assert_chunked_equals_whole(out: Path, tmp_path: Path, monkeypatch, commits: pl.DataFrame) -> None:
    """The chunked analysis of the run's events.parquet equals the whole table's analysis,
    with chunks of 3 commits (edges crossed all the time; 997 in a long run) and of the
    default size; and so
    does the summary read from its per-commit file a column at a time."""
    context, dev, levels = context_of(out)
    events = pl.read_parquet(out / rundir.EVENTS_FILE)
    whole = analyse.analyse_events(events, {}, commits, dev, levels, context)
    assert isinstance(whole.commits, pl.DataFrame) and whole.commits.height == commits.height > 0
    journal = json.loads((out / "summary.json").read_text())["config"]["pragmas"]["journal_mode"]
    whole_summary = build_summary({}, phases.with_phases(whole.commits, journal), levels, **whole.sections)
    tiny = "3" if commits.height <= 5000 else "997"  # a long run's chunk edges: a hundred of them
    for size in (tiny, None):
        work = tmp_path / f"chunks-{size}"
        work.mkdir()
        events.write_parquet(work / rundir.EVENTS_FILE, row_group_size=1000)
        if size:
            monkeypatch.setenv("SQLWA_ANALYSIS_CHUNK_COMMITS", size)
        else:
            monkeypatch.delenv("SQLWA_ANALYSIS_CHUNK_COMMITS", raising=False)
        scan = pl.scan_parquet(work / rundir.EVENTS_FILE)
        if not stream.streamable(context):  # analysed whole (its test above)
            return
        chunked = analyse.analyse_streamed(scan, {}, commits.lazy(), dev, levels, context, work / "c.parquet", None)
        assert isinstance(chunked.commits, pl.LazyFrame)
        assert_frame_equal(chunked.commits.collect(), whole.commits)
        assert isinstance(chunked.writes, pl.LazyFrame) and whole.writes is not None
        assert_frame_equal(chunked.writes.collect(), whole.writes)
        assert chunked.sections == whole.sections
        assert chunked.amortized == whole.amortized
        with_phases = analyse.analyse_streamed(scan, {}, commits, dev, levels, context, work / "p.parquet", journal)
        assert isinstance(with_phases.commits, pl.LazyFrame)
        summary = build_summary({}, ColumnFrame(with_phases.commits), levels, **with_phases.sections)
        assert summary == whole_summary
        # nothing of the chunks is left behind: the parts were joined and removed
        assert sorted(p.name for p in work.iterdir()) == sorted(
            [rundir.EVENTS_FILE, "c.parquet", "p.parquet", rundir.WRITES_FILE]
        )


@pytest.mark.parametrize(
    "name",
    [
        "test_syscalls_per_commit_equal_strace[wal-full]",
        "test_syscalls_per_commit_equal_strace[delete-full]",
        "test_block_per_commit_equals_independent_tally[ext4]",
    ],
)
def test_tiny_chunks_against_independent_truth(name, tmp_path, monkeypatch):
    """Lab runs analysed in chunks of 3 commits, their engine records taken 3 at a
    time, meet the independent truth the lab tests
    check runs against: strace's syscalls per commit, and the raw trace's block requests
    per commit tallied by regular expressions (tests/lab/test_run_lab.py)."""
    from lab import test_run_lab

    monkeypatch.setenv("SQLWA_ANALYSIS_CHUNK_COMMITS", "3")  # the run's own process inherits it
    monkeypatch.setenv("SQLWA_CHUNK_COMMITS", "3")  # and the engine's records, 3 at a time
    function, _, params = name.partition("[")
    test = getattr(test_run_lab, function)
    if function.startswith("test_syscalls"):
        journal, sync = params.rstrip("]").split("-")
        if test_run_lab.shutil.which("strace") is None:
            pytest.skip("strace is not installed")
        test(tmp_path, journal, sync)
    else:
        test(tmp_path, params.rstrip("]"))


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


def test_engine_chunks_of_three_against_strace(tmp_path):
    """A lab run whose engine hands its records over 3 commits at a time (and whose
    analysis walks 3 commit windows at a time) has every commit's row, the engine's VFS
    counts and the trace's syscall figures alike, equal to strace's count of the SQL
    thread's calls in that commit's marker window; its rows equal a run's with the
    default chunks (the deterministic columns: counts, not times); and OUT keeps no
    file of the chunks."""
    from trace_truth import strace_per_commit

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    tiny = {**os.environ, "SQLWA_CHUNK_COMMITS": "3", "SQLWA_ANALYSIS_CHUNK_COMMITS": "3"}
    default = {k: v for k, v in tiny.items() if k not in ("SQLWA_CHUNK_COMMITS", "SQLWA_ANALYSIS_CHUNK_COMMITS")}
    args = ["run", "--fs", "ext4", "--image-size", "64M", "-j", "wal", "--sync", "full", "-n", "40", "--warmup", "4"]
    log = tmp_path / "strace.log"
    strace = ["strace", "-f", "-s", "64", "-o", str(log), "-e", "trace=write,pwrite64,fsync,fdatasync,sync_file_range"]
    runs = {}
    for name, env, prefix in (("tiny", tiny, strace), ("default", default, [])):
        out = tmp_path / name
        cmd = [*prefix, sys.executable, "-m", "sqlwa", *args, "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [], "no chunk file left in OUT"
        runs[name] = (json.loads((out / "summary.json").read_text()), pl.read_parquet(out / rundir.COMMITS_FILE))
    summary, commits = runs["tiny"]
    assert commits["index"].to_list() == list(range(44)), "every chunk, in order, none twice (44: 3 does not divide it)"
    assert commits["warmup"].to_list() == [True] * 4 + [False] * 40
    assert (summary["commits"], summary["warmup_commits"]) == (40, 4)
    truth = strace_per_commit(log, summary["config"]["tid"])
    assert sorted(truth) == list(range(44))
    for row in commits.iter_rows(named=True):
        seen = truth[row["index"]]
        # the engine's own columns (its VFS shim: one pwrite64 per xWrite, a WAL has no
        # directory syncs) and the trace's
        assert (row["vfs_write_calls"], row["vfs_sync_calls"]) == (seen["pwrite_calls"], seen["fsync_calls"]), row
        assert (row["pwrite_calls"], row["pwrite_bytes"], row["fsync_calls"]) == (
            seen["pwrite_calls"],
            seen["pwrite_bytes"],
            seen["fsync_calls"],
        ), row["index"]
    counts = ["index", "warmup", "logical_bytes", "statements", "pwrite_calls", "pwrite_bytes", "fsync_calls", "phase"]
    counts += [c for c in commits.columns if c.startswith("vfs_")]
    assert_frame_equal(commits.select(counts), runs["default"][1].select(counts))
    assert commits.columns == runs["default"][1].columns and commits.schema == runs["default"][1].schema
