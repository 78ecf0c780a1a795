"""One guest of the VM lab: qemu booting the chosen kernel with the host's root shared
read-only, the run's control and output directories shared writable, running one lab
capture (:mod:`sqlwa.vm.guest`) and powering off.

Accelerator: KVM where ``/dev/kvm`` can be opened and boots the kernel, else TCG. Some
hosts' KVM cannot boot a stock kernel (a PVM KVM, as on this project's lab machine,
stops qemu at once with MSR errors); qemu is then started again under TCG and the
reason recorded. Under TCG the guest runs several times slower, so its counts are exact
and its timings are not comparable with a host's: the run's ``config.vm`` says which.

Nothing outlives the run: qemu dies with sqlwa (PR_SET_PDEATHSIG) and is killed on any
exception or signal; the guest's lab lives in the guest's RAM; the control directory is
a scratch directory (``sqlwa lab cleanup`` knows those).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlwa import _system, errors
from sqlwa.errors import LabError, SqlwaError, UsageError
from sqlwa.lab.scratch import GUEST_CONTROL_TAG
from sqlwa.measure.lab_capture import LabCapture
from sqlwa.vm import guest, initramfs
from sqlwa.vm.kernel import GuestKernel

QEMU = "qemu-system-x86_64"
QEMU_FIX = "install Debian's qemu-system-x86 (and busybox-static), then re-run"
GUEST_MARK = "sqlwa-vm: "
BOOT_WAIT_S = 120  # boot to init's "booted" line; ~3 s here under TCG, far more when loaded
QUIET_WAIT_S = 900  # the longest silence of a running guest (mkfs and fill print nothing)
GUEST_CPUS = 2
BASE_MEMORY_MB = 1024  # the guest's own needs: kernel, the overlay's RAM, Python
CONSOLE_TAIL = 12  # console lines quoted when a guest fails


@dataclass
class VmFacts:
    """What ``config.vm`` records about the guest a run measured in."""

    kernel: dict
    accelerator: str  # "kvm" or "tcg"
    accelerator_note: str | None  # why not KVM, when TCG
    timings_comparable: bool  # False under TCG: counts exact, times not a device's
    memory_mb: int
    cpus: int
    qemu: str | None
    boot_s: float | None  # guest uptime at init's "booted" line

    def describe(self) -> dict:
        return asdict(self)


def qemu_binary() -> str:
    found = _system.find_tool(QEMU)
    if found is None:
        raise UsageError(f"--vm needs {QEMU}, which this machine lacks", QEMU_FIX)
    return found


def run_capture(
    kernel: GuestKernel,
    request: dict,
    ctl: Path,
    out_dir: Path,
    image_bytes: int,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[LabCapture, VmFacts]:
    """Boot a guest that takes the capture ``request`` describes; its result and facts."""
    qemu = qemu_binary()
    image = initramfs.initramfs_for(kernel)
    memory_mb = BASE_MEMORY_MB + image_bytes // (1 << 20)
    write_control_files(ctl, kernel, request, out_dir, image_bytes)
    note = None
    for accelerator in accelerators():
        argv = qemu_argv(qemu, accelerator, kernel, image, ctl, out_dir, memory_mb)
        outcome = boot(argv, ctl, progress)
        if outcome.booted or accelerator == "tcg":
            break
        note = f"KVM could not boot the guest ({outcome.reason}); ran under TCG"
    if not outcome.booted:
        raise LabError(f"the VM lab's guest did not boot: {outcome.reason}", outcome.console_hint())
    facts = VmFacts(
        kernel=kernel.describe(),
        accelerator=accelerator,
        accelerator_note=note,
        timings_comparable=accelerator == "kvm",
        memory_mb=memory_mb,
        cpus=GUEST_CPUS,
        qemu=_system.tool_version(qemu),
        boot_s=outcome.boot_s,
    )
    return guest_result(ctl, outcome), facts


def accelerators() -> list[str]:
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    return ["kvm", "tcg"] if kvm else ["tcg"]


def write_control_files(ctl: Path, kernel: GuestKernel, request: dict, out_dir: Path, image_bytes: int) -> None:
    """request.json for the guest program, guest.env for init, guest.sh for the chroot."""
    (ctl / guest.REQUEST_FILE).write_text(json.dumps(request) + "\n")
    env = {
        "MODULES_DIR": str(Path(kernel.root) / "lib" / "modules"),
        "OUT_DIR": str(out_dir),
        "TMP_SIZE": f"{image_bytes // (1 << 20) + 256}m",  # the lab's image and its margin
    }
    (ctl / "guest.env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
    package_parent = Path(__file__).resolve().parents[2]  # the directory holding sqlwa/
    modules = ["loop", *(["fuse"] if request["fuse"] != "none" else [])]
    (ctl / "guest.sh").write_text(
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8\n"
        "export TMPDIR=/run/sqlwa-tmp\n"  # init's tmpfs for the lab's image (TMP_SIZE)
        f"export PYTHONPATH={shlex.quote(str(package_parent))}\n"
        f"modprobe -a {' '.join(modules)} || exit 3\n"
        f"exec {shlex.quote(sys.executable)} -m sqlwa.vm.guest /run/sqlwa-vm\n"
    )


def qemu_argv(
    qemu: str, accelerator: str, kernel: GuestKernel, image: Path, ctl: Path, out_dir: Path, memory_mb: int
) -> list[str]:
    share = "local,security_model=none,multidevs=remap"
    return [
        qemu,
        *("-accel", accelerator, "-cpu", "host" if accelerator == "kvm" else "max"),
        *("-m", f"{memory_mb}M", "-smp", str(GUEST_CPUS)),
        *("-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio"),
        *("-kernel", kernel.image, "-initrd", str(image)),
        *("-append", "console=ttyS0 quiet loglevel=3 panic=-1"),
        *("-virtfs", f"{share},path=/,mount_tag=host,readonly=on"),
        *("-virtfs", f"{share},path={option_value(ctl)},mount_tag={GUEST_CONTROL_TAG}"),
        *("-virtfs", f"{share},path={option_value(out_dir)},mount_tag=out"),
    ]


def option_value(path: Path) -> str:
    """``path`` inside a qemu option list, where a comma is written twice."""
    return str(path).replace(",", ",,")


@dataclass
class BootOutcome:
    booted: bool
    reason: str | None
    boot_s: float | None
    exit_code: int | None  # guest.sh's, as init reports it
    console: list[str]

    def console_hint(self) -> str:
        tail = " | ".join(line for line in self.console[-CONSOLE_TAIL:] if line.strip())
        return f"the guest's console ended: {tail}" if tail else "the guest printed nothing"


def boot(argv: list[str], ctl: Path, progress: Callable[[int, int], None] | None) -> BootOutcome:
    """Run qemu until the guest powers off, following its console."""
    proc = _system.start_daemon(argv, ctl / "qemu.log")
    outcome = BootOutcome(False, None, None, None, [])
    started = time.monotonic()
    try:
        while True:
            wait = QUIET_WAIT_S if outcome.booted else BOOT_WAIT_S - (time.monotonic() - started)
            line = _system.read_line_within(proc, max(wait, 0))
            if line is None:
                break
            follow(line.rstrip("\r\n"), outcome, progress)
        code = _system.exit_code_within(proc, 5)
        if code is None:
            outcome.reason = (
                outcome.reason or f"the guest stayed silent for {QUIET_WAIT_S if outcome.booted else BOOT_WAIT_S} s"
            )
        elif not outcome.booted:
            outcome.reason = qemu_error(ctl) or f"qemu exited with status {code}"
    finally:
        _system.stop_process(proc, 0)
    return outcome


def follow(line: str, outcome: BootOutcome, progress: Callable[[int, int], None] | None) -> None:
    outcome.console.append(line)
    if not line.startswith(GUEST_MARK):
        return
    word, _, rest = line.removeprefix(GUEST_MARK).partition(" ")
    if word == "booted":
        outcome.booted, outcome.boot_s = True, float(rest)
    elif word == "progress" and progress is not None:
        done, total = rest.split()
        progress(int(done), int(total))
    elif word == "exit":
        outcome.exit_code = int(rest)
    elif word == "init":
        outcome.reason = rest


def qemu_error(ctl: Path) -> str | None:
    lines = [line.strip() for line in (ctl / "qemu.log").read_text(errors="replace").splitlines() if line.strip()]
    return lines[0] if lines else None


def guest_result(ctl: Path, outcome: BootOutcome) -> LabCapture:
    """The guest's capture, or its error raised here as the same kind of error."""
    error_file, capture_file = ctl / guest.ERROR_FILE, ctl / guest.CAPTURE_FILE
    if error_file.is_file():
        error = json.loads(error_file.read_text())
        kind = getattr(errors, error["type"], None)
        if not (isinstance(kind, type) and issubclass(kind, SqlwaError)):
            kind = LabError
        raise kind(f"in the VM lab: {error['message']}", error["hint"])
    if capture_file.is_file():
        return LabCapture.from_json(capture_file.read_text())
    raise LabError(
        f"the VM lab's guest ended without a result (guest exit status {outcome.exit_code})", outcome.console_hint()
    )
