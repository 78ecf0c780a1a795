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

Nothing outlives the run: qemu dies with sqlwa (PR_SET_PDEATHSIG) and is killed at once
on any exception or signal (a guest is asked to power off only when it is idle); the
guest's lab lives in the guest's RAM; the control directory is a scratch directory
(``sqlwa lab cleanup`` knows those).

Nothing the guest does can hang the run either: each phase of a guest's work has a limit
of its own (:class:`Phase`) — booting to its ready line, taking up a request, the run
(lab set-up, workload, trace, a crash run's states: scaled by the commits and states the
guest reports it has to do, its think time and device delay), and tearing the lab down
— besides :data:`QUIET_WAIT_S` of silence. On expiry qemu is killed and the run fails in
one line naming the phase and its limit. A guest killed so is booted again for the next
capture of a matrix. Every console line is kept in the run directory's console.log
(:class:`ConsoleLog`), so a hang can be read after the fact.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from sqlwa import _system, errors
from sqlwa.errors import GuestHung, LabError, SqlwaError, UsageError
from sqlwa.lab import filesystem
from sqlwa.lab.scratch import GUEST_CONTROL_TAG
from sqlwa.measure.lab_capture import LabCapture
from sqlwa.results.rundir import CONSOLE_FILE
from sqlwa.vm import guest, initramfs
from sqlwa.vm.kernel import GuestKernel, read_cached, write_cached

QEMU = "qemu-system-x86_64"
QEMU_FIX = "install Debian's qemu-system-x86 (and busybox-static), then re-run"
GUEST_MARK = "sqlwa-vm: "
HOST_MARK = "sqlwa (host): "  # the host's own notes in the console log
BOOT_FIX = (
    "an emulated boot on a busy machine can take longer: re-run when it is quieter, "
    "or give it more time with SQLWA_VM_BOOT_WAIT_S=300"
)
BOOT_WAIT_S = 120  # boot to init's "booted" line; ~3 s here under TCG, far more when loaded
KVM_BOOT_WAIT_S = 30  # the same under KVM, which boots in a second or two
KVM_VERDICTS_FILE = "kvm-verdicts.json"  # in the cache: KVM that could not boot a kernel here, and why
QUIET_WAIT_S = 900  # the longest silence of a running guest (mkfs and fill print nothing)
# The phases' limits under TCG; KVM runs the same work KVM_SPEEDUP times faster at least.
REQUEST_WAIT_S = 60  # request.json written to the guest's "started": a poll of 0.1 s and a JSON read
RUN_SETUP_S = 300  # the lab's set-up (image, mkfs, fill, mount), or a crash run's reference run, per ...
RUN_SETUP_PER_GIB_S = 300  # ... plus this per GiB of the guest's image room
RUN_COMMIT_S = 1.0  # per transaction the guest reports (~0.05 s here under TCG), before think time and delay
DELAY_WAITS_PER_COMMIT = 20  # the device delays a transaction may wait out (each fsync's writes and flush)
CRASH_STATE_S = 10  # per crash state: replayed, mounted, checked (~0.5 s here under TCG)
KVM_SPEEDUP = 4
# From the guest's "stage teardown" to its result: its unmounts, dmsetup remove and losetup
# -d take a second; each is bounded in the guest (filesystem.TEARDOWN_STEP_S), and this
# bounds them all.
TEARDOWN_WAIT_S = 300
# Test hooks: SQLWA_VM_<PHASE>_WAIT_S sets a phase's limit (seconds, not scaled);
# guest.STALL_ENV makes the guest program stop answering in a phase.
PHASE_WAIT_ENV = "SQLWA_VM_{}_WAIT_S"
TEARDOWN_WAIT_ENV = PHASE_WAIT_ENV.format("TEARDOWN")
# The test hooks of the guest, passed on to the guest program when set here.
GUEST_TEST_ENV = (filesystem.TEARDOWN_STEP_ENV, filesystem.HANG_STEP_ENV, guest.STALL_ENV)
# The guest's CPUs by accelerator. Under KVM two: the workload and the trace's drain each
# have one, as on a phone. Under TCG one: each vCPU is a host thread emulating it, and two
# 2-vCPU guests on a 2-core host spent their time spinning on guest locks whose holder's
# thread was not running (two crash runs at once: 53 s with two vCPUs each, 18.5 s with
# one; alone 19.0 and 18.1 s). Counts are exact either way; TCG's times are not comparable.
GUEST_CPUS = {"kvm": 2, "tcg": 1}
BASE_MEMORY_MB = 1024  # the guest's own needs: kernel, the overlay's RAM, Python
CONSOLE_TAIL = 12  # console lines quoted when a guest fails
POWER_OFF_WAIT_S = 30  # an idle guest's power-off on the way out of a run that went well
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
    found = _system.tools.find_tool(QEMU)
    if found is None:
        raise UsageError(f"--vm needs {QEMU}, which this machine lacks", QEMU_FIX)
    return found


