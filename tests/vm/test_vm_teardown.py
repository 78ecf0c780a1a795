"""A stuck teardown step cannot hang a VM lab run. A hidden test hook makes one step of the
guest's lab teardown (its unmount) hang for good, as an unmount stuck in the kernel would:

- the guest bounds each teardown step (SQLWA_TEARDOWN_STEP_S here): the run fails in one
  line naming the step, and nothing is left behind;
- where the guest's own bound is longer than the host will wait (SQLWA_VM_TEARDOWN_WAIT_S),
  the host kills qemu and says so in one line;
- a matrix goes on after such a kill in a freshly booted guest: every cell ends (failed,
  with the same reason), none waits on a dead guest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import leftovers_after_release
from sqlwa import _system

pytestmark = [pytest.mark.vm, pytest.mark.slow]

HANG_UNMOUNT = {"SQLWA_FAULT_HANG_TEARDOWN": "unmount"}


def sqlwa_with(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    out, err = proc.communicate(timeout=900)
    assert leftovers_after_release(proc.pid) == []
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - started


def qemus_sharing(path: Path) -> list[int]:
    """qemu processes still serving ``path`` to a guest."""
    return [
        p.pid
        for p in _system.processes.processes()
        if p.comm.startswith("qemu-system") and str(path) in " ".join(p.argv)
    ]


def test_a_hung_teardown_step_is_abandoned_by_the_guest_and_the_run_fails_in_one_line(tmp_path):
    out = tmp_path / "out"
    env = {**HANG_UNMOUNT, "SQLWA_TEARDOWN_STEP_S": "3"}
    proc, seconds = sqlwa_with(env, "run", "--vm", "--image-size", "32M", "-n", "5", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    first, *rest = proc.stderr.splitlines()
    assert first.startswith("sqlwa: error: in the VM lab: cleaning up sqlwa-lab-"), first
    assert ": unmount did not finish in 3 s and was abandoned" in first
    assert "Traceback" not in proc.stderr and len(rest) <= 1  # the line and its fix
    assert seconds < 300 and not qemus_sharing(out)


def test_a_guest_hung_longer_than_the_host_waits_is_killed_with_one_line(tmp_path):
    out = tmp_path / "out"
    env = {**HANG_UNMOUNT, "SQLWA_TEARDOWN_STEP_S": "3600", "SQLWA_VM_TEARDOWN_WAIT_S": "15"}
    proc, seconds = sqlwa_with(env, "run", "--vm", "--image-size", "32M", "-n", "5", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[0] == (
        "sqlwa: error: the VM lab's guest hung: its teardown phase took longer than its limit of 15 s; "
        f"qemu was killed and this run's measurement is lost; its console is in {out / 'console.log'}"
    )
    assert "Traceback" not in proc.stderr
    assert seconds < 300 and not qemus_sharing(out)


def test_a_matrix_goes_on_in_a_fresh_guest_after_one_is_killed(tmp_path):
    out = tmp_path / "m"
    env = {**HANG_UNMOUNT, "SQLWA_TEARDOWN_STEP_S": "3600", "SQLWA_VM_TEARDOWN_WAIT_S": "15"}
    args = ["matrix", "--vm", "-j", "delete,wal", "--sync", "full", "-n", "5", "--image-size", "32M"]
    proc, _ = sqlwa_with(env, *args, "--out", str(out))
    assert proc.returncode == 1, proc.stderr  # cells failed; the sweep itself ended
    failed = [line for line in proc.stderr.splitlines() if line.strip().startswith("failed")]
    assert len(failed) == 2, proc.stderr
    for line in failed:  # the second too: its guest was booted again, not found dead
        assert "the VM lab's guest hung: its teardown phase took longer than its limit of 15 s" in line, line
        assert f"its console is in {out / 'runs'}" in line, line  # the cell's own run directory
    assert not qemus_sharing(out)
