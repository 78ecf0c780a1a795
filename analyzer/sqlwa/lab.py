"""The lab: a fresh filesystem on a loop device for every run.

:class:`LabFilesystem` creates a sparse image file of its own, attaches it to a loop
device, runs mkfs on that loop device, mounts it on a directory of its own, optionally
fills it to a given percentage, and removes all of it again on exit, on an exception, and
on SIGINT / SIGTERM. ``tmpfs`` needs no image or loop device and is simply mounted.

Safety: the only device ever given to mkfs is the loop device this object attached,
after checking that the device's backing file is the very image file (same inode) it
created. No caller-supplied path is ever formatted; a mkfs option that names a device is
refused.

Naming: everything the lab creates is named ``sqlwa-lab-<pid>-<token>`` (a directory in
``workdir`` holding ``<name>.img`` and ``mnt/``), so :func:`cleanup_leftovers` can find
what a crashed run left behind, tell from the pid whether its owner is dead, and touch
nothing else.

Loop device and the page cache: the loop device is attached with direct I/O
(``losetup --direct-io=on``). The block tracepoints fire on the loop device's own request
queue, so what is counted is exactly what the filesystem sent to its "disk" either way;
direct I/O keeps the host's page cache out from *under* the loop device, so a cache
flush or a FUA write really waits for the host disk (request latencies are meaningful)
and the image is not cached twice in RAM. If the backing filesystem refuses direct I/O
the loop device falls back to buffered I/O and :meth:`LabFilesystem.describe` says so
(``loop_direct_io: false``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from sqlwa.errors import Interrupted, LabError, NeedsRoot, UnsupportedFilesystem, UsageError

LAB_PREFIX = "sqlwa-lab"
# <prefix>-<owner pid>-<random token>; the pid tells cleanup whether the owner is alive.
LAB_NAME_RE = re.compile(rf"^{LAB_PREFIX}-(\d+)-([0-9a-f]+)$")
LAB_IMAGE_RE = re.compile(rf"^{LAB_PREFIX}-(\d+)-([0-9a-f]+)\.img$")
FILL_DIR = "sqlwa-fill"
SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin")
DIR_HINT = "run with sudo, or use --dir PATH for a VFS-only run (no block or syscall level)"


@dataclass(frozen=True)
class FsSpec:
    """How to make one of the lab's filesystems."""

    name: str
    kernel_type: str
    mkfs_tool: str | None
    mkfs_args: tuple[str, ...]
    mount_opts: tuple[str, ...]


