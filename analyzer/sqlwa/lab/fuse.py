"""A FUSE layer between SQLite and the lab filesystem, as Android's MediaProvider sits in
front of /sdcard: a daemon mirrors the lab's data directory at ``<lab dir>/fuse`` and the
workload runs there, so every call SQLite makes reaches the lab filesystem through it.

Layers (``--fuse``): ``passthrough`` is sqlwa's own daemon (``sqlwa-fuse``, the
``fuse-layer`` crate on the fuser library), every read, write and sync going through it;
``passthrough-writeback`` the same with the kernel's writeback cache (writes stay in the
FUSE page cache until writeback or a sync sends them to the daemon);
``passthrough-kernel`` with the kernel's FUSE passthrough (Linux 6.9+: reads and writes go
from the kernel straight to the lower file, the daemon sees opens, syncs and metadata);
``bindfs`` is Debian's bindfs (libfuse 3) with its defaults, an off-the-shelf reference.
A layer is one name, so a matrix can take it as an axis.

Measured, not hidden: the daemon is started under a per-run name (its comm,
``fuse-<lab token>``, from the name of a link to its binary in the lab directory), and the
capture traces the syscalls of every thread of that name, those the daemon starts later
included (see :mod:`sqlwa.capture.tracing`). Its block requests fall on the same loop
device. :meth:`FuseLayer.describe` records what was asked and, for sqlwa's daemon, what
the kernel granted (the daemon reports it after FUSE_INIT).

Lifetime: the daemon is sqlwa's child, in a session of its own and killed by the kernel
when sqlwa dies (PR_SET_PDEATHSIG). Teardown unmounts the FUSE mount (umount, as root
that is what ``fusermount3 -u`` does), waits for the daemon to end and kills it if it
does not; ``sqlwa lab cleanup`` finds a daemon left behind by its comm and its command
line naming a lab directory whose owner is gone, and the mount by its place in that
directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlwa import _system
from sqlwa.errors import LabError, UnsupportedFilesystem, UsageError

NO_FUSE = "none"
MOUNT_DIR = "fuse"  # the FUSE mountpoint, <lab dir>/fuse
LOG_FILE = "fuse.log"  # the daemon's stderr, <lab dir>/fuse.log
COMM_PREFIX = "fuse"  # the daemon's name: fuse-<lab token> (15 characters at most)
COMM_RE = re.compile(rf"^{COMM_PREFIX}-([0-9a-f]+)$")
READY_WAIT_S = 10  # mount and FUSE_INIT take milliseconds; a daemon silent this long is stuck
STOP_WAIT_S = 5  # after the unmount a daemon ends at once; this long means it will not
SQLWA_DAEMON = "sqlwa-fuse"


@dataclass(frozen=True)
class FuseSpec:
    """One FUSE layer: which daemon, with which of the kernel's options."""

    name: str
    daemon: str
    writeback_cache: bool
    kernel_passthrough: bool
    what: str


LAYERS = {
    "passthrough": FuseSpec("passthrough", SQLWA_DAEMON, False, False, "sqlwa-fuse: every call through the daemon"),
    "passthrough-writeback": FuseSpec(
        "passthrough-writeback", SQLWA_DAEMON, True, False, "sqlwa-fuse with the kernel's writeback cache"
    ),
    "passthrough-kernel": FuseSpec(
        "passthrough-kernel", SQLWA_DAEMON, False, True, "sqlwa-fuse with the kernel's FUSE passthrough"
    ),
    "bindfs": FuseSpec("bindfs", "bindfs", False, False, "bindfs (libfuse 3), its defaults"),
}
CHOICES = (NO_FUSE, *LAYERS)


#: How sqlwa-fuse comes back: the wheel carries it, a checkout's set-up builds it.
SQLWA_DAEMON_FIX = "pip install --force-reinstall sqlwa-*.whl   (the wheel carries sqlwa-fuse), or ./scripts/setup"


