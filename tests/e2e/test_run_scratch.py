"""A VFS-only run's scratch directory: made only inside an existing --dir, and removed
when the run is interrupted (#15, point 10)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import sqlwa


def test_a_missing_dir_is_refused_and_nothing_is_created(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    out = tmp_path / "out"
    proc = sqlwa("run", "-n", "2", "--dir", str(missing), "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("sqlwa: error: --dir") and "not an existing directory" in proc.stderr
    assert not (tmp_path / "no").exists() and not out.exists()


def test_a_file_as_dir_is_refused_before_the_output_directory_is_made(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    out = tmp_path / "out"
    proc = sqlwa("run", "-n", "2", "--dir", str(a_file), "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "is a file" in proc.stderr
    assert a_file.read_text() == "mine" and not out.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_run_removes_its_scratch_directory(tmp_path, signum):
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", "run", "-n", "200000", "--dir", str(work), "--out", str(tmp_path / "o")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(work.glob("sqlwa-run-*/*")) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the database exists: the workload is running
        assert list(work.glob("sqlwa-run-*/*")), "the run did not start"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode in (130, 2), (proc.returncode, err)
    assert "Traceback" not in err and ("interrupted" in err or "terminated" in err), err
    assert list(Path(work).iterdir()) == []
