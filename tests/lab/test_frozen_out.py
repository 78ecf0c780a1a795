"""Ctrl-C while the output's filesystem is frozen: the run's lab and tracefs instance are
removed and the interruption is reported within seconds, not after the drain's 30 s wait
(#15, point 9). Writing trace.txt stays stuck until the filesystem thaws; nothing can
unstick a write to a frozen filesystem, but nothing of the lab has to wait for it.

A Ctrl-C between measured commits keeps what was measured (#37), which writes to OUT: a
frozen OUT is found out (a write probe that does not come back) and the keeping given up
in one line, the run unfinished (RUNNING, no summary.json), whether the freeze holds the
trace's last part (the drain) or the analysis' files."""

from __future__ import annotations

import json
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import lab_leftovers, leftovers_after_release
from sqlwa.lab.filesystem import LabFilesystem, LabOptions
from sqlwa.results import rundir

pytestmark = [pytest.mark.root, pytest.mark.tracefs]

# From the signal (or the freeze) to the line that says what happened. Once the lab is
# gone: the write probe's give-up (sqlwa._system.writable: PROBE_S 2 s, a probe every
# 0.5 s) and the line, 5 s. Frozen before the signal, the drain stuck is also given up
# (DISCARD_WAIT_S, 1 s) and the lab taken down before the line: its mount, loop device
# and tracefs instance released in up to about 2 s each under a full CPU and disk load
# (sqlwa._system.settle): 6 s more. A run waiting for the thaw never says it (20 s).
REPORTED_WITHIN_S = 5.0
REPORTED_WITH_TEARDOWN_WITHIN_S = REPORTED_WITHIN_S + 3 * 2.0
STUCK = "does not take writes"
UNFINISHED = "holds no finished run"


def read_stderr_until(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.1)
        if ready:
            chunk = proc.stderr.read1(4096).decode(errors="replace")  # type: ignore[union-attr]
            if not chunk:
                break
            seen += chunk
    return seen


def start_run(out: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", *extra, "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_workload(out: Path, seconds: float) -> None:
    deadline = time.monotonic() + 60
    while not (out / rundir.RUNNING_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(seconds)  # the workload is going


def check_unfinished(proc: subprocess.Popen, out: Path, err: str, rest: str) -> None:
    """After the thaw: the process exits 130, its last line the one read while frozen, and
    the run is unfinished."""
    proc.wait(timeout=60)
    assert proc.returncode == 130, err + rest
    lines = (err + rest).strip().splitlines()
    assert UNFINISHED in lines[-1] and "Traceback" not in err + rest, err + rest
    assert (out / rundir.RUNNING_FILE).exists() and not (out / rundir.SUMMARY_FILE).exists()
    assert json.loads((out / rundir.RUNNING_FILE).read_text())["state"] == "unfinished"


def thaw_and_end(proc: subprocess.Popen, mountpoint: str, frozen: bool) -> None:
    if frozen:
        subprocess.run(["fsfreeze", "-u", mountpoint], check=True)
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def frozen_capable() -> None:
    if shutil.which("fsfreeze") is None:
        pytest.skip("fsfreeze is not installed (Debian package util-linux)")


@pytest.mark.usefixtures("frozen_capable")
@pytest.mark.parametrize("second_ctrl_c", [False, True], ids=["once", "twice"])
def test_ctrl_c_with_a_frozen_out_cleans_up_at_once(tmp_path: Path, second_ctrl_c: bool) -> None:
    """Frozen before the signal: the drain is (or soon gets) stuck writing trace.txt, so
    neither the rest of the trace nor the analysis can be kept. A second Ctrl-C before
    that is found out ends the run as an interruption too, not as a failed capture."""
    # room for the capture a run of -n 200000 is estimated to need (about 140 MiB): a
    # smaller output filesystem is refused before the run starts (the long-run disk check)
    with LabFilesystem("ext4", LabOptions(image_size="256M")) as outfs:
        out = Path(outfs.mountpoint) / "out"
        proc = start_run(out, "-n", "200000")
        frozen = False
        try:
            wait_for_workload(out, 1.5)
            subprocess.run(["fsfreeze", "-f", outfs.mountpoint], check=True)
            frozen = True
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            if second_ctrl_c:
                time.sleep(0.5)  # the drain is stuck; the probe has not yet said so
                proc.send_signal(signal.SIGINT)
            err = read_stderr_until(proc, UNFINISHED, timeout=20)
            took = time.monotonic() - started
            assert UNFINISHED in err and "Traceback" not in err, err
            line = err.strip().splitlines()[-1]
            assert line.startswith("sqlwa: interrupted"), err
            assert second_ctrl_c or (STUCK in line and "not kept" in line), err
            assert took < REPORTED_WITH_TEARDOWN_WITHIN_S, f"the interruption took {took:.1f} s to report"
            assert leftovers_after_release(proc.pid) == []
            subprocess.run(["fsfreeze", "-u", outfs.mountpoint], check=True)
            frozen = False
            check_unfinished(proc, out, err, proc.stderr.read().decode(errors="replace"))  # type: ignore[union-attr]
        finally:
            thaw_and_end(proc, outfs.mountpoint, frozen)


@pytest.mark.usefixtures("frozen_capable")
def test_keeping_gives_up_on_an_out_frozen_while_it_writes(tmp_path: Path) -> None:
    """The signal first, the freeze once the lab is gone (the trace whole in OUT, the
    analysis writing its files there): the keeping gives up within the bound, saying why,
    and a run kept so far is not completed after the thaw."""
    with LabFilesystem("ext4", LabOptions(image_size="256M")) as outfs:
        out = Path(outfs.mountpoint) / "out"
        proc = start_run(out, "--duration", "1h")
        frozen = False
        try:
            wait_for_workload(out, 8)  # enough commits that their analysis takes a while
            proc.send_signal(signal.SIGINT)
            deadline = time.monotonic() + 60
            while lab_leftovers(proc.pid):  # the lab and the capture, taken down
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
            assert not (out / rundir.SUMMARY_FILE).exists(), "the analysis finished too soon to freeze it"
            subprocess.run(["fsfreeze", "-f", outfs.mountpoint], check=True)
            frozen = True
            started = time.monotonic()
            err = read_stderr_until(proc, UNFINISHED, timeout=20)
            took = time.monotonic() - started
            line = err.strip().splitlines()[-1]
            assert STUCK in line and UNFINISHED in line and "not kept" in line, err
            assert line.startswith("sqlwa: interrupted;"), line
            assert took < REPORTED_WITHIN_S, f"giving up took {took:.1f} s"
            assert leftovers_after_release(proc.pid) == []
            subprocess.run(["fsfreeze", "-u", outfs.mountpoint], check=True)
            frozen = False
            check_unfinished(proc, out, err, proc.stderr.read().decode(errors="replace"))  # type: ignore[union-attr]
        finally:
            thaw_and_end(proc, outfs.mountpoint, frozen)
