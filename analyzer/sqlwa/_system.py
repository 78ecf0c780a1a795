"""The operating system, in one place: running tools, the mount table, loop devices,
processes, signals, syncfs, tracefs and the output-directory lock.

Every other module asks this one when it needs the OS beyond plain file I/O, so there is
one way to run a subprocess (:func:`run_tool`, raising :class:`~sqlwa.errors.ToolError`
with the command, exit code and stderr), one mount-table parser (mountinfo, with the
kernel's octal escapes undone) and one signal guard.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import pickle
import re
import select
import shutil
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlwa.errors import LabError, ToolError, UsageError, interruption

SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin")
TRACEFS_MOUNTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
# The programs the wheel carries inside the package (scripts/release): the FUSE daemon and
# sqlwa record's preload library.
BUNDLED_DIR = Path(__file__).resolve().parent / "_bin"


# --------------------------------------------------------------------------- tools


def find_tool(name: str) -> str | None:
    """``name`` on PATH or in the system sbin directories (non-root PATHs often lack them)."""
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(SYSTEM_BIN_DIRS)
    return shutil.which(name, path=path)


def _executable(program: str) -> str:
    """The file to run for ``program``: a bare name as :func:`find_tool` finds it, so every
    tool sqlwa runs (depmod, losetup, dmsetup ...) is found under a PATH without sbin."""
    if os.sep in program:
        return program
    return find_tool(program) or program


def run_tool(
    argv: Sequence[str | os.PathLike[str]],
    what: str,
    hint: str | None = None,
    timeout: float | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    die_with_caller: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a system tool and return its output, or raise :class:`ToolError`.

    The tool runs in its own session, so a terminal Ctrl-C reaches only sqlwa, whose
    signal handler decides; subprocess.run kills the child if an exception unwinds the wait.
    ``what`` says what the tool was for ("mkfs for xfs"), ``hint`` the fix to show;
    ``input`` is the tool's stdin (else none: /dev/null). With ``die_with_caller`` the
    kernel kills the tool if sqlwa dies, however it dies (a long measurement must not
    go on writing after a kill -9).
    """
    args = [str(a) for a in argv]
    try:
        return subprocess.run(
            args,
            executable=_executable(args[0]),
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
            cwd=cwd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            preexec_fn=_dying_with(os.getpid()) if die_with_caller else None,
        )
    except FileNotFoundError as exc:
        raise ToolError(
            f"{what}: {args[0]} not found", hint or f"install the package providing {args[0]}", argv=args
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{what}: {' '.join(args)} did not finish in {timeout:g} s", hint, argv=args) from exc
    except subprocess.CalledProcessError as exc:
        detail = " ".join(line.strip() for line in (exc.stderr or exc.stdout or "").splitlines() if line.strip())
        raise ToolError(
            f"{what} failed: {' '.join(args)}: {detail or f'exit code {exc.returncode}'}",
            hint,
            argv=args,
            returncode=exc.returncode,
            stderr=exc.stderr or "",
        ) from exc


def mount(argv: Sequence[str], what: str, hint: str, fstype: str) -> None:
    """``mount ARGV`` via :func:`run_tool`; when it fails, the kernel's own reason (a line
    of its log such as "xfs: Unknown parameter 'nobarrier'", which mount(8) before
    util-linux 2.39 only calls "wrong fs type, bad option ...") leads the error."""
    with kernel_log_since() as new_messages:
        try:
            run_tool(argv, what, hint)
        except ToolError as exc:
            device = os.path.basename(argv[-2]) if len(argv) > 1 else fstype
            reasons = [m for m in new_messages() if m.lower().startswith(fstype) or f"({device})" in m]
            if not reasons:
                raise
            raise ToolError(
                f"{what} failed, the kernel says: {'; '.join(reasons)} ({' '.join(exc.argv)})",
                hint,
                argv=exc.argv,
                returncode=exc.returncode,
                stderr=exc.stderr,
            ) from exc


@contextmanager
def kernel_log_since() -> Iterator[Callable[[], list[str]]]:
    """Yields a function returning the kernel log messages (/dev/kmsg, root only) written
    since the ``with`` began; without access to the log it returns none."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield list
        return
    try:
        os.lseek(fd, 0, os.SEEK_END)
        yield lambda: _read_kmsg(fd)
    finally:
        os.close(fd)


def _read_kmsg(fd: int) -> list[str]:
    """Each read of /dev/kmsg is one record, "prio,seq,usec,flags;message"."""
    messages: list[str] = []
    while True:
        try:
            record = os.read(fd, 8192).decode(errors="replace")
        except BlockingIOError:
            return messages
        except OSError:  # EPIPE: records were overwritten while we read; keep what we have
            continue
        if not record:
            return messages
        messages.append(record.split(";", 1)[-1].split("\n", 1)[0].strip())


def try_tool(argv: Sequence[str], timeout: float | None = None) -> subprocess.CompletedProcess[str] | None:
    """Run a tool whose failure the caller handles itself (a retry, a fallback): the
    finished process whatever its exit code, or None if it could not run or timed out."""
    args = [str(a) for a in argv]
    try:
        return subprocess.run(
            args,
            executable=_executable(args[0]),
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def tool_version(tool: str) -> str | None:
    """The first line a tool prints for ``-V`` or ``--version``."""
    for flag in ("-V", "--version"):
        proc = try_tool([tool, flag], timeout=10)
        if proc is None:
            return None
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 0 and text:
            return text.splitlines()[0]
    return None


# --------------------------------------------------------------------------- processes


def is_root() -> bool:
    return os.geteuid() == 0


def pid_is_dead(pid: int) -> bool:
    """True if no live process has this pid (a zombie counts as dead: it will never
    clean up after itself)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


# --------------------------------------------------------------------------- ownership
#
# What a run makes (lab directories, scratch directories, tracefs instances) carries the
# owner's pid in its name, and the owner holds an flock on the directory itself for as
# long as it lives. A pid means nothing in another PID namespace (inside
# `unshare --pid` a live host process looks dead, and the other way round); the lock is
# the kernel's, on the same inode for every namespace, and is freed however its holder
# ends. Cleanup removes a thing only where both say its owner is gone.


def hold_ownership(directory: str | os.PathLike) -> int:
    """Lock ``directory`` as its owner's for as long as the returned descriptor is open."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release_ownership(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def owner_is_gone(directory: str | os.PathLike, pid: int) -> bool:
    """True only if no process in this PID namespace has ``pid`` and nobody holds the
    ownership lock of ``directory``. A directory this process cannot open (another mount
    namespace's, say) has an owner it cannot judge: False."""
    if not pid_is_dead(pid):
        return False
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also drops our probe's own lock
    return True


# --------------------------------------------------------------------------- fscrypt
#
# The kernel's fscrypt ioctls (include/uapi/linux/fscrypt.h), so no extra tool is needed
# (Debian 12 has no fscryptctl). Numbers are _IOC(dir, 'f', nr, size); a test compiles
# the header and compares.

FS_IOC_SET_ENCRYPTION_POLICY = 0x800C6613  # _IOR('f', 19, struct fscrypt_policy_v1)
FS_IOC_GET_ENCRYPTION_POLICY_EX = 0xC0096616  # _IOWR('f', 22, __u8[9])
FS_IOC_ADD_ENCRYPTION_KEY = 0xC0506617  # _IOWR('f', 23, struct fscrypt_add_key_arg)
FS_IOC_REMOVE_ENCRYPTION_KEY = 0xC0406618  # _IOWR('f', 24, struct fscrypt_remove_key_arg)
FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER = 2
FSCRYPT_POLICY_V2 = 2
_KEY_SPEC = "=II32s"  # type, reserved, identifier (16 bytes used) / descriptor
_POLICY_V2 = "=BBBB4s16s"  # version, contents mode, filenames mode, flags, reserved, key id


def _directory_fd(path: str | os.PathLike) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def add_encryption_key(mountpoint: str | os.PathLike, raw_key: bytes) -> bytes:
    """Add a v2 master key to the filesystem at ``mountpoint``; returns the 16-byte key
    identifier the kernel derived from it."""
    arg = bytearray(struct.pack(f"{_KEY_SPEC}II32s", FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER, 0, b"", len(raw_key), 0, b""))
    arg += raw_key
    fd = _directory_fd(mountpoint)
    try:
        fcntl.ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, arg)
    finally:
        os.close(fd)
    return bytes(arg[8:24])


def remove_encryption_key(mountpoint: str | os.PathLike, identifier: bytes) -> int:
    """Remove the key from the filesystem; returns the kernel's removal status flags
    (FSCRYPT_KEY_REMOVAL_STATUS_FLAG_FILES_BUSY = 1: files were still in use)."""
    arg = bytearray(struct.pack(f"{_KEY_SPEC}I20s", FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER, 0, identifier, 0, b""))
    fd = _directory_fd(mountpoint)
    try:
        fcntl.ioctl(fd, FS_IOC_REMOVE_ENCRYPTION_KEY, arg)
    finally:
        os.close(fd)
    return struct.unpack_from("=I", arg, 40)[0]


def set_encryption_policy(
    directory: str | os.PathLike, contents: int, filenames: int, flags: int, key_id: bytes
) -> None:
    """Put an empty ``directory`` under a v2 policy with the given modes and key."""
    policy = bytearray(struct.pack(_POLICY_V2, FSCRYPT_POLICY_V2, contents, filenames, flags, b"", key_id))
    fd = _directory_fd(directory)
    try:
        fcntl.ioctl(fd, FS_IOC_SET_ENCRYPTION_POLICY, policy)
    finally:
        os.close(fd)


def encryption_policy(path: str | os.PathLike) -> tuple[int, int, int, int, bytes] | None:
    """(version, contents mode, filenames mode, flags, key identifier) of ``path``'s
    policy as the kernel reports it, or None if it has none (ENODATA)."""
    arg = bytearray(struct.pack("=Q24s", 24, b""))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, FS_IOC_GET_ENCRYPTION_POLICY_EX, arg)
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return None
        raise
    finally:
        os.close(fd)
    version, contents, filenames, flags, _, key_id = struct.unpack_from(_POLICY_V2, arg, 8)
    return version, contents, filenames, flags, key_id


