"""Removing what crashed runs left behind: mounts, loop devices, lab directories and
tracefs instances, found by sqlwa's own naming only and only where their owner is dead."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sqlwa._system import current_mounts, detach_loop, loop_devices, pid_is_dead, unmount
from sqlwa.capture.tracing import remove_dead_instances
from sqlwa.errors import LabError
from sqlwa.lab.filesystem import LAB_IMAGE_RE, LAB_NAME_RE, remove_lab_dir, require_root


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
            _attempt(
                removed, f"unmounted {mount.mountpoint} ({mount.fstype} on {mount.source})", unmount, mount.mountpoint
            )
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
