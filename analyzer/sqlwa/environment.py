"""Facts about the machine a run happened on, recorded with every result."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def tool_version() -> str:
    try:
        return version("sqlwa")
    except PackageNotFoundError:
        return "unknown"


def filesystem_of(path: Path) -> dict[str, str]:
    """The mount that holds ``path``: its filesystem type, source and options.

    Reads /proc/self/mounts and takes the longest mount point that prefixes the path,
    so a directory inside a loop mount reports the loop filesystem, not its parent's.
    """
    target = os.path.realpath(path)
    best = {"type": "unknown", "source": "unknown", "mountpoint": "/", "options": ""}
    best_len = -1
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        mountpoint = fields[1].replace("\\040", " ")
        inside = target == mountpoint or target.startswith(mountpoint.rstrip("/") + "/")
        if inside and len(mountpoint) > best_len:
            best_len = len(mountpoint)
            best = {"type": fields[2], "source": fields[0], "mountpoint": mountpoint, "options": fields[3]}
    return best


def machine_facts() -> dict[str, str | int]:
    return {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count() or 0,
        "python": platform.python_version(),
        "tool_version": tool_version(),
    }
