"""A long lab run (#37, item 2) stopped by a signal mid-workload: the commits measured so
far are analysed and written, as many as the rows of the database the lab's image kept
(read out of the image by debugfs, counted by the sqlite3 shell), each commit's row whole
(its block figures those of a tally of the raw trace), and nothing of sqlwa's is left
behind; a second Ctrl-C still aborts at once. (An OUT that takes no writes meanwhile:
tests/lab/test_frozen_out.py.)"""

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

from helpers import lab_leftovers, leftovers_after_release
from sqlwa.results import rundir
from trace_truth import marker_times_ns, tally_block_per_commit

pytestmark = [pytest.mark.root, pytest.mark.tracefs]

TABLES = ("tblMyList0", "tblMyList1", "tblMyList2")  # mobibench-insert: a row in each per commit
# From the second Ctrl-C to the exit. While analysing, the lab is gone already: only the
# unwinding and the interpreter's exit are left (well under a second; 5 s on a loaded
# core). While draining, the drain is given up (DISCARD_WAIT_S, 1 s) and the lab still
# taken down: an unmount, a loop device and a tracefs instance that the kernel releases in
# up to about 2 s each under a full CPU and disk load (sqlwa._system.settle): 5 + 1 + 6.
# The keeping a second Ctrl-C must give up, 10 s of commits analysed, is what the
# "holds no finished run" line, RUNNING and the missing summary.json check.
# From the first Ctrl-C to the line saying the rest is being kept: the engine ends the
# commit in flight (milliseconds; an fsync behind a busy disk writer waits seconds), then
# prints. The bound is generous; what shows "at once" is the order: the line comes while
# the run still goes on, before summary.json, not after the analysis.
KEEPING_SAID_WITHIN_S = 10.0
SECOND_CTRL_C_WITHIN_S = {"analysing": 5.0, "draining": 5.0 + 1.0 + 3 * 2.0}


def rows_in_image(image: Path, tmp: Path) -> list[int]:
    """Each table's rows in the lab image's mobibench-insert.db (the lab's data directory
    is its root), by debugfs (no mount) and the sqlite3 shell."""
    db = tmp / "from-image.db"
    subprocess.run(["debugfs", "-R", f"dump /mobibench-insert.db {db}", str(image)], check=True, capture_output=True)
    return [
        int(subprocess.run(["sqlite3", str(db), f"SELECT count(*) FROM {t}"], capture_output=True, text=True).stdout)
        for t in TABLES
    ]


def long_lab_run(out: Path, err_path: Path, whole_text: bool = False) -> subprocess.Popen:
    """``sqlwa run --duration 1h`` in the lab; ``whole_text`` keeps its capture's whole
    text in trace.txt (the truth tallied here), which a fast host passes the 64 MiB it is
    otherwise cut into parts at within the 10 s before the first progress line."""
    argv = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "--duration", "1h"]
    env = {**os.environ, "SQLWA_TRACE_SEGMENT_BYTES": str(1 << 40)} if whole_text else None
    with open(err_path, "w") as err:
        argv += ["--keep-image", "-o", str(out)]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env)


def wait_for_progress(proc: subprocess.Popen, err_path: Path, lines: int = 1, timeout: float = 180) -> None:
    """Until the run has printed ``lines`` progress lines (one every 10 s, stderr a file)."""
    deadline = time.monotonic() + timeout
    while err_path.read_text().count("commits,") < lines:
        assert proc.poll() is None, err_path.read_text()
        assert time.monotonic() < deadline, "no progress line"
        time.sleep(0.1)


