"""`sqlwa doctor` (#36) against the kernel's own interfaces: what it says this machine can
measure is what /proc/filesystems, /sys/fs, /dev and the mount table say, for root and for
a user; it exits 0 either way, and --json carries the same findings as the table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import sqlwa, sqlwa_as_nobody


def findings(*args: str) -> dict[str, dict]:
    proc = sqlwa("doctor", "--json", *args)
    return {f["what"]: f for f in json.loads(proc.stdout)}


def kernel_filesystems() -> set[str]:
    return {line.split()[-1] for line in Path("/proc/filesystems").read_text().splitlines()}


def test_doctor_says_what_the_kernel_says():
    found = findings()
    assert [f["section"] for f in found.values()][:3] == ["level"] * 3
    assert found["VFS"]["ok"]
    assert found["fscrypt"]["ok"] == os.path.exists("/sys/fs/ext4/features/encryption")
    fuse_possible = "fuse" in kernel_filesystems() and os.path.exists("/dev/fuse")
    assert not found["FUSE"]["ok"] or fuse_possible
    assert found["eCryptfs"]["ok"] == ("ecryptfs" in kernel_filesystems())
    assert found["kvm"]["ok"] == os.access("/dev/kvm", os.R_OK | os.W_OK) or not found["qemu"]["ok"]
    for what, f in found.items():
        assert f["ok"] or f["fix"], f"{what}: missing, and no command to add it"


def test_doctor_table_lists_every_finding_with_its_fix():
    table = sqlwa("doctor").stdout
    for what, f in findings().items():
        assert f" {what} " in table
        if not f["ok"]:
            assert f"add it: {f['fix']}" in table


@pytest.mark.root
def test_doctor_as_root_sees_the_block_level_where_tracefs_is():
    found = findings()
    tracing = Path("/sys/kernel/tracing/events/block/block_rq_issue")
    assert found["block"]["ok"] == (tracing.is_dir() and "ext4" in kernel_filesystems())


@pytest.mark.root
def test_doctor_without_root_says_the_block_level_needs_root_and_exits_0():
    with sqlwa_as_nobody("doctor", "--json", prefix="sqlwa-test-doctor-") as (proc, _):
        assert proc.returncode == 0, proc.stderr
        found = {f["what"]: f for f in json.loads(proc.stdout)}
        assert not found["block"]["ok"] and "needs root" in found["block"]["detail"]
        assert found["block"]["fix"].startswith("sudo ")
