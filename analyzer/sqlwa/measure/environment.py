"""Facts about the machine a run happened on, recorded with every result."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from sqlwa import _native
from sqlwa._system.mounts import mount_holding


def tool_version() -> str:
    """sqlwa's version, as the native core was built with it."""
    return _native.__version__


def filesystem_of(path: Path) -> dict[str, str]:
    """The mount that holds ``path``: its filesystem type, source, mount point and options
    (a directory inside a loop mount reports the loop filesystem, not its parent's)."""
    mount = mount_holding(path)
    if mount is None:
        return {"type": "unknown", "source": "unknown", "mountpoint": "/", "options": ""}
    return {"type": mount.fstype, "source": mount.source, "mountpoint": mount.mountpoint, "options": mount.options}


def machine_facts() -> dict[str, str | int]:
    return {
        "hostname": platform.node(),  # which machine: the shards of one sweep run on many
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count() or 0,
        "python": platform.python_version(),
        "tool_version": tool_version(),
    }
