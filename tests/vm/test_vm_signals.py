"""Ctrl-C or SIGTERM ends a VM lab run within 2 s, whatever the guest is doing (#32, 4):
qemu is killed at once rather than asked to power off once its capture is done, and
nothing is left behind — no qemu, no control directory, nothing `sqlwa lab cleanup`
would find. The moment to interrupt is read from the run's console.log (the guest's own
lines): a crash run exploring its states, a run over dm-delay, a run over dm-crypt."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import leftovers_after_release
from sqlwa import _system
from sqlwa.results import rundir

pytestmark = [pytest.mark.vm, pytest.mark.slow]

# The bound, and the mechanism's: qemu is SIGKILLed, not waited for, so what is
# left is the kernel freeing the guest's memory (a few hundred MiB touched of its 1 GiB:
# tens of ms), the control directory's removal and the interpreter's exit, a few tenths
# of a second on a loaded core. A run that lets the guest finish or power off takes longer.
EXIT_WITHIN_S = 2.0
EXPLORING = "states"  # the third word of the guest's progress lines while crash states are tried
COMMITTING = "sqlwa-vm: progress "


def qemus_sharing(path: Path) -> list[int]:
    """qemu processes still serving ``path`` to a guest."""
    return [
        p.pid
        for p in _system.processes.processes()
        if p.comm.startswith("qemu-system") and str(path) in " ".join(p.argv)
    ]


def wait_for_console(proc: subprocess.Popen, console: Path, seen, timeout: float = 400) -> None:
    """Until a line of the guest's console satisfies ``seen`` (the run still going)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        lines = console.read_text(errors="replace").splitlines() if console.exists() else []
        if any(seen(line) for line in lines):
            return
        time.sleep(0.05)
    raise AssertionError(f"the guest never got there; its console: {lines[-10:]}")


def interrupted_in(tmp_path: Path, signum: int, seen, *args: str) -> tuple[str, float]:
    """Start ``sqlwa ARGS --out OUT``, send ``signum`` once the console shows ``seen``;
    stderr and the seconds from the signal to the process's exit."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "sqlwa", *args, "--image-size", "64M", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_console(proc, out / rundir.CONSOLE_FILE, seen)
        sent = time.monotonic()
        proc.send_signal(signum)
        proc.wait(120)
        seconds = time.monotonic() - sent
        print(f"{' '.join(args[:2])}: exit {seconds:.2f} s after {signal.Signals(signum).name}")
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert not qemus_sharing(out)
    assert leftovers_after_release(proc.pid) == []  # its control directory (a scratch directory) included
    assert (out / rundir.RUNNING_FILE).exists() and not (out / rundir.SUMMARY_FILE).exists()
    return err, seconds


def exploring(line: str) -> bool:
    words = line.split()
    return line.startswith(COMMITTING) and words[-1] == EXPLORING and words[2] != words[3]


def committing(line: str) -> bool:
    words = line.split()
    return line.startswith(COMMITTING) and len(words) == 4 and words[2] != words[3]


SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])


@SIGNALS
def test_a_crash_run_exploring_its_states_ends_at_once(tmp_path: Path, signum: int) -> None:
    _, seconds = interrupted_in(tmp_path, signum, exploring, "crash", "--vm", "-j", "wal", "-n", "40")
    assert seconds <= EXIT_WITHIN_S


@SIGNALS
def test_a_run_over_a_delayed_device_ends_at_once(tmp_path: Path, signum: int) -> None:
    _, seconds = interrupted_in(tmp_path, signum, committing, "run", "--vm", "--device-delay", "20", "-n", "300")
    assert seconds <= EXIT_WITHIN_S


def test_a_run_over_dm_crypt_ends_at_once(tmp_path: Path) -> None:
    args = ("run", "--vm", "--crypt", "dm-crypt", "-n", "3000")
    _, seconds = interrupted_in(tmp_path, signal.SIGTERM, committing, *args)
    assert seconds <= EXIT_WITHIN_S
