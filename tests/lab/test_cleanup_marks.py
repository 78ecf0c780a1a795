"""`sqlwa lab cleanup` and directories merely named like a lab's (#43, point 4): a user's
own `sqlwa-lab-P-T/` holding a `sqlwa-lab-P-T.img` (P a dead pid) lost the file, its loop
device and a mount inside it. A lab directory now carries sqlwa's mark, written as the lab
makes it; cleanup removes only marked ones (and empty ones, a lab killed as it made its
directory) and says which it left.

The truth is the kernel's: the image's bytes (SHA-256), `losetup`'s list of loop devices
and /proc/mounts, before and after.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa import _system
from sqlwa.lab.filesystem import LAB_MARK, LAB_MARK_TEXT

pytestmark = pytest.mark.root


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def backing_files() -> dict[str, str]:
    """Every loop device's backing file, as losetup lists them."""
    listed = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True, check=True)
    return dict(line.split(None, 1) for line in listed.stdout.splitlines() if len(line.split(None, 1)) == 2)


def mounted_at(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


def test_a_users_directory_named_like_a_lab_keeps_its_files_loop_and_mount(tmp_path):
    name = f"sqlwa-lab-{dead_pid()}-ab12"
    own = tmp_path / name
    (own / "mnt").mkdir(parents=True)
    image = own / f"{name}.img"
    image.write_bytes(os.urandom(1 << 20) * 4)  # 4 MiB of the user's data
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    attach = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True)
    loop = attach.stdout.strip()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(own / "mnt")], check=True)
        (own / "mnt" / "notes.txt").write_text("mine")

        proc = sqlwa("lab", "cleanup", "--workdir", str(tmp_path))

        assert backing_files().get(loop) == str(image), proc.stdout
        assert mounted_at(own / "mnt") and (own / "mnt" / "notes.txt").read_text() == "mine", proc.stdout
        assert hashlib.sha256(image.read_bytes()).hexdigest() == digest
        said = [line for line in proc.stdout.splitlines() if str(own) in line]
        assert len(said) == 1 and said[0].startswith(f"left {own} alone") and "no sqlwa mark" in said[0], proc.stdout
    finally:
        if mounted_at(own / "mnt"):
            subprocess.run(["umount", str(own / "mnt")], check=True)
        subprocess.run(["losetup", "-d", loop], capture_output=True)


def test_a_directory_killed_before_its_mark_was_written_goes(tmp_path):
    """mkdir, then the mark: a lab killed between them leaves an empty directory, no one's."""
    empty = tmp_path / f"sqlwa-lab-{dead_pid()}-cd34"
    empty.mkdir()
    cut_short = tmp_path / f"sqlwa-lab-{dead_pid()}-ef56"
    cut_short.mkdir()
    (cut_short / LAB_MARK).write_text(LAB_MARK_TEXT[:5])
    proc = sqlwa("lab", "cleanup", "--workdir", str(tmp_path))
    assert not empty.exists() and not cut_short.exists(), proc.stdout


CHILD = """
import os, signal, sys
from sqlwa.lab.filesystem import LabFilesystem, LabOptions
lab = LabFilesystem("tmpfs", LabOptions(image_size="16M", workdir=sys.argv[1]))
lab.__enter__()
print(lab.lab_dir, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_labs_directory_is_marked_and_cleaned_up(tmp_path):
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    lab_dir = Path(child.stdout.strip())
    try:
        assert (lab_dir / LAB_MARK).read_text() == LAB_MARK_TEXT  # the mark, as the lab wrote it
        assert mounted_at(lab_dir / "mnt")
        proc = sqlwa("lab", "cleanup", "--workdir", str(tmp_path))
        assert f"removed {lab_dir}" in proc.stdout, proc.stdout
        assert not lab_dir.exists() and not mounted_at(lab_dir / "mnt")
    finally:
        if mounted_at(lab_dir / "mnt"):
            _system.mounts.unmount(str(lab_dir / "mnt"))
