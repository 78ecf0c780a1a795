"""Per-commit CPU time of the SQL thread, from the engine to commits.parquet, summary.json,
the results store and the terminal table.

Truth is what the kernel says of the thread or process, read by the test around the whole
run, not sqlwa's numbers: ``time.thread_time_ns()`` (CLOCK_THREAD_CPUTIME_ID of the test's
own thread, which runs the engine) and its runqueue wait in /proc/thread-self/schedstat
for a run in this process; ``getrusage(RUSAGE_CHILDREN)`` for ``sqlwa run`` as a child.
The commits are inside the run, so their CPU time adds up to at most the whole; a
CPU-bound transaction's latency is CPU time but for the time it waited for a CPU (the
machine is shared), and a commit that sleeps (on another connection's lock) is not.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa
from sqlwa.measure import engine
from sqlwa.results import store

# Each transaction sums 1..N in a recursive CTE (a view the transaction reads) and stores
# one row: a few milliseconds of CPU in SQLite, no device wait with synchronous=OFF.
CPU_BOUND = """
name = "cpu-bound"
txns = 8
warmup = 1
[[table]]
name = "results"
columns = ["id INTEGER PRIMARY KEY", "v INTEGER"]
[[table]]
name = "burn"
sql = "CREATE VIEW burn AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT sum(x) AS s FROM c"
[[txn]]
op = "select"
table = "burn"
[[txn]]
op = "insert"
table = "results"
values = { v = { kind = "int", min = 1, max = 9 } }
"""


@pytest.fixture
def cpu_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "cpu-bound.toml"
    path.write_text(CPU_BOUND)
    return path


def runqueue_wait_ns() -> int:
    """Nanoseconds this thread has waited for a CPU (schedstat's second field)."""
    return int(Path("/proc/thread-self/schedstat").read_text().split()[1])


def test_a_cpu_bound_run_is_cpu_time_within_the_threads_own(cpu_scenario: Path, tmp_path: Path) -> None:
    settings = engine.RunSettings(sync="off")
    clock, waited = time.thread_time_ns(), runqueue_wait_ns()
    result = engine.run_workload(engine.load_scenario(str(cpu_scenario)), settings, tmp_path / "db")
    clock, waited = time.thread_time_ns() - clock, runqueue_wait_ns() - waited
    commits = result.commits
    assert result.info["tid"] == threading.get_native_id()  # the engine ran in this thread
    assert (commits["cpu_ns"] == commits["cpu_user_ns"] + commits["cpu_sys_ns"]).all()
    assert (commits["cpu_ns"] <= commits["latency_ns"]).all()
    cpu, latency = int(commits["cpu_ns"].sum()), int(commits["latency_ns"].sum())
    assert 0 < cpu <= clock, (cpu, clock)
    # all the latency that was not waiting for a CPU is CPU time (the wait is read over
    # the whole run, so it is at least the commits' share of it)
    assert cpu >= 0.8 * (latency - waited), (cpu, latency, waited)


# Another process (POSIX locks of one process never conflict with each other) takes the
# write lock, says so, and holds it for 300 ms.
HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(0.3)
conn.execute("COMMIT")
"""


def test_a_commit_waiting_on_a_lock_is_latency_not_cpu(tmp_path: Path) -> None:
    """The lock is taken before the first transaction; SQLite's busy handler sleeps until
    it is free."""
    settings = engine.RunSettings(length=engine.Length(txns=3, warmup=0), extra_pragmas=["busy_timeout=10000"])
    db_dir = tmp_path / "db"
    holder: list[subprocess.Popen] = []

    def lock_first(done: int, total: int) -> None:
        if done == 0 and not holder:
            argv = [sys.executable, "-c", HOLD_LOCK, str(db_dir / "kv-prefs.db")]
            holder.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
            assert holder[0].stdout is not None and holder[0].stdout.readline() == "locked\n"

    try:
        result = engine.run_workload(engine.load_scenario("kv-prefs"), settings, db_dir, progress=lock_first)
    finally:
        for proc in holder:
            assert proc.wait(30) == 0
    first = result.commits.row(0, named=True)
    assert first["latency_ns"] >= 250_000_000, first
    assert first["cpu_ns"] * 10 < first["latency_ns"], first


def test_sqlwa_run_records_cpu_per_commit_everywhere(cpu_scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = sqlwa("run", "-s", str(cpu_scenario), "--sync", "off", "--dir", str(tmp_path), "--out", str(out))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu_ns = (after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime) * 1e9
    commits = pl.read_parquet(out / "commits.parquet")
    measured = commits.filter(~pl.col("warmup"))
    # the commits' CPU time is part of the whole process's, as the kernel counted it
    assert 0 < commits["cpu_ns"].sum() <= child_cpu_ns
    summary = json.loads((out / "summary.json").read_text())
    cpu = summary["cpu_ms"]
    ms = measured["cpu_ns"] / 1e6
    assert cpu["p50"] == pytest.approx(ms.quantile(0.5, interpolation="linear"))
    assert cpu["max"] == pytest.approx(ms.max())
    assert cpu["share_of_latency"] == pytest.approx(measured["cpu_ns"].sum() / measured["latency_ns"].sum())
    assert summary["per_commit"]["cpu_user_ns"] == pytest.approx(measured["cpu_user_ns"].mean())
    assert "CPU of the SQL thread (user + sys) p50" in proc.stdout and f"{cpu['p50']:.3f}" in proc.stdout
    # the store keeps the commits' CPU time and the run's mean
    path = tmp_path / store.STORE_FILE
    store.save_run_dir(path, out)
    conn = store.connect(path)
    stored = conn.execute("SELECT idx, cpu_user_ns, cpu_sys_ns FROM commits ORDER BY idx").fetchall()
    assert [tuple(r) for r in stored] == commits.select("index", "cpu_user_ns", "cpu_sys_ns").rows()
    [mean] = conn.execute("SELECT cpu_ms_per_commit FROM runs").fetchone()
    conn.close()
    assert mean == pytest.approx(measured["cpu_ns"].mean() / 1e6)