def run_capture(
    kernel: GuestKernel,
    request: dict,
    ctl: Path,
    out_dir: Path,
    image_bytes: int,
    progress: Callable[[int, int | None], None] | None = None,
) -> tuple[LabCapture, VmFacts]:
    """Boot a guest, take the one capture ``request`` describes, and power it off."""
    with Guest(kernel, ctl, out_dir, image_bytes, console_to=out_dir / CONSOLE_FILE) as guest:
        return guest.capture(request, progress), guest.facts


class ConsoleLog:
    """The guest's console lines: the last few in memory for error messages, every one
    appended to a file as it arrives (flushed: a hung guest's console can be read while
    it hangs and after it is killed)."""

    def __init__(self, path: Path) -> None:
        self.tail: deque[str] = deque(maxlen=CONSOLE_TAIL)
        self.path = path
        self.file: TextIO | None = None

    def to(self, path: Path) -> None:
        """Go on in ``path`` (a matrix's cell's run directory), appended to."""
        if self.file is not None and path == self.path:
            return
        self.close()
        self.path = path

    def add(self, line: str) -> None:
        self.tail.append(line)
        if self.file is None:
            self.file = open(self.path, "a", encoding="utf-8", errors="replace")
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def hint(self) -> str:
        tail = " | ".join(line for line in self.tail if line.strip())
        return f"the guest's console ended: {tail}" if tail else "the guest printed nothing"