def daemon_binary(daemon: str) -> str | None:
    """Where the daemon's binary is: on PATH (or sbin), beside this Python (scripts/setup
    installs sqlwa-fuse into the virtualenv's bin/), or in the package (the wheel carries
    sqlwa-fuse in sqlwa/_bin/)."""
    found = _system.tools.find_tool(daemon)
    if found:
        return found
    for beside in (Path(sys.prefix) / "bin" / daemon, _system.tools.BUNDLED_DIR / daemon):
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    return None


def check_fuse(mode: str) -> FuseSpec | None:
    """The layer's spec, or why this machine cannot have it; before anything is made."""
    if mode == NO_FUSE:
        return None
    if mode not in LAYERS:
        raise UsageError(f"--fuse {mode!r} is not a FUSE layer", f"choose one of: {', '.join(CHOICES)}")
    spec = LAYERS[mode]
    if "fuse" not in _system.mounts.kernel_filesystems():
        raise UnsupportedFilesystem(
            f"--fuse {mode}: the kernel has no FUSE (no 'fuse' in /proc/filesystems)",
            "add --vm (Debian's kernel has it), load it (modprobe fuse), or use a kernel with CONFIG_FUSE_FS",
        )
    if not os.path.exists("/dev/fuse"):
        raise UnsupportedFilesystem(f"--fuse {mode}: there is no /dev/fuse", "create it: mknod /dev/fuse c 10 229")
    if daemon_binary(spec.daemon) is None:
        fix = SQLWA_DAEMON_FIX if spec.daemon == SQLWA_DAEMON else "apt-get install bindfs"
        raise UnsupportedFilesystem(f"--fuse {mode}: {spec.daemon} is not installed", fix)
    return spec


