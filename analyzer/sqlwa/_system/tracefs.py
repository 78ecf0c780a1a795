"""tracefs: where it is mounted, writes to its files, instances removed."""

from __future__ import annotations

import os
from pathlib import Path

from sqlwa._system import settle

TRACEFS_MOUNTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


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
    from sqlwa._system.processes import is_root
    from sqlwa._system.tools import try_tool

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


def remove_tracefs_instance(instance_dir: Path, within: float = settle.KERNEL_RELEASE_S) -> None:
    """rmdir a tracefs instance, retrying for up to ``within`` seconds: it is busy while any
    of its files (a writer of trace_marker, a reader of trace_pipe) is still open, e.g. by
    a process that is exiting. Raises the last OSError if it stays busy."""

    def removal_failure() -> OSError | None:
        try:
            os.rmdir(instance_dir)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return exc
        return None

    failure = settle.polled(removal_failure, lambda exc: exc is None, within)
    if failure is not None:
        raise failure
