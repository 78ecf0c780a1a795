"""A run in the VM lab (``--vm``): the lab run in a qemu guest with a kernel of the user's
choice, which measures into the output directory it shares with the host
(:mod:`sqlwa.vm.guest`); the host analyses the capture it leaves there
(:func:`sqlwa.measure.report.analyse_capture`). Needs no root on the host."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlwa import _system
from sqlwa.errors import UsageError
from sqlwa.lab import filesystem, layers
from sqlwa.lab.scratch import scratch_dir
from sqlwa.measure import engine, lab_capture, report
from sqlwa.measure.request import RunOutcome, RunRequest
from sqlwa.measure.targets import KEPT_IMAGE_FILE, ProgressFn
from sqlwa.vm import kernel as vm_kernel
from sqlwa.vm import machine

GUEST_STRACE_FILE = "guest.strace"  # --guest-strace: the guest program's syscalls, by strace
CRASH_IMAGE_ROOM = 4  # the lab's image, its write log, the durable base and one crash state


@dataclass
class VmLab:
    """The lab in a qemu guest: one booted for the run, or ``guest``, one already booted
    for many (a matrix boots one for all its cells)."""

    request: RunRequest
    guest: machine.Guest | None = None

    def preflight(self) -> None:
        preflight_vm(self.request)

    @contextmanager
    def prepared(self) -> Iterator[vm_kernel.GuestKernel | None]:
        # a missing qemu or a kernel that cannot be had is refused before OUT exists
        yield guest_kernel(self.request.stack.machine.kernel) if self.guest is None else None

    def measure(
        self,
        scenario: engine.Scenario,
        made: vm_kernel.GuestKernel | None,
        out_dir: Path,
        progress: ProgressFn | None,
    ) -> RunOutcome:
        # the guest loads the scenario itself (the host's is only checked)
        with self.guest_for(made, out_dir) as guest:
            with _system.sharing.measuring() as shared:  # on the host: the guest's CPUs are its
                capture = guest.capture(guest_request(self.request, out_dir), progress)
                capture.records.info["host_sharing"] = shared()
        return report.analyse_capture(self.request, capture, out_dir, self.describe(capture, guest.facts))

    def guest_for(
        self, kernel: vm_kernel.GuestKernel | None, out_dir: Path
    ) -> contextlib.AbstractContextManager[machine.Guest]:
        """The run's own guest, booted with ``kernel`` and powered off afterwards, or the
        one it was given."""
        if kernel is None:
            assert self.guest is not None, "a run given no kernel is given its guest"
            return contextlib.nullcontext(self.guest)
        request = self.request
        strace_to = out_dir / GUEST_STRACE_FILE if request.debug.guest_strace else None
        # a crash run keeps its write log and a state's images beside the lab's in guest RAM
        room = CRASH_IMAGE_ROOM if request.crash else 1
        return booted_guest(kernel, out_dir, request.stack.volume.image_size, strace_to, room)

    def describe(self, capture: lab_capture.LabCapture, facts: machine.VmFacts) -> dict:
        """Where the run happened: the stack asked for and the lab made of it in the guest,
        whose kernel and CPUs they are."""
        guest = {"vm": facts.describe(), "kernel": capture.fs["kernel"], "cpus": facts.cpus}
        return {**report.lab_place(self.request.stack, capture.fs), **guest}


def guest_kernel(choice: str) -> vm_kernel.GuestKernel:
    """The ``--kernel`` a guest boots, once qemu is known to be there."""
    machine.qemu_binary()
    return vm_kernel.resolve(choice)


@contextmanager
def booted_guest(
    kernel: vm_kernel.GuestKernel, share: Path, image_size: str, strace_to: Path | None = None, room: int = 1
) -> Iterator[machine.Guest]:
    """A VM lab guest sharing ``share`` (the runs' output directories lie in it), with
    its control directory a scratch directory removed afterwards; memory for ``room``
    images of ``image_size``."""
    image_bytes = filesystem.parse_size(image_size) * room
    with scratch_dir(None, keep=False) as ctl, machine.Guest(kernel, ctl, share, image_bytes, strace_to) as guest:
        yield guest


def preflight_vm(request: RunRequest) -> None:
    """What the host can refuse before a guest boots (the guest checks the lab's options again)."""
    if request.output.dir is not None or request.output.keep_db:
        raise UsageError(
            "--dir and --keep-db are for a VFS-only run on this host; a --vm run measures in the guest's lab",
            "leave --dir and --keep-db out",
        )
    if request.settings.length.duration_s is not None:
        raise UsageError(
            "--duration is for a run on this host; a --vm run's time limits follow its transactions",
            "give -n instead, or leave --vm out",
        )
    layers.check(request.stack, has_device=True, host=False)


def guest_request(request: RunRequest, out_dir: Path) -> dict:
    """What the guest program (sqlwa.vm.guest) needs, as JSON; paths absolute, since the
    guest sees the host's files at the same paths but not its working directory."""
    scenario = request.scenario
    if engine.looks_like_path(scenario):
        scenario = str(Path(scenario).resolve())
    settings = request.settings.as_dict()
    if from_db := settings.get("from_db"):  # a replayed log's snapshot (the CLI resolves it; the API may not)
        settings["from_db"] = str(Path(from_db).resolve())
    return {
        "scenario": scenario,
        "settings": settings,
        "stack": request.stack.as_dict(),
        "keep_image": str((out_dir / KEPT_IMAGE_FILE).resolve()) if request.debug.keep_image else None,
        "out_dir": str(out_dir.resolve()),
        "allow_loss": request.capture.allow_loss,
        "buffer_kb": request.capture.buffer_kb,
        "crash": dataclasses.asdict(request.crash) if request.crash else None,
    }
