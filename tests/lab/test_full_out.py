"""A lab run whose --out fills up: one line naming the full directory, exit 2, and nothing
of the lab or the capture left behind (#15, points 6 and 12)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import leftovers_after_release

pytestmark = [pytest.mark.root, pytest.mark.tracefs]


def run_sqlwa(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """``sqlwa ARGS`` and its pid, by which its leftovers are found (tests run in parallel)."""
    with subprocess.Popen([sys.executable, "-m", "sqlwa", *args], stderr=subprocess.PIPE, text=True) as proc:
        _, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err), proc.pid


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 512 KiB tmpfs: room for the run's set-up files, not for its trace."""
    mountpoint = tmp_path / "small"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "sqlwa-test-small", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


def test_a_full_out_during_a_lab_run_is_one_line(small_tmpfs: Path):
    out = small_tmpfs / "out"
    proc, pid = run_sqlwa("run", "--fs", "ext4", "--image-size", "64M", "-n", "3000", "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception in thread" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1, proc.stderr
    assert "No space left on device" in errors[0] and str(out) in errors[0], errors[0]
    assert "close the marker file" not in proc.stderr
    assert "fix: make room" in proc.stderr
    assert leftovers_after_release(pid) == []


@pytest.mark.parametrize("room", [0, 12 << 10], ids=["no-room-at-all", "room-for-the-lock-only"])
def test_a_full_out_in_a_vfs_only_run_is_one_line(small_tmpfs: Path, room: int):
    (small_tmpfs / "filler").write_bytes(b"\0" * ((512 << 10) - room))
    out = small_tmpfs / "out"
    proc, pid = run_sqlwa("run", "-n", "3000", "-o", str(out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("sqlwa: error: cannot write the run's") and "No space left" in proc.stderr
    assert "fix: make room on that filesystem" in proc.stderr
    assert leftovers_after_release(pid) == []
