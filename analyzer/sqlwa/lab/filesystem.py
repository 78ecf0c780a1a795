"""The lab: a fresh filesystem on a loop device for every run.

:class:`LabFilesystem` creates a sparse image file of its own, attaches it to a loop
device, runs mkfs on that loop device, mounts it on a directory of its own, optionally
fills it to a given percentage, and removes all of it again on exit, on an exception, and
on SIGINT / SIGTERM. ``tmpfs`` needs no image or loop device and is simply mounted.

Safety: the only device ever given to mkfs (or to cryptsetup, with ``--crypt``) is the
loop device this object attached, after checking that the device's backing file is the
very image file (same inode) it created; with ``--crypt`` mkfs gets the dm-crypt target
of the lab's own name, checked to sit on that loop device alone. No caller-supplied path
is ever formatted: mkfs options come from an allow-list and no mkfs or mount option may
name a path or device (:mod:`sqlwa.lab.options`). The image must fit into the free
space of the directory it is made in, with a margin, and be at least what the
filesystem's mkfs needs (:func:`check_image_size`). All of this is checked when the
object is made, before anything exists.

Naming: everything the lab creates is named ``sqlwa-lab-<pid>-<token>`` (a directory in
``workdir`` holding ``<name>.img`` and ``mnt/``), so :func:`cleanup_leftovers` can find
what a crashed run left behind and touch nothing else. The directory carries sqlwa's
mark (:data:`LAB_MARK`), written as it is made: a directory merely named like a lab (a
user's own) is never cleaned up. The owner holds an flock on the lab directory while it
lives; cleanup needs the mark, the pid dead and the lock free
(:func:`sqlwa._system.ownership.owner_is_gone`), which also holds across PID namespaces.

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

import os
import re
import secrets
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlwa import _system
from sqlwa.errors import LabError, NeedsRoot, ToolError, UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import devmapper, ecryptfs, fuse
from sqlwa.lab import layers as layer_kinds
from sqlwa.lab.encryption import Encryption
from sqlwa.lab.layer import BlockLayer, DirectoryLayer, Ground, L, Layer, Site, Step
from sqlwa.lab.layers import EcryptfsStack, FillLayer, FscryptLayer, FuseDaemonLayer, LogWritesLayer
from sqlwa.lab.options import checked_mkfs_opts, checked_mount_opts, is_device

LAB_PREFIX = "sqlwa-lab"
# <prefix>-<owner pid>-<random token>; the pid tells cleanup whether the owner is alive.
LAB_NAME_RE = re.compile(rf"^{LAB_PREFIX}-(\d+)-([0-9a-f]+)$")
# the lab's image, and a crash run's write log beside it (LOG_SUFFIX)
LAB_IMAGE_RE = re.compile(rf"^{LAB_PREFIX}-(\d+)-([0-9a-f]+)(\.img|\.writes\.log)$")
# a lab's device-mapper targets: dm-crypt named like the lab, log-writes with "-log"
LAB_TARGET_RE = re.compile(rf"^{LAB_PREFIX}-(\d+)-([0-9a-f]+)(-log)?$")
#: In every lab directory, written as it is made: what `lab cleanup` removes must carry it.
LAB_MARK = ".sqlwa-lab"
LAB_MARK_TEXT = "sqlwa lab directory, removed by its run or `sqlwa lab cleanup`\n"
DIR_HINT = "run with sudo, or use --dir PATH for a VFS-only run (no block or syscall level)"


@dataclass(frozen=True)
class FsSpec:
    """How to make one of the lab's filesystems."""

    name: str
    kernel_type: str
    mkfs_tool: str | None
    mkfs_args: tuple[str, ...]
    mount_opts: tuple[str, ...]
    min_size: int = 1 << 20  # the smallest --image-size that makes a usable filesystem ...
    min_reason: str = "a smaller one holds no useful database"  # ... and why
    stacked: str | None = None  # a filesystem stacked on this one, where the workload runs (ecryptfs)