# ext4: inode tables and the journal are zeroed at mkfs time (lazy_*_init=0); otherwise
# the kernel's ext4lazyinit thread writes them in the background after mount and those
# writes would land in the measured trace. 4 KiB blocks always: mke2fs would pick 1 KiB
# for images under 512 MiB, which no phone or disk uses.
_EXT4_MKFS = ("-F", "-q", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0")
FILESYSTEMS: dict[str, FsSpec] = {
    "ext4": FsSpec("ext4", "ext4", "mkfs.ext4", _EXT4_MKFS, ("data=ordered",)),
    "ext4-journal": FsSpec("ext4-journal", "ext4", "mkfs.ext4", _EXT4_MKFS, ("data=journal",)),
    "ext4-writeback": FsSpec("ext4-writeback", "ext4", "mkfs.ext4", _EXT4_MKFS, ("data=writeback",)),
    "xfs": FsSpec("xfs", "xfs", "mkfs.xfs", ("-f", "-q"), ()),
    "btrfs": FsSpec("btrfs", "btrfs", "mkfs.btrfs", ("-f", "-q"), ()),
    "f2fs": FsSpec("f2fs", "f2fs", "mkfs.f2fs", ("-f", "-q"), ()),
    "tmpfs": FsSpec("tmpfs", "tmpfs", None, (), ()),
}


# --------------------------------------------------------------------------- signals


def interruption(signum: int) -> BaseException:
    """The exception a signal becomes: Ctrl-C stays KeyboardInterrupt (click turns it into
    "interrupted"), SIGTERM becomes :class:`Interrupted`."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return Interrupted(f"terminated by {signal.Signals(signum).name}")


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
        if not self._defer and not self.tearing_down and self._pending is not None:
            raise interruption(self.take_pending())  # type: ignore[arg-type]

    def _handle(self, signum: int, _frame: object) -> None:
        if self._defer or self.tearing_down:
            self._pending = self._pending or signum
            return
        raise interruption(signum)


# --------------------------------------------------------------------------- helpers


def parse_size(text: str | int) -> int:
    """``"1G"``, ``"512M"``, ``"1GiB"``, ``4096`` → bytes (binary units)."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise UsageError(f"image size {text!r} is not a size", "give e.g. 1G, 512M or a byte count")
    number, unit = int(match.group(1)), match.group(2).upper()
    return number * 1024 ** "_KMGT".index(unit) if unit else number


def find_tool(name: str) -> str | None:
    """``name`` on PATH or in the system sbin directories (non-root PATHs often lack them)."""
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(SYSTEM_BIN_DIRS)
    return shutil.which(name, path=path)


def run_tool(argv: Sequence[str], what: str, hint: str | None = None) -> subprocess.CompletedProcess:
    """Run a system tool in its own session, so a terminal Ctrl-C reaches only sqlwa, whose
    handler decides; subprocess.run kills the child if an exception unwinds the wait."""
    try:
        return subprocess.run(list(argv), check=True, capture_output=True, text=True, start_new_session=True)
    except FileNotFoundError as exc:
        raise LabError(f"{what}: {argv[0]} not found", hint or f"install the package providing {argv[0]}") from exc
    except subprocess.CalledProcessError as exc:
        detail = " ".join(line.strip() for line in (exc.stderr or exc.stdout or "").splitlines() if line.strip())
        reason = detail or f"exit code {exc.returncode}"
        raise LabError(f"{what} failed: {' '.join(argv)}: {reason}", hint) from exc


def is_root() -> bool:
    return os.geteuid() == 0


def kernel_filesystems() -> set[str]:
    with open("/proc/filesystems") as f:
        return {line.split()[-1] for line in f if line.strip()}


def pid_is_dead(pid: int) -> bool:
    """True if no live process has this pid (a zombie counts as dead: it will never
    clean up after itself)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _unescape_mount_field(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    fstype: str
    source: str
    options: str  # per-mount and superblock options, as the kernel shows them


def current_mounts() -> list[Mount]:
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
                    options=fields[5] + "," + (tail[2] if len(tail) > 2 else ""),
                )
            )
    return mounts


def mount_at(mountpoint: str) -> Mount | None:
    found = [m for m in current_mounts() if m.mountpoint == mountpoint]
    return found[-1] if found else None


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
        except (FileNotFoundError, OSError):
            continue  # not attached (no loop/ directory) or detached meanwhile
        backing = backing.removesuffix(" (deleted)")
        devices.append(LoopDevice(f"/dev/{sys_dir.name}", backing, int(major), int(minor), dio))
    return devices


def loops_backed_by(image: str) -> list[LoopDevice]:
    return [d for d in loop_devices() if d.backing_file == image]


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


# --------------------------------------------------------------------------- availability


@dataclass(frozen=True)
class Support:
    """Whether this machine can provide a lab filesystem, and if not why and how to fix it."""

    fs: str
    available: bool
    reason: str
    hint: str | None = None


def _kernel_support(kernel_type: str, fs: str) -> Support | None:
    if kernel_type in kernel_filesystems():
        return None
    modprobe = find_tool("modprobe")
    if modprobe and is_root():
        subprocess.run([modprobe, "-q", kernel_type], capture_output=True, start_new_session=True)
        if kernel_type in kernel_filesystems():
            return None
        tried = f"modprobe {kernel_type} failed"
    else:
        tried = "modprobe not available" if not modprobe else "modprobe needs root"
    return Support(
        fs,
        False,
        f"{fs}: the kernel has no {kernel_type} support (not in /proc/filesystems, {tried})",
        f"use another --fs, or load the {kernel_type} module / run on a kernel with "
        f"CONFIG_{kernel_type.upper()}_FS",
    )


def filesystem_support(fs: str) -> Support:
    """Can this machine provide ``fs``? Checks the kernel (with a modprobe attempt), the
    mkfs tool and losetup. Root is checked separately (:func:`require_root`)."""
    spec = FILESYSTEMS.get(fs)
    if spec is None:
        return Support(fs, False, f"{fs!r} is not a lab filesystem", f"choose one of: {', '.join(FILESYSTEMS)}")
    missing_kernel = _kernel_support(spec.kernel_type, fs)
    if missing_kernel:
        return missing_kernel
    for tool, package in ((spec.mkfs_tool, _package_of(spec)), ("losetup" if spec.mkfs_tool else None, "mount")):
        if tool and not find_tool(tool):
            return Support(fs, False, f"{fs}: {tool} is not installed", f"install it, e.g. apt-get install {package}")
    return Support(fs, True, f"{fs}: kernel support and {spec.mkfs_tool or 'mount'} present")


def _package_of(spec: FsSpec) -> str:
    return {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs", "f2fs": "f2fs-tools"}.get(
        spec.kernel_type, "util-linux"
    )


def require_root(what: str) -> None:
    if not is_root():
        raise NeedsRoot(f"{what} needs root (loop devices, mkfs and mount are root-only)", DIR_HINT)


def require_filesystem(fs: str) -> FsSpec:
    """The spec for ``fs`` if this machine can make it, else the error saying why not."""
    if fs not in FILESYSTEMS:
        raise UsageError(f"unknown filesystem {fs!r}", f"choose one of: {', '.join(FILESYSTEMS)}")
    support = filesystem_support(fs)
    if not support.available:
        raise UnsupportedFilesystem(support.reason, support.hint)
    require_root(f"--fs {fs}")
    return FILESYSTEMS[fs]


# --------------------------------------------------------------------------- options


def _refuse_device_tokens(opts: Iterable[str]) -> tuple[str, ...]:
    """mkfs takes its device as a positional argument, so a stray path among the options
    could become the device formatted. Refuse anything that names a device."""
    checked = []
    for token in opts:
        token = str(token)
        path = token.split("=", 1)[-1]
        if path.startswith("/dev/") or _is_device(path):
            raise LabError(
                f"refusing mkfs option {token!r}: it names a device; the lab only formats its own image",
                "pass only options in --mkfs-opts; the lab chooses the device",
            )
        checked.append(token)
    return tuple(checked)


def _is_device(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISBLK(mode) or stat.S_ISCHR(mode)


def _checked_mount_opts(opts: Iterable[str]) -> tuple[str, ...]:
    checked = tuple(o for opt in opts for o in str(opt).split(",") if o)
    for opt in checked:
        if any(c.isspace() for c in opt):
            raise UsageError(f"mount option {opt!r} contains whitespace", "separate mount options with commas")
    return checked


def _checked_workdir(workdir: str | os.PathLike | None) -> str:
    base = os.path.realpath(workdir if workdir is not None else tempfile.gettempdir())
    if _is_device(base):
        raise LabError(
            f"refusing {base}: it is a device; the lab never formats a given device or path, "
            "only an image file it creates itself",
            "give --workdir a directory (the image is created inside it), or leave it out",
        )
    if not os.path.isdir(base):
        raise LabError(f"lab workdir {base} is not a directory", "give an existing directory for the image file")
    return base


# --------------------------------------------------------------------------- the lab


class LabFilesystem:
    """A fresh filesystem for one run; use as a context manager.

    >>> with LabFilesystem("ext4-journal", image_size="1G", mount_opts=["noatime"]) as lab:
    ...     run_workload(lab.mountpoint, block_dev=lab.dev)

    Attributes after ``__enter__``: ``fs``, ``mountpoint``, ``loop_device`` (None for
    tmpfs), ``dev_major`` / ``dev_minor`` (the loop device; None for tmpfs) and ``dev``
    (the two as a tuple, what the capture traces; None for tmpfs), ``mkfs_cmd``
    (argv list or None), ``mount_opts`` (requested, including the lab's defaults),
    ``mount_options`` (what the kernel reports), ``fill`` (dict or None).
    ``progress`` is called with a stage name (image, loop, mkfs, mount, fill, ready) as
    setup proceeds — for a progress display, and for tests that interrupt setup.
    """

    def __init__(
        self,
        fs: str,
        image_size: str | int = "1G",
        mkfs_opts: Sequence[str] | str = (),
        mount_opts: Sequence[str] | str = (),
        fill_pct: float = 0,
        workdir: str | os.PathLike | None = None,
        direct_io: bool = True,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if fs not in FILESYSTEMS:
            raise UsageError(f"unknown filesystem {fs!r}", f"choose one of: {', '.join(FILESYSTEMS)}")
        if not 0 <= fill_pct < 100:
            raise UsageError(f"--fill {fill_pct}: must be between 0 and 99", "give a percentage such as 80")
        self.fs = fs
        self.spec = FILESYSTEMS[fs]
        self.image_size = parse_size(image_size)
        if isinstance(mkfs_opts, str):  # "-O fast_commit" as typed on the command line
            mkfs_opts = shlex.split(mkfs_opts)
        if isinstance(mount_opts, str):  # "noatime,barrier=0"
            mount_opts = [mount_opts]
        self.user_mkfs_opts = _refuse_device_tokens(mkfs_opts)
        self.mount_opts = self.spec.mount_opts + _checked_mount_opts(mount_opts)
        self.fill_pct = fill_pct
        self.workdir = _checked_workdir(workdir)
        self.direct_io = direct_io
        self._progress = progress or (lambda stage: None)
        self._guard = SignalGuard()
        self.name = f"{LAB_PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        self.lab_dir = os.path.join(self.workdir, self.name)
        self.image = os.path.join(self.lab_dir, self.name + ".img")
        self.mountpoint = os.path.join(self.lab_dir, "mnt")
        self.loop_device: str | None = None
        self.dev_major: int | None = None
        self.dev_minor: int | None = None
        self.loop_direct_io: bool | None = None
        self.mkfs_cmd: list[str] | None = None
        self.mkfs_version: str | None = None
        self.mount_options: str | None = None
        self.fill: dict | None = None
        self._image_identity: tuple[int, int] | None = None

    @property
    def dev(self) -> tuple[int, int] | None:
        """(major, minor) of the loop device, or None when there is none (tmpfs)."""
        return (self.dev_major, self.dev_minor) if self.loop_device else None  # type: ignore[return-value]

    # -- context manager

    def __enter__(self) -> "LabFilesystem":
        require_filesystem(self.fs)
        self._guard.set_up(self._setup, self._teardown)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        errors = self._teardown()
        if exc_type is not None:
            return  # the original exception propagates; teardown did its best
        self._guard.finish(errors, lambda message: LabError(
            f"cleaning up {self.name} failed: {message}",
            "run `sqlwa lab cleanup` once the run's process has exited",
        ))

    # -- setup

    def _setup(self) -> None:
        os.mkdir(self.lab_dir, 0o700)
        if self.spec.mkfs_tool is None:
            os.mkdir(self.mountpoint, 0o700)
            self._mount_tmpfs()
        else:
            self._create_image()
            self._attach_loop()
            self._mkfs()
            os.mkdir(self.mountpoint, 0o700)
            self._mount_loop()
        self.mount_options = mount_at(self.mountpoint).options  # type: ignore[union-attr]
        if self.fill_pct:
            self._progress("fill")
            self.fill = fill_filesystem(self.mountpoint, self.fill_pct)
        self._progress("ready")

    def _create_image(self) -> None:
        self._progress("image")
        fd = os.open(self.image, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.image_size)  # sparse: costs no space until written
            st = os.fstat(fd)
            self._image_identity = (st.st_dev, st.st_ino)
        finally:
            os.close(fd)

    def _attach_loop(self) -> None:
        self._progress("loop")
        argv = ["losetup", "--find", "--show", f"--direct-io={'on' if self.direct_io else 'off'}", self.image]
        with self._guard.critical():
            out = run_tool(argv, "attaching the image to a loop device", "check that loop devices are available").stdout
        device = out.strip().splitlines()[-1] if out.strip() else ""
        loop = next((d for d in loops_backed_by(self.image) if d.device == device), None)
        if loop is None:
            raise LabError(f"losetup reported {device!r}, which is not backed by {self.image}")
        self.loop_device, self.dev_major, self.dev_minor = loop.device, loop.major, loop.minor
        self.loop_direct_io = loop.direct_io

    def _assert_loop_is_ours(self) -> None:
        """The last check before mkfs: the device is a loop device whose backing file is
        the image this object created (same inode), nothing else."""
        device = self.loop_device or ""
        sys_dir = Path("/sys/block") / os.path.basename(device)
        ok = re.fullmatch(r"/dev/loop\d+", device) is not None
        try:
            backing = (sys_dir / "loop" / "backing_file").read_text().rstrip("\n").removesuffix(" (deleted)")
            st = os.stat(backing)
        except OSError:  # not a loop device, or not attached
            ok = False
        else:
            ok = ok and backing == self.image and (st.st_dev, st.st_ino) == self._image_identity
        if not ok:
            raise LabError(f"refusing to format {device!r}: it is not the loop device of {self.image}")

    def _mkfs(self) -> None:
        self._progress("mkfs")
        self._assert_loop_is_ours()
        tool = find_tool(self.spec.mkfs_tool) or self.spec.mkfs_tool  # type: ignore[arg-type]
        self.mkfs_cmd = [tool, *self.spec.mkfs_args, *self.user_mkfs_opts, self.loop_device]  # type: ignore[list-item]
        self.mkfs_version = _tool_version(tool)
        run_tool(self.mkfs_cmd, f"mkfs for {self.fs}", "check --mkfs-opts (and --image-size: xfs needs >= 300M)")

    def _mount_loop(self) -> None:
        self._progress("mount")
        argv = ["mount", "-t", self.spec.kernel_type]
        if self.mount_opts:
            argv += ["-o", ",".join(self.mount_opts)]
        with self._guard.critical():
            run_tool(argv + [self.loop_device, self.mountpoint], f"mounting {self.fs}", "check --mount-opts")  # type: ignore[list-item]

    def _mount_tmpfs(self) -> None:
        self._progress("mount")
        opts = (f"size={self.image_size}", *self.mount_opts)
        # The source name carries the lab name, so cleanup can recognise the mount.
        argv = ["mount", "-t", "tmpfs", "-o", ",".join(opts), self.name, self.mountpoint]
        with self._guard.critical():
            run_tool(argv, "mounting tmpfs", "check --mount-opts")

    # -- teardown

    def _teardown(self) -> list[Exception]:
        """Remove whatever exists of this lab, found by its names (not by what setup got
        to record), so a setup interrupted at any point is fully undone."""
        self._guard.tearing_down = True
        errors: list[Exception] = []
        for step in (self._unmount, self._detach_loops, self._remove_files):
            try:
                step()
            except Exception as exc:  # keep going: later steps still free what they can
                errors.append(exc)
        self._guard.restore()
        return errors

    def _unmount(self) -> None:
        if mount_at(self.mountpoint) is not None:
            unmount(self.mountpoint)

    def _detach_loops(self) -> None:
        for loop in loops_backed_by(self.image):
            detach_loop(loop.device)

    def _remove_files(self) -> None:
        remove_lab_dir(self.lab_dir)

    # -- reporting

    def describe(self) -> dict:
        """What summary.json records about the filesystem the run measured."""
        return {
            "fs": self.fs,
            "fs_type": self.spec.kernel_type,
            "image_size": self.image_size if self.spec.mkfs_tool else None,
            "tmpfs_size": self.image_size if not self.spec.mkfs_tool else None,
            "loop_device": self.loop_device,
            "dev": f"{self.dev_major}:{self.dev_minor}" if self.dev else None,
            "loop_direct_io": self.loop_direct_io,
            "mkfs_cmd": self.mkfs_cmd,
            "mkfs_version": self.mkfs_version,
            "mount_opts": list(self.mount_opts),
            "mount_options": self.mount_options,
            "mountpoint": self.mountpoint,
            "fill": self.fill,
            "kernel": os.uname().release,
        }


def _tool_version(tool: str) -> str | None:
    for flag in ("-V", "--version"):
        try:
            proc = subprocess.run([tool, flag], capture_output=True, text=True, timeout=10, start_new_session=True)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 0 and text:
            return text.splitlines()[0]
    return None


# --------------------------------------------------------------------------- removal


def unmount(mountpoint: str) -> None:
    """umount, retrying briefly (udev or a just-closed file can hold it a moment); a lazy
    unmount is the last resort so the loop device can still be released."""
    for attempt in range(5):
        proc = subprocess.run(["umount", mountpoint], capture_output=True, text=True, start_new_session=True)
        if proc.returncode == 0 or mount_at(mountpoint) is None:
            return
        time.sleep(0.1 * (attempt + 1))
    subprocess.run(["umount", "-l", mountpoint], capture_output=True, start_new_session=True)
    if mount_at(mountpoint) is not None:
        raise LabError(f"could not unmount {mountpoint}: {proc.stderr.strip()}")


def detach_loop(device: str) -> None:
    """losetup -d, then wait until sysfs shows the device free (detach is asynchronous
    when something still holds the device: the kernel then auto-clears it on last close)."""
    subprocess.run(["losetup", "-d", device], capture_output=True, start_new_session=True)
    backing = Path("/sys/block") / os.path.basename(device) / "loop" / "backing_file"
    for _ in range(50):
        if not backing.exists():
            return
        time.sleep(0.05)
    raise LabError(f"loop device {device} is still attached after losetup -d (something holds it open)")


def remove_lab_dir(lab_dir: str) -> None:
    """Delete the image and the empty mount directory, then the lab directory. Only our own
    names, never recursively: if mnt/ is still a mount or not empty, rmdir fails and
    nothing inside it is touched."""
    if not os.path.isdir(lab_dir):
        return
    name = os.path.basename(lab_dir)
    image = os.path.join(lab_dir, name + ".img")
    if os.path.lexists(image):
        os.unlink(image)
    mnt = os.path.join(lab_dir, "mnt")
    if os.path.isdir(mnt) and mount_at(mnt) is None:
        os.rmdir(mnt)
    os.rmdir(lab_dir)


# --------------------------------------------------------------------------- fill


def fill_filesystem(mountpoint: str, pct: float, seed: int = 0) -> dict:
    """Fill ``mountpoint`` to ``pct`` percent used (as df counts it) with files of mixed
    sizes (4 KiB .. 16 MiB, log-uniform) in ``sqlwa-fill/``, then sync. Stops early on
    ENOSPC. Returns the target, the achieved percentage (after sync) and what was written.

    Some filesystems (btrfs) account written data in statvfs only after writeback, so the
    level is estimated as max(statvfs, level at the last sync + bytes written since) and
    the filesystem is synced every 32 MiB; that keeps the fill from overshooting.
    """
    fill_dir = os.path.join(mountpoint, FILL_DIR)
    os.makedirs(fill_dir, exist_ok=True)
    rng = random.Random(seed)
    chunk = os.urandom(1 << 20)  # incompressible, so btrfs compression cannot shrink it
    files = written = 0
    target = pct / 100
    for _round in range(64):
        syncfs(mountpoint)
        level = _FillLevel(mountpoint)
        if level.fraction() >= target:
            break
        while level.fraction() < target and level.pending < 32 << 20:
            size = _fill_file_size(rng, level.missing_bytes(target))
            try:
                _write_file(os.path.join(fill_dir, f"f{files:06d}"), size, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                syncfs(mountpoint)
                return _fill_report(mountpoint, pct, files, written)
            files += 1
            written += size
            level.pending += size
    syncfs(mountpoint)
    return _fill_report(mountpoint, pct, files, written)


def _fill_report(mountpoint: str, pct: float, files: int, written: int) -> dict:
    return {
        "target_pct": pct,
        "achieved_pct": round(100 * used_fraction(mountpoint), 2),
        "files": files,
        "bytes": written,
    }


class _FillLevel:
    """How full the filesystem is, counting data written since the last sync."""

    def __init__(self, mountpoint: str) -> None:
        self.mountpoint = mountpoint
        st = os.statvfs(mountpoint)
        self.block = st.f_frsize
        self.capacity = (st.f_blocks - st.f_bfree + st.f_bavail) * st.f_frsize
        self.synced_used = (st.f_blocks - st.f_bfree) * st.f_frsize
        self.pending = 0

    def used(self) -> int:
        st = os.statvfs(self.mountpoint)
        return max((st.f_blocks - st.f_bfree) * st.f_frsize, self.synced_used + self.pending)

    def fraction(self) -> float:
        return self.used() / max(1, self.capacity)

    def missing_bytes(self, target: float) -> int:
        return int(target * self.capacity) - self.used()


def _fill_file_size(rng: random.Random, missing: int) -> int:
    size = int(2 ** rng.uniform(12, 24))  # 4 KiB .. 16 MiB
    size = max(4096, min(size, missing))
    return (size + 4095) // 4096 * 4096


def _write_file(path: str, size: int, chunk: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = size
        while left:
            n = os.write(fd, chunk[: min(left, len(chunk))])
            left -= n
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- leftovers


def _owner_pid(name: str) -> int | None:
    match = LAB_NAME_RE.match(name) or LAB_IMAGE_RE.match(name)
    return int(match.group(1)) if match else None


def _lab_dir_of(path: str) -> str | None:
    """The ``sqlwa-lab-<pid>-<token>`` directory ``path`` lies in, if any."""
    for part in (Path(path), *Path(path).parents):
        if LAB_NAME_RE.match(part.name):
            return str(part)
    return None


def cleanup_leftovers(workdirs: Iterable[str] = ()) -> list[str]:
    """Remove what crashed runs left behind, found by the lab's own naming only, and only
    where the owning process (the pid in the name) is dead: mounts of sqlwa loop devices or
    under sqlwa lab directories, loop devices backed by sqlwa images, sqlwa tracefs
    instances, and lab directories in ``workdirs`` and the temp dir. Returns one line per
    thing removed; nothing else is ever touched."""
    require_root("sqlwa lab cleanup")
    removed: list[str] = []
    dead_loops = [d for d in loop_devices() if _dead_owner(os.path.basename(d.backing_file))]
    dead_devices = {d.device for d in dead_loops}
    lab_dirs = {os.path.dirname(d.backing_file) for d in dead_loops}
    for mount in reversed(current_mounts()):  # innermost first
        lab_dir = _lab_dir_of(mount.mountpoint)
        if mount.source in dead_devices or (lab_dir and _dead_owner(os.path.basename(lab_dir))):
            _attempt(removed, f"unmounted {mount.mountpoint} ({mount.fstype} on {mount.source})", unmount, mount.mountpoint)
            if lab_dir:
                lab_dirs.add(lab_dir)
    for loop in dead_loops:
        _attempt(removed, f"detached {loop.device} (backing file {loop.backing_file})", detach_loop, loop.device)
    for base in {os.path.realpath(d) for d in (*workdirs, tempfile.gettempdir())}:
        if os.path.isdir(base):
            lab_dirs.update(str(p) for p in Path(base).iterdir() if _dead_owner(p.name) and p.is_dir())
    for lab_dir in sorted(lab_dirs):
        if LAB_NAME_RE.match(os.path.basename(lab_dir)) and os.path.isdir(lab_dir):
            _attempt(removed, f"removed {lab_dir}", remove_lab_dir, lab_dir)
    from sqlwa.capture import remove_dead_instances  # capture imports this module

    removed += remove_dead_instances()
    return removed


def _dead_owner(name: str) -> bool:
    pid = _owner_pid(name)
    return pid is not None and pid_is_dead(pid)


def _attempt(report: list[str], done: str, action: Callable[[str], None], target: str) -> None:
    """Run one removal; a failure is reported and does not stop the others."""
    try:
        action(target)
    except (LabError, OSError) as exc:
        report.append(f"failed to clean up {target}: {exc}")
        return
    report.append(done)
