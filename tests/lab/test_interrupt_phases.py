"""SIGTERM or Ctrl-C in the analysis phase of a lab run, after the lab is gone: exit 130
with a line that says the run did not finish, and nothing left behind (#15, point 9)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import lab_leftovers, leftovers_after_release
from sqlwa.results import rundir

pytestmark = [pytest.mark.root, pytest.mark.tracefs]


def wait_for_lab_then_its_end(proc: subprocess.Popen, timeout: float = 240) -> None:
    """Until the run's lab has been made and then torn down: the analysis has begun."""
    seen = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        present = bool(lab_leftovers(proc.pid))
        if seen and not present:
            return
        seen = seen or present
        time.sleep(0.01)
    raise AssertionError("the run's lab was never made and removed")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_in_the_analysis_phase_says_the_run_is_unfinished(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "-n", "4000", "-o", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lab_then_its_end(proc)
        assert not (out / rundir.SUMMARY_FILE).exists(), "the analysis finished too soon to interrupt"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert f"{out} holds no finished run" in err.strip().splitlines()[-1], err
    assert (out / rundir.RUNNING_FILE).exists() and not (out / rundir.SUMMARY_FILE).exists()
    assert leftovers_after_release(proc.pid) == []
