"""Real runs' summary.json against its schema (sqlwa.analysis.schema.check_summary): a
VFS run in each journal mode, one a duration bounded, a replayed log with a transaction
that wrote nothing, and a VFS-only matrix's cells; each as the readers return it too
(rundir.summary, sqlwa.load). The lab's runs are in tests/lab/test_summary_schema_lab.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sqlwa
from helpers import run_summary, sqlwa_in_process
from sqlwa.analysis import schema
from sqlwa.results import rundir


def assert_of_the_schema(run_dir: Path) -> dict:
    """The run's summary.json is of the schema, and the readers return it unchanged."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert schema.check_summary(summary) == [], run_dir
    assert rundir.summary(run_dir) == summary
    assert sqlwa.load(run_dir).summary == summary
    return summary


@pytest.mark.parametrize(
    "args",
    [
        ("-n", "20"),
        ("-n", "30", "-j", "wal", "--sync", "normal", "--warmup", "2"),
        ("--duration", "0.3", "-j", "wal"),
    ],
    ids=["delete", "wal-normal", "duration"],
)
def test_a_vfs_run_is_of_the_schema(tmp_path: Path, args: tuple[str, ...]) -> None:
    summary = run_summary(tmp_path / "out", *args)
    assert_of_the_schema(tmp_path / "out")
    assert {"stopped", "wrote_nothing", "close", "cpu_ms", "phases", "device_not_measured"} <= set(summary)
    assert "dir_fs" in summary["config"] and "lab" not in summary["config"]


def test_a_replay_is_of_the_schema(tmp_path: Path) -> None:
    sql = tmp_path / "app.sql"
    sql.write_text(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);\n"
        "BEGIN;\nINSERT INTO t (body) VALUES ('a');\nINSERT INTO t (body) VALUES ('b');\nCOMMIT;\n"
        "DELETE FROM t WHERE id = 99;\nUPDATE t SET body = 'c' WHERE id = 2;\n"
    )
    log = tmp_path / "app.jsonl"
    converted = sqlwa_in_process("record", "--from", str(sql), "--out", str(log))
    assert converted.returncode == 0, converted.stderr
    summary = run_summary(tmp_path / "out", "-s", str(log))
    assert_of_the_schema(tmp_path / "out")
    assert summary["config"]["replay"]["source"] == "sql-file"
    assert summary["wrote_nothing"]["transactions"] == 1 and summary["wrote_nothing"]["first"]


def test_a_vfs_only_matrix_cell_is_of_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "m"
    proc = sqlwa_in_process("matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "10", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    cells = sorted(out.glob("runs/*/summary.json"))
    assert len(cells) == 2
    for cell in cells:
        assert_of_the_schema(cell.parent)