def crypto_drivers(algorithm: str) -> list[tuple[int, str]]:
    """(priority, driver) of every implementation of ``algorithm`` in /proc/crypto, best
    first: the kernel's crypto API gives a new user the highest-priority one."""
    found = []
    for block in Path("/proc/crypto").read_text().split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if fields.get("name") == algorithm and fields.get("selftest", "passed") == "passed":
            found.append((int(fields.get("priority", 0)), fields.get("driver", "")))
    return sorted(found, reverse=True)


# --------------------------------------------------------------------------- directory lock

LOCK_FILE = ".sqlwa.lock"


@contextmanager
def directory_lock(directory: Path, owner: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``DIRECTORY/.sqlwa.lock`` for the ``with`` block, or
    raise :class:`UsageError` naming the process that holds it. ``owner`` says what
    writes there ("sqlwa run", "sqlwa matrix") for that message.

    flock locks belong to the open file, so the kernel frees the lock when its holder
    exits however it ends (a kill -9 included): a stale lock file never blocks anyone.
    The holder writes its pid and command line into the file for the refusal message and
    removes the file when it is done. A waiter may have opened the old file just before it
    was removed; it notices (the path no longer names the inode it locked) and retries.
    """
    path = Path(directory) / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise UsageError(
                f"{directory} cannot hold sqlwa's lock file: {exc.strerror}", "choose a writable directory"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another sqlwa process"
            os.close(fd)
            raise UsageError(
                f"{directory} is in use: {holder} is writing into it",
                "wait for it to finish, or choose another --out",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file between our open and our lock
    try:
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{owner} (pid {os.getpid()}, since {started})\n".encode(), 0)
        except OSError:
            pass  # who holds the lock is a courtesy for the refusal message; the lock holds
        yield
    finally:
        # On a frozen filesystem the unlink waits for the thaw; the run's end need not.
        within(LOCK_RELEASE_WAIT_S, _release_lock, path, fd)


LOCK_RELEASE_WAIT_S = 1


def _release_lock(path: Path, fd: int) -> None:
    try:
        path.unlink(missing_ok=True)  # while still holding the lock: no one else owns the file
    except OSError:
        pass  # a stale lock file blocks no one: flock locks die with their descriptor
    finally:
        os.close(fd)


def within(wait_s: float, action: Callable[..., None], *args: object) -> None:
    """Run ``action(*args)``, waiting at most ``wait_s`` for it; an action stuck in the
    kernel (a write to a frozen filesystem) finishes in a daemon thread when it can."""
    worker = threading.Thread(target=action, args=args, daemon=True)
    worker.start()
    worker.join(wait_s)


# --------------------------------------------------------------------------- signals


class SignalGuard:
    """Turns SIGINT and SIGTERM into exceptions while a lab or capture is active, so the
    ``with`` block unwinds and cleans up, and restores the previous handlers afterwards.

    Inside :meth:`critical` a signal is remembered and raised when the section ends; during
    teardown it is only remembered (a second Ctrl-C must not abort the cleanup) and
    :meth:`take_pending` hands it back once everything is removed. Handlers can only be
    installed from the main thread; elsewhere the guard does nothing and the caller's
    ``finally`` still cleans up.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}
        self._defer = 0
        self._pending: int | None = None
        self.tearing_down = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        with self.critical():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def take_pending(self) -> int | None:
        signum, self._pending = self._pending, None
        return signum

    def set_up(self, setup: Callable[[], None], teardown: Callable[[], object]) -> None:
        """Installs the handlers and runs ``setup``; if anything fails part-way (a signal
        included) ``teardown`` removes what was made before the exception propagates."""
        try:
            self.install()
            setup()
        except BaseException:
            teardown()
            raise

    def finish(self, teardown_errors: list[Exception], failure: Callable[[str], BaseException]) -> None:
        """After a clean teardown: raises ``failure(message)`` if parts of it failed, then
        the signal that arrived during it, if any."""
        if teardown_errors:
            raise failure("; ".join(str(e) for e in teardown_errors))
        pending = self.take_pending()
        if pending is not None:
            raise interruption(pending)

    @contextmanager
    def critical(self) -> Iterator[None]:
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
        pending = self._pending
        if not self._defer and not self.tearing_down and pending is not None:
            self._pending = None
            raise interruption(pending)

    def _handle(self, signum: int, _frame: object) -> None:
        if self._defer or self.tearing_down:
            self._pending = self._pending or signum
            return
        raise interruption(signum)


