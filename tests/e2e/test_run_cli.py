"""``sqlwa run`` at the VFS level (no root): outputs, the summary.json contract,
SQLite's documented sync sequence, and clean errors for bad input."""

from __future__ import annotations

import json

import polars as pl
import pytest
from rich.console import Console

from helpers import run_summary, sqlwa


def test_default_run_writes_summary_and_commits(tmp_path):
    summary = run_summary(tmp_path / "out", "--txns", "40", "--warmup", "5")
    assert summary["levels"] == ["vfs"]
    assert summary["commits"] == 40
    cfg = summary["config"]
    for key in ("scenario", "fs", "journal", "sync", "txns", "sqlite_version", "kernel"):
        assert key in cfg, key
    assert cfg["scenario"] == "mobibench-insert" and cfg["journal"] == "delete" and cfg["sync"] == "full"
    assert set(summary["per_commit"]) >= {"logical_bytes", "vfs_write_calls", "vfs_write_bytes", "vfs_sync_calls"}
    assert set(summary["vfs_by_file"]) >= {"db", "journal", "wal"}
    assert set(summary["latency_ms"]) >= {"p50", "p90", "p99", "max"}
    # MobiBench's insert transaction: a row into each of its three tables, a 100-byte
    # value and an 8-byte id each
    assert summary["per_commit"]["logical_bytes"] == 3 * (100 + 8)

    commits = pl.read_parquet(tmp_path / "out" / "commits.parquet")
    assert commits.height == 45
    assert commits["warmup"].sum() == 5
    assert (commits["end_ns"] > commits["start_ns"]).all()
    assert (commits["start_ns"].diff().drop_nulls() > 0).all()


def test_json_flag_prints_the_summary(tmp_path):
    proc = sqlwa("run", "--txns", "5", "--json", "--out", str(tmp_path / "o"))
    assert json.loads(proc.stdout)["commits"] == 5


def test_table_names_the_measured_level(tmp_path):
    proc = sqlwa("run", "--txns", "5", "--out", str(tmp_path / "o"))
    assert "VFS" in proc.stdout and "block and syscall levels were not measured" in proc.stdout


def test_a_run_without_a_lab_says_beside_its_latency_that_the_device_was_not_measured(tmp_path):
    """A plain run times commits on whatever filesystem its directory is on, but counts no
    device write or flush (#33, item 10): the line saying so follows the table whose last
    rows are the latency and frame misses, and summary.json carries the same line."""
    proc = sqlwa("run", "--txns", "5", "--dir", str(tmp_path), "--out", str(tmp_path / "o"))
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert "block" not in summary["levels"]  # the truth: no block request was seen
    lines = proc.stdout.splitlines()
    note = next(i for i, line in enumerate(lines) if line.startswith("device not measured"))
    assert lines[note - 1].startswith("└")  # right under the table, whose last rows are the frame budget's
    assert any("frame budget" in line for line in lines[note - 4 : note - 1])
    assert lines[note] == summary["device_not_measured"]
    assert "latency and frame misses" in lines[note] and "as root with --fs ext4" in lines[note]
    printed = json.loads(
        sqlwa("run", "--txns", "5", "--dir", str(tmp_path), "--json", "--out", str(tmp_path / "j")).stdout
    )
    assert printed["device_not_measured"] == summary["device_not_measured"]


def test_a_lab_run_says_nothing_of_an_unmeasured_device():
    from helpers import REPO
    from sqlwa.views.terminal import print_summary

    summary = json.loads((REPO / "traces/samples/sqlwa-runs/ext4-wal/summary.json").read_text())
    assert "block" in summary["levels"] and "device_not_measured" not in summary
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    print_summary(summary, console)
    assert "device not measured" not in console.export_text()


# SQLite's documented per-commit xSync sequence (docs/reference/sqlite-commit-syncs.md);
# at the VFS level the directory sync is inside the journal's first xSync.
VFS_SYNCS = {
    ("wal", "normal"): {"wal": 0, "db": 0},
    ("wal", "full"): {"wal": 1, "db": 0},
    ("delete", "full"): {"journal": 2, "db": 1},
    ("delete", "normal"): {"journal": 1, "db": 1},
    ("truncate", "full"): {"journal": 3, "db": 1},
    ("persist", "full"): {"journal": 3, "db": 1},
    ("delete", "off"): {"journal": 0, "db": 0},
}


@pytest.mark.parametrize("journal,sync", list(VFS_SYNCS))
def test_vfs_sync_sequence_matches_sqlite_docs(tmp_path, journal, sync):
    # wal_autocheckpoint=0: no checkpoint inside the window, so every commit is "ordinary".
    summary = run_summary(
        tmp_path / "o", "-j", journal, "--sync", sync, "--txns", "30", "--warmup", "3", "--wal-autocheckpoint", "0"
    )
    for kind, syncs in VFS_SYNCS[(journal, sync)].items():
        assert summary["vfs_by_file"][kind]["sync_calls"] == syncs, (kind, summary["vfs_by_file"])


def test_wal_commit_writes_one_frame_per_changed_page(tmp_path):
    summary = run_summary(tmp_path / "o", "-j", "wal", "--sync", "full", "--txns", "30", "--wal-autocheckpoint", "0")
    wal = summary["vfs_by_file"]["wal"]
    # A frame is a 24-byte header + one 4 KiB page. MobiBench's transaction inserts into
    # its three tables, so it changes three pages (each table's last leaf; no
    # sqlite_sequence, which its AUTOINCREMENT table of until 2017 added): 3 x 4120 bytes,
    # more on the few commits that start a new leaf.
    assert wal["write_bytes"] == pytest.approx(3 * 4120, rel=0.1)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["-s", "no-such-scenario"], "no-such-scenario"),
        (["-j", "bogus"], "bogus"),
        (["--sync", "sometimes"], "sometimes"),
        (["--dir", "/proc/sqlwa-not-writable"], "/proc/sqlwa-not-writable"),
        (["--out", "/proc/sqlwa-not-writable"], "/proc/sqlwa-not-writable"),
        (["-s", "/nonexistent/scenario.toml"], "/nonexistent/scenario.toml"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, args, needle):
    proc = sqlwa("run", "--txns", "2", *args, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_invalid_toml_names_the_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\ndescription = "y"\n[[txn]\n')
    proc = sqlwa("run", "-s", str(bad), check=False, cwd=tmp_path)
    assert proc.returncode == 2
    assert "line 3" in proc.stderr and "Traceback" not in proc.stderr


def test_nothing_left_in_dir(tmp_path):
    run_dir = tmp_path / "work"
    run_dir.mkdir()
    run_summary(tmp_path / "o", "--txns", "3", "--dir", str(run_dir))
    assert list(run_dir.iterdir()) == []


def test_scenario_failing_sql_names_the_statement(tmp_path):
    # The second insert of the same UNIQUE value fails at run time, not at load time.
    scenario = tmp_path / "dupes.toml"
    scenario.write_text(
        'name = "dupes"\n'
        "[[table]]\n"
        'name = "t"\n'
        'columns = ["k TEXT UNIQUE NOT NULL"]\n'
        "[[txn]]\n"
        'op = "insert"\n'
        'table = "t"\n'
        'values = { k = { kind = "literal", value = "same" } }\n'
    )
    proc = sqlwa("run", "-s", str(scenario), "--txns", "3", "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "INSERT" in proc.stderr and "UNIQUE" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") <= 3
