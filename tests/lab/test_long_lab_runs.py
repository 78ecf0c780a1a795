"""A long lab run (#37, item 2) stopped by a signal mid-workload: the commits measured so
far are analysed and written, as many as the rows of the database the lab's image kept
(read out of the image by debugfs, counted by the sqlite3 shell), and nothing of sqlwa's
is left behind; a second Ctrl-C still aborts at once."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import sqlwa_leftovers
from sqlwa.results import rundir

pytestmark = [pytest.mark.root, pytest.mark.tracefs]

TABLES = ("tblMyList0", "tblMyList1", "tblMyList2")  # mobibench-insert: a row in each per commit


def rows_in_image(image: Path, tmp: Path) -> list[int]:
    """Each table's rows in the lab image's mobibench-insert.db (the lab's data directory
    is its root), by debugfs (no mount) and the sqlite3 shell."""
    db = tmp / "from-image.db"
    subprocess.run(["debugfs", "-R", f"dump /mobibench-insert.db {db}", str(image)], check=True, capture_output=True)
    return [
        int(subprocess.run(["sqlite3", str(db), f"SELECT count(*) FROM {t}"], capture_output=True, text=True).stdout)
        for t in TABLES
    ]


def long_lab_run(out: Path, err_path: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "--duration", "1h"]
    with open(err_path, "w") as err:
        return subprocess.Popen([*argv, "--keep-image", "-o", str(out)], stdout=subprocess.PIPE, stderr=err, text=True)


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
    proc = long_lab_run(out, err_path)
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
    progress = [line for line in stderr.splitlines() if "commits," in line]
    assert " events · " in progress[0] and "syncs/commit" in progress[0], progress[0]
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    assert summary["stopped"]["by"] == "interrupted" and summary["commits"] > 0
    assert f"after {summary['commits']} commits" in summary["stopped"]["partial"]
    assert "block" in summary["levels"] and summary["trace"]["lost_events"] == 0
    transactions = summary["commits"] + summary["warmup_commits"]
    assert rows_in_image(out / "lab.img", tmp_path) == [transactions] * 3
    assert sqlwa_leftovers(proc.pid) == []


def test_a_second_ctrl_c_aborts_at_once(tmp_path: Path) -> None:
    out, err_path = tmp_path / "out", tmp_path / "err.txt"
    proc = long_lab_run(out, err_path)
    try:
        wait_for_progress(proc, err_path)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # the workload has stopped; the analysis of what it measured begins
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    stderr = err_path.read_text()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert f"{out} holds no finished run" in stderr.strip().splitlines()[-1], stderr
    assert not (out / rundir.SUMMARY_FILE).exists()
    assert sqlwa_leftovers(proc.pid) == []