class FuseLayer:
    """The daemon and its mount for one lab; made by :class:`~sqlwa.lab.filesystem.LabFilesystem`."""

    def __init__(self, spec: FuseSpec, lab_dir: str, token: str) -> None:
        self.spec = spec
        self.lab_dir = lab_dir
        self.comm = f"{COMM_PREFIX}-{token}"
        self.mountpoint = os.path.join(lab_dir, MOUNT_DIR)
        self.link = os.path.join(lab_dir, self.comm)
        self.lower: str | None = None
        self.process: subprocess.Popen[str] | None = None
        self.granted: dict | None = None
        self.version: str | None = None

    def argv(self, lower: str) -> list[str]:
        if self.spec.daemon != SQLWA_DAEMON:
            return [self.link, "-f", lower, self.mountpoint]  # -f: stay our child, no fork
        flags = ["--writeback-cache"] * self.spec.writeback_cache + [
            "--kernel-passthrough"
        ] * self.spec.kernel_passthrough
        return [self.link, lower, self.mountpoint, "--fsname", self.comm, *flags]

    def setup(self, lower: str, critical: Callable[[], AbstractContextManager]) -> str:
        """Start the daemon over ``lower``; returns the mountpoint once it serves."""
        binary = daemon_binary(self.spec.daemon)
        assert binary is not None, "check_fuse found it"
        self.lower = lower
        self.version = _system.tools.tool_version(binary)
        # Started through a link of the per-run name: the name is the daemon's comm.
        os.symlink(binary, self.link)
        os.mkdir(self.mountpoint, 0o700)
        with critical():  # a signal now would leave a daemon the teardown does not know
            self.process = process = _system.processes.start_daemon(
                self.argv(lower), os.path.join(self.lab_dir, LOG_FILE)
            )
        self._wait_ready(process)
        return self.mountpoint

    def _wait_ready(self, process: subprocess.Popen[str]) -> None:
        if self.spec.daemon == SQLWA_DAEMON:
            line = _system.processes.read_line_within(process, READY_WAIT_S)
            if line is None:
                raise self._failure(process)
            self.granted = json.loads(line)
            return
        for _ in range(int(READY_WAIT_S / 0.02)):
            if process.poll() is not None:
                raise self._failure(process)
            mount = _system.mounts.mount_at(self.mountpoint)
            if mount is not None and mount.fstype.startswith("fuse"):
                os.stat(self.mountpoint)  # returns once the daemon answered FUSE_INIT
                return
            time.sleep(0.02)
        raise self._failure(process)

    def _failure(self, process: subprocess.Popen[str]) -> LabError:
        """Why the daemon does not serve: its own last line, as one error."""
        code = _system.processes.exit_code_within(process, 1)
        said = _last_line(os.path.join(self.lab_dir, LOG_FILE))
        if code is None:
            return LabError(f"--fuse {self.spec.name}: {self.spec.daemon} did not mount within {READY_WAIT_S} s")
        message = f"--fuse {self.spec.name}: {said or f'{self.spec.daemon} exited with {code}'}"
        if code == 2 and self.spec.daemon == SQLWA_DAEMON:  # the kernel cannot give what was asked
            return UnsupportedFilesystem(message, "choose another --fuse layer, or a kernel that has it")
        return LabError(message, f"see {self.spec.daemon}'s messages above")

    def teardown(self) -> None:
        """Unmount, then see the daemon gone; found by name, so a half-made layer goes too."""
        if _system.mounts.mount_at(self.mountpoint) is not None:
            _system.mounts.unmount(self.mountpoint)  # the daemon reads ENODEV and ends
        if self.process is not None:
            _system.processes.stop_process(self.process, STOP_WAIT_S)
            self.process = None

    def lower_path(self, path: str | os.PathLike[str]) -> Path:
        """The lower file the daemon serves ``path`` (a file in its mountpoint) from: the
        same name in the lower directory, where the file's blocks are."""
        assert self.lower is not None, "set up"
        return Path(self.lower) / Path(path).relative_to(self.mountpoint)

    def cpu_time(self) -> _system.processes.CpuTime:
        """The daemon's CPU time so far, all its threads."""
        assert self.process is not None, "set up"
        return _system.processes.process_cpu(self.process.pid)

    def describe(self) -> dict:
        """What summary.json records: the layer, the daemon, and the options in effect."""
        return {
            "layer": self.spec.name,
            "what": self.spec.what,
            "daemon": self.spec.daemon,
            "daemon_version": self.version,
            "comm": self.comm,
            "pid": self.process.pid if self.process is not None else None,
            "mountpoint": self.mountpoint,
            "lower": self.lower,
            "requested": {"writeback_cache": self.spec.writeback_cache, "passthrough": self.spec.kernel_passthrough},
            # sqlwa-fuse reports what the kernel granted at FUSE_INIT; bindfs reports nothing
            "granted": self.granted,
            "spec": asdict(self.spec),
        }


def _last_line(path: str) -> str | None:
    try:
        lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1].removeprefix("sqlwa-fuse: ") if lines else None


def remove_layer_files(lab_dir: str) -> None:
    """The link, the log and the (unmounted, empty) mountpoint of a lab's FUSE layer."""
    for entry in os.listdir(lab_dir) if os.path.isdir(lab_dir) else ():
        path = os.path.join(lab_dir, entry)
        if COMM_RE.match(entry) and os.path.islink(path) or entry == LOG_FILE:
            os.unlink(path)
    mountpoint = os.path.join(lab_dir, MOUNT_DIR)
    if os.path.isdir(mountpoint) and _system.mounts.mount_at(mountpoint) is None:
        os.rmdir(mountpoint)


def daemons_of(lab_dir: str) -> list[_system.processes.Process]:
    """Processes that are this lab's FUSE daemon: named fuse-<its token>, their command
    line naming a path inside it."""
    token = os.path.basename(lab_dir).rsplit("-", 1)[-1]
    inside = lab_dir.rstrip("/") + "/"
    return [
        p
        for p in _system.processes.processes()
        if p.comm == f"{COMM_PREFIX}-{token}" and any(arg.startswith(inside) for arg in p.argv)
    ]
