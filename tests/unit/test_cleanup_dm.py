"""``sqlwa lab cleanup`` and the device-mapper targets of ``--crypt``: it removes a target
named like a lab (sqlwa-lab-<pid>-<token>) that sits on a dead lab's loop device, before
it detaches that loop device, and leaves every other target alone — a live lab's, and
any target not named by sqlwa even over a dead lab's loop device.

This host has no device-mapper, so the system is played by stand-ins for the mount
table, the loop devices and the dm devices; the labs' directories and their ownership
locks are real.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

from sqlwa import _system
from sqlwa.lab import cleanup
from sqlwa.lab.filesystem import LAB_MARK, LAB_MARK_TEXT
from sqlwa.lab.scratch import SCRATCH_MARK, SCRATCH_MARK_TEXT


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_cleanup_removes_the_dm_target_of_a_dead_lab_first_and_only_that(tmp_path, monkeypatch):
    dead = f"sqlwa-lab-{dead_pid()}-aa11"
    live = f"sqlwa-lab-{os.getpid()}-bb22"
    for name in (dead, live):
        (tmp_path / name).mkdir()
        (tmp_path / name / LAB_MARK).write_text(LAB_MARK_TEXT)  # sqlwa's mark, which cleanup looks for
    ownership = _system.ownership.hold_ownership(tmp_path / live)
    loops = [
        _system.loops.LoopDevice("/dev/loop5", str(tmp_path / dead / f"{dead}.img"), 7, 5, True),
        _system.loops.LoopDevice("/dev/loop6", str(tmp_path / live / f"{live}.img"), 7, 6, True),
    ]
    targets = [
        _system.dm.DmDevice(dead, "/dev/dm-0", 254, 0, ("loop5",)),
        _system.dm.DmDevice(live, "/dev/dm-1", 254, 1, ("loop6",)),
        _system.dm.DmDevice("cryptroot", "/dev/dm-2", 254, 2, ("loop5",)),  # not sqlwa's name
    ]
    done: list[str] = []
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))  # nothing of the real /tmp is looked at
    monkeypatch.setattr(cleanup, "is_root", lambda: True)
    monkeypatch.setattr(cleanup, "processes", lambda: [])
    monkeypatch.setattr(cleanup, "remove_dead_instances", lambda: [])
    monkeypatch.setattr(cleanup, "current_mounts", lambda: [])
    monkeypatch.setattr(cleanup, "loop_devices", lambda: loops)
    monkeypatch.setattr(cleanup, "dm_devices", lambda: targets)
    monkeypatch.setattr(cleanup, "remove_dm_device", lambda name: done.append(f"dm {name}"))
    monkeypatch.setattr(cleanup, "detach_loop", lambda device: done.append(f"loop {device}"))
    try:
        report = cleanup.cleanup_leftovers()
    finally:
        _system.ownership.release_ownership(ownership)
    assert done == [f"dm {dead}", "loop /dev/loop5"]
    assert f"removed device-mapper target {dead} (over loop5)" in report
    assert not (tmp_path / dead).exists() and (tmp_path / live).exists()


def test_cleanup_undoes_a_killed_crash_run(tmp_path, monkeypatch):
    """``sqlwa crash`` killed mid-way leaves its log-writes target (<lab>-log, over the lab's
    loop device and the write log's), both loop devices, and in its scratch directory a
    crash state mounted from a loop device: all of it goes, the target before its loop
    devices, the mount before its loop device; a live run's of the same kinds stays."""
    pid = dead_pid()
    lab, scratch = f"sqlwa-lab-{pid}-cc33", f"sqlwa-run-{pid}-x1y2"
    live_scratch = f"sqlwa-run-{os.getpid()}-z9"
    for name in (lab, scratch, live_scratch):
        (tmp_path / name).mkdir()
    (tmp_path / lab / LAB_MARK).write_text(LAB_MARK_TEXT)
    for name in (scratch, live_scratch):  # sqlwa's mark, which cleanup looks for
        (tmp_path / name / SCRATCH_MARK).write_text(SCRATCH_MARK_TEXT)
    (tmp_path / scratch / "mnt-1").mkdir()
    ownership = _system.ownership.hold_ownership(tmp_path / live_scratch)
    loops = [
        _system.loops.LoopDevice("/dev/loop5", str(tmp_path / lab / f"{lab}.img"), 7, 5, True),
        _system.loops.LoopDevice("/dev/loop6", str(tmp_path / lab / f"{lab}.writes.log"), 7, 6, False),
        _system.loops.LoopDevice("/dev/loop7", str(tmp_path / scratch / "state-1.img"), 7, 7, False),
        _system.loops.LoopDevice("/dev/loop8", str(tmp_path / live_scratch / "state-1.img"), 7, 8, False),
    ]
    targets = [_system.dm.DmDevice(f"{lab}-log", "/dev/dm-0", 254, 0, ("loop5", "loop6"))]
    mounts = [_system.mounts.Mount(str(tmp_path / scratch / "mnt-1"), "ext4", "/dev/loop7", "rw")]
    done: list[str] = []
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(cleanup, "is_root", lambda: True)
    monkeypatch.setattr(cleanup, "processes", lambda: [])
    monkeypatch.setattr(cleanup, "remove_dead_instances", lambda: [])
    monkeypatch.setattr(cleanup, "current_mounts", lambda: mounts)
    monkeypatch.setattr(cleanup, "loop_devices", lambda: loops)
    monkeypatch.setattr(cleanup, "dm_devices", lambda: targets)
    monkeypatch.setattr(cleanup, "unmount", lambda path: done.append(f"umount {os.path.basename(path)}"))
    monkeypatch.setattr(cleanup, "remove_dm_device", lambda name: done.append(f"dm {name}"))
    monkeypatch.setattr(cleanup, "detach_loop", lambda device: done.append(f"loop {device}"))
    try:
        cleanup.cleanup_leftovers()
    finally:
        _system.ownership.release_ownership(ownership)
    assert done.index("umount mnt-1") < done.index("loop /dev/loop7")
    assert done.index(f"dm {lab}-log") < min(done.index("loop /dev/loop5"), done.index("loop /dev/loop6"))
    assert "loop /dev/loop8" not in done
    assert not (tmp_path / scratch).exists() and (tmp_path / live_scratch).exists()
