"""A guest that stalls cannot hang a VM lab run (#32, 6): each phase of the guest's work
(boot, request, run; teardown in test_vm_teardown.py) has a limit of its own, and a guest
that stops answering in one is killed when that phase's limit runs out, with one line
naming the phase, the limit and the console's file. The console is kept in the run
directory (console.log), line by line as the guest printed it, so what the guest said
before it stalled can be read there after it is gone.

A hidden test hook (SQLWA_VM_STALL=PHASE) makes the guest's program stop answering in
PHASE for good, as a guest starved by its host would; SQLWA_VM_<PHASE>_WAIT_S shortens
that phase's limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import leftovers_after_release
from sqlwa import _system
from sqlwa.results import rundir

pytestmark = [pytest.mark.vm, pytest.mark.slow]

# Boot to init's "booted" line takes ~20 s under TCG here: a limit that lets it boot but
# not wait out a stall for good.
BOOT_LIMIT_S = 90
SHORT_LIMIT_S = 5


def qemus_sharing(path: Path) -> list[int]:
    """qemu processes still serving ``path`` to a guest."""
    return [
        p.pid
        for p in _system.processes.processes()
        if p.comm.startswith("qemu-system") and str(path) in " ".join(p.argv)
    ]


def stalled_run(out: Path, phase: str, limit_s: float) -> tuple[subprocess.CompletedProcess, float]:
    """``sqlwa run --vm`` with the guest stalled in ``phase``, whose limit is ``limit_s``."""
    env = {**os.environ, "SQLWA_VM_STALL": phase, f"SQLWA_VM_{phase.upper()}_WAIT_S": str(limit_s)}
    argv = [sys.executable, "-m", "sqlwa", "run", "--vm", "--image-size", "32M", "-n", "5", "--out", str(out)]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
        proc.wait()
    assert not qemus_sharing(out)
    assert leftovers_after_release(proc.pid) == []
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), time.monotonic() - started


@pytest.mark.parametrize("phase", ["request", "run"])
def test_a_guest_stalled_after_boot_is_killed_at_its_phase_limit(tmp_path: Path, phase: str) -> None:
    out = tmp_path / "out"
    proc, seconds = stalled_run(out, phase, SHORT_LIMIT_S)
    console = out / rundir.CONSOLE_FILE
    assert proc.returncode == 2, proc.stderr
    first, *rest = proc.stderr.splitlines()
    assert first == (
        f"sqlwa: error: the VM lab's guest hung: its {phase} phase took longer than its limit of {SHORT_LIMIT_S} s; "
        f"qemu was killed and this run's measurement is lost; its console is in {console}"
    )
    assert "Traceback" not in proc.stderr and len(rest) <= 1  # the line and its fix
    lines = console.read_text().splitlines()
    assert "sqlwa-vm: ready" in lines  # the guest's own lines up to the stall, kept on disk
    assert ("sqlwa-vm: started 1" in lines) == (phase == "run")
    assert not any(line.startswith("sqlwa-vm: stage") for line in lines)  # it never began its lab
    assert seconds < 240


def test_a_guest_that_never_gets_ready_fails_at_the_boot_limit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc, _ = stalled_run(out, "boot", BOOT_LIMIT_S)
    console = out / rundir.CONSOLE_FILE
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first == (
        f"sqlwa: error: the VM lab's guest did not start: the guest was not ready in {BOOT_LIMIT_S} s, "
        f"the boot phase's limit; its console is in {console}"
    )
    assert any(line.startswith("sqlwa-vm: booted ") for line in console.read_text().splitlines())


def test_a_kernel_silent_at_the_boot_limit_is_booted_once_more(tmp_path: Path) -> None:
    """A limit shorter than the kernel's way to init (several seconds under TCG) makes both
    boots silent: the host says in the console log that it booted the guest again, and the
    error says where the boot stopped and how to give it more time."""
    out = tmp_path / "out"
    proc, seconds = stalled_run(out, "boot", 1)
    console = out / rundir.CONSOLE_FILE
    assert proc.returncode == 2, proc.stderr
    first, fix = proc.stderr.splitlines()
    assert first == (
        "sqlwa: error: the VM lab's guest did not start: the guest's kernel printed nothing in 1 s, "
        f"the boot phase's limit (it never reached init); its console is in {console}"
    )
    assert "SQLWA_VM_BOOT_WAIT_S=300" in fix
    lines = console.read_text().splitlines()
    assert (
        lines.count(
            "sqlwa (host): the guest's kernel printed nothing in 1 s, the boot phase's limit "
            "(it never reached init); booting it once more"
        )
        == 1
    )
    assert not any(line.startswith("sqlwa-vm: ") for line in lines)
    assert seconds < 60
