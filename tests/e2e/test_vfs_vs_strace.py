"""The VFS counts against independent truth: strace's count of fsync/fdatasync and of
pread64 calls and bytes, and SQLite's own pager.c for the xSync flags.

Setup (schema, warm-up) also syncs, so the test runs the same configuration twice with
different transaction counts and takes the difference: what remains is exactly the
syncs of the extra commits. SQLite issues one sync the VFS cannot see: the directory
sync inside the journal's first xSync after the journal is created (every commit in
DELETE/TRUNCATE/PERSIST mode, plus one after the unlink with EXTRA in DELETE mode).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa

pytestmark = pytest.mark.skipif(
    shutil.which("strace") is None, reason="strace is not installed (apt-get install strace)"
)

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

# The per-commit figures below are those of one autocommit row per transaction (MobiBench's
# insert until 2017); the current mobibench-insert writes three tables per transaction.
SCENARIO = "mobibench-insert-2013"


def run_under_strace(
    tmp_path: Path, name: str, strace_args: list[str], journal: str, sync: str, txns: int
) -> tuple[Path, Path]:
    """``sqlwa run`` of ``txns`` commits (2 warm-up, no checkpoint) under strace; returns
    (strace's output file, the run directory)."""
    out = tmp_path / name
    log = tmp_path / f"{name}.strace"
    cmd = [
        "strace",
        "-f",
        *strace_args,
        "-o",
        str(log),
        sys.executable,
        "-m",
        "sqlwa",
        "run",
        "-s",
        SCENARIO,
        "-j",
        journal,
        "--sync",
        sync,
        "--txns",
        str(txns),
        "--warmup",
        "2",
        "--wal-autocheckpoint",
        "0",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return log, out


def strace_syncs(tmp_path: Path, name: str, journal: str, sync: str, txns: int) -> tuple[int, dict]:
    log, out = run_under_strace(tmp_path, name, ["-c", "-e", "trace=fsync,fdatasync"], journal, sync, txns)
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


def strace_reads(tmp_path: Path, name: str, journal: str, txns: int) -> tuple[int, int, pl.DataFrame]:
    """(pread64 calls on the database's files, bytes they returned, commits.parquet) of
    one run under strace. Only the database's and its journal's reads (``-y`` names each
    call's file): the run reads its own Parquet files too, as it writes its results."""
    log, out = run_under_strace(tmp_path, name, ["-y", "-e", "trace=pread64"], journal, "full", txns)
    calls = returned = 0
    pending: set[str] = set()  # threads whose database read strace split in two
    # `PID pread64(FD</path>, "..."..., COUNT, OFFSET) = N`, or split by another thread into
    # `PID pread64(FD</path>, ... <unfinished ...>` and `PID <... pread64 resumed>...) = N`.
    for line in log.read_text().splitlines():
        pid = line.split(maxsplit=1)[0]
        ours = "pread64(" in line and re.search(r"\.db(-journal)?>", line) is not None
        if ours and "<unfinished" in line:
            pending.add(pid)
            continue
        resumed = "pread64 resumed>" in line and pid in pending
        if resumed:
            pending.discard(pid)
        if (ours and "= " in line) or resumed:
            calls += 1
            returned += max(int(line.rsplit("= ", 1)[1].split()[0]), 0)
    return calls, returned, pl.read_parquet(out / "commits.parquet")


# Reads per commit from pager.c: the database's 16-byte change counter at offset 24, and the
# journal's 8-byte check for a next header before its sync, past the end of the journal
# written so far (a call, no bytes); PERSIST also reads the first byte of the journal it
# kept, to see whether it is hot. journal -> {file: (calls, bytes) per commit}
READS = {
    "delete": {"db": (1, 16), "journal": (1, 0)},
    "persist": {"db": (1, 16), "journal": (2, 1)},
}


# Not WAL: there the pread64 calls are the checkpoint on close reading WAL frames, one per
# page the table has grown to, which no commit window holds.
@pytest.mark.parametrize("journal", list(READS))
def test_vfs_reads_per_commit_match_strace(tmp_path, journal):
    # SQLite's unix VFS reads with pread64. The extra commits of the longer run account for
    # the difference in pread64 calls and bytes returned, which the VFS counts must equal.
    few_calls, few_bytes, few = strace_reads(tmp_path, "few", journal, 10)
    many_calls, many_bytes, many = strace_reads(tmp_path, "many", journal, 40)

    def vfs(table, what: str) -> int:
        return int(sum(table[c].sum() for c in table.columns if c.startswith("vfs_") and c.endswith(f"_read_{what}")))

    assert many_calls - few_calls == vfs(many, "calls") - vfs(few, "calls")
    assert many_bytes - few_bytes == vfs(many, "bytes") - vfs(few, "bytes")
    measured = many.filter(~many["warmup"])
    for kind, (calls, read) in READS[journal].items():
        assert (measured[f"vfs_{kind}_read_calls"] == calls).all(), kind
        assert (measured[f"vfs_{kind}_read_bytes"] == read).all(), kind


# The flags SQLite passes to xSync, from pager.c (3.4x, sqlite3PagerSetFlags, syncJournal,
# zeroJournalHdr): syncFlags is SQLITE_SYNC_FULL only with PRAGMA fullfsync, else NORMAL;
# with FULL, the journal's second sync (after its header) adds DATAONLY; PERSIST's zeroing
# of the journal header is synced with DATAONLY whatever the setting.
# (journal, fullfsync) -> {file: (sync_full, sync_dataonly) per commit}
SYNC_FLAGS = {
    ("delete", False): {"journal": (0, 0), "db": (0, 0)},
    ("delete", True): {"journal": (2, 1), "db": (1, 0)},
    ("persist", False): {"journal": (0, 1), "db": (0, 0)},
    ("persist", True): {"journal": (3, 2), "db": (1, 0)},
    ("truncate", True): {"journal": (3, 1), "db": (1, 0)},
}


@pytest.mark.parametrize("journal,fullfsync", list(SYNC_FLAGS))
def test_sync_flags_follow_pager_c(tmp_path, journal, fullfsync):
    pragma = ["--pragma", "fullfsync=1"] if fullfsync else []
    sqlwa(
        "run",
        "-s",
        SCENARIO,
        "-j",
        journal,
        "--sync",
        "full",
        "--txns",
        "20",
        "--warmup",
        "2",
        *pragma,
        "--out",
        str(tmp_path / "o"),
    )
    measured = pl.read_parquet(tmp_path / "o" / "commits.parquet").filter(~pl.col("warmup"))
    for kind, (full, dataonly) in SYNC_FLAGS[(journal, fullfsync)].items():
        got = (measured[f"vfs_{kind}_sync_full"].mean(), measured[f"vfs_{kind}_sync_dataonly"].mean())
        assert got == (full, dataonly), (kind, got)
