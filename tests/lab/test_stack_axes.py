"""The phone's storage stack on the host (#17): the android-sdcard profile, and sweeps over
the layers (--encrypt, --fuse, --profile) whose store rows, directories, checks and
comparisons carry them.

Truth is what the kernel says (the mount table, the encryption policy
FS_IOC_GET_ENCRYPTION_POLICY_EX reports on the database's directory, what the FUSE
daemon was granted at FUSE_INIT), SQLite's documented sync sequence, and the results
store read with sqlite3 directly. Everything runs as a subprocess whose pid names its
lab, so the test can see that it left nothing behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import sqlwa_leftovers
from sqlwa.lab import fuse

pytestmark = [
    pytest.mark.root,
    pytest.mark.tracefs,
    pytest.mark.skipif(fuse.daemon_binary(fuse.SQLWA_DAEMON) is None, reason="run ./scripts/setup (sqlwa-fuse)"),
]

# SQLite's documented per-commit xSync sequence (../shared/reference/sqlite-commit-syncs.md),
# as tests/e2e/test_run_cli.py checks it without layers: WAL + FULL syncs the WAL once.
WAL_FULL_SYNCS = 1


def sqlwa_owned(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run sqlwa, then hold it to having left nothing of its own (lab names carry its pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate(timeout=timeout)
    assert sqlwa_leftovers(proc.pid) == []
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def sdcard_run(out: Path, *args: str) -> dict:
    proc = sqlwa_owned("run", "--profile", "android-sdcard", "--image-size", "64M", "-j", "wal", "--sync", "full",
                       "-n", "10", "--warmup", "1", "-o", str(out), *args)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "summary.json").read_text())


def test_android_sdcard_puts_passthrough_fuse_over_encrypted_android_ext4(tmp_path: Path) -> None:
    summary = sdcard_run(tmp_path / "sdcard")
    cfg = summary["config"]
    lab = cfg["lab"]
    assert cfg["profile"]["name"] == "android-sdcard" and cfg["profile"]["overridden"] == []
    assert "FuseDaemon.cpp" in cfg["profile"]["source"] and cfg["profile"]["why"]
    # the kernel's mount table and encryption policy: android-ext4's /data
    assert cfg["fs"] == "ext4" and {"nodev", "noatime", "nosuid"} <= set(cfg["mount_options"].split(","))
    assert lab["encryption"]["policy"] == {"version": 2, "contents_mode": 1, "filenames_mode": 4, "flags": 3}
    # what the kernel granted the daemon at FUSE_INIT: passthrough, no writeback cache
    assert cfg["fuse"] == "passthrough-kernel"
    assert lab["fuse"]["granted"]["passthrough"] is True and lab["fuse"]["granted"]["writeback_cache"] is False
    assert lab["fuse"]["lower"] == str(Path(lab["mountpoint"]) / "data")  # FUSE in front of the encrypted dir
    # SQLite's side is what SQLite documents; its writes went past the daemon, to the lower file
    pc = summary["per_commit"]
    assert pc["vfs_sync_calls"] == WAL_FULL_SYNCS and pc["pwrite_calls"] > 0
    assert pc["fuse_pwrite_calls"] == 0 and pc["fuse_fdatasync_calls"] + pc["fuse_fsync_calls"] > 0


def test_an_explicit_fuse_layer_overrides_the_profiles_and_says_so(tmp_path: Path) -> None:
    summary = sdcard_run(tmp_path / "mine", "--fuse", "passthrough")
    cfg = summary["config"]
    assert cfg["fuse"] == "passthrough" and cfg["profile"]["overridden"] == ["fuse"]
    assert cfg["lab"]["fuse"]["granted"]["passthrough"] is False
    assert summary["per_commit"]["fuse_pwrite_calls"] > 0  # every write through the daemon now