# ext4: inode tables and the journal are zeroed at mkfs time (lazy_*_init=0); otherwise
# the kernel's ext4lazyinit thread writes them in the background after mount and those
# writes would land in the measured trace. 4 KiB blocks always: mke2fs would pick 1 KiB
# for images under 512 MiB, which no phone or disk uses.
_EXT4_MKFS = ("-F", "-q", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0")
# The smallest images each mkfs makes a usable filesystem on with the lab's options
# (measured with e2fsprogs 1.47, xfsprogs 6.1, btrfs-progs 6.2, f2fs-tools 1.15).
_EXT4_MIN = 8 << 20, "below that mke2fs makes no journal with 4 KiB blocks"
FILESYSTEMS: dict[str, FsSpec] = {
    "ext4": FsSpec("ext4", "ext4", "mkfs.ext4", _EXT4_MKFS, ("data=ordered",), *_EXT4_MIN),
    "ext4-journal": FsSpec("ext4-journal", "ext4", "mkfs.ext4", _EXT4_MKFS, ("data=journal",), *_EXT4_MIN),
    "ext4-writeback": FsSpec("ext4-writeback", "ext4", "mkfs.ext4", _EXT4_MKFS, ("data=writeback",), *_EXT4_MIN),
    "xfs": FsSpec("xfs", "xfs", "mkfs.xfs", ("-f", "-q"), (), 300 << 20, "mkfs.xfs: 'must be larger than 300MB'"),
    "btrfs": FsSpec(
        "btrfs", "btrfs", "mkfs.btrfs", ("-f", "-q"), (), 109 << 20, "mkfs.btrfs: 'minimum size ... 114294784'"
    ),
    "f2fs": FsSpec("f2fs", "f2fs", "mkfs.f2fs", ("-f", "-q"), (), 52 << 20, "below that mkfs.f2fs makes no superblock"),
    # eCryptfs over a fresh ext4 (data=ordered): lab.ecryptfs
    "ecryptfs": FsSpec("ecryptfs", "ext4", "mkfs.ext4", _EXT4_MKFS, ("data=ordered",), *_EXT4_MIN, stacked="ecryptfs"),
    "tmpfs": FsSpec("tmpfs", "tmpfs", None, (), ()),
}

# --------------------------------------------------------------------------- helpers


def parse_size(text: str | int) -> int:
    """``"1G"``, ``"512M"``, ``"1GiB"``, ``4096`` → bytes (binary units)."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise UsageError(f"--image-size {text!r} is not a size", "give e.g. 1G, 512M or a byte count")
    number, unit = int(match.group(1)), match.group(2).upper()
    return number * 1024 ** "_KMGT".index(unit) if unit else number


def format_size(size: int) -> str:
    """Bytes as --image-size writes them: 300M, 1.5G, 74.2G."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f}".removesuffix(".0") + unit
    return str(size)


def free_space_margin(total: int) -> int:
    """What must stay free beside a lab image (or tmpfs) on a filesystem (or in RAM) of
    ``total`` bytes: 1 GiB, or 5 % of it where that is less."""
    return min(1 << 30, total // 20)


def check_image_size(fs: str, size: int, workdir: str, given: str | None = None) -> None:
    """Refuse an image (or tmpfs) size that cannot work, before anything is made: 0, less
    than the filesystem's mkfs needs, or more than the free space of ``workdir``'s
    filesystem (for tmpfs: available memory) less :func:`free_space_margin`. The image is
    sparse, but mkfs, --fill and the workload may write all of it."""
    spec = FILESYSTEMS[fs]
    what = f"--image-size {given if given is not None else size}"
    if size <= 0:
        unlimited = " (a tmpfs of size 0 would be unlimited)" if spec.mkfs_tool is None else ""
        raise UsageError(f"{what}: a lab filesystem needs a size{unlimited}", "give e.g. --image-size 1G")
    if size < spec.min_size:
        raise UsageError(
            f"{what}: {fs} needs at least {format_size(spec.min_size)} ({spec.min_reason})",
            f"give --image-size {format_size(spec.min_size)} or more",
        )
    if spec.mkfs_tool is None:
        (free, total), where = _system.mounts.memory_available(), "memory (a tmpfs lives in RAM) has {} available"
        fix = "give a smaller --image-size"
    else:
        (free, total), where = _system.mounts.free_space(workdir), f"{workdir} has {{}} free"
        fix = "give a smaller --image-size, or set TMPDIR to a directory on a larger filesystem"
    margin = free_space_margin(total)
    if size > free - margin:
        raise UsageError(
            f"{what} does not fit: {where.format(format_size(free))}, and {format_size(margin)} of it "
            "must stay free (1 GiB, or 5 % of the total if less)",
            fix,
        )


# --------------------------------------------------------------------------- availability


@dataclass(frozen=True)
class Support:
    """Whether this machine can provide a lab filesystem, and if not why and how to fix it."""

    fs: str
    available: bool
    reason: str
    hint: str | None = None
    fix: str | None = None  # the one command that adds what is missing (sqlwa doctor)


def _kernel_support(kernel_type: str, fs: str) -> Support | None:
    if kernel_type in _system.mounts.kernel_filesystems():
        return None
    modprobe = _system.tools.find_tool("modprobe")
    if modprobe and _system.processes.is_root():
        _system.tools.try_tool([modprobe, "-q", kernel_type])
        if kernel_type in _system.mounts.kernel_filesystems():
            return None
        tried = f"modprobe {kernel_type} failed"
    else:
        tried = "modprobe not available" if not modprobe else "modprobe needs root"
    return Support(
        fs,
        False,
        f"{fs}: the kernel has no {kernel_type} support (not in /proc/filesystems, {tried})",
        # The VM lab boots Debian's kernel, which has every lab filesystem as a module,
        # and uses this host's mkfs tools: --vm is the fix for a kernel without one.
        f"add --vm (Debian's kernel has {kernel_type}), or load the {kernel_type} module / "
        f"run on a kernel with CONFIG_{kernel_type.upper()}_FS",
        f"sudo modprobe {kernel_type}   (or sqlwa run --vm --fs {fs}: Debian's kernel has it)",
    )


def filesystem_support(fs: str) -> Support:
    """Can this machine provide ``fs``? Checks the kernel (with a modprobe attempt), the
    mkfs tool and losetup. Root is checked separately (:func:`require_root`)."""
    spec = FILESYSTEMS.get(fs)
    if spec is None:
        return Support(fs, False, f"{fs!r} is not a lab filesystem", f"choose one of: {', '.join(FILESYSTEMS)}")
    missing_kernel = _kernel_support(spec.kernel_type, fs) or _stacked_support(spec)
    if missing_kernel:
        return missing_kernel
    for tool, package in ((spec.mkfs_tool, _package_of(spec)), ("losetup" if spec.mkfs_tool else None, "mount")):
        if tool and not _system.tools.find_tool(tool):
            return Support(
                fs,
                False,
                f"{fs}: {tool} is not installed",
                f"install it, e.g. apt-get install {package}",
                f"sudo apt-get install {package}",
            )
    return Support(fs, True, f"{fs}: kernel support and {spec.mkfs_tool or 'mount'} present")


def _stacked_support(spec: FsSpec) -> Support | None:
    if spec.stacked is None:
        return None
    try:
        ecryptfs.check_ecryptfs()
    except UnsupportedFilesystem as exc:
        return Support(spec.name, False, str(exc), hint_of(exc), f"sqlwa run --vm --fs {spec.name}")
    return None


def _package_of(spec: FsSpec) -> str:
    return {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs", "f2fs": "f2fs-tools"}.get(
        spec.kernel_type, "util-linux"
    )


def require_root(what: str) -> None:
    if not _system.processes.is_root():
        raise NeedsRoot(f"{what} needs root (loop devices, mkfs and mount are root-only)", DIR_HINT)


def require_lab_host(fs: str) -> None:
    """The one rule for every command asked by name for lab filesystems ``fs`` (``--fs``
    on this host, not ``--vm``): refused without root, as the run would fail later."""
    if not _system.processes.is_root():
        raise NeedsRoot(
            f"--fs {fs} needs root (loop devices, mkfs, mount and tracefs are root-only)",
            "run with sudo, or add --vm (the VM lab needs no root); without --fs, run and matrix measure the VFS level",
        )


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


def mkfs_argv(fs: str, user_opts: Sequence[str], device: str) -> list[str]:
    """The mkfs command for ``fs`` on ``device``: the lab's options, then the user's
    (checked by :func:`~sqlwa.lab.options.checked_mkfs_opts`), the device last."""
    spec = FILESYSTEMS[fs]
    assert spec.mkfs_tool is not None, f"{fs} has no mkfs"
    tool = _system.tools.find_tool(spec.mkfs_tool) or spec.mkfs_tool
    return [tool, *spec.mkfs_args, *user_opts, device]


def _checked_workdir(workdir: str | os.PathLike | None) -> str:
    base = os.path.realpath(workdir if workdir is not None else tempfile.gettempdir())
    if is_device(base):
        raise LabError(
            f"refusing {base}: it is a device; the lab never formats a given device or path, "
            "only an image file it creates itself",
            "give --workdir a directory (the image is created inside it), or leave it out",
        )
    if not os.path.isdir(base):
        raise LabError(f"lab workdir {base} is not a directory", "give an existing directory for the image file")
    return base


# --------------------------------------------------------------------------- the lab


@dataclass(frozen=True)
class LabOptions:
    """How a lab's filesystem is made and kept, apart from its layers."""

    image_size: str | int = "1G"
    mkfs_opts: Sequence[str] | str = ()
    mount_opts: Sequence[str] | str = ()
    workdir: str | os.PathLike | None = None
    direct_io: bool = True
    keep_image: str | os.PathLike | None = None  # a test's look at what reached the disk: the image is copied here


class LabFilesystem:
    """A fresh filesystem for one run; use as a context manager, which hands out the
    mounted lab (:class:`MountedLab`, whose facts are all set):

    >>> with LabFilesystem("ext4", LabOptions(image_size="1G", mount_opts=["noatime"])) as lab:
    ...     run_workload(lab.data_dir, block_dev=lab.dev)

    ``layers`` (:mod:`sqlwa.lab.layer`, in :data:`sqlwa.lab.layers.KINDS`'s order, as
    :func:`sqlwa.lab.layers.asked` gives them) are checked here, set up in their order
    (block layers over the loop device before mkfs, directory layers over the mount)
    and torn down in reverse. Attributes from the start: ``fs``, ``spec``, ``name``,
    ``mountpoint``, ``mount_opts`` (requested, including the lab's defaults), ``layers``;
    ``fuse``, ``ecryptfs``, ``encryption`` and ``log_writes`` are those layers' objects,
    or None. ``progress`` is called with a stage name (image, loop, each block layer's,
    mkfs, mount, each directory layer's, ready) as setup proceeds — for a progress
    display, and for tests that interrupt setup.
    """

    def __init__(
        self,
        fs: str,
        options: LabOptions = LabOptions(),
        layers: Sequence[Layer] = (),
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if fs not in FILESYSTEMS:
            raise UsageError(f"unknown filesystem {fs!r}", f"choose one of: {', '.join(FILESYSTEMS)}")
        self.fs = fs
        self.spec = FILESYSTEMS[fs]
        # Everything the caller chose is checked here, before anything is made.
        self.user_mkfs_opts = checked_mkfs_opts(fs, self.spec.mkfs_tool, options.mkfs_opts)
        self.mount_opts = self.spec.mount_opts + checked_mount_opts(fs, options.mount_opts)
        self.workdir = _checked_workdir(options.workdir)
        self.image_size = parse_size(options.image_size)
        check_image_size(fs, self.image_size, self.workdir, str(options.image_size))
        self.layers = tuple(layers)
        ground = Ground(fs, self.spec.kernel_type, self.spec.mkfs_tool is not None, self.spec.stacked)
        for layer in self.layers:
            layer.check(ground, self.layers)
        if self.spec.stacked and all(layer.key != self.spec.stacked for layer in self.layers):
            raise LabError(f"--fs {fs} is {self.spec.stacked} over {self.spec.kernel_type}: give its layer")
        self._block = [layer for layer in self.layers if isinstance(layer, BlockLayer)]
        self._over = [layer for layer in self.layers if isinstance(layer, DirectoryLayer)]
        self.direct_io = options.direct_io
        self.keep_image = options.keep_image
        self._progress = progress or (lambda stage: None)
        self._guard = _system.signals.SignalGuard()
        token = secrets.token_hex(4)
        self.name = f"{LAB_PREFIX}-{os.getpid()}-{token}"
        self.lab_dir = os.path.join(self.workdir, self.name)
        self.image = os.path.join(self.lab_dir, self.name + ".img")
        self.mountpoint = os.path.join(self.lab_dir, "mnt")
        self.log_image = os.path.join(self.lab_dir, self.name + LOG_SUFFIX)
        site = Site(self.name, token, self.lab_dir, self.mountpoint, self.image_size, self.log_image)
        for layer in self.layers:
            layer.bind(site)
        # where the workload runs: the encrypted directory with --encrypt, the FUSE mount with --fuse
        self.data_dir = self.mountpoint
        # what set-up makes, in its order; the mounted lab hands it out (__enter__)
        self._disk: LoopDisk | None = None
        self._made_fs: Mkfs | None = None
        self._mounted: MountedLab | None = None
        self._image_identity: tuple[int, int] | None = None
        self._ownership: int | None = None

    def layer(self, kind: type[L]) -> L | None:
        """This lab's layer of ``kind``, or None."""
        return next((layer for layer in self.layers if isinstance(layer, kind)), None)

    @property
    def fuse(self) -> fuse.FuseLayer | None:
        found = self.layer(FuseDaemonLayer)
        return found.daemon if found else None

    @property
    def ecryptfs(self) -> ecryptfs.EcryptfsLayer | None:
        found = self.layer(EcryptfsStack)
        return found.mount if found else None

    @property
    def encryption(self) -> Encryption | None:
        found = self.layer(FscryptLayer)
        return found.encryption if found else None

    @property
    def log_writes(self) -> devmapper.LogWrites | None:
        found = self.layer(LogWritesLayer)
        return found.target if found else None

    @property
    def write_log(self) -> str | os.PathLike | None:
        """Where a crash run's write log is moved when the lab comes down (None: no log)."""
        found = self.layer(LogWritesLayer)
        return found.write_log if found else None

    def fs_device(self, disk: LoopDisk) -> str:
        """The device the filesystem is on: the top block layer's (a crash run's
        log-writes, dm-crypt or dm-delay), else the loop device ``disk``."""
        return self._block[-1].path if self._block else disk.device

    def _loop(self) -> LoopDisk:
        """The loop device, once set-up has attached it."""
        if self._disk is None:
            raise LabError(f"{self.name} has no loop device attached")
        return self._disk

    @property
    def mapped_dev(self) -> tuple[int, int] | None:
        """(major, minor) of the device-mapper target the filesystem is on (a crash run's
        log-writes, dm-crypt or dm-delay), None without one."""
        return self._block[-1].dev if self._block else None

    def mappable_path(self, path: str) -> str:
        """Where ``path`` (in :attr:`data_dir`) has blocks FIEMAP can map, through the
        layers top down: its lower file under eCryptfs, which has no FIEMAP of its own."""
        for layer in reversed(self._over):
            path = layer.mappable(path)
        return path

    # -- context manager

    def __enter__(self) -> MountedLab:
        require_filesystem(self.fs)
        self._guard.set_up(self._setup, self._teardown)
        if self._mounted is None:
            raise LabError(f"setting up {self.name} ended before the lab was ready")
        return self._mounted

    def __exit__(self, exc_type, exc, tb) -> None:
        errors = self._teardown()
        if exc_type is not None:
            return  # the original exception propagates; teardown did its best
        self._guard.finish(
            errors,
            lambda message: LabError(
                f"cleaning up {self.name} failed: {message}",
                "run `sqlwa lab cleanup` once the run's process has exited",
            ),
        )

    # -- setup

    def _setup(self) -> None:
        os.mkdir(self.lab_dir, 0o700)
        self._ownership = _system.ownership.hold_ownership(self.lab_dir)
        _system.ownership.write_mark(self.lab_dir, LAB_MARK, LAB_MARK_TEXT)
        if self.spec.mkfs_tool is None:
            os.mkdir(self.mountpoint, 0o700)
            self._mount_tmpfs()
        else:
            self._create_image()
            self._attach_loop()
            self._open_block_layers()
            self._mkfs()
            os.mkdir(self.mountpoint, 0o700)
            self._mount_loop()
            for block in self._block:
                block.mounted()
        mount_options = _system.mounts.options_at(self.mountpoint)
        for layer in self._over:
            self._progress(layer.stage)
            self.data_dir = layer.open(self.mountpoint, self.data_dir, self._guard.critical)
        fill = self.layer(FillLayer)
        self._mounted = MountedLab(
            self, self._disk, self._made_fs, mount_options, self.data_dir, fill.report if fill else None
        )
        self._progress("ready")

    def _create_image(self) -> None:
        self._progress("image")
        fd = os.open(self.image, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.ftruncate(fd, self.image_size)  # sparse: costs no space until written
            except (OSError, OverflowError) as exc:  # EFBIG: beyond the host's largest file
                reason = exc.strerror if isinstance(exc, OSError) else "too large for this system"
                raise LabError(
                    f"creating the image ({format_size(self.image_size)}) in {self.workdir} failed: {reason}",
                    "give a smaller --image-size",
                ) from None
            st = os.fstat(fd)
            self._image_identity = (st.st_dev, st.st_ino)
        finally:
            os.close(fd)

    def _attach_loop(self) -> None:
        self._progress("loop")
        with self._guard.critical():
            try:
                out = self._losetup(self.direct_io)
            except ToolError as exc:
                # Kernels before 6.6 refuse a direct-I/O loop device over tmpfs (EINVAL from
                # LOOP_CONFIGURE) where losetup cannot fall back by itself: attach buffered.
                if not (self.direct_io and "Invalid argument" in exc.stderr):
                    raise
                out = self._losetup(direct_io=False)
        device = out.strip().splitlines()[-1] if out.strip() else ""
        loop = next((d for d in _system.loops.loops_backed_by(self.image) if d.device == device), None)
        if loop is None:
            raise LabError(f"losetup reported {device!r}, which is not backed by {self.image}")
        self._disk = LoopDisk(loop.device, loop.major, loop.minor, loop.direct_io)

    def _losetup(self, direct_io: bool) -> str:
        argv = ["losetup", "--find", "--show", f"--direct-io={'on' if direct_io else 'off'}", self.image]
        return _system.tools.run_tool(
            argv, "attaching the image to a loop device", "check that loop devices are available"
        ).stdout

    def _assert_loop_is_ours(self, device: str) -> None:
        """The last check before mkfs: ``device`` is a loop device whose backing file is
        the image this object created (same inode), nothing else."""
        ok = re.fullmatch(r"/dev/loop\d+", device) is not None
        backing = _system.loops.loop_backing_file(device) if ok else None
        try:
            st = os.stat(backing) if backing else None
        except OSError:
            st = None
        ok = st is not None and backing == self.image and (st.st_dev, st.st_ino) == self._image_identity
        if not ok:
            raise LabError(f"refusing to format {device!r}: it is not the loop device of {self.image}")

    def _open_block_layers(self) -> None:
        """The block layers, each over the one under it (the first over the loop device,
        which is checked to be ours first, as for mkfs)."""
        under = self._loop().device
        for layer in self._block:
            self._progress(layer.stage)
            self._assert_loop_is_ours(self._loop().device)
            layer.open(under, self._guard.critical)
            under = layer.path

    def _mkfs(self) -> None:
        self._progress("mkfs")
        disk = self._loop()
        self._assert_loop_is_ours(disk.device)
        under = disk.device
        for layer in self._block:
            layer.assert_over(under)
            under = layer.path
        feature = [opt for layer in self.layers for opt in layer.mkfs_options(self.spec.kernel_type)]
        argv = mkfs_argv(self.fs, [*feature, *self.user_mkfs_opts], self.fs_device(disk))
        self._made_fs = Mkfs(argv, _system.tools.tool_version(argv[0]))
        _system.tools.run_tool(argv, f"mkfs for {self.fs}", "check --mkfs-opts")

    def _mount_loop(self) -> None:
        self._progress("mount")
        argv = ["mount", "-t", self.spec.kernel_type]
        if self.mount_opts:
            argv += ["-o", ",".join(self.mount_opts)]
        with self._guard.critical():
            argv += [self.fs_device(self._loop()), self.mountpoint]
            _system.tools.mount(argv, f"mounting {self.fs}", "check --mount-opts", self.spec.kernel_type)

    def _mount_tmpfs(self) -> None:
        self._progress("mount")
        opts = (f"size={self.image_size}", *self.mount_opts)
        # The source name carries the lab name, so cleanup can recognise the mount.
        argv = ["mount", "-t", "tmpfs", "-o", ",".join(opts), self.name, self.mountpoint]
        with self._guard.critical():
            _system.tools.mount(argv, "mounting tmpfs", "check --mount-opts", "tmpfs")

    # -- teardown

    def teardown_steps(self) -> list[Step]:
        """Every step of the teardown, named, in order: the directory layers top down,
        the unmount, the block layers top down, then the loop devices and the files."""
        over = [step for layer in reversed(self._over) for step in layer.teardown_steps()]
        block = [step for layer in reversed(self._block) for step in layer.teardown_steps()]
        own: list[Step] = [("detach_loops", self._detach_loops), ("copy_image", self._copy_image)]
        return [*over, ("unmount", self._unmount), *block, *own, ("remove_files", self._remove_files)]

    def _teardown(self) -> list[Exception]:
        """Remove whatever exists of this lab, found by its names (not by what setup got
        to record), so a setup interrupted at any point is fully undone. Every step is
        bounded (:func:`teardown_step_s`): one stuck in the kernel is abandoned with an
        error and the others still run, so a hung unmount cannot hang the run."""
        self._guard.tearing_down = True
        self._progress("teardown")
        errors: list[Exception] = []
        for name, step in self.teardown_steps():
            try:
                _system.signals.call_within(with_injected_hang(name, step), teardown_step_s(), f"{self.name}: {name}")
            except Exception as exc:  # keep going: later steps still free what they can
                errors.append(exc)
        _system.ownership.release_ownership(self._ownership)  # held to here: cleanup leaves us alone
        self._ownership = None
        self._guard.restore()
        return errors

    def _unmount(self) -> None:
        if _system.mounts.mount_at(self.mountpoint) is not None:
            _system.mounts.unmount(self.mountpoint)

    def _detach_loops(self) -> None:
        for loop in [*_system.loops.loops_backed_by(self.image), *_system.loops.loops_backed_by(self.log_image)]:
            _system.loops.detach_loop(loop.device)

    def _copy_image(self) -> None:
        if self.keep_image is not None and os.path.isfile(self.image):
            copy_sparse(self.image, self.keep_image)

    def _remove_files(self) -> None:
        remove_lab_dir(self.lab_dir)

    def sync(self) -> None:
        """syncfs every layer, top down: a FUSE writeback cache first sends its dirty pages
        to the daemon, whose writes the lab filesystem's syncfs then writes back."""
        for layer in reversed(self._over):
            layer.sync()
        _system.mounts.syncfs(self.mountpoint)


@dataclass(frozen=True)
class LoopDisk:
    """The loop device a lab's image is attached to (tmpfs has none)."""

    device: str
    major: int
    minor: int
    direct_io: bool  # False where the backing filesystem refused direct I/O


@dataclass(frozen=True)
class Mkfs:
    """The mkfs command that made a lab's filesystem, and the tool's version."""

    argv: list[str]
    version: str | None  # None where the tool does not say


@dataclass(frozen=True)
class MountedLab:
    """A lab filesystem, set up and mounted: what ``with LabFilesystem(...) as lab`` hands
    out. Its facts are set from the start; ``disk`` and ``mkfs`` are None only for tmpfs,
    which has neither."""

    lab: LabFilesystem
    disk: LoopDisk | None
    mkfs: Mkfs | None
    mount_options: str  # what the kernel reports
    data_dir: str  # where the workload runs: the encrypted directory, the FUSE mount, or mountpoint
    fill: dict | None  # what --fill wrote (None without it)

    @property
    def fs(self) -> str:
        return self.lab.fs

    @property
    def spec(self) -> FsSpec:
        return self.lab.spec

    @property
    def name(self) -> str:
        return self.lab.name

    @property
    def mountpoint(self) -> str:
        return self.lab.mountpoint

    @property
    def fuse(self) -> fuse.FuseLayer | None:
        return self.lab.fuse

    @property
    def ecryptfs(self) -> ecryptfs.EcryptfsLayer | None:
        return self.lab.ecryptfs

    @property
    def loop_device(self) -> str | None:
        return self.disk.device if self.disk is not None else None

    @property
    def dev(self) -> tuple[int, int] | None:
        """(major, minor) of the loop device, what the capture traces; None for tmpfs."""
        return (self.disk.major, self.disk.minor) if self.disk is not None else None

    @property
    def fs_device(self) -> str | None:
        """The device the filesystem is on (:meth:`LabFilesystem.fs_device`); None for tmpfs."""
        return self.lab.fs_device(self.disk) if self.disk is not None else None

    @property
    def mapped_dev(self) -> tuple[int, int] | None:
        return self.lab.mapped_dev

    def mappable_path(self, path: str) -> str:
        return self.lab.mappable_path(path)

    def sync(self) -> None:
        self.lab.sync()

    def describe(self) -> dict:
        """What summary.json records about the filesystem the run measured."""
        lab = self.lab
        facts: dict[str, Any] = {
            "fs": lab.fs,
            "fs_type": lab.spec.kernel_type,
            "image_size": lab.image_size if lab.spec.mkfs_tool else None,
            "tmpfs_size": lab.image_size if not lab.spec.mkfs_tool else None,
            "loop_device": self.loop_device,
            "dev": f"{self.disk.major}:{self.disk.minor}" if self.disk else None,
            "loop_direct_io": self.disk.direct_io if self.disk else None,
            "mkfs_cmd": self.mkfs.argv if self.mkfs else None,
            "mkfs_version": self.mkfs.version if self.mkfs else None,
            "mount_opts": list(lab.mount_opts),
            "mount_options": self.mount_options,
            "mountpoint": lab.mountpoint,
            "kernel": os.uname().release,
            "fs_device": self.fs_device,
        }
        # every layer kind's entry, None where the lab has none of it
        facts.update({kind.key: None for kind in layer_kinds.KINDS})
        facts.update({layer.key: layer.describe() for layer in lab.layers})
        return facts


# --------------------------------------------------------------------------- teardown bounds

TEARDOWN_STEP_S = 60  # one teardown step (an unmount, dmsetup remove, losetup -d): seconds here
# Test hooks, hidden: a teardown step's bound in seconds, and the name of a step made to
# hang (e.g. "unmount") — the guest's teardown under a stuck kernel, on demand.
TEARDOWN_STEP_ENV = "SQLWA_TEARDOWN_STEP_S"
HANG_STEP_ENV = "SQLWA_FAULT_HANG_TEARDOWN"


def teardown_step_s() -> float:
    return float(os.environ.get(TEARDOWN_STEP_ENV) or TEARDOWN_STEP_S)


def with_injected_hang(name: str, step: Callable[[], None]) -> Callable[[], None]:
    """``step``, or one that never returns when :data:`HANG_STEP_ENV` names it."""
    if os.environ.get(HANG_STEP_ENV) != name:
        return step

    def hang() -> None:
        threading.Event().wait()

    return hang


# --------------------------------------------------------------------------- removal

COPY_BLOCK = 64 << 10
LOG_SUFFIX = ".writes.log"  # the log-writes target's log (sqlwa crash), beside the image


def copy_sparse(source: str, target: str | os.PathLike) -> None:
    """Copy ``source`` leaving its all-zero blocks out (holes in ``target``), so a 128 MiB
    lab image of which a few MiB were written costs a few MiB, also over the VM's share."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        offset = 0
        while block := src.read(COPY_BLOCK):
            if block.strip(b"\0"):
                dst.seek(offset)
                dst.write(block)
            offset += len(block)
        dst.truncate(offset)


def remove_lab_dir(lab_dir: str) -> None:
    """Delete the image and the empty mount directory, then the lab directory. Only our own
    names, never recursively: if mnt/ is still a mount or not empty, rmdir fails and
    nothing inside it is touched."""
    if not os.path.isdir(lab_dir):
        return
    name = os.path.basename(lab_dir)
    fuse.remove_layer_files(lab_dir)
    ecryptfs.remove_layer_files(lab_dir)
    for image in (os.path.join(lab_dir, name + ".img"), os.path.join(lab_dir, name + LOG_SUFFIX)):
        if os.path.lexists(image):
            os.unlink(image)
    mnt = os.path.join(lab_dir, "mnt")
    if os.path.isdir(mnt) and _system.mounts.mount_at(mnt) is None:
        os.rmdir(mnt)
    if len(os.listdir(lab_dir)) == 1 and os.path.lexists(os.path.join(lab_dir, LAB_MARK)):
        os.unlink(os.path.join(lab_dir, LAB_MARK))  # last: a directory left holding more stays marked
    os.rmdir(lab_dir)


def is_lab_marked(lab_dir: str) -> bool:
    """Whether ``lab_dir`` carries the mark a lab writes into its directory, or holds
    nothing but a mark cut short (its run killed as it made it)."""
    return _system.ownership.is_marked(lab_dir, LAB_MARK, LAB_MARK_TEXT)
