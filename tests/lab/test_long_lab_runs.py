"""A long lab run (#37, item 2) stopped by a signal mid-workload: it shows its progress,
ends unfinished with its lab taken down and nothing of sqlwa's left behind; a second
Ctrl-C changes nothing of that."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import sqlwa_leftovers
from sqlwa.results import rundir

pytestmark = [pytest.mark.root, pytest.mark.tracefs]


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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_workload_ends_a_lab_run_at_once(tmp_path: Path, signum: int) -> None:
    """A lab run does not keep what it measured (keeping writes to OUT, which may not take
    writes: tests/lab/test_frozen_out.py): it ends unfinished, its lab taken down, after
    showing its progress with the trace events and syncs it measured."""
    out, err_path = tmp_path / "out", tmp_path / "err.txt"
    proc = long_lab_run(out, err_path)
    try:
        wait_for_progress(proc, err_path)
        proc.send_signal(signum)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    stderr = err_path.read_text()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert f"{out} holds no finished run" in stderr.strip().splitlines()[-1], stderr
    progress = [line for line in stderr.splitlines() if "commits," in line]
    assert " events · " in progress[0] and "syncs/commit" in progress[0], progress[0]
    assert not (out / rundir.SUMMARY_FILE).exists()
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
