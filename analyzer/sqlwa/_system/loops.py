"""Loop devices: attached, found by their backing file, their facts, detached."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlwa._system import mounts, settle, tools
from sqlwa.errors import ToolError


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
    mount = mounts.mount_holding(path)
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
    when something still holds the device: the kernel then auto-clears it on last close,
    :mod:`.settle`)."""
    proc = tools.try_tool(["losetup", "-d", device])
    if settle.settled(lambda: loop_backing_file(device) is None):
        return
    raise ToolError(
        f"loop device {device} is still attached after losetup -d (something holds it open)",
        argv=["losetup", "-d", device],
        returncode=proc.returncode if proc else None,
        stderr=proc.stderr if proc else "",
    )


def attach_loop(image: str) -> str:
    """``losetup --find --show IMAGE`` (buffered I/O): the loop device now backing it."""
    return tools.run_tool(["losetup", "--find", "--show", image], f"attaching {image} to a loop device").stdout.strip()