@contextmanager
def signals_unwind() -> Iterator[None]:
    """SIGINT and SIGTERM as exceptions inside the block (a :class:`SignalGuard`), so the
    temporary files made in it are removed by their own ``with`` on the way out; the
    previous handlers afterwards."""
    guard = SignalGuard()
    guard.install()
    try:
        yield
    finally:
        guard.restore()


def call_within(action: Callable[[], object], timeout_s: float, what: str) -> None:
    """Run ``action`` in a thread of its own and wait for it ``timeout_s`` seconds at most.
    If it is not done by then, raise :class:`LabError` and leave it behind: a step stuck in
    the kernel (an unmount, a loop device's detach) can be abandoned, never cancelled.
    Signals still reach the caller's handlers, which run in the main thread."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            action()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller, in its thread
            outcome.append(exc)

    worker = threading.Thread(target=run, name=f"sqlwa: {what}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise LabError(f"{what} did not finish in {timeout_s:g} s and was abandoned")
    if outcome[0] is not None:
        raise outcome[0]


# --------------------------------------------------------------------------- mounts


def _unescape_mount_field(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _merged_options(per_mount: str, superblock: str) -> str:
    """The mount's options as /proc/self/mounts shows them: per-mount options, then the
    superblock's, each once."""
    merged = dict.fromkeys(o for o in f"{per_mount},{superblock}".split(",") if o)
    return ",".join(merged)


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    fstype: str
    source: str
    options: str  # per-mount and superblock options, as the kernel shows them


