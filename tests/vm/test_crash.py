"""``sqlwa crash`` in the VM lab against SQLite's documented guarantees
(https://www.sqlite.org/atomiccommit.html, https://www.sqlite.org/wal.html and
https://www.sqlite.org/pragma.html#pragma_synchronous): what a power cut may cost each
setting.

- WAL/FULL loses no acknowledged commit and never corrupts, on ext4, xfs and f2fs: every
  crash state holds every commit SQLite had acknowledged by then;
- DELETE/FULL never corrupts and loses at most the last acknowledged commit: SQLite does
  not sync the directory after deleting the journal (the commit point), so the journal
  can come back and be rolled back; the pragma's documentation says EXTRA closes exactly
  that, and DELETE/EXTRA loses nothing;
- WAL/NORMAL may lose commits, but only those since the last sync of the WAL (the
  engine's VFS counts say which commits synced it), and never corrupts;
- synchronous=OFF, and ext4 mounted ``barrier=0`` (fsync without a cache flush), lose
  acknowledged commits: a configuration that must lose data and shows none would mean
  the crash states are wrong, so these tests fail then.

The judge of each state is the system's SQLite (Python's sqlite3), not the engine's
bundled one, and a commit is "there" when the state's rows equal the rows the database
had right after that commit in an untraced run of the same workload. One guest serves
every configuration (a fresh filesystem each).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa
from sqlwa.analysis import schema
from sqlwa.results import store
from trace_truth import syncs_with_uncovered_writes
from vm_guest import vm_runs

pytestmark = [pytest.mark.vm, pytest.mark.slow]

COMMITS = 4
IMAGE = "128M"
XFS_IMAGE = "320M"  # mkfs.xfs refuses less than 300 MB
RUNS = {
    "ext4-wal-full": ("ext4", "wal", "full", ""),
    "xfs-wal-full": ("xfs", "wal", "full", ""),
    "f2fs-wal-full": ("f2fs", "wal", "full", ""),
    "ext4-delete-full": ("ext4", "delete", "full", ""),
    "xfs-delete-full": ("xfs", "delete", "full", ""),
    "f2fs-delete-full": ("f2fs", "delete", "full", ""),
    "ext4-delete-extra": ("ext4", "delete", "extra", ""),
    "ext4-wal-normal": ("ext4", "wal", "normal", ""),
    "ext4-wal-off": ("ext4", "wal", "off", ""),
    "ext4-nobarrier-wal-full": ("ext4", "wal", "full", "barrier=0"),
}
DURABLE = ["ext4-wal-full", "xfs-wal-full", "f2fs-wal-full", "ext4-delete-extra"]
DELETE_FULL = ["ext4-delete-full", "xfs-delete-full", "f2fs-delete-full"]
MUST_LOSE = ["ext4-wal-off", "ext4-nobarrier-wal-full"]


@dataclass(frozen=True)
class CrashRun:
    out_dir: Path
    summary: dict
    commits: pl.DataFrame


def crash_args(name: str) -> list[str]:
    """The ``sqlwa crash --vm`` command line of configuration ``name``."""
    fs, journal, sync, mount_opts = RUNS[name]
    args = ["--vm", "--fs", fs, "-j", journal, "--sync", sync, "-n", str(COMMITS), "--warmup", "1"]
    args += ["--image-size", XFS_IMAGE if fs == "xfs" else IMAGE, "--samples", "2", "--crash-seed", "1"]
    return args + (["--mount-opts", mount_opts] if mount_opts else [])


@pytest.fixture(scope="module")
def crash_runs(tmp_path_factory) -> dict[str, CrashRun]:
    """Each configuration's ``sqlwa crash --vm`` command line, parsed by the command, run
    in one guest booted for them all (a fresh filesystem, write log and crash states each:
    tests/vm_guest.py); the command's own guest and printing are tested in
    tests/vm/test_crash_first_loss.py and test_vm_lab.py."""
    share = tmp_path_factory.mktemp("vm-crash")
    outs = vm_runs(share, {name: ("crash", crash_args(name)) for name in RUNS})
    return {
        name: CrashRun(out, json.loads((out / "summary.json").read_text()), pl.read_parquet(out / "commits.parquet"))
        for name, out in outs.items()
    }


def durability(outcome: CrashRun) -> dict:
    return outcome.summary["durability"]


def uncovered_syncs(run: CrashRun) -> list[tuple[int, str]]:
    """The syncs of the run that returned with a write to the disk no cache flush had
    covered, read from the kernel's own block events in the raw trace."""
    disk = run.summary["config"]["lab"]["dev"].replace(":", ",")
    return syncs_with_uncovered_writes(run.out_dir / "trace.txt", disk)


@pytest.mark.parametrize("name", DURABLE)
def test_full_sync_loses_nothing_and_never_corrupts(crash_runs, name):
    """Every state holds every acknowledged commit, unless the filesystem broke fsync's
    promise: a sync that returned with a write no flush had covered (seen on f2fs, whose
    fdatasync issued its cache flush before the inode write it had just issued completed,
    in the syncs that created the WAL). Then at most as many commits may go as there were
    such syncs, and never one without them: a loss with every sync covered would mean the
    crash states are wrong."""
    found = durability(crash_runs[name])
    uncovered = uncovered_syncs(crash_runs[name])
    assert found["states"] >= COMMITS, "at least a state per commit"
    assert found["corrupt_states"] == 0 and found["unmountable_states"] == 0, found["first"]
    if not uncovered:
        assert found["outcomes"]["durable"] == found["states"], found["first"]
    assert found["lost_commits"]["max"] <= len(uncovered), (found["first"], uncovered)