@pytest.mark.skipif(not shutil.which("debugfs") or not shutil.which("sqlite3"), reason="needs debugfs and sqlite3")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_workload_keeps_the_commits_measured(tmp_path: Path, signum: int) -> None:
    out, err_path = tmp_path / "out", tmp_path / "err.txt"
    proc = long_lab_run(out, err_path, whole_text=True)
    try:
        wait_for_progress(proc, err_path)
        proc.send_signal(signum)
        proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait()
    stderr = err_path.read_text()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert f"{out} holds what was measured" in stderr.strip().splitlines()[-1], stderr
    said = re.search(r"after ([\d,]+) measured commits: ending the trace, then analysing them", stderr)
    assert said is not None, stderr
    progress = [line for line in stderr.splitlines() if "commits," in line]
    assert " events · " in progress[0] and "syncs/commit" in progress[0], progress[0]
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    assert not (out / rundir.RUNNING_FILE).exists()
    assert summary["stopped"]["by"] == "interrupted" and summary["commits"] > 0
    assert f"after {summary['commits']} commits" in summary["stopped"]["partial"]
    # the count said at the stop is the one kept (and the image's rows confirm below)
    assert int(said.group(1).replace(",", "")) == summary["commits"], said.group(0)
    assert "block" in summary["levels"] and summary["trace"]["lost_events"] == 0
    transactions = summary["commits"] + summary["warmup_commits"]
    assert rows_in_image(out / "lab.img", tmp_path) == [transactions] * 3
    # every commit the database holds has its row, whole: the last one's too
    commits = pl.read_parquet(out / rundir.COMMITS_FILE).sort("index")
    assert commits.height == transactions and commits.filter(~pl.col("warmup")).height == summary["commits"]
    ended = sorted(i for kind, i in marker_times_ns(out / rundir.TRACE_FILE) if kind == "txn_end")
    assert commits["index"].to_list() == ended
    truth = tally_block_per_commit(out / rundir.TRACE_FILE, summary["config"]["lab"]["dev"].replace(":", ","))
    for row in commits.iter_rows(named=True):
        t = truth.get(row["index"], {})
        figures = (row["write_bytes"], row["write_requests"], row["flush_requests"])
        assert figures == (t.get("bytes", 0), t.get("writes", 0), t.get("flush", 0)), row["index"]
        assert row["latency_ns"] > 0 and row["fsync_calls"] > 0, row
    assert leftovers_after_release(proc.pid) == []


def wait_for_text(proc: subprocess.Popen, err_path: Path, text: str, timeout: float) -> None:
    """Until the run's stderr (a file) holds ``text``."""
    deadline = time.monotonic() + timeout
    while text not in err_path.read_text():
        assert proc.poll() is None, err_path.read_text()
        assert time.monotonic() < deadline, f"not said within {timeout} s: {text!r}"
        time.sleep(0.01)


def wait_for_lab_gone(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until the run's lab and capture are taken down: the trace is whole in OUT and the
    analysis of what was measured is under way."""
    deadline = time.monotonic() + timeout
    while lab_leftovers(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("phase", ["draining", "analysing"])
def test_a_second_ctrl_c_aborts_at_once(tmp_path: Path, phase: str) -> None:
    """The second Ctrl-C while the trace's rest is drained or while what was measured is
    analysed: the run ends unfinished at once, the keeping given up."""
    out, err_path = tmp_path / "out", tmp_path / "err.txt"
    proc = long_lab_run(out, err_path)
    try:
        wait_for_progress(proc, err_path)
        proc.send_signal(signal.SIGINT)
        # said at once: the engine stops between two commits (milliseconds), not after the
        # trace's rest and the analysis (seconds; minutes after a day-long run)
        wait_for_text(proc, err_path, "Ctrl-C again stops at once", timeout=KEEPING_SAID_WITHIN_S)
        # the workload has stopped; keeping what it measured is under way
        time.sleep(0.3) if phase == "draining" else wait_for_lab_gone(proc)
        assert proc.poll() is None and not (out / rundir.SUMMARY_FILE).exists(), "kept before the second Ctrl-C"
        second = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        took = time.monotonic() - second
    finally:
        proc.kill()
        proc.wait()
    stderr = err_path.read_text()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert f"{out} holds no finished run" in last, stderr
    assert took < SECOND_CTRL_C_WITHIN_S[phase], f"{took:.1f} s from the second Ctrl-C to the exit"
    assert (out / rundir.RUNNING_FILE).exists() and not (out / rundir.SUMMARY_FILE).exists()
    # the raw capture kept, as the first line promised: the trace's text (or its parts)
    assert any(p.name.startswith("trace.") and p.stat().st_size > 0 for p in out.iterdir()), sorted(out.iterdir())
    if phase == "analysing":
        assert f"again while analysing; the raw capture stays in {out}" in last, last
    assert leftovers_after_release(proc.pid) == []
