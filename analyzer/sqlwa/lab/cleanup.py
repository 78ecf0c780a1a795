"""Removing what crashed runs left behind: FUSE daemons, mounts, device-mapper targets,
loop devices, lab and scratch directories, tracefs instances and host-sharing markers, found by sqlwa's own
naming only and only where their owner is gone (its pid dead here and its ownership lock free, which also holds across
PID namespaces: :func:`sqlwa._system.ownership.owner_is_gone`). A lab or scratch
directory must also carry sqlwa's mark, written as it was made: one merely named like
a lab's (a user's own, or an older sqlwa's without the mark) is left, and said so, with
its loop devices and mounts."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sqlwa._system.dm import dm_devices, remove_dm_device
from sqlwa._system.loops import detach_loop, loop_devices
from sqlwa._system.mounts import current_mounts, unmount
from sqlwa._system.ownership import owner_is_gone
from sqlwa._system.processes import is_root, kill_process, processes
from sqlwa._system.sharing import remove_dead_markers
from sqlwa.capture.tracing import remove_dead_instances
from sqlwa.errors import LabError
from sqlwa.lab import fuse
from sqlwa.lab.filesystem import (
    LAB_IMAGE_RE,
    LAB_NAME_RE,
    LAB_TARGET_RE,
    is_lab_marked,
    remove_lab_dir,
)
from sqlwa.lab.scratch import GUEST_CONTROL_TAG, SCRATCH_NAME_RE, dead_scratch_dirs, has_scratch_mark
from sqlwa.record import spool

ROOT_ONLY = "lab mounts, loop devices and tracefs instances were not looked at: they need root (sudo sqlwa lab cleanup)"


def _lab_dir_of(path: str) -> str | None:
    """The ``sqlwa-lab-<pid>-<token>`` directory ``path`` lies in, if any."""
    for part in (Path(path), *Path(path).parents):
        if LAB_NAME_RE.match(part.name):
            return str(part)
    return None


def cleanup_leftovers(workdirs: Iterable[str] = ()) -> list[str]:
    """Remove what crashed runs left behind, found by sqlwa's own naming only, and only
    where the owner is gone: mounts of sqlwa loop devices or under sqlwa lab directories,
    device-mapper targets named like a lab over such loop devices, loop devices backed by
    sqlwa images, sqlwa tracefs instances, lab directories and scratch directories in
    ``workdirs`` and the temp dir, and the host-sharing markers nobody holds locked. Returns one line per thing
    removed or left alone; nothing else is ever touched. Without root only scratch
    directories (the user's own) are looked at, and the last line says so."""
    bases = sorted({os.path.realpath(d) for d in (*workdirs, tempfile.gettempdir())})
    report: list[str] = []
    _stop_dead_guests(report)
    if is_root():
        unmarked: set[str] = set()
        _cleanup_labs(bases, report, unmarked)
        report += [left_unmarked(lab_dir) for lab_dir in sorted(unmarked)]
        report += remove_dead_instances()
    for scratch in dead_scratch_dirs(bases):
        _attempt(report, f"removed {scratch}", lambda p: shutil.rmtree(p), str(scratch))
    for recording in spool.dead_spools(bases):
        _remove_partial_log(recording, report)
        _attempt(report, f"removed {recording} (the spool of a killed sqlwa record)", shutil.rmtree, str(recording))
    report += remove_dead_markers()  # a killed run's host-sharing marker (sqlwa._system.sharing)
    if not is_root():
        report.append(ROOT_ONLY)
    return report


def _remove_partial_log(spool_dir: Path, report: list[str]) -> None:
    """The ``.part`` file a killed ``sqlwa record`` was writing its log to, if its spool
    names one (sqlwa.record.spool checks it still is one)."""
    try:
        part = spool.remove_noted_part(spool_dir)
    except OSError as exc:
        report.append(f"failed to clean up the partial log of {spool_dir}: {exc}")
        return
    if part is not None:
        report.append(f"removed {part} (a log a killed sqlwa record was writing)")


def left_unmarked(lab_dir: str) -> str:
    return (
        f"left {lab_dir} alone: it is named like a lab but has no sqlwa mark ({os.path.basename(lab_dir)}"
        "/.sqlwa-lab): a directory of someone else's, or of an sqlwa older than the mark; remove it by hand "
        "if it is a lab's"
    )


def _stop_dead_daemons(report: list[str], unmarked: set[str]) -> None:
    """Kill the FUSE daemons of labs whose owner is gone: a daemon named fuse-<token>
    whose command line names a path in the lab directory of that token. First, as a
    daemon holds files of the lab filesystem open and serves the FUSE mount."""
    for proc in processes():
        match = fuse.COMM_RE.match(proc.comm)
        holder = next((d for d in map(_lab_dir_of, proc.argv[1:]) if d), None) if match else None
        if match is None or holder is None or not holder.endswith(f"-{match.group(1)}") or not _gone(holder, unmarked):
            continue
        try:
            kill_process(proc.pid)
        except LabError as exc:
            report.append(f"failed to stop FUSE daemon {proc.pid} ({proc.comm}): {exc}")
            continue
        report.append(f"stopped FUSE daemon {proc.pid} ({proc.comm}) of {holder}")


def _stop_dead_guests(report: list[str]) -> None:
    """Kill the VM lab's guests whose run is gone: a qemu process sharing a scratch
    directory (``mount_tag=ctl``) whose owner is gone. qemu dies with its sqlwa
    (PR_SET_PDEATHSIG); this is for one that did not, e.g. started by a killed tool."""
    for proc in processes():
        if not proc.comm.startswith("qemu-system"):
            continue
        ctl = next((d for d in map(_guest_control_dir, proc.argv) if d), None)
        match = SCRATCH_NAME_RE.match(os.path.basename(ctl)) if ctl else None
        if ctl is None or match is None or not owner_is_gone(ctl, int(match.group(1))):
            continue
        try:
            kill_process(proc.pid)
        except LabError as exc:
            report.append(f"failed to stop VM lab guest {proc.pid}: {exc}")
            continue
        report.append(f"stopped VM lab guest {proc.pid} (qemu) of {ctl}")


def _guest_control_dir(arg: str) -> str | None:
    """The path of a ``-virtfs local,…,path=P,mount_tag=ctl`` argument."""
    fields = dict(part.split("=", 1) for part in arg.split(",") if "=" in part)
    return fields.get("path") if fields.get("mount_tag") == GUEST_CONTROL_TAG else None


def _cleanup_labs(bases: list[str], report: list[str], unmarked: set[str]) -> None:
    _stop_dead_daemons(report, unmarked)
    dead_loops, lab_dirs = [], set()
    for loop in loop_devices():
        lab_dir = os.path.dirname(loop.backing_file)
        if _dead_scratch(lab_dir):  # a crash run's state images (sqlwa.durability)
            dead_loops.append(loop)
            continue
        if not LAB_IMAGE_RE.match(os.path.basename(loop.backing_file)):
            continue
        if not os.path.isdir(lab_dir):
            report.append(
                f"left {loop.device} alone: its backing file {loop.backing_file} is not visible here "
                "(another mount namespace?); run `sqlwa lab cleanup` where it was made"
            )
        elif _gone(lab_dir, unmarked):
            dead_loops.append(loop)
            lab_dirs.add(lab_dir)
    dead_devices = {d.device for d in dead_loops}
    for mount in reversed(current_mounts()):  # innermost first
        holder = _lab_dir_of(mount.mountpoint)
        in_dead_scratch = _dead_scratch(os.path.dirname(mount.mountpoint))
        if mount.source in dead_devices or (holder and _gone(holder, unmarked)) or in_dead_scratch:
            what = f"unmounted {mount.mountpoint} ({mount.fstype} on {mount.source})"
            _attempt(report, what, unmount, mount.mountpoint)
            if holder:
                lab_dirs.add(holder)
    _remove_dead_targets(dead_devices, report)  # after the unmounts, before the loops they hold
    for loop in dead_loops:
        _attempt(report, f"detached {loop.device} (backing file {loop.backing_file})", detach_loop, loop.device)
    for base in bases:
        if os.path.isdir(base):
            found = (str(p) for p in Path(base).iterdir() if p.is_dir() and not p.is_symlink())
            lab_dirs.update(p for p in found if _gone(p, unmarked))
    for lab_dir in sorted(lab_dirs):
        if LAB_NAME_RE.match(os.path.basename(lab_dir)) and os.path.isdir(lab_dir):
            _attempt(report, f"removed {lab_dir}", remove_lab_dir, lab_dir)


def _remove_dead_targets(dead_loops: set[str], report: list[str]) -> None:
    """Remove the device-mapper targets named like a lab, sqlwa-lab-<pid>-<token> (--crypt)
    or sqlwa-lab-<pid>-<token>-log (sqlwa crash's log-writes), that sit on a dead lab's
    loop devices only; any other target is left alone."""
    dead = {os.path.basename(device) for device in dead_loops}
    for target in dm_devices():
        if LAB_TARGET_RE.match(target.name) and target.slaves and set(target.slaves) <= dead:
            what = f"removed device-mapper target {target.name} (over {', '.join(target.slaves)})"
            _attempt(report, what, remove_target, f"/dev/mapper/{target.name}")


def remove_target(path: str) -> None:
    """Remove the device-mapper target at /dev/mapper/NAME (a path, so that
    :func:`_attempt` can tell one that is gone meanwhile from a failure)."""
    remove_dm_device(os.path.basename(path))


def _dead_scratch(directory: str) -> bool:
    """Whether ``directory`` is a scratch directory (sqlwa-run-<pid>-…, with sqlwa's mark)
    whose owner is gone."""
    match = SCRATCH_NAME_RE.match(os.path.basename(directory))
    return match is not None and has_scratch_mark(directory) and owner_is_gone(directory, int(match.group(1)))


def _gone(lab_dir: str, unmarked: set[str]) -> bool:
    """Whether ``lab_dir`` is a lab directory whose owner is gone: named like one, carrying
    sqlwa's mark (or holding nothing but a mark cut short), its owner dead. One named like
    a lab whose owner is gone but without the mark is added to ``unmarked``, to be said."""
    match = LAB_NAME_RE.match(os.path.basename(lab_dir))
    if match is None or not owner_is_gone(lab_dir, int(match.group(1))):
        return False
    if is_lab_marked(lab_dir):
        return True
    unmarked.add(lab_dir)
    return False


def _attempt(report: list[str], done: str, action: Callable[[str], None], target: str) -> None:
    """Run one removal; a failure is reported and does not stop the others."""
    try:
        action(target)
    except (LabError, OSError) as exc:
        if os.path.lexists(target):  # else another cleanup removed it first: not a failure
            report.append(f"failed to clean up {target}: {exc}")
        return
    report.append(done)
