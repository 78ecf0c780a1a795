"""Device-mapper devices: whether the kernel has it, its devices and tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlwa._system import processes, tools


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
    modprobe = tools.find_tool("modprobe")
    if modprobe and processes.is_root():
        tools.try_tool([modprobe, "-q", "dm_mod"], timeout=30)
    return _misc_device("device-mapper")


def _misc_device(name: str) -> bool:
    try:
        return any(line.split()[-1] == name for line in Path("/proc/misc").read_text().splitlines() if line.strip())
    except OSError:
        return False


def dm_target_available(target: str, module: str) -> bool:
    """Whether device-mapper has the ``target`` type (``crypt``), loading ``module`` if needed."""
    if processes.is_root():
        tools.try_tool(["modprobe", "-q", module], timeout=30)
    proc = tools.try_tool(["dmsetup", "targets"], timeout=30)
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
    return tools.run_tool(["dmsetup", "table", name], f"reading the device-mapper table of {name}").stdout


def remove_dm_device(name: str) -> None:
    """``dmsetup remove --retry NAME`` (--retry: udev or a just-closed file can hold the
    device a moment); raises :class:`ToolError` if it stays."""
    tools.run_tool(["dmsetup", "remove", "--retry", name], f"removing the device-mapper device {name}", timeout=60)
