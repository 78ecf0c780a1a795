"""A sweep sharded over a real batch engine (#37): the cells of `sqlwa matrix --plan`, run as
4 shards by GNU parallel (`--shard {#}/4`, parallel's own 1-based job number), merged with
`sqlwa merge`, give the same store rows (every count exact, timing columns present) and
the same `sqlwa check` verdicts and JUnit (times aside) as the same matrix run whole on
one machine. A shard killed part-way (SIGKILL: no clean-up of its own) leaves a merge that
is partial; re-run alone with --resume, it completes. Shards of different store schema
versions, or of one cell with different results, are refused in one line, exit 2.

The truth for the merged result is the same sweep run whole (the original program's own
result) and the cells `--plan` lists; the truth for "every cell once" is the union of the
shards' run keys against the plan's."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import sqlwa, sqlwa_in_process
from sqlwa.catalogue import METRICS
from sqlwa.results import store

SHARDS = 4
# 2 scenarios x 4 journals x 2 syncs = 16 VFS-level cells, a few commits each.
VFS_SWEEP = (
    "--vfs-only",
    "-s",
    "mobibench-insert,messenger",
    "-j",
    "delete,truncate,persist,wal",
    "--sync",
    "full,normal",
    "-n",
    "8",
    "--warmup",
    "0",
)
# 2 lab cells on fresh ext4 filesystems (root), in 2 shards: block and syscall levels too.
LAB_SWEEP = ("--fs", "ext4", "-j", "delete,wal", "--sync", "full", "-n", "5", "--warmup", "0")

# Count rules (lab cells: some fail, some hold) and two latency rules whose verdict no run
# can change (a p99 above one nanosecond, a p50 below 1000 s): timings differ between any
# two runs of a cell, so a realistic timing limit's verdict may too (what `check`'s
# statistics are for). The latency rules' measured values are times, compared as such.
POLICY = """
[options]
allow_unmeasured = true

[[rule]]
name = "syncs"
max_fsync_calls_per_commit = 2

[[rule]]
name = "latency floor"
journal = "delete"
max_p99_ms = 0.000001

[[rule]]
name = "latency ceiling"
max_p50_ms = 1000000
"""

# The per-commit columns that are counts; the rest (start, latency, CPU time) are timings.
# The block level's counts are exact for a run, but two runs of one lab cell may differ
# (when ext4's journal commits, what else the device sees), so the whole sweep and the
# shards, which are separate runs, agree on them as present, not as equal; the merge is
# held to the shards' own rows exactly, every column.
COMMIT_COUNTS = ("idx", "warmup", "logical_bytes", "vfs_write_calls", "vfs_write_bytes", "vfs_sync_calls")
COMMIT_COUNTS += ("fsync_calls", "fdatasync_calls", "pwrite_calls", "pwrite_bytes")
BLOCK_COLUMNS = ("write_requests", "write_bytes", "flush_requests", "fua_writes")
RUN_COUNTS = ("run_key", "cell", "status", "scenario", "fs", "journal", "sync", "levels", "commits", "lost_events")
COUNT_METRICS = tuple(
    name for name, metric in METRICS.items() if not metric.timing and metric.level in ("vfs", "syscall")
)
BLOCK_METRICS = tuple(name for name, metric in METRICS.items() if metric.level == "block")
TIMING_COLUMNS = ("started_at", "finished_at", "p50_ms", "p99_ms", "max_ms", "frame_budget_miss_pct")
# Where a run's files are: the merge moves them into its own directory.
PATH_COLUMNS = ("id", "run_dir", "events_path")


def need_parallel() -> str:
    """GNU parallel (scripts/system-deps installs it); without root the test skips, saying
    so; as root its absence is a set-up failure, not a reason to skip."""
    found = shutil.which("parallel")
    if found is None:
        if os.geteuid() != 0:
            pytest.skip("GNU parallel is not installed (sudo ./scripts/system-deps installs it)")
        pytest.fail("GNU parallel is not installed: run ./scripts/system-deps")
    return found


def store_rows(out: Path) -> dict[str, dict]:
    """Every run of a matrix straight from its results.sqlite (not through sqlwa's
    readers): its count columns, whether its timings and block figures are there, and
    its commits' counts."""
    rows = {}
    for key, (run, commits) in raw_rows(out).items():
        rows[key] = {
            **{name: run[name] for name in (*RUN_COUNTS, *COUNT_METRICS)},
            "timings_present": all(run[name] is not None for name in TIMING_COLUMNS),
            "block_present": [run[name] is not None for name in BLOCK_METRICS],
            "hostname": run["hostname"],
            "commit_rows": [tuple(c[name] for name in COMMIT_COUNTS) for c in commits],
            "commit_block_present": [tuple(c[name] is not None for name in BLOCK_COLUMNS) for c in commits],
        }
    return rows