def current_mounts() -> list[Mount]:
    """The mount table of this process (``/proc/self/mountinfo``), in mount order."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.rstrip("\n").split(" - ", 1)
            fields, tail = left.split(), right.split()
            mounts.append(
                Mount(
                    mountpoint=_unescape_mount_field(fields[4]),
                    fstype=tail[0],
                    source=_unescape_mount_field(tail[1]),
                    options=_merged_options(fields[5], tail[2] if len(tail) > 2 else ""),
                )
            )
    return mounts


def mount_at(mountpoint: str) -> Mount | None:
    """The mount whose mount point is exactly ``mountpoint`` (the topmost one)."""
    found = [m for m in current_mounts() if m.mountpoint == mountpoint]
    return found[-1] if found else None


def mount_holding(path: str | os.PathLike[str]) -> Mount | None:
    """The mount that holds ``path``: the longest mount point that prefixes it, so a
    directory inside a loop mount reports the loop filesystem, not its parent's."""
    target = os.path.realpath(path)
    best: Mount | None = None
    try:
        mounts = current_mounts()
    except OSError:
        return None
    for mount in mounts:
        inside = target == mount.mountpoint or target.startswith(mount.mountpoint.rstrip("/") + "/")
        if inside and (best is None or len(mount.mountpoint) >= len(best.mountpoint)):
            best = mount
    return best


# Filesystems that are the kernel's interfaces, not storage: a mkdir there makes a tracefs
# instance, a cgroup or a configfs item, and a write changes the kernel's state.
KERNEL_INTERFACE_FILESYSTEMS = frozenset(
    {
        "proc", "sysfs", "tracefs", "debugfs", "securityfs", "cgroup", "cgroup2", "configfs", "bpf",
        "pstore", "efivarfs", "fusectl", "binfmt_misc", "devtmpfs", "devpts", "mqueue", "hugetlbfs",
        "nsfs", "rpc_pipefs", "autofs",
    }
)  # fmt: skip