@pytest.mark.parametrize("name", DELETE_FULL)
def test_delete_full_loses_at_most_the_last_commit_to_its_journal(crash_runs, name):
    """Never corrupt; a losing state lost one commit, and its rollback journal was still
    there (the unlink that committed it had not reached the disk)."""
    found = durability(crash_runs[name])
    assert found["corrupt_states"] == 0 and found["unmountable_states"] == 0, found["first"]
    assert found["lost_commits"]["max"] <= 1
    if found["lost_commits"]["max"]:
        assert "rollback journal" in found["first"]["lost"]["detail"]


@pytest.mark.parametrize("name", [*DURABLE, *DELETE_FULL])
def test_every_commit_was_marked_and_every_flush_logged(crash_runs, name):
    """The log holds a flush for each commit SQLite synced (FULL and EXTRA: at least one
    per commit)."""
    found = durability(crash_runs[name])
    transactions = crash_runs[name].commits.height
    assert found["log"]["flushes"] >= transactions
    assert found["log"]["writes"] > 0


def test_wal_normal_loses_only_commits_since_the_last_wal_sync(crash_runs):
    """A lost commit is one acknowledged after the WAL was last synced: with
    synchronous=NORMAL SQLite syncs the WAL only when it checkpoints, so every state's
    database must hold at least the commits up to the last one that synced the WAL before
    the crash; and SQLite never finds it corrupt."""
    outcome = crash_runs["ext4-wal-normal"]
    found = durability(outcome)
    assert found["corrupt_states"] == 0 and found["unmountable_states"] == 0
    synced = outcome.commits.filter(pl.col("vfs_wal_sync_calls") + pl.col("vfs_db_sync_calls") > 0)
    last_synced = synced["index"].max() if synced.height else None
    # no commit synced anything in this short run (the first checkpoint is at 1000 pages):
    # everything since the database was created may go, and it does in some state
    assert last_synced is None or found["lost_commits"]["max"] <= outcome.commits.height - last_synced
    assert found["lost_commits"]["max"] > 0, "NORMAL without a WAL sync must lose commits in some state"


@pytest.mark.parametrize("name", MUST_LOSE)
def test_no_flush_before_the_acknowledgement_loses_commits(crash_runs, name):
    found = durability(crash_runs[name])
    assert found["lost_commits"]["max"] > 0, f"{name} cannot be durable, yet no crash state lost a commit"
    assert found["lost_commits"]["states_losing"] > 0
    first = found["first"].get("lost") or found["first"].get("corrupt") or found["first"].get("unmountable")
    assert first is not None and first["writes_missing"], "the first losing state names the writes it lacked"


def test_the_outputs_of_a_run_are_all_there(crash_runs):
    """summary.json carries durability next to the usual figures; states add up."""
    for outcome in crash_runs.values():
        found = durability(outcome)
        assert sum(found["outcomes"].values()) == found["states"]
        assert sum(found["lost_commits"]["distribution"].values()) == (
            found["outcomes"]["lost"] + found["outcomes"]["durable"]
        )
        assert (Path(outcome.out_dir) / "commits.parquet").is_file()
        assert outcome.summary["per_commit"]["flush_requests"] is not None


POLICY = """
[[rule]]
name = "power loss"
forbid_corruption = true
max_lost_commits = 0
"""


def checked(tmp_path: Path, name: str, runs: list[Path]) -> subprocess.CompletedProcess:
    """`sqlwa check` of a store holding ``runs`` against POLICY, with its JSON verdict."""
    store_dir = tmp_path / name
    store_dir.mkdir()
    for run_dir in runs:
        store.save_run_dir(store_dir / store.STORE_FILE, run_dir)
    policy = tmp_path / f"{name}.toml"
    policy.write_text(POLICY)
    return sqlwa("check", str(store_dir), "--policy", str(policy), "--json", check=False)


def test_the_gate_passes_durable_settings_and_fails_one_that_loses_commits(crash_runs, tmp_path):
    """The store keeps the crash states' figures (read back with sqlite3) and `sqlwa check`
    holds max_lost_commits and forbid_corruption against them."""
    durable = checked(tmp_path, "durable", [crash_runs["ext4-wal-full"].out_dir])
    assert durable.returncode == 0, durable.stdout + durable.stderr
    losing = checked(tmp_path, "losing", [crash_runs["ext4-wal-off"].out_dir])
    assert losing.returncode == 1
    verdicts = {c["check"]: c["outcome"] for c in json.loads(losing.stdout)["checks"]}
    assert verdicts["max_lost_commits"] == "violation"
    with sqlite3.connect(tmp_path / "losing" / store.STORE_FILE) as conn:
        lost, states = conn.execute("SELECT lost_commits, crash_states FROM runs").fetchone()
    found = durability(crash_runs["ext4-wal-off"])
    assert (lost, states) == (found["lost_commits"]["max"], found["states"])


def test_every_crash_run_is_of_the_summary_schema(crash_runs) -> None:
    """``durability`` (and its ``wal_checkpoint``), config.lab.write_log."""
    for name, run in crash_runs.items():
        assert schema.check_summary(run.summary) == [], name
