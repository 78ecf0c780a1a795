"""The VFS counts against independent truth: strace's count of fsync/fdatasync.

Setup (schema, warm-up) also syncs, so the test runs the same configuration twice with
different transaction counts and takes the difference: what remains is exactly the
syncs of the extra commits. SQLite issues one sync the VFS cannot see: the directory
sync inside the journal's first xSync after the journal is created (every commit in
DELETE/TRUNCATE/PERSIST mode, plus one after the unlink with EXTRA in DELETE mode).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (apt-get install strace)")

# (journal, sync) -> (directory syncs per commit, total syscall syncs per commit per the reference table)
EXPECTED = {
    ("delete", "normal"): (1, 3),
    ("delete", "full"): (1, 4),
    ("delete", "extra"): (2, 5),
    ("truncate", "normal"): (1, 3),
    ("truncate", "full"): (1, 5),
    ("persist", "normal"): (1, 4),
    ("persist", "full"): (1, 5),
    ("wal", "normal"): (0, 0),
    ("wal", "full"): (0, 1),
    ("delete", "off"): (0, 0),
}


def strace_syncs(tmp_path, name: str, journal: str, sync: str, txns: int) -> tuple[int, dict]:
    out = tmp_path / name
    log = tmp_path / f"{name}.strace"
    cmd = [
        "strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(log),
        sys.executable, "-m", "sqlwa", "run", "-j", journal, "--sync", sync, "--txns", str(txns),
        "--warmup", "2", "--wal-autocheckpoint", "0", "--out", str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    calls = 0
    # strace -c columns: % time, seconds, usecs/call, calls, [errors,] syscall
    for line in log.read_text().splitlines():
        tokens = line.split()
        if tokens and tokens[-1] in ("fsync", "fdatasync"):
            calls += int(tokens[3])
    return calls, json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("journal,sync", list(EXPECTED))
def test_syscall_syncs_per_commit_match_vfs_and_reference(tmp_path, journal, sync):
    few, _ = strace_syncs(tmp_path, "few", journal, sync, 10)
    many, summary = strace_syncs(tmp_path, "many", journal, sync, 40)
    syscall_per_commit = (many - few) / 30
    dir_syncs, reference_total = EXPECTED[(journal, sync)]
    vfs_per_commit = summary["per_commit"]["vfs_sync_calls"]
    assert syscall_per_commit == pytest.approx(vfs_per_commit + dir_syncs), (syscall_per_commit, vfs_per_commit)
    assert syscall_per_commit == pytest.approx(reference_total)