def kernel_interface_at(path: str | os.PathLike[str]) -> str | None:
    """The type of the kernel-interface filesystem ``path`` would be made on, if any."""
    mount = mount_holding(path)
    return mount.fstype if mount is not None and mount.fstype in KERNEL_INTERFACE_FILESYSTEMS else None


def unmount(mountpoint: str) -> None:
    """umount, retrying briefly (udev or a just-closed file can hold it a moment); a lazy
    unmount is the last resort so the loop device can still be released."""
    last = None
    for attempt in range(5):
        last = try_tool(["umount", mountpoint])
        if (last is not None and last.returncode == 0) or mount_at(mountpoint) is None:
            return
        time.sleep(0.1 * (attempt + 1))
    try_tool(["umount", "-l", mountpoint])
    if mount_at(mountpoint) is not None:
        reason = last.stderr.strip() if last is not None else "umount could not run"
        raise ToolError(
            f"could not unmount {mountpoint}: {reason}",
            argv=["umount", mountpoint],
            returncode=last.returncode if last else None,
            stderr=last.stderr if last else "",
        )


def kernel_filesystems() -> set[str]:
    """The filesystem types the running kernel knows (``/proc/filesystems``)."""
    with open("/proc/filesystems") as f:
        return {line.split()[-1] for line in f if line.strip()}


