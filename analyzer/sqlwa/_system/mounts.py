"""The mount table (mountinfo, with the kernel's octal escapes undone), mounting and
unmounting, syncfs and free space.
"""

from __future__ import annotations

import ctypes
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlwa._system import tools
from sqlwa.errors import LabError, ToolError


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


def options_at(mountpoint: str) -> str:
    """The options of the mount at ``mountpoint``, as the kernel reports them; a
    :class:`~sqlwa.errors.LabError` if nothing is mounted there."""
    mount = mount_at(mountpoint)
    if mount is None:
        raise LabError(f"nothing is mounted at {mountpoint}")
    return mount.options


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


#: Filesystems that keep their files in memory: a tmpfs mounted in /dev (/dev/shm) is storage.
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def memory_filesystem_below(path: str | os.PathLike[str], root: str) -> str | None:
    """The mount point of the memory filesystem (tmpfs, ramfs) that holds ``path``, when it
    is mounted strictly below ``root`` (/dev/shm below /dev); else None."""
    mount = mount_holding(path)
    if mount is None or mount.fstype not in MEMORY_FILESYSTEMS:
        return None
    return mount.mountpoint if mount.mountpoint.startswith(root.rstrip("/") + "/") else None


def unmount(mountpoint: str) -> None:
    """umount, retrying briefly (udev or a just-closed file can hold it a moment); a lazy
    unmount is the last resort so the loop device can still be released."""
    last = None
    for attempt in range(5):
        last = tools.try_tool(["umount", mountpoint])
        if (last is not None and last.returncode == 0) or mount_at(mountpoint) is None:
            return
        time.sleep(0.1 * (attempt + 1))
    tools.try_tool(["umount", "-l", mountpoint])
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
