"""One guest of the VM lab: qemu booting the chosen kernel with the host's root shared
read-only, the run's control and output directories shared writable, running one lab
capture (:mod:`sqlwa.vm.guest`) and powering off.

Accelerator: KVM where ``/dev/kvm`` can be opened and boots the kernel, else TCG. Some
hosts' KVM cannot boot a stock kernel (a PVM KVM, as on this project's lab machine,
stops qemu with MSR errors or leaves the guest silent); qemu is then started again under
TCG and the reason recorded. A KVM guest boots in a second or two, so it gets
:data:`KVM_BOOT_WAIT_S`, and the verdict is remembered in the cache (per host kernel,
qemu and guest kernel): later runs on the same machine go straight to TCG. Under TCG the
guest runs several times slower, so its counts are exact and its timings are not
comparable with a host's: the run's ``config.vm`` says which.

Nothing outlives the run: qemu dies with sqlwa (PR_SET_PDEATHSIG) and is killed on any
exception or signal; the guest's lab lives in the guest's RAM; the control directory is
a scratch directory (``sqlwa lab cleanup`` knows those).

Nothing the guest does can hang the run either: the host waits a bounded time for each
of its lines (:data:`QUIET_WAIT_S` of silence; once the guest says its lab is being torn
down, :data:`TEARDOWN_WAIT_S` in all, beyond the guest's own bound on each teardown
step), then kills qemu and says so in one line. A guest killed so is booted again for
the next capture of a matrix.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlwa import _system, errors
from sqlwa.errors import LabError, SqlwaError, UsageError
from sqlwa.lab import filesystem
from sqlwa.lab.scratch import GUEST_CONTROL_TAG
from sqlwa.measure.lab_capture import LabCapture
from sqlwa.vm import guest, initramfs
from sqlwa.vm.kernel import GuestKernel, cache_dir

QEMU = "qemu-system-x86_64"
QEMU_FIX = "install Debian's qemu-system-x86 (and busybox-static), then re-run"
GUEST_MARK = "sqlwa-vm: "
BOOT_WAIT_S = 120  # boot to init's "booted" line; ~3 s here under TCG, far more when loaded
KVM_BOOT_WAIT_S = 30  # the same under KVM, which boots in a second or two
KVM_VERDICTS_FILE = "kvm-verdicts.json"  # in the cache: KVM that could not boot a kernel here, and why
QUIET_WAIT_S = 900  # the longest silence of a running guest (mkfs and fill print nothing)
# From the guest's "stage teardown" to its result: its unmounts, dmsetup remove and losetup
# -d take a second; each is bounded in the guest (filesystem.TEARDOWN_STEP_S), and this
# bounds them all. TEARDOWN_WAIT_ENV sets it (a hidden test hook).
TEARDOWN_WAIT_S = 300
TEARDOWN_WAIT_ENV = "SQLWA_VM_TEARDOWN_WAIT_S"
# The test hooks of the lab's teardown, passed on to the guest program when set here.
GUEST_TEST_ENV = (filesystem.TEARDOWN_STEP_ENV, filesystem.HANG_STEP_ENV)
GUEST_CPUS = 2
BASE_MEMORY_MB = 1024  # the guest's own needs: kernel, the overlay's RAM, Python
CONSOLE_TAIL = 12  # console lines quoted when a guest fails
POWER_OFF_WAIT_S = 30
GUEST_MODULES = ("loop", "fuse")  # the devices losetup and a FUSE layer open need these first


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
    """Boot a guest, take the one capture ``request`` describes, and power it off."""
    with Guest(kernel, ctl, out_dir, image_bytes) as guest:
        return guest.capture(request, progress), guest.facts


class Guest:
    """A booted guest serving captures one after another (``sqlwa matrix --vm`` boots one
    for all its cells; each capture still makes a fresh lab filesystem). ``share`` is the
    host directory the runs' output directories lie in; it is shared at its own path."""

    def __init__(
        self, kernel: GuestKernel, ctl: Path, share: Path, image_bytes: int, strace_to: Path | None = None
    ) -> None:
        # Absolute: the guest mounts the share at the host's path, and qemu and init do not
        # run in the user's working directory.
        self.kernel, self.ctl, self.share = kernel, ctl.resolve(), share.resolve()
        self.strace_to = strace_to and strace_to.resolve()  # strace the guest program into this file (in share)
        self.memory_mb = BASE_MEMORY_MB + image_bytes // (1 << 20)
        self.image_bytes = image_bytes
        self.proc: subprocess.Popen[str] | None = None
        self.console: list[str] = []
        self.served = 0
        self.boot_s: float | None = None  # guest uptime at init's "booted" line
        self.facts: VmFacts

    def __enter__(self) -> Guest:
        self._start()
        return self

    def _start(self) -> None:
        """Boot the guest until its program is ready, under KVM where it can, else TCG."""
        qemu = qemu_binary()
        image = initramfs.initramfs_for(self.kernel)
        write_control_files(self.ctl, self.kernel, self.share, self.image_bytes, self.strace_to)
        qemu_version = _system.tool_version(qemu)
        host, offered = host_identity(qemu_version, self.kernel), accelerators()
        note = remembered_kvm_failure(host) if "kvm" in offered else None
        for accelerator in offered if note is None else ["tcg"]:
            argv = qemu_argv(qemu, accelerator, self.kernel, image, self.ctl, self.share, self.memory_mb)
            failure = self._boot(argv, KVM_BOOT_WAIT_S if accelerator == "kvm" else BOOT_WAIT_S)
            if failure is None:
                break
            if accelerator == "tcg":
                raise LabError(f"the VM lab's guest did not start: {failure}", self.console_hint())
            note = f"KVM could not boot the guest ({failure}); ran under TCG"
            remember_kvm_failure(host, note)
        self.facts = VmFacts(
            kernel=self.kernel.describe(),
            accelerator=accelerator,
            accelerator_note=note,
            timings_comparable=accelerator == "kvm",
            memory_mb=self.memory_mb,
            cpus=GUEST_CPUS,
            qemu=qemu_version,
            boot_s=self.boot_s,
        )

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        (self.ctl / guest.QUIT_FILE).touch()  # the guest program ends, init powers off
        if _system.exit_code_within(self.proc, POWER_OFF_WAIT_S) is None:
            self.proc.kill()
        _system.stop_process(self.proc, 0)
        self.proc = None

    def _boot(self, argv: list[str], wait_s: float) -> str | None:
        """Start qemu and wait for the guest program's ready line; None, or why not."""
        self.proc = _system.start_daemon(argv, self.ctl / "qemu.log")
        self.console = []
        for word, rest in self._guest_lines(Patience(wait_s)):
            if word == "booted":
                self.boot_s = float(rest)
            elif word == "ready":
                return None
            elif word == "init":
                break
        code = _system.exit_code_within(self.proc, 5)
        _system.stop_process(self.proc, 0)
        self.proc = None
        if code not in (None, 0):
            return qemu_error(self.ctl) or f"qemu exited with status {code}"
        if not any(line.strip() for line in self.console):
            return f"the guest printed nothing in {wait_s:g} s"
        return f"the guest stopped before it was ready ({self.console_hint()})"

    def capture(self, request: dict, progress: Callable[[int, int], None] | None = None) -> LabCapture:
        """Have the guest take one capture; its result, or its error raised here. A guest
        killed after a hang (:meth:`_lost`) is booted again first."""
        if self.proc is None:
            self._start()
        self.served += 1
        job = self.ctl / str(self.served)
        job.mkdir()
        staged = job / f".{guest.REQUEST_FILE}"
        staged.write_text(json.dumps(request) + "\n")
        staged.rename(job / guest.REQUEST_FILE)  # whole, or not there: the guest polls for it
        patience = Patience(QUIET_WAIT_S)
        for word, rest in self._guest_lines(patience):
            if word == "progress" and progress is not None:
                done, total = rest.split()[:2]  # a third word names the stage (crash states)
                progress(int(done), int(total))
            elif word == "stage" and rest == "teardown":
                patience.finish_within(teardown_wait_s(), "tearing down its lab")
            elif word == "done":
                return guest_result(job, self)
        raise self._lost(patience)

    def _guest_lines(self, patience: Patience) -> Iterator[tuple[str, str]]:
        """The guest's ``sqlwa-vm:`` lines as (word, rest), until qemu exits or ``patience``
        runs out; every console line is kept for error messages."""
        assert self.proc is not None
        while (wait_s := patience.wait_s()) > 0 and (line := _system.read_line_within(self.proc, wait_s)) is not None:
            line = line.rstrip("\r\n")
            self.console.append(line)
            if line.startswith(GUEST_MARK):
                word, _, rest = line.removeprefix(GUEST_MARK).partition(" ")
                yield word, rest

    def _lost(self, patience: Patience) -> LabError:
        """The error of a guest that stopped, or that hung and is killed here."""
        assert self.proc is not None
        if self.proc.poll() is not None or _system.exit_code_within(self.proc, 1) is not None:
            self.proc = None
            return LabError("the VM lab's guest stopped during a run", self.console_hint())
        self.proc.kill()
        _system.stop_process(self.proc, 0)
        self.proc = None
        return LabError(
            f"the VM lab's guest hung: {patience.what()}; qemu was killed and this run's measurement is lost",
            f"re-run; if it recurs, report it with the console's end: {self.console_hint()}",
        )

    def console_hint(self) -> str:
        tail = " | ".join(line for line in self.console[-CONSOLE_TAIL:] if line.strip())
        return f"the guest's console ended: {tail}" if tail else "the guest printed nothing"