def syncfs(path: str) -> None:
    """syncfs(2) on the filesystem holding ``path``: write back everything dirty on it."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def used_fraction(path: str) -> float:
    """Used / (used + available), as df shows it (ext4's root reserve is not counted)."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    return used / max(1, used + st.f_bavail)


def free_space(path: str) -> tuple[int, int]:
    """(bytes an unprivileged user may still write, total size) of the filesystem holding
    ``path``; root's reserve is not counted as free."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def memory_available() -> tuple[int, int]:
    """(MemAvailable, MemTotal) in bytes, from /proc/meminfo: what a tmpfs could fill."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = int(value.split()[0]) * 1024 if value.split() else 0
    return fields.get("MemAvailable", fields.get("MemFree", 0)), fields.get("MemTotal", 0)


# --------------------------------------------------------------------------- loop devices


@dataclass(frozen=True)
class LoopDevice:
    device: str  # /dev/loopN
    backing_file: str  # as the kernel reports it, without " (deleted)"
    major: int
    minor: int
    direct_io: bool


def loop_devices() -> list[LoopDevice]:
    """Every attached loop device, from sysfs (no parsing of losetup's output)."""
    devices = []
    for sys_dir in sorted(Path("/sys/block").glob("loop*")):
        try:
            backing = (sys_dir / "loop" / "backing_file").read_text().rstrip("\n")
            major, minor = (sys_dir / "dev").read_text().strip().split(":")
            dio = (sys_dir / "loop" / "dio").read_text().strip() == "1"
        except OSError:
            continue  # not attached (no loop/ directory) or detached meanwhile
        backing = backing.removesuffix(" (deleted)")
        devices.append(LoopDevice(f"/dev/{sys_dir.name}", backing, int(major), int(minor), dio))
    return devices


def loops_backed_by(image: str) -> list[LoopDevice]:
    return [d for d in loop_devices() if d.backing_file == image]


def loop_backing_file(device: str) -> str | None:
    """The file behind loop device ``device`` (/dev/loopN), or None if it is not attached."""
    sys_file = Path("/sys/block") / os.path.basename(device) / "loop" / "backing_file"
    try:
        return sys_file.read_text().rstrip("\n").removesuffix(" (deleted)")
    except OSError:
        return None


def block_device_sectors(device: str) -> int:
    """The size of block device ``device`` (/dev/loopN) in 512-byte sectors, from sysfs."""
    return int((Path("/sys/class/block") / os.path.basename(device) / "size").read_text())


def _sys_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def block_device_facts(path: str | os.PathLike[str]) -> dict[str, object]:
    """What sysfs and the mount table say about the storage under ``path``: the
    filesystem, its mount options and source, the block device (the whole disk for a
    partition), its model, whether it has a volatile write cache and FUA, whether it
    rotates, and for a loop device its backing file. Keys whose answer is unknown are
    left out (a network or FUSE filesystem has no block device)."""
    facts: dict[str, object] = {}
    mount = mount_holding(path)
    if mount is None:
        return facts
    facts.update(filesystem=mount.fstype, mount_options=mount.options, source=mount.source)
    if not mount.source.startswith("/dev/"):
        return facts
    sys_dev = Path("/sys/class/block") / os.path.basename(os.path.realpath(mount.source))
    if not sys_dev.exists():
        return facts
    disk = sys_dev.resolve().parent if (sys_dev / "partition").exists() else sys_dev.resolve()
    facts["block_device"] = disk.name
    queue = disk / "queue"
    model = " ".join(t for t in (_sys_text(disk / "device" / "vendor"), _sys_text(disk / "device" / "model")) if t)
    found: dict[str, object] = {
        "model": model or _sys_text(disk / "dm" / "name"),
        "write_cache": _sys_text(queue / "write_cache"),
        "fua": _sys_text(queue / "fua"),
        "rotational": _sys_text(queue / "rotational"),
        "loop_backing_file": _sys_text(disk / "loop" / "backing_file"),
        "loop_direct_io": _sys_text(disk / "loop" / "dio"),
    }
    for key in ("fua", "rotational", "loop_direct_io"):  # sysfs says 0 or 1
        if found[key] is not None:
            found[key] = found[key] == "1"
    facts.update({k: v for k, v in found.items() if v is not None})
    return facts


def detach_loop(device: str) -> None:
    """losetup -d, then wait until sysfs shows the device free (detach is asynchronous
    when something still holds the device: the kernel then auto-clears it on last close)."""
    proc = try_tool(["losetup", "-d", device])
    for _ in range(50):
        if loop_backing_file(device) is None:
            return
        time.sleep(0.05)
    raise ToolError(
        f"loop device {device} is still attached after losetup -d (something holds it open)",
        argv=["losetup", "-d", device],
        returncode=proc.returncode if proc else None,
        stderr=proc.stderr if proc else "",
    )


# --------------------------------------------------------------------------- device-mapper


@dataclass(frozen=True)
class DmDevice:
    name: str  # the target's name, as /dev/mapper/<name>
    node: str  # /dev/dm-N
    major: int
    minor: int
    slaves: tuple[str, ...]  # the devices under it (loop0 ...), from sysfs


def device_mapper_available() -> bool:
    """Whether the kernel has device-mapper, loading dm-mod first where it can (root)."""
    if _misc_device("device-mapper"):
        return True
    modprobe = find_tool("modprobe")
    if modprobe and is_root():
        try_tool([modprobe, "-q", "dm_mod"], timeout=30)
    return _misc_device("device-mapper")


def _misc_device(name: str) -> bool:
    try:
        return any(line.split()[-1] == name for line in Path("/proc/misc").read_text().splitlines() if line.strip())
    except OSError:
        return False


def dm_target_available(target: str, module: str) -> bool:
    """Whether device-mapper has the ``target`` type (``crypt``), loading ``module`` if needed."""
    if is_root():
        try_tool(["modprobe", "-q", module], timeout=30)
    proc = try_tool(["dmsetup", "targets"], timeout=30)
    return (
        proc is not None
        and proc.returncode == 0
        and any(line.split()[:1] == [target] for line in proc.stdout.splitlines())
    )


def dm_devices() -> list[DmDevice]:
    """Every device-mapper device, from sysfs (no parsing of dmsetup's output)."""
    found = []
    for sys_dir in sorted(Path("/sys/block").glob("dm-*")):
        try:
            name = (sys_dir / "dm" / "name").read_text().strip()
            major, minor = (sys_dir / "dev").read_text().strip().split(":")
            slaves = tuple(sorted(p.name for p in (sys_dir / "slaves").iterdir()))
        except OSError:
            continue  # removed meanwhile
        found.append(DmDevice(name, f"/dev/{sys_dir.name}", int(major), int(minor), slaves))
    return found


def dm_device(name: str) -> DmDevice | None:
    return next((d for d in dm_devices() if d.name == name), None)


def dm_table(name: str) -> str:
    """``dmsetup table NAME``: the target lines, keys shown as zeros (dmsetup masks them)."""
    return run_tool(["dmsetup", "table", name], f"reading the device-mapper table of {name}").stdout


def remove_dm_device(name: str) -> None:
    """``dmsetup remove --retry NAME`` (--retry: udev or a just-closed file can hold the
    device a moment); raises :class:`ToolError` if it stays."""
    run_tool(["dmsetup", "remove", "--retry", name], f"removing the device-mapper device {name}", timeout=60)


# --------------------------------------------------------------------------- kernel keyrings
#
# add_key(2) and keyctl(2) have no wrapper in glibc: called by number (x86-64), so no
# extra tool (keyutils) is needed.

SYS_ADD_KEY = 248
SYS_KEYCTL = 250
KEY_SPEC_SESSION_KEYRING = -3
KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_INVALIDATE = 21


def _key_syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def join_new_session_keyring() -> int:
    """Give this process a fresh anonymous session keyring: keys added to it die with
    the process (and its children, which inherit it), whatever ends it."""
    return _key_syscall(SYS_KEYCTL, ctypes.c_int(KEYCTL_JOIN_SESSION_KEYRING), ctypes.c_char_p(None))


def add_key(key_type: str, description: str, payload: bytes | None, keyring: int) -> int:
    """add_key(2): a key (or, with type ``keyring`` and no payload, a keyring) in ``keyring``."""
    return _key_syscall(
        SYS_ADD_KEY,
        ctypes.c_char_p(key_type.encode()),
        ctypes.c_char_p(description.encode()),
        ctypes.c_char_p(payload),
        ctypes.c_size_t(len(payload) if payload else 0),
        ctypes.c_int(keyring),
    )


def invalidate_key(key_id: int) -> None:
    """KEYCTL_INVALIDATE: the key (a keyring: with the keys only it held) is gone at once."""
    _key_syscall(SYS_KEYCTL, ctypes.c_int(KEYCTL_INVALIDATE), ctypes.c_int(key_id))


# --------------------------------------------------------------------------- tracefs


def tracefs_root() -> Path | None:
    """Where tracefs is mounted (a directory with ``instances/``), or None."""
    for candidate in TRACEFS_MOUNTS:
        if os.path.isdir(os.path.join(candidate, "instances")):
            return Path(candidate)
    return None


def mount_tracefs() -> Path | None:
    """Mount tracefs on /sys/kernel/tracing where it is not mounted anywhere yet (root
    only), as scripts/system-deps does; the mountpoint if this call mounted it, else None
    (already mounted, not root, or the mount failed: the caller's check says why)."""
    if tracefs_root() is not None or not is_root():
        return None
    target = TRACEFS_MOUNTS[0]
    if try_tool(["mount", "-t", "tracefs", "nodev", target], timeout=30) is None:
        return None
    return Path(target) if tracefs_root() == Path(target) else None


def tracefs_write(path: Path, value: str) -> None:
    """Write one control file of tracefs (one write(2): tracefs acts on each write)."""
    with open(path, "w") as f:
        f.write(value)


def remove_tracefs_instance(instance_dir: Path, attempts: int = 20) -> None:
    """rmdir a tracefs instance, retrying briefly: it is busy while any of its files (a
    writer of trace_marker, a reader of trace_pipe) is still open. Raises the last
    OSError if it stays busy."""
    for attempt in range(attempts):
        try:
            os.rmdir(instance_dir)
            return
        except FileNotFoundError:
            return
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.1)