def raw_rows(out: Path) -> dict[str, tuple[dict, list[dict]]]:
    """Every run's whole row (but where its files are) and its commits' whole rows."""
    found = {}
    with sqlite3.connect(f"file:{out / store.STORE_FILE}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        for run in conn.execute("SELECT * FROM runs ORDER BY id"):
            commits = conn.execute("SELECT * FROM commits WHERE run_id = ? ORDER BY idx", (run["id"],))
            found[run["run_key"]] = (
                {name: run[name] for name in run.keys() if name not in PATH_COLUMNS},
                [{name: c[name] for name in c.keys() if name != "run_id"} for c in commits],
            )
    return found


def without_times(text: str) -> str:
    """A check's output or JUnit with its times blanked: seconds spent, and the measured
    latencies of the latency rules (in lines and in properties)."""
    text = re.sub(r' (time|timestamp)="[^"]*"', "", text)
    text = re.sub(r"(max_p\d+_ms measured )[\d.,]+", r"\1T", text)
    return re.sub(r'(name="[^"]*max_p\d+_ms" value=)"[^"]*"', r'\1"T"', text)


def run_shards(tmp: Path, sweep: tuple[str, ...], count: int = SHARDS, kill_shard: int | None = None) -> list[Path]:
    """The shards run by GNU parallel, `{#}` (1-based job number) as K, each into its own
    --out; with ``kill_shard``, that shard is SIGKILLed once its first cell has started."""
    outs = [tmp / f"s{k}" for k in range(1, count + 1)]
    command = [need_parallel(), "--will-cite", "-j", str(count), "--halt", "never"]
    command += [
        sys.executable,
        "-m",
        "sqlwa",
        "matrix",
        *sweep,
        "--shard",
        f"{{#}}/{count}",
        "--out",
        str(tmp / "s{#}"),
    ]
    command += [":::", *map(str, range(1, count + 1))]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_shard is not None:
        kill_when_started(outs[kill_shard - 1], proc)
    stdout, stderr = proc.communicate(timeout=600)
    expected = 0 if kill_shard is None else 1  # parallel's exit status: the number of failed jobs
    assert proc.returncode == expected, f"{stdout[-2000:]}\n{stderr[-3000:]}"
    if kill_shard is not None:  # what a user does after a kill -9: its scratch directory goes
        sqlwa("lab", "cleanup")
    return outs


def kill_when_started(out: Path, proc: subprocess.Popen) -> None:
    """SIGKILL the sweep writing ``out`` (its pid from sqlwa's own lock file) as soon as a
    cell of it is running."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        running = list(out.glob("runs/*/RUNNING"))
        lock = out / ".sqlwa.lock"
        if running and lock.exists():
            holder = re.search(r"\(pid (\d+),", lock.read_text())
            if holder:
                os.kill(int(holder[1]), signal.SIGKILL)
                return
        assert proc.poll() is None, "the shards finished before one could be killed"
        time.sleep(0.005)
    raise AssertionError(f"no cell of {out} started")


def merged_against_whole(tmp: Path, sweep: tuple[str, ...], shards: list[Path]) -> None:
    """The merge of ``shards`` holds what the sweep run whole holds, and checks the same."""
    whole = tmp / "whole"
    sqlwa("matrix", *sweep, "--out", str(whole))
    merged = tmp / "merged"
    done = sqlwa_in_process("merge", str(merged), *map(str, shards))
    assert done.returncode == 0, done.stderr
    assert "partial" not in done.stderr, done.stderr

    union = {key: row for shard in shards for key, row in raw_rows(shard).items()}
    assert raw_rows(merged) == union  # the merge: the shards' rows, every column, nothing else
    want, got = store_rows(whole), store_rows(merged)
    assert list(got) == list(want)  # every cell once, in the sweep's own order
    for key in want:
        assert got[key]["timings_present"], key
        assert got[key] == want[key], key

    policy = tmp / "policy.toml"
    policy.write_text(POLICY)
    checks = {}
    for name, out in (("whole", whole), ("merged", merged)):
        proc = sqlwa_in_process("check", "--policy", str(policy), str(out), "--junit", str(tmp / f"{name}.xml"))
        checks[name] = proc
    assert checks["whole"].returncode == checks["merged"].returncode == 1  # some rule fails: not a trivial pass
    assert without_times(checks["merged"].stdout) == without_times(checks["whole"].stdout)
    assert checks["merged"].stderr == checks["whole"].stderr  # "N checks: P passed, V violated …"
    assert "FAIL" in checks["whole"].stdout and re.search(r" [1-9]\d* passed", checks["whole"].stderr)
    assert without_times((tmp / "merged.xml").read_text()) == without_times((tmp / "whole.xml").read_text())

    # The other readers take the merged matrix as a local one.
    for command in (
        ("report", "-o", str(tmp / "page.html")),
        ("compare", str(whole)),
        ("predict", "-d", "moto-z-2016"),
    ):
        on_whole = sqlwa_in_process(command[0], str(whole), *command[1:])
        on_merged = sqlwa_in_process(command[0], str(merged), *command[1:])
        # predict needs the block level: on a VFS-level sweep both refuse, alike
        assert on_merged.returncode == on_whole.returncode, on_merged.stderr
        assert on_merged.stderr.replace(str(merged), "M") == on_whole.stderr.replace(str(whole), "M")


def plan_keys(sweep: tuple[str, ...], shard: str | None = None) -> list[str]:
    args = ("--shard", shard) if shard else ()
    return [cell["key"] for cell in json.loads(sqlwa_in_process("matrix", *sweep, "--plan", *args).stdout)["cells"]]


def test_a_sweep_in_four_shards_by_gnu_parallel_merges_into_the_same_matrix(tmp_path):
    everything = plan_keys(VFS_SWEEP)
    assert len(everything) == 16
    parts = [plan_keys(VFS_SWEEP, f"{k}/4") for k in range(1, 5)]
    assert sorted(sum(parts, [])) == sorted(everything) and all(len(part) == 4 for part in parts)

    shards = run_shards(tmp_path, VFS_SWEEP, kill_shard=2)
    killed = store_rows(shards[1])
    assert len(killed) < 4 and list((shards[1] / "runs").glob("*/RUNNING"))  # cut short, mid-cell
    partial = sqlwa_in_process("merge", str(tmp_path / "partial"), *map(str, shards))
    assert f"partial: {12 + len(killed)} of 16 cells" in partial.stderr

    resumed = sqlwa("matrix", *VFS_SWEEP, "--shard", "2/4", "--out", str(shards[1]), "--resume")
    assert resumed.stderr.count("done-earlier") == len(killed)
    for k, shard in enumerate(shards, start=1):  # each shard ran its part of the plan, no more
        assert sorted(store_rows(shard)) == sorted(parts[k - 1])

    merged_against_whole(tmp_path, VFS_SWEEP, shards)


@pytest.mark.root
def test_lab_cells_in_shards_merge_into_the_same_matrix(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("lab cells need root")
    shards = run_shards(tmp_path, LAB_SWEEP, count=2)
    merged_against_whole(tmp_path, LAB_SWEEP, shards)


def test_merge_refuses_other_schema_versions_and_different_results(tmp_path):
    base = ("--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "5", "--warmup", "0")
    one, two = tmp_path / "one", tmp_path / "two"
    sqlwa("matrix", *base, "--shard", "1/2", "--out", str(one))
    sqlwa("matrix", *base, "--out", str(two))  # the whole sweep: overlaps shard 1's cell

    same = sqlwa_in_process("merge", str(tmp_path / "ok"), str(one), str(two))  # VFS counts are exact: identical
    assert same.returncode == 0 and "taken once" in same.stderr, same.stderr

    # One cell with another result: its fsync count changed in the second store.
    with sqlite3.connect(two / store.STORE_FILE) as conn:
        conn.execute("UPDATE runs SET vfs_sync_calls_per_commit = vfs_sync_calls_per_commit + 1")
    refused = sqlwa_in_process("merge", str(tmp_path / "m1"), str(one), str(two))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) <= 2, refused.stderr
    assert "with different results: vfs_sync_calls_per_commit" in refused.stderr
    assert not (tmp_path / "m1").exists()

    # A store of another schema version (as an older sqlwa would have left it).
    with sqlite3.connect(two / store.STORE_FILE) as conn:
        conn.execute(f"PRAGMA user_version = {store.STORE_SCHEMA_VERSION - 1}")
    refused = sqlwa_in_process("merge", str(tmp_path / "m2"), str(one), str(two))
    assert refused.returncode == 2 and "shards of different store schema versions" in refused.stderr
    assert not (tmp_path / "m2").exists()

    # Shards of another sweep, and an OUT that is not sqlwa's.
    other = tmp_path / "other"
    sqlwa("matrix", *base[:-4], "-n", "6", "--warmup", "0", "--shard", "2/2", "--out", str(other))
    refused = sqlwa_in_process("merge", str(tmp_path / "m3"), str(one), str(other))
    assert refused.returncode == 2 and "part of another sweep" in refused.stderr and "-n 6" in refused.stderr
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    refused = sqlwa_in_process("merge", str(foreign), str(one))
    assert refused.returncode == 2 and "notes.txt" in refused.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_merge_refuses_a_damaged_plan_and_keeps_a_failed_cells_missing_directory_out(tmp_path):
    base = ("--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "5", "--warmup", "0")
    one, two = tmp_path / "one", tmp_path / "two"
    sqlwa("matrix", *base, "--shard", "1/2", "--out", str(one))
    sqlwa("matrix", *base, "--shard", "2/2", "--out", str(two))

    # A failed cell that left no directory: its row names none in OUT, and nothing is there.
    with sqlite3.connect(two / store.STORE_FILE) as conn:
        (run_dir,) = conn.execute("SELECT run_dir FROM runs").fetchone()
        conn.execute("UPDATE runs SET status = 'failed'")
    gone = Path(run_dir) if Path(run_dir).is_absolute() else two / run_dir
    shutil.rmtree(gone)
    merged = sqlwa_in_process("merge", str(tmp_path / "m"), str(one), str(two))
    assert merged.returncode == 0, merged.stderr
    with sqlite3.connect(tmp_path / "m" / store.STORE_FILE) as conn:
        failed = conn.execute("SELECT run_dir FROM runs WHERE status = 'failed'").fetchone()[0]
    assert failed is None and len(list((tmp_path / "m" / "runs").iterdir())) == 1

    # A plan whose cell keys are one string, not a list (a damaged store): one line.
    with sqlite3.connect(two / store.STORE_FILE) as conn:
        plan = json.loads(conn.execute("SELECT plan_json FROM matrix_plan").fetchone()[0])
        for key in ("cell_keys", "matrix_cell_keys"):
            plan[key] = ",".join(plan[key])
        conn.execute("UPDATE matrix_plan SET plan_json = ?", (json.dumps(plan),))
    refused = sqlwa_in_process("merge", str(tmp_path / "m2"), str(one), str(two))
    assert refused.returncode == 2 and "stored plan is damaged" in refused.stderr, refused.stderr
    assert not (tmp_path / "m2").exists()
