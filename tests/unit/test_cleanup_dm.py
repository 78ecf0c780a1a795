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


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_cleanup_removes_the_dm_target_of_a_dead_lab_first_and_only_that(tmp_path, monkeypatch):
    dead = f"sqlwa-lab-{dead_pid()}-aa11"
    live = f"sqlwa-lab-{os.getpid()}-bb22"
    for name in (dead, live):
        (tmp_path / name).mkdir()
    ownership = _system.hold_ownership(tmp_path / live)
    loops = [
        _system.LoopDevice("/dev/loop5", str(tmp_path / dead / f"{dead}.img"), 7, 5, True),
        _system.LoopDevice("/dev/loop6", str(tmp_path / live / f"{live}.img"), 7, 6, True),
    ]
    targets = [
        _system.DmDevice(dead, "/dev/dm-0", 254, 0, ("loop5",)),
        _system.DmDevice(live, "/dev/dm-1", 254, 1, ("loop6",)),
        _system.DmDevice("cryptroot", "/dev/dm-2", 254, 2, ("loop5",)),  # not sqlwa's name
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
        _system.release_ownership(ownership)
    assert done == [f"dm {dead}", "loop /dev/loop5"]
    assert f"removed device-mapper target {dead} (over loop5)" in report
    assert not (tmp_path / dead).exists() and (tmp_path / live).exists()
