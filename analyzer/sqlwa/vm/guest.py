"""The VM lab's guest side: ``python -m sqlwa.vm.guest CTL``, run by the guest's init.

Serves captures until told to stop: says ``sqlwa-vm: ready``, then for N = 1, 2, … waits
for ``CTL/N/request.json``, takes that lab capture (a fresh filesystem on a loop device
in the guest's RAM, the workload and its trace), leaves ``CTL/N/capture.json`` (a
:class:`~sqlwa.measure.lab_capture.LabCapture`) or, for an error sqlwa knows,
``CTL/N/error.json``, and says ``sqlwa-vm: done N``; ``CTL/quit`` ends it. It says
``sqlwa-vm: started N`` when it has taken request N up, and a crash run's
``sqlwa-vm: stage explore`` when its lab is gone and its states are next: the host
bounds each phase by a limit of its own. The trace goes
to the run's output directory, shared with the host, where the host analyses it.
Progress goes to the console as ``sqlwa-vm: progress D N`` lines, the lab's stages
(mkfs, mount, …, teardown) as ``sqlwa-vm: stage NAME``. Imports nothing heavy
(see :mod:`sqlwa.measure.lab_capture`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from sqlwa.durability import explore
from sqlwa.errors import SqlwaError, hint_of
from sqlwa.lab import filesystem, stack
from sqlwa.measure import engine, lab_capture

REQUEST_FILE = "request.json"
CAPTURE_FILE = "capture.json"
ERROR_FILE = "error.json"
QUIT_FILE = "quit"
POLL_S = 0.1  # how often the control directory is looked at for the next request
PROGRESS_EVERY_S = 0.5  # the serial console is slow under TCG: a line per half second at most
# A test hook: the phase ("boot", "request" or "run") in which this program stops
# answering for good, as a guest stalled by its host would (tests/vm/test_vm_phases.py).
STALL_ENV = "SQLWA_VM_STALL"


def capture(request: dict) -> lab_capture.LabCapture:
    settings = engine.RunSettings.from_flat(request["settings"])
    scenario = engine.load_scenario(request["scenario"])
    options = lab_capture.CaptureOptions(allow_loss=request["allow_loss"], buffer_kb=request["buffer_kb"])
    out_dir = Path(request["out_dir"])
    if request.get("crash") is None:
        lab = lab_of(request)
        return lab_capture.capture_in_lab(settings, scenario, lab, out_dir, options, ConsoleProgress())
    crash = explore.CrashOptions(**request["crash"])
    with lab_capture.crash_workspace() as workspace:
        lab = lab_of(request, write_log=workspace / lab_capture.WRITE_LOG_FILE)
        return lab_capture.capture_with_crash(
            settings,
            scenario,
            lab,
            out_dir,
            options,
            crash,
            workspace,
            ConsoleProgress(),
            ConsoleProgress("states"),
            say_stage,
        )


def lab_of(request: dict, write_log: Path | None = None) -> filesystem.LabFilesystem:
    return stack.lab_filesystem(
        stack.StackSpec.from_dict(request["stack"]),
        keep_image=request["keep_image"],
        write_log=write_log,
        progress=say_stage,
    )


def say_stage(stage: str) -> None:
    """The lab's stage, for the host: it bounds how long it waits for a teardown."""
    print(f"sqlwa-vm: stage {stage}", flush=True)


class ConsoleProgress:
    """The engine's progress as console lines the host turns into its progress bar."""

    def __init__(self, what: str = "") -> None:
        self.last = 0.0
        self.what = f" {what}" if what else ""  # the host's bar shows the stage: commits, then crash states

    def __call__(self, done: int, total: int | None) -> None:  # total: never None (no --duration in a guest)
        now = time.monotonic()
        if done == total or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            print(f"sqlwa-vm: progress {done} {total}{self.what}", flush=True)


def serve(ctl: Path) -> None:
    stall_in("boot")
    print("sqlwa-vm: ready", flush=True)
    number = 1
    while (job := next_request(ctl, number)) is not None:
        stall_in("request")
        print(f"sqlwa-vm: started {number}", flush=True)
        stall_in("run")
        take(job)
        print(f"sqlwa-vm: done {number}", flush=True)
        number += 1


def stall_in(phase: str) -> None:
    """Never return when :data:`STALL_ENV` names ``phase`` (a test's stalled guest)."""
    while os.environ.get(STALL_ENV) == phase:
        time.sleep(3600)


def next_request(ctl: Path, number: int) -> Path | None:
    """The directory of request ``number`` once it is there, or None when told to quit."""
    job = ctl / str(number)
    while not (job / REQUEST_FILE).is_file():
        if (ctl / QUIT_FILE).exists():
            return None
        time.sleep(POLL_S)
    return job


def take(job: Path) -> None:
    try:
        result = capture(json.loads((job / REQUEST_FILE).read_text()))
    except SqlwaError as exc:
        error = {"type": type(exc).__name__, "message": str(exc), "hint": hint_of(exc)}
        (job / ERROR_FILE).write_text(json.dumps(error) + "\n")
        return
    (job / CAPTURE_FILE).write_text(result.to_json())


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
