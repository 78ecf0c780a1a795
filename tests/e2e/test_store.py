"""The results store: schema version and migrations, absent layers stay NULL, runs load
back whole, and several processes writing at once lose nothing."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from helpers import REPO, sqlwa
from sqlwa.results import rundir, store
from sqlwa.views import report

OLD_LAB_RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-delete"  # trace.txt, no events.parquet


@pytest.fixture(scope="module")
def vfs_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vfs-run") / "run"
    sqlwa("run", "-j", "wal", "--sync", "full", "-n", "20", "--warmup", "2", "--out", str(out))
    return out


def test_new_store_has_current_schema_and_wal_mode(tmp_path):
    conn = store.connect(tmp_path / "results.sqlite")
    assert store.schema_version(conn) == store.STORE_SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"runs", "commits", "runs_by_config"} <= names


def test_a_store_at_rest_has_no_wal_files_and_its_readers_leave_none(tmp_path):
    """A finished matrix leaves its store alone in the directory, and reading it (report,
    compare, check: read-only connections) adds no -wal or -shm file beside it, where a
    read-only connection to a store left in WAL mode would make both and could not
    remove them. A writer that is not alone leaves the mode as it is."""
    out = tmp_path / "m"
    sqlwa("matrix", "-j", "wal,delete", "--sync", "full", "-n", "5", "--warmup", "1", "--out", str(out))
    sqlwa("report", str(out), "-o", str(tmp_path / "report.html"))
    sqlwa("compare", str(out), str(out))
    assert sorted(p.name for p in out.iterdir()) == ["results.sqlite", "runs"]
    other = store.connect(out / store.STORE_FILE)  # WAL again while a writer has it
    writer = store.connect(out / store.STORE_FILE)
    store.close(writer)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close(other)
    assert sorted(p.name for p in out.iterdir()) == ["results.sqlite", "runs"]


def test_old_store_is_migrated_and_keeps_its_rows(tmp_path, vfs_run):
    path = tmp_path / "results.sqlite"
    raw = sqlite3.connect(path)
    raw.executescript(store.MIGRATIONS[0])
    raw.execute("INSERT INTO runs (run_key, status, frame_budget_misses) VALUES ('old', 'ok', 3)")
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()
    conn = store.connect(path)
    assert store.schema_version(conn) == store.STORE_SCHEMA_VERSION
    assert tuple(conn.execute("SELECT run_key, frame_budget_misses, frame_budget_miss_pct FROM runs").fetchone()) == (
        "old",
        3,
        None,
    )
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'runs_by_config'").fetchone()
    store.save_run_dir(path, vfs_run)  # and the migrated store takes new runs with every column
    assert conn.execute("SELECT count(*) FROM runs WHERE frame_budget_miss_pct IS NOT NULL").fetchone()[0] == 1


def version_4_store(path: Path) -> None:
    """A store as sqlwa made it before the layers were configuration keys: a layered run
    (only a run directory saved into a store could be one) and a skipped matrix cell."""
    raw = sqlite3.connect(path)
    for migration in store.MIGRATIONS[:4]:
        raw.executescript(migration)
    layered = {"scenario": "s", "fs": "ext4", "encrypt": "fscrypt", "fuse": "passthrough", "profile": {"name": "p"}}
    raw.execute(
        "INSERT INTO runs (id, run_key, status, scenario, fs, journal, sync, levels, config_json) "
        "VALUES (1, 'layered', 'ok', 's', 'ext4', 'wal', 'full', '[\"vfs\"]', ?)",
        (json.dumps(layered),),
    )
    raw.execute("INSERT INTO commits (run_id, idx, warmup, latency_ns) VALUES (1, 0, 0, 1000000)")
    raw.execute(
        "INSERT INTO runs (id, run_key, status, scenario, fs, journal, sync) VALUES (2, 'skipped', 'skipped', 's', 'xfs', 'wal', 'full')"
    )
    raw.execute("PRAGMA user_version = 4")
    raw.commit()
    raw.close()


def test_a_store_from_before_the_layers_reads_them_from_each_runs_config(tmp_path):
    path = tmp_path / store.STORE_FILE
    version_4_store(path)
    expected = [("fscrypt", "passthrough", "p"), ("none", "none", "none")]
    # read as it is (readers never migrate) ...
    runs = store.load_results(tmp_path)
    assert list(runs.select("encrypt", "fuse", "profile").iter_rows()) == expected
    latencies = store.load_latencies(tmp_path)
    assert latencies.select("encrypt", "fuse", "profile").row(0) == expected[0]
    # ... and migrated by a writer to the same values, in columns of their own
    conn = store.connect(path)
    assert store.schema_version(conn) == store.STORE_SCHEMA_VERSION
    assert [tuple(r) for r in conn.execute("SELECT encrypt, fuse, profile FROM runs ORDER BY id")] == expected
    indexed = [r["name"] for r in conn.execute("PRAGMA index_info('runs_by_config')")]
    assert indexed == ["scenario", "fs", "encrypt", "fuse", "profile", "crypt", "journal", "sync", "status"]


def version_6_store(path: Path) -> None:
    """A store as sqlwa made it before dm-crypt was a layer (schema version 6): a dm-crypt
    run saved from its run directory (its config says so), a plain run, and a skipped
    fscrypt cell (no config at all)."""
    raw = sqlite3.connect(path)
    for script in store.MIGRATIONS[:6]:
        raw.executescript(script)
    rows = [
        (1, "fde", "ok", "none", json.dumps({"crypt": "dm-crypt-luks2", "encrypt": "none"})),
        (2, "plain", "ok", "none", json.dumps({"encrypt": "none"})),
        (3, "skipped", "skipped", "fscrypt", None),
    ]
    raw.executemany(
        "INSERT INTO runs (id, run_key, status, scenario, fs, encrypt, fuse, profile, journal, sync, levels, "
        "config_json) VALUES (?, ?, ?, 's', 'ext4', ?, 'none', 'none', 'wal', 'full', '[\"vfs\"]', ?)",
        rows,
    )
    raw.execute("INSERT INTO commits (run_id, idx, warmup, latency_ns) VALUES (1, 0, 0, 1000000)")
    raw.execute("PRAGMA user_version = 6")
    raw.commit()
    raw.close()


def test_a_store_from_before_dm_crypt_was_a_layer_reads_it_from_each_runs_config(tmp_path):
    path = tmp_path / store.STORE_FILE
    version_6_store(path)
    expected = [("none", "dm-crypt-luks2"), ("none", "none"), ("fscrypt", "none")]
    runs = store.load_results(tmp_path)  # read as it is: readers never migrate
    assert list(runs.select("encrypt", "crypt").iter_rows()) == expected
    assert store.load_latencies(tmp_path).select("crypt").row(0) == ("dm-crypt-luks2",)
    assert store.config_means(runs)["crypt"].to_list() == ["dm-crypt-luks2", "none"]  # not one configuration
    conn = store.connect(path)  # a writer migrates it to the same values, in a column of its own
    assert store.schema_version(conn) >= 7  # crypt's column came with version 7
    assert [tuple(r) for r in conn.execute("SELECT encrypt, crypt FROM runs ORDER BY id")] == expected


def version_5_store(path: Path) -> None:
    """A store as sqlwa made it before the CPU columns (schema version 5), with one run."""
    raw = sqlite3.connect(path)
    for script in store.MIGRATIONS[:5]:
        raw.executescript(script)
    raw.execute("INSERT INTO runs (run_key, status, levels, p50_ms) VALUES ('old', 'ok', '[\"vfs\"]', 1.5)")
    raw.execute("INSERT INTO commits (run_id, idx, latency_ns) VALUES (1, 0, 1500000)")
    raw.execute("PRAGMA user_version = 5")
    raw.commit()
    raw.close()


def test_a_version_5_store_reads_without_cpu_and_migrates_to_keep_it(tmp_path, vfs_run):
    path = tmp_path / "results.sqlite"
    version_5_store(path)
    # readers never migrate: the runs an older sqlwa saved have no CPU time, not 0
    [row] = store.load_results(tmp_path).iter_rows(named=True)
    assert row["cpu_ms_per_commit"] is None and row["p50_ms"] == 1.5
    conn = store.connect(path)
    assert store.schema_version(conn) == store.STORE_SCHEMA_VERSION
    assert tuple(conn.execute("SELECT latency_ns, cpu_user_ns, cpu_sys_ns FROM commits").fetchone()) == (
        1500000,
        None,
        None,
    )
    store.save_run_dir(path, vfs_run)
    commits = pl.read_parquet(vfs_run / "commits.parquet")
    new = conn.execute("SELECT sum(cpu_user_ns), sum(cpu_sys_ns) FROM commits WHERE run_id = 2").fetchone()
    assert tuple(new) == (commits["cpu_user_ns"].sum(), commits["cpu_sys_ns"].sum())
    [mean] = conn.execute("SELECT cpu_ms_per_commit FROM runs WHERE run_key != 'old'").fetchone()
    assert mean == pytest.approx(commits.filter(~pl.col("warmup"))["cpu_ns"].mean() / 1e6)


def test_newer_store_is_refused(tmp_path):
    path = tmp_path / "results.sqlite"
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {store.STORE_SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(store.UsageError, match="newer than this sqlwa"):
        store.connect(path)


def test_vfs_run_round_trip_with_absent_levels_null(tmp_path, vfs_run):
    path = tmp_path / "results.sqlite"
    store.save_run_dir(path, vfs_run)
    runs = store.load_results(tmp_path)
    assert runs.height == 1
    row = runs.row(0, named=True)
    summary = json.loads((vfs_run / "summary.json").read_text())
    cfg = summary["config"]
    assert row["sqlite_version"] == cfg["sqlite_version"]
    assert json.loads(row["sqlite_compile_options"]) == cfg["sqlite_compile_options"]
    assert row["kernel"] == cfg["kernel"] and row["tool_version"] == cfg["tool_version"]
    assert row["vfs_sync_calls_per_commit"] == summary["per_commit"]["vfs_sync_calls"]
    # block and syscall levels were not measured: absent, never 0
    for name in ("fsync_calls_per_commit", "write_kib_per_commit", "block_over_logical", "flushes_per_commit"):
        assert row[name] is None, name
    conn = store.connect(path)
    commits = conn.execute("SELECT count(*), sum(warmup), max(write_bytes), max(fsync_calls) FROM commits").fetchone()
    assert tuple(commits) == (22, 2, None, None)


def test_saving_records_the_event_table_and_never_parses_the_trace(tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(OLD_LAB_RUN, run)
    path = tmp_path / "results.sqlite"
    store.save_run_dir(path, run)
    assert not (run / "events.parquet").exists()  # saving wrote nothing into the run
    [row] = store.load_results(tmp_path).iter_rows(named=True)
    assert row["events_path"] is None
    # readers still get the run's events: derived from trace.txt on the fly
    assert report.has_events(row) and report.read_events(row).equals(rundir.events(run))
    fig, _ = report.timeline(row)
    assert len(fig.layout.shapes) == 12  # the first measured commits' windows
    rundir.events(run).write_parquet(run / "events.parquet")  # as a lab run writes it
    store.save_run_dir(path, run)
    [row] = store.load_results(tmp_path).iter_rows(named=True)
    assert row["events_path"] == str((run / "events.parquet").resolve())


def test_frame_budget_misses_count_slow_measured_commits():
    commits = pl.DataFrame(
        {"warmup": [True, False, False, False], "latency_ns": [90_000_000, 1_000_000, 17_000_000, 16_000_000]}
    )
    figures = store.latency_figures(commits)
    assert figures["frame_budget_misses"] == 1
    # by hand: 1 of the 3 measured commits; p99.9 of 1, 16, 17 ms interpolated at rank 1.998
    assert figures["frame_budget_miss_pct"] == pytest.approx(100 / 3)
    assert figures["p999_ms"] == pytest.approx(16 + 0.998)


def test_load_results_refuses_a_directory_without_results(tmp_path):
    with pytest.raises(store.UsageError, match="neither"):
        store.load_results(tmp_path)


def _writer(args) -> int:
    store_path, run_dir, worker, count = args
    for i in range(count):
        record = store.RunRecord(
            run_key=f"w{worker}-{i}", config=store.RunConfig("s", "none", "wal", "full"), run_dir=Path(run_dir)
        )
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        commits = pl.read_parquet(Path(run_dir) / "commits.parquet")
        conn = store.connect(Path(store_path))  # a fresh connection each time: opening races too
        store.save_run(conn, record, summary, commits, base=Path(store_path).parent)
        conn.close()
    return count


def test_concurrent_writers_lose_nothing(tmp_path, vfs_run):
    path = tmp_path / "results.sqlite"  # does not exist yet: creation and migration race as well
    workers, each = 6, 8
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        written = pool.map(_writer, [(str(path), str(vfs_run), w, each) for w in range(workers)])
    assert sum(written) == workers * each
    conn = store.connect(path)
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == workers * each
    assert conn.execute("SELECT count(*) FROM commits").fetchone()[0] == workers * each * 22
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