class Guest:
    """A booted guest serving captures one after another (``sqlwa matrix --vm`` boots one
    for all its cells; each capture still makes a fresh lab filesystem). ``share`` is the
    host directory the runs' output directories lie in; it is shared at its own path. The
    console goes to ``console_to``, and during a capture to the run directory's
    :data:`CONSOLE_FILE`."""

    def __init__(
        self,
        kernel: GuestKernel,
        ctl: Path,
        share: Path,
        image_bytes: int,
        strace_to: Path | None = None,
        console_to: Path | None = None,
    ) -> None:
        # Absolute: the guest mounts the share at the host's path, and qemu and init do not
        # run in the user's working directory.
        self.kernel, self.ctl, self.share = kernel, ctl.resolve(), share.resolve()
        self.strace_to = strace_to and strace_to.resolve()  # strace the guest program into this file (in share)
        self.memory_mb = BASE_MEMORY_MB + image_bytes // (1 << 20)
        self.image_bytes = image_bytes
        self.proc: subprocess.Popen[str] | None = None
        self.guest_console = (console_to or self.share / CONSOLE_FILE).resolve()
        self.console = ConsoleLog(self.guest_console)
        self.served = 0
        self.boot_s: float | None = None  # guest uptime at init's "booted" line
        self.accelerator = "tcg"
        self.facts: VmFacts

    def __enter__(self) -> Guest:
        try:
            self._start()
        except BaseException:  # a signal while it boots included: __exit__ is not called then
            self._kill()
            raise
        return self

    def _start(self) -> None:
        """Boot the guest until its program is ready, under KVM where it can, else TCG."""
        qemu = qemu_binary()
        image = initramfs.initramfs_for(self.kernel)
        write_control_files(self.ctl, self.kernel, self.share, self.image_bytes, self.strace_to)
        qemu_version = _system.tools.tool_version(qemu)
        host, offered = host_identity(qemu_version, self.kernel), accelerators()
        note = remembered_kvm_failure(host) if "kvm" in offered else None
        self.console.to(self.guest_console)
        for accelerator in offered if note is None else ["tcg"]:
            self.accelerator = accelerator
            argv = qemu_argv(qemu, accelerator, self.kernel, image, self.ctl, self.share, self.memory_mb)
            failure = self._boot(argv, self.limit_s("boot", KVM_BOOT_WAIT_S if accelerator == "kvm" else BOOT_WAIT_S))
            if failure is not None and accelerator == "tcg" and self.silent():
                # An emulated kernel on a loaded host now and then hangs before init, and
                # prints nothing (quiet): the same guest booted again almost always starts.
                self.console.add(f"{HOST_MARK}{failure}; booting it once more")
                failure = self._boot(argv, self.limit_s("boot", BOOT_WAIT_S))
            if failure is None:
                break
            if accelerator == "tcg":
                raise LabError(
                    f"the VM lab's guest did not start: {failure}; its console is in {self.console.path}",
                    BOOT_FIX if self.silent() else self.console.hint(),
                )
            note = f"KVM could not boot the guest ({failure}); ran under TCG"
            remember_kvm_failure(host, note)
        self.facts = VmFacts(
            kernel=self.kernel.describe(),
            accelerator=accelerator,
            accelerator_note=note,
            timings_comparable=accelerator == "kvm",
            memory_mb=self.memory_mb,
            cpus=GUEST_CPUS[accelerator],
            qemu=qemu_version,
            boot_s=self.boot_s,
        )

    def __exit__(self, exc_type: object, *exc: object) -> None:
        """An idle guest is asked to power off; after an error or a signal the guest may be
        in the middle of a capture nobody will read, and qemu is killed at once."""
        if self.proc is not None and exc_type is None:
            (self.ctl / guest.QUIT_FILE).touch()  # the guest program ends, init powers off
            if _system.processes.exit_code_within(self.proc, POWER_OFF_WAIT_S) is None:
                self.proc.kill()
        self._kill()

    def _kill(self) -> None:
        """qemu killed and reaped, the console file closed."""
        if self.proc is not None:
            self.proc.kill()
            _system.processes.stop_process(self.proc, 0)
            self.proc = None
        self.console.close()

    def limit_s(self, phase: str, tcg_s: float) -> float:
        """A phase's limit: ``tcg_s`` under TCG, less under KVM (boot's is given for each);
        the test hook's value when set."""
        hook = os.environ.get(PHASE_WAIT_ENV.format(phase.upper()))
        if hook:
            return float(hook)
        return tcg_s / KVM_SPEEDUP if self.accelerator == "kvm" and phase != "boot" else tcg_s

    def _boot(self, argv: list[str], wait_s: float) -> str | None:
        """Start qemu and wait for the guest program's ready line; None, or why not."""
        self.proc = _system.processes.start_daemon(argv, self.ctl / "qemu.log")
        self.console.tail.clear()  # a failed KVM boot's lines are in the file, not in the next boot's verdict
        patience = Patience(QUIET_WAIT_S)
        patience.begin("boot", wait_s)
        for word, rest in self._guest_lines(patience):
            if word == "booted":
                self.boot_s = float(rest)
            elif word == "ready":
                return None
            elif word == "init":
                break
        code = _system.processes.exit_code_within(self.proc, 5)
        _system.processes.stop_process(self.proc, 0)
        self.proc = None
        if code not in (None, 0):
            return qemu_error(self.ctl) or f"qemu exited with status {code}"
        if self.silent():
            return f"the guest's kernel printed nothing in {wait_s:g} s, the boot phase's limit (it never reached init)"
        if code is None:
            return f"the guest was not ready in {wait_s:g} s, the boot phase's limit"
        return "the guest stopped before it was ready"

    def silent(self) -> bool:
        """Whether the guest of the last boot printed nothing: its kernel (quiet) never
        started init, whose first line says it did."""
        return not any(line.strip() for line in self.console.tail if not line.startswith(HOST_MARK))

    def capture(self, request: dict, progress: Callable[[int, int | None], None] | None = None) -> LabCapture:
        """Have the guest take one capture; its result, or its error raised here. A guest
        killed after a hang (:meth:`_lost`) is booted again first."""
        if self.proc is None:
            self._start()
        self.served += 1
        job = self.ctl / str(self.served)
        job.mkdir()
        self.console.to(Path(request["out_dir"]) / CONSOLE_FILE)
        try:
            return self._serve(job, request, progress)
        finally:
            self.console.to(self.guest_console)

    def _serve(self, job: Path, request: dict, progress: Callable[[int, int | None], None] | None) -> LabCapture:
        """Hand the guest ``request`` in ``job`` and follow it through its phases."""
        staged = job / f".{guest.REQUEST_FILE}"
        staged.write_text(json.dumps(request) + "\n")
        staged.rename(job / guest.REQUEST_FILE)  # whole, or not there: the guest polls for it
        patience = Patience(QUIET_WAIT_S)
        patience.begin("request", self.limit_s("request", REQUEST_WAIT_S))
        commits = 0  # the run's transactions, once the guest's progress has counted them
        for word, rest in self._guest_lines(patience):
            if word == "started" or (word == "stage" and rest == "explore"):
                # a crash run's states come after an untraced re-run of its transactions
                patience.begin("run", self.limit_s("run", self.run_work_s(request, commits, False)))
            elif word == "progress":
                done, total, *what = rest.split()  # a third word names the stage (crash states)
                if progress is not None:
                    progress(int(done), int(total))
                commits = commits if what else int(total)
                patience.allow(self.limit_s("run", self.run_work_s(request, int(total), bool(what))))
            elif word == "stage" and rest == "teardown":
                patience.begin("teardown", self.limit_s("teardown", TEARDOWN_WAIT_S))
            elif word == "done":
                return guest_result(job, self)
        raise self._lost(patience)

    def run_setup_s(self) -> float:
        """The run phase's limit before the guest says how much it has to do: the lab's
        set-up (or a crash run's reference run), by the size of the guest's image room."""
        return RUN_SETUP_S + RUN_SETUP_PER_GIB_S * self.image_bytes / (1 << 30)

    def run_work_s(self, request: dict, total: int, states: bool) -> float:
        """The run phase's limit once the guest has said it has ``total`` transactions (or
        crash states) to do: the set-up's, and each one's think time and device delays."""
        if states:
            return self.run_setup_s() + total * CRASH_STATE_S
        settings = request["settings"]
        waits_ms = (settings.get("think_time_ms") or 0) + (
            request["stack"].get("device_delay_ms") or 0
        ) * DELAY_WAITS_PER_COMMIT
        return self.run_setup_s() + total * (RUN_COMMIT_S + waits_ms / 1000)

    def _guest_lines(self, patience: Patience) -> Iterator[tuple[str, str]]:
        """The guest's ``sqlwa-vm:`` lines as (word, rest), until qemu exits or ``patience``
        runs out; every console line goes to the console log."""
        assert self.proc is not None
        while (wait_s := patience.wait_s()) > 0 and (
            line := _system.processes.read_line_within(self.proc, wait_s)
        ) is not None:
            line = line.rstrip("\r\n")
            self.console.add(line)
            if line.startswith(GUEST_MARK):
                word, _, rest = line.removeprefix(GUEST_MARK).partition(" ")
                yield word, rest

    def _lost(self, patience: Patience) -> LabError:
        """The error of a guest that stopped, or that hung and is killed here."""
        assert self.proc is not None
        hint = self.console.hint()
        if self.proc.poll() is not None or _system.processes.exit_code_within(self.proc, 1) is not None:
            self._kill()
            return LabError("the VM lab's guest stopped during a run", hint)
        self._kill()
        return GuestHung(
            f"the VM lab's guest hung: {patience.what()}; qemu was killed and this run's measurement is lost; "
            f"its console is in {self.console.path}",
            f"re-run; if it recurs, report it with that file ({hint})",
        )


