"""A VFS-only run's commit records leave the engine in chunks, written as they come
(issues #34, #37: bounded memory). Forced down to a few commits a chunk, every commit's
row still matches strace's count of the SQL thread's pwrite64 and fsync-family calls in
that commit's window, its summary is the whole table's, and an interrupted run leaves no partial file behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa
from sqlwa.analysis.summary import build_summary
from sqlwa.measure import commit_stream
from sqlwa.results import rundir

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")

TINY = {"SQLWA_CHUNK_COMMITS": "3"}
SYSCALL = re.compile(r"^(\d+)\s+(getrusage|pwrite64|fdatasync|fsync)\((RUSAGE_THREAD)?")


def windows_of(strace_log: Path, tid: int) -> list[dict[str, int]]:
    """Per commit window, the SQL thread's pwrite64 and fsync-family calls: the engine
    reads its thread's CPU time (getrusage(RUSAGE_THREAD), a real syscall) just after a
    commit's start and just before its end, so the calls between the two reads of each
    pair are the commit's."""
    found: list[dict[str, int]] = []
    current: dict[str, int] | None = None
    for line in strace_log.read_text().splitlines():
        m = SYSCALL.match(line)
        if m is None or int(m.group(1)) != tid:
            continue
        call = m.group(2)
        if call == "getrusage":
            if m.group(3) is None:
                continue
            if current is None:
                current = {"pwrite64": 0, "syncs": 0}
            else:
                found.append(current)
                current = None
        elif current is not None:
            current["pwrite64" if call == "pwrite64" else "syncs"] += 1
    assert current is None, "a commit window without its end"
    return found


@needs_strace
@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_tiny_chunks_keep_every_commit_equal_to_strace(tmp_path, journal):
    out, log = tmp_path / "run", tmp_path / "run.strace"
    cmd = ["strace", "-f", "-e", "trace=getrusage,pwrite64,fdatasync,fsync", "-o", str(log)]
    cmd += [sys.executable, "-m", "sqlwa", "run", "-s", "mobibench-insert", "-j", journal, "--sync", "full"]
    cmd += ["-n", "20", "--warmup", "2", "--out", str(out), "--dir", str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, **TINY}, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    commits = pl.read_parquet(out / "commits.parquet")
    assert commits["index"].to_list() == list(range(22)), "every chunk, in order, none twice"
    assert commits["warmup"].to_list() == [True, True] + [False] * 20
    assert (summary["commits"], summary["warmup_commits"]) == (20, 2)

    truth = windows_of(log, summary["config"]["tid"])
    assert len(truth) == 22
    # a rollback journal is created anew each commit: SQLite's directory sync the VFS cannot see
    directory_syncs = 1 if journal == "delete" else 0
    for row, seen in zip(commits.iter_rows(named=True), truth, strict=True):
        assert row["vfs_write_calls"] == seen["pwrite64"], (row["index"], seen)
        assert row["vfs_sync_calls"] + directory_syncs == seen["syncs"], (row["index"], seen)
    assert summary["per_commit"]["vfs_sync_calls"] == pytest.approx(
        sum(t["syncs"] - directory_syncs for t in truth[2:]) / 20
    )
    assert not list(tmp_path.glob("sqlwa-*")), "the scratch directory and its chunk files are gone"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_run_keeps_its_commits_and_no_chunk_file(tmp_path, signum):
    out, scratch = tmp_path / "run", tmp_path / "scratch"
    scratch.mkdir()
    cmd = [sys.executable, "-m", "sqlwa", "run", "-n", "1000000", "--warmup", "0", "--keep-db"]
    cmd += ["--out", str(out), "--dir", str(scratch)]
    env = {**os.environ, "SQLWA_CHUNK_COMMITS": "50"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    partial = f"*/{commit_stream.PARTIAL_FILE}"
    while not any(p.stat().st_size > 50_000 for p in scratch.glob(partial)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no chunk was written"
        time.sleep(0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0, stderr
    assert "Traceback" not in stderr.decode()
    # the kept database stays (--keep-db); the chunk file does not: the commits measured
    # before the signal are the run's commits.parquet, its summary saying it is partial
    # (tests/e2e/test_long_runs.py checks their number against the kept database)
    assert not list(scratch.glob(partial)), list(scratch.rglob("*"))
    assert list(scratch.glob("*/*.db"))
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    assert "after" in summary["stopped"]["partial"], summary["stopped"]
    assert pl.read_parquet(out / rundir.COMMITS_FILE).height == summary["commits"] > 0


def test_a_wal_run_over_many_chunks_has_the_phases_of_one(tmp_path):
    """The WAL's first checkpoint in an early chunk makes the later chunks' commits
    steady state, as in a run whose commits were one table: the phases are where the
    database file was written (its VFS counts), chunk boundaries or not."""
    out = tmp_path / "run"
    args = ["run", "-s", "mobibench-insert", "-j", "wal", "-n", "1500", "--warmup", "0", "--out", str(out)]
    sqlwa(*args, "--dir", str(tmp_path), env={**os.environ, "SQLWA_CHUNK_COMMITS": "7"})
    commits = pl.read_parquet(out / "commits.parquet").sort("index")
    wrote_db = commits["vfs_db_write_calls"] > 0
    first = int(wrote_db.arg_true()[0])
    phase = commits["phase"].cast(pl.String).to_list()
    assert set(phase[:first]) == {"wal_growth"}
    expected = ["checkpoint" if w else "steady" for w in wrote_db.to_list()[first:]]
    assert phase[first:] == expected
    # summary.json's figures, from running sums over 215 chunks, are the whole table's
    summary = json.loads((out / "summary.json").read_text())
    whole = build_summary(
        summary["config"],
        commits,
        ["vfs"],
        device_not_measured=summary["device_not_measured"],
        stopped=summary["stopped"],  # what bounded the run: the engine's, not the table's
        # what is no commit (the closing, transactions that wrote nothing): the engine's too
        **{key: summary[key] for key in ("close", "wrote_nothing") if key in summary},
    )
    assert json.loads(json.dumps(whole)) == summary
