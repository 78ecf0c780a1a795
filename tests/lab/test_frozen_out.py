"""Ctrl-C while the output's filesystem is frozen: the run's lab and tracefs instance are
removed and the interruption is reported within seconds, not after the drain's 30 s wait
(#15, point 9). Writing trace.txt stays stuck until the filesystem thaws; nothing can
unstick a write to a frozen filesystem, but nothing of the lab has to wait for it."""

from __future__ import annotations

import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import sqlwa_leftovers
from sqlwa.lab.filesystem import LabFilesystem
from sqlwa.results import rundir

pytestmark = [pytest.mark.root, pytest.mark.tracefs]


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


def test_ctrl_c_with_a_frozen_out_cleans_up_at_once(tmp_path: Path) -> None:
    if shutil.which("fsfreeze") is None:
        pytest.skip("fsfreeze is not installed (Debian package util-linux)")
    # room for the capture a run of -n 200000 is estimated to need (about 140 MiB): a
    # smaller output filesystem is refused before the run starts (the long-run disk check)
    with LabFilesystem("ext4", image_size="256M") as outfs:
        out = Path(outfs.mountpoint) / "out"
        argv = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "-n", "200000"]
        proc = subprocess.Popen([*argv, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        frozen = False
        try:
            deadline = time.monotonic() + 60
            while not (out / rundir.RUNNING_FILE).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.5)  # the workload is going
            subprocess.run(["fsfreeze", "-f", outfs.mountpoint], check=True)
            frozen = True
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            err = read_stderr_until(proc, "holds no finished run", timeout=20)
            took = time.monotonic() - started
            assert "holds no finished run" in err and "Traceback" not in err, err
            assert took < 5, f"the interruption took {took:.1f} s to report"
            assert sqlwa_leftovers(proc.pid) == []
        finally:
            if frozen:
                subprocess.run(["fsfreeze", "-u", outfs.mountpoint], check=True)
            try:
                proc.wait(timeout=60)
            finally:
                proc.kill()
                proc.wait()