# --------------------------------------------------------------------------- daemons
#
# A daemon the lab runs (a FUSE daemon) is its child for as long as it lives: it is
# started in a session of its own (a terminal's Ctrl-C reaches only sqlwa, which decides)
# and with PR_SET_PDEATHSIG, so the kernel kills it when sqlwa dies, however it dies.

PR_SET_PDEATHSIG = 1


def _dying_with(parent: int) -> Callable[[], None]:
    def die_with_parent() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: nobody would stop us
            os._exit(1)

    return die_with_parent


def start_daemon(argv: Sequence[str], log_path: str | os.PathLike[str]) -> subprocess.Popen[str]:
    """Start ``argv`` with its stdout a pipe (for a ready line) and stderr into
    ``log_path``; raises :class:`ToolError` if it cannot be started."""
    argv = [str(a) for a in argv]
    with open(log_path, "w") as log:
        try:
            return subprocess.Popen(
                argv,
                executable=_executable(argv[0]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
                preexec_fn=_dying_with(os.getpid()),
            )
        except OSError as exc:
            raise ToolError(f"starting {argv[0]} failed: {exc.strerror}", argv=argv) from None


def read_line_within(proc: subprocess.Popen[str], wait_s: float) -> str | None:
    """The first line ``proc`` prints on stdout, or None if it prints none within
    ``wait_s`` seconds or exits without one."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(wait_s):
            return None
    return proc.stdout.readline() or None


def exit_code_within(proc: subprocess.Popen[str], wait_s: float) -> int | None:
    """``proc``'s exit code once it ends within ``wait_s`` seconds, else None (its stdout
    reaches EOF a moment before it can be reaped)."""
    try:
        return proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        return None


def stop_process(proc: subprocess.Popen[str], wait_s: float) -> None:
    """Wait up to ``wait_s`` for ``proc`` to end by itself, then SIGKILL it and reap it."""
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@dataclass(frozen=True)
class Process:
    pid: int
    comm: str
    argv: list[str]


def processes() -> list[Process]:
    """Every process visible here with its comm and command line (kernel threads, which
    have no command line, and processes gone meanwhile are left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().rstrip("\n")
        except OSError:
            continue
        if argv and argv[0]:
            found.append(Process(int(entry.name), comm, [a.decode(errors="replace") for a in argv if a]))
    return found


@dataclass(frozen=True)
class CpuTime:
    """CPU time of a process, all its threads (those that ended included), ns."""

    user_ns: int
    sys_ns: int


def process_cpu(pid: int) -> CpuTime:
    """``pid``'s user and system time from /proc/PID/stat (utime, stime: fields 14 and 15,
    in clock ticks of sysconf(SC_CLK_TCK), 10 ms here); ProcessLookupError once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    # after the comm in parentheses, which may hold spaces and parentheses itself
    fields = text.rsplit(")", 1)[1].split()
    tick_ns = process_cpu_tick_ns()
    return CpuTime(user_ns=int(fields[11]) * tick_ns, sys_ns=int(fields[12]) * tick_ns)


def process_cpu_tick_ns() -> int:
    """The unit of :func:`process_cpu`'s figures, ns."""
    return 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def kill_process(pid: int, wait_s: float = 5) -> None:
    """SIGKILL ``pid`` and wait until it is gone (or a zombie: its parent reaps it)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while not pid_is_dead(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if not pid_is_dead(pid):
        raise ToolError(f"process {pid} is still alive after SIGKILL (stuck in the kernel?)")


FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Deallocate a range of a file (reads back as zeros), keeping its size: fallocate(2)
    with FALLOC_FL_PUNCH_HOLE, which os has no wrapper for."""
    libc = ctypes.CDLL(None, use_errno=True)
    mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    if libc.fallocate(fd, mode, ctypes.c_long(offset), ctypes.c_long(length)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fallocate(PUNCH_HOLE): {os.strerror(err)}")


def data_extents(fd: int) -> Iterator[tuple[int, int]]:
    """(offset, length) of each stretch of a sparse file that holds data (SEEK_DATA and
    SEEK_HOLE), so a copy can leave the holes out."""
    size = os.fstat(fd).st_size
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after offset
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end - start
        offset = end


def mount_device(device: str, mountpoint: str, fstype: str, options: Sequence[str]) -> None:
    """mount(2) without mount(8): for a loop of many mounts (a crash run mounts every
    state), where a process per mount would cost more than the mount itself. Raises
    OSError with the kernel's errno; the kernel's reason is in its log."""
    libc = ctypes.CDLL(None, use_errno=True)
    data = ",".join(options).encode() or None
    if libc.mount(device.encode(), mountpoint.encode(), fstype.encode(), ctypes.c_ulong(0), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount -t {fstype} {device} {mountpoint}: {os.strerror(err)}")


def unmount_device(mountpoint: str) -> None:
    """umount2(2), falling back to :func:`unmount` (retries, then lazy) if it is busy."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(mountpoint.encode(), 0) != 0:
        unmount(mountpoint)


def attach_loop(image: str) -> str:
    """``losetup --find --show IMAGE`` (buffered I/O): the loop device now backing it."""
    return run_tool(["losetup", "--find", "--show", image], f"attaching {image} to a loop device").stdout.strip()


T = TypeVar("T")


def call_in_child(wait_s: float, action: Callable[..., T], *args: object) -> T | None:
    """``action(*args)`` in a forked child, its result (pickled back) or its exception
    re-raised here; None if it has not finished within ``wait_s`` seconds, when the child
    is killed (a child stuck in the kernel stays until the kernel lets go: it holds
    nothing of this process's)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here, whatever happens
        os.close(read_end)
        try:
            try:
                payload = pickle.dumps((True, action(*args)))
            except BaseException as exc:
                payload = pickle.dumps((False, exc))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as result:
        ready, _, _ = select.select([result], [], [], wait_s)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            _reap_within(pid, 1.0)
            return None
        data = result.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise OSError(f"the child running {getattr(action, '__name__', action)} died (wait status {status})")
    ok, value = pickle.loads(data)
    if not ok:
        raise value
    return value


def _reap_within(pid: int, wait_s: float) -> None:
    """Reap a killed child if it dies within ``wait_s`` (one stuck in the kernel may not)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return
        time.sleep(0.02)