class Patience:
    """How long the host waits for the guest's next line: a silence of ``quiet_s``, and a
    deadline for the phase the guest is in (:meth:`begin`), which the guest's report of
    what it has to do may move later (:meth:`allow`)."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self.phase = ""
        self.began = time.monotonic()
        self.limit_s = float("inf")

    def begin(self, phase: str, limit_s: float) -> None:
        self.phase, self.began, self.limit_s = phase, time.monotonic(), limit_s

    def allow(self, limit_s: float) -> None:
        """The phase may take ``limit_s`` from its beginning, if that is longer."""
        self.limit_s = max(self.limit_s, limit_s)

    def wait_s(self) -> float:
        return max(0.0, min(self.quiet_s, self.began + self.limit_s - time.monotonic()))

    def what(self) -> str:
        """What it did not do in time, in words."""
        if time.monotonic() >= self.began + self.limit_s:
            return f"its {self.phase} phase took longer than its limit of {self.limit_s:g} s"
        return f"it printed nothing for {self.quiet_s:g} s in its {self.phase} phase"


def host_identity(qemu_version: str | None, kernel: GuestKernel) -> str:
    """What a KVM verdict holds for: this host's kernel, the qemu and the guest's kernel."""
    return f"{os.uname().release} | {qemu_version} | {kernel.source}"


def kvm_verdicts() -> dict:
    """The remembered KVM failures, host identity → note; none when unreadable."""
    verdicts = read_cached(KVM_VERDICTS_FILE)
    return verdicts if isinstance(verdicts, dict) else {}


def remembered_kvm_failure(host: str) -> str | None:
    """Why KVM could not boot this guest on this host before, if it could not."""
    note = kvm_verdicts().get(host)
    return note if isinstance(note, str) else None


def remember_kvm_failure(host: str, note: str) -> None:
    """Keep the verdict for the next guest. Best effort: an unwritable cache costs the
    next guest the KVM wait, nothing more. Written whole (a rename), so concurrent runs
    never read half a file."""
    write_cached(KVM_VERDICTS_FILE, {**kvm_verdicts(), host: note})


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
    guest's syscall level against an independent count; nothing without ``log``. With
    --seccomp-bpf only the traced calls stop the program: the guest's Python imports
    sqlwa over the share, thousands of other calls that would each be a ptrace stop of
    an emulated CPU."""
    if log is None:
        return ""
    calls = "trace=write,pwrite64,fsync,fdatasync,sync_file_range"
    return f"strace -f --seccomp-bpf -qq -o {shlex.quote(str(log))} -e {calls} "


def qemu_argv(
    qemu: str, accelerator: str, kernel: GuestKernel, image: Path, ctl: Path, out_dir: Path, memory_mb: int
) -> list[str]:
    share = "local,security_model=none,multidevs=remap"
    return [
        qemu,
        *("-accel", accelerator, "-cpu", "host" if accelerator == "kvm" else "max"),
        *("-m", f"{memory_mb}M", "-smp", str(GUEST_CPUS[accelerator])),
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
    raise LabError("the VM lab's guest ended a run without a result", guest_.console.hint())