class Patience:
    """How long the host waits for the guest's next line: a silence of ``quiet_s``, and
    once :meth:`finish_within` is called, a deadline for the whole of what is left."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self.deadline: float | None = None
        self.doing: str | None = None
        self.bound_s: float | None = None

    def finish_within(self, seconds: float, doing: str) -> None:
        self.deadline, self.doing, self.bound_s = time.monotonic() + seconds, doing, seconds

    def wait_s(self) -> float:
        if self.deadline is None:
            return self.quiet_s
        return max(0.0, min(self.quiet_s, self.deadline - time.monotonic()))

    def what(self) -> str:
        """What it did not do in time, in words."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return f"it was still {self.doing} after {self.bound_s:g} s"
        return f"it printed nothing for {self.quiet_s:g} s"


def teardown_wait_s() -> float:
    return float(os.environ.get(TEARDOWN_WAIT_ENV) or TEARDOWN_WAIT_S)


def host_identity(qemu_version: str | None, kernel: GuestKernel) -> str:
    """What a KVM verdict holds for: this host's kernel, the qemu and the guest's kernel."""
    return f"{os.uname().release} | {qemu_version} | {kernel.source}"


def kvm_verdicts() -> dict:
    """The remembered KVM failures, host identity → note; none when unreadable."""
    try:
        verdicts = json.loads((cache_dir() / KVM_VERDICTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return verdicts if isinstance(verdicts, dict) else {}


def remembered_kvm_failure(host: str) -> str | None:
    """Why KVM could not boot this guest on this host before, if it could not."""
    note = kvm_verdicts().get(host)
    return note if isinstance(note, str) else None


def remember_kvm_failure(host: str, note: str) -> None:
    """Keep the verdict for the next guest. Best effort: an unwritable cache costs the
    next guest the KVM wait, nothing more. Written whole (a rename), so concurrent runs
    never read half a file."""
    verdicts = {**kvm_verdicts(), host: note}
    path = cache_dir() / KVM_VERDICTS_FILE
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(verdicts, indent=1) + "\n")
        staged.rename(path)
    except OSError:
        with contextlib.suppress(OSError):
            staged.unlink(missing_ok=True)


def accelerators() -> list[str]:
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    return ["kvm", "tcg"] if kvm else ["tcg"]


def write_control_files(
    ctl: Path, kernel: GuestKernel, out_dir: Path, image_bytes: int, strace_to: Path | None = None
) -> None:
    """guest.env for init, guest.sh for the chroot; requests come one by one (Guest.capture)."""
    env = {
        "MODULES_DIR": str(Path(kernel.root) / "lib" / "modules"),
        "OUT_DIR": str(out_dir),
        "TMP_SIZE": f"{image_bytes // (1 << 20) + 256}m",  # the lab's image and its margin
    }
    (ctl / "guest.env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
    package_parent = Path(__file__).resolve().parents[2]  # the directory holding sqlwa/
    test_hooks = "".join(
        f"export {name}={shlex.quote(os.environ[name])}\n" for name in GUEST_TEST_ENV if name in os.environ
    )
    (ctl / "guest.sh").write_text(
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8\n"
        "export TMPDIR=/run/sqlwa-tmp\n"  # init's tmpfs for the lab's image (TMP_SIZE)
        f"export PYTHONPATH={shlex.quote(str(package_parent))}\n"
        f"{test_hooks}"
        f"modprobe -a {' '.join(GUEST_MODULES)} || exit 3\n"
        f"exec {strace_prefix(strace_to)}{shlex.quote(sys.executable)} -m sqlwa.vm.guest /run/sqlwa-vm\n"
    )


def strace_prefix(log: Path | None) -> str:
    """The guest program under strace (the host's, over the share), for checking the
    guest's syscall level against an independent count; nothing without ``log``."""
    if log is None:
        return ""
    calls = "trace=write,pwrite64,fsync,fdatasync,sync_file_range"
    return f"strace -f -qq -o {shlex.quote(str(log))} -e {calls} "


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


def qemu_error(ctl: Path) -> str | None:
    lines = [line.strip() for line in (ctl / "qemu.log").read_text(errors="replace").splitlines() if line.strip()]
    return lines[0] if lines else None


def guest_result(job: Path, guest_: Guest) -> LabCapture:
    """The capture in ``job``, or the guest's error raised here as the same kind of error."""
    error_file, capture_file = job / guest.ERROR_FILE, job / guest.CAPTURE_FILE
    if error_file.is_file():
        error = json.loads(error_file.read_text())
        kind = getattr(errors, error["type"], None)
        if not (isinstance(kind, type) and issubclass(kind, SqlwaError)):
            kind = LabError
        raise kind(f"in the VM lab: {error['message']}", error["hint"])
    if capture_file.is_file():
        return LabCapture.from_json(capture_file.read_text())
    raise LabError("the VM lab's guest ended a run without a result", guest_.console_hint())
