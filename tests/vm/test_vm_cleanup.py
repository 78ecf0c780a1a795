"""``sqlwa lab cleanup`` stops a VM lab guest whose run is gone, and only such a guest.

No qemu is needed: a copy of ``bash`` named ``qemu-system-x86_64``, waiting on a FIFO,
with a guest's arguments stands in for one (cleanup tells a guest by its command name and its control
share, ``-virtfs local,path=<scratch dir>,mount_tag=ctl``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from sqlwa import _system
from sqlwa.lab.cleanup import cleanup_leftovers
from sqlwa.lab.scratch import SCRATCH_MARK, SCRATCH_MARK_TEXT, SCRATCH_PREFIX


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def fake_qemu(tmp_path):
    binary = tmp_path / "qemu-system-x86_64"
    shutil.copy(shutil.which("bash"), binary)
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    started = []

    def start(ctl: Path) -> subprocess.Popen:
        share = f"local,security_model=none,path={ctl},mount_tag=ctl"
        # bash -c CMD NAME ARGS: the guest's arguments are the script's; opening the FIFO blocks
        proc = subprocess.Popen([str(binary), "-c", f"read line < {fifo}", "qemu", "-virtfs", share])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_guest_whose_run_is_gone_is_stopped_and_a_live_ones_is_left(fake_qemu):
    dead = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}-{dead_pid()}-"))
    (dead / SCRATCH_MARK).write_text(SCRATCH_MARK_TEXT)  # as sqlwa marks its scratch directories
    live = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}-{os.getpid()}-"))
    ownership = _system.ownership.hold_ownership(live)
    try:
        orphan, kept = fake_qemu(dead), fake_qemu(live)
        report = cleanup_leftovers()
        assert orphan.wait(10) is not None
        assert any(f"stopped VM lab guest {orphan.pid}" in line for line in report), report
        assert kept.poll() is None  # its run (this process) is alive and holds its lock
        assert not dead.exists()  # and the dead run's control directory is gone too
    finally:
        _system.ownership.release_ownership(ownership)
        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(dead, ignore_errors=True)
