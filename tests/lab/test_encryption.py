"""--encrypt fscrypt: the database directory really is under the v2 policy asked for
(the kernel's own answers: lsattr's E flag, names unreadable once the key is removed),
the ioctl numbers are the kernel header's, and the run records what served it (#17)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import leftovers_after_release, sqlwa
from sqlwa import _system
from sqlwa.errors import UnsupportedFilesystem
from sqlwa.lab.filesystem import LabFilesystem, LabOptions
from sqlwa.lab.layers import FscryptLayer

pytestmark = pytest.mark.root

HEADER_PROGRAM = r"""
#include <stdio.h>
#include <linux/fscrypt.h>
int main(void) {
    printf("%lu %lu %lu %lu\n", (unsigned long)FS_IOC_SET_ENCRYPTION_POLICY,
           (unsigned long)FS_IOC_GET_ENCRYPTION_POLICY_EX, (unsigned long)FS_IOC_ADD_ENCRYPTION_KEY,
           (unsigned long)FS_IOC_REMOVE_ENCRYPTION_KEY);
    return 0;
}
"""


def test_the_ioctl_numbers_are_the_kernel_headers(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not Path("/usr/include/linux/fscrypt.h").exists():
        pytest.skip("needs a C compiler and the kernel's uapi headers (Debian: gcc, linux-libc-dev)")
    (tmp_path / "n.c").write_text(HEADER_PROGRAM)
    subprocess.run([cc, "-o", str(tmp_path / "n"), str(tmp_path / "n.c")], check=True)
    numbers = [int(n) for n in subprocess.run([str(tmp_path / "n")], capture_output=True, text=True).stdout.split()]
    assert numbers == [
        _system.fscrypt.FS_IOC_SET_ENCRYPTION_POLICY,
        _system.fscrypt.FS_IOC_GET_ENCRYPTION_POLICY_EX,
        _system.fscrypt.FS_IOC_ADD_ENCRYPTION_KEY,
        _system.fscrypt.FS_IOC_REMOVE_ENCRYPTION_KEY,
    ]


def test_the_data_directory_is_encrypted_and_unreadable_without_its_key() -> None:
    with LabFilesystem("ext4", LabOptions(image_size="64M"), [FscryptLayer("fscrypt")]) as lab:
        data = Path(lab.data_dir)
        assert data.parent == Path(lab.mountpoint)
        flags = subprocess.run(["lsattr", "-d", str(data)], capture_output=True, text=True, check=True).stdout
        assert "E" in flags.split()[0], flags  # e2fsprogs' view of the inode's encrypt flag
        (data / "plain-name.db").write_bytes(b"secret" * 1000)
        assert sorted(os.listdir(data)) == ["plain-name.db"]
        facts = lab.describe()["encryption"]
        assert facts["policy"] == {"version": 2, "contents_mode": 1, "filenames_mode": 4, "flags": 3}
        assert facts["contents_driver"] and facts["filenames_driver"]
        lab.lab.encryption.remove_key()  # type: ignore[union-attr]
        names = os.listdir(data)
        assert len(names) == 1 and names[0] != "plain-name.db", names
    assert leftovers_after_release(os.getpid()) == []


def test_an_encrypted_run_records_its_policy_and_counts_like_a_plain_one(tmp_path: Path) -> None:
    plain = json.loads(sqlwa_run(tmp_path / "plain"))
    enc = json.loads(sqlwa_run(tmp_path / "enc", "--encrypt", "fscrypt"))
    assert enc["config"]["encrypt"] == "fscrypt" and plain["config"]["encrypt"] == "none"
    assert enc["config"]["lab"]["encryption"]["policy"]["version"] == 2
    assert "-O" in enc["config"]["lab"]["mkfs_cmd"] and "encrypt" in enc["config"]["lab"]["mkfs_cmd"]
    # encryption changes what a block costs the CPU, not which calls SQLite makes
    for key in ("vfs_sync_calls", "fsync_calls"):
        assert enc["per_commit"][key] == plain["per_commit"][key], key


def sqlwa_run(out: Path, *args: str) -> str:
    sqlwa("run", "--fs", "ext4", "--image-size", "64M", "-n", "20", "-o", str(out), *args)
    return (out / "summary.json").read_text()


def test_a_missing_cipher_or_filesystem_is_one_line() -> None:
    proc = sqlwa("run", "--fs", "xfs", "--encrypt", "fscrypt", "-n", "3", "-o", "/nonexistent/x", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("sqlwa: error: --encrypt fscrypt: xfs has no")
    try:
        with LabFilesystem("ext4", LabOptions(image_size="64M"), [FscryptLayer("fscrypt-adiantum")]):
            pass
    except UnsupportedFilesystem as exc:
        assert "has no adiantum(xchacha12,aes)" in str(exc)
    assert leftovers_after_release(os.getpid()) == []


def test_the_android_profile_applies_aosps_data_options_and_explicit_ones_win(tmp_path: Path) -> None:
    """--profile android-ext4 is AOSP Cuttlefish's /data line (nodev,noatime,nosuid; FBE
    with AES-256-XTS/CTS), as the kernel's mount table and policy show it; an explicit
    option overrides the profile's and the summary says so."""
    summary = json.loads(sqlwa_run(tmp_path / "p", "--profile", "android-ext4"))
    cfg = summary["config"]
    assert {"nodev", "noatime", "nosuid"} <= set(cfg["mount_options"].split(","))
    assert cfg["encrypt"] == "fscrypt" and cfg["lab"]["encryption"]["policy"]["contents_mode"] == 1
    assert "cuttlefish" in cfg["profile"]["source"] and cfg["profile"]["overridden"] == []
    assert any("errors=panic" in d for d in cfg["profile"]["departures"])
    mine = json.loads(sqlwa_run(tmp_path / "q", "--profile", "android-ext4", "--encrypt", "none"))["config"]
    assert mine["encrypt"] == "none" and mine["lab"]["encryption"] is None
    assert mine["profile"]["overridden"] == ["encrypt"]
