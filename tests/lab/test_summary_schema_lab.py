"""Lab runs' summary.json against its schema (sqlwa.analysis.schema.check_summary):
fscrypt on a filled ext4, a FUSE passthrough layer, a profile, a replay, tmpfs, and a
lab matrix's cells; each as the readers return it too. (dm-crypt, dm-delay and crash
runs need device-mapper: the VM lab's, compared there.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import sqlwa
from helpers import lab_matrix, run_summary
from helpers import sqlwa as sqlwa_cli
from sqlwa.analysis import schema
from sqlwa.lab import fuse
from sqlwa.results import rundir

pytestmark = [pytest.mark.root, pytest.mark.tracefs]


def assert_of_the_schema(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert schema.check_summary(summary) == [], run_dir
    assert rundir.summary(run_dir) == summary == sqlwa.load(run_dir).summary
    return summary


def test_fscrypt_on_a_filled_ext4_is_of_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_summary(
        out, "-n", "15", "--fs", "ext4", "--encrypt", "fscrypt", "--fill", "50", "--image-size", "256M"
    )
    assert_of_the_schema(out)
    lab = summary["config"]["lab"]
    assert lab["encryption"]["policy"] is not None and lab["fill"] is not None
    assert {"trace", "device_time", "bytes_by_category", "checkpoint", "findings", "amortized"} <= set(summary)


@pytest.mark.skipif(fuse.daemon_binary(fuse.SQLWA_DAEMON) is None, reason="run ./scripts/setup")
def test_a_fuse_layer_is_of_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_summary(out, "-n", "15", "-j", "wal", "--fs", "ext4", "--fuse", "passthrough")
    assert_of_the_schema(out)
    assert summary["fuse"]["daemon_cpu"] and summary["fuse"]["sqlite_calls_per_commit"]
    assert "fuse_fsync_calls" in summary["per_commit"]


def test_a_profile_and_a_replay_on_ext4_are_of_the_schema(tmp_path: Path) -> None:
    profiled = run_summary(tmp_path / "profiled", "-n", "10", "--profile", "android-sdcard")
    assert_of_the_schema(tmp_path / "profiled")
    assert profiled["config"]["profile"] is not None
    sql = tmp_path / "app.sql"
    sql.write_text("CREATE TABLE t (a);\nINSERT INTO t VALUES (1);\nINSERT INTO t VALUES (2);\n")
    log = tmp_path / "app.jsonl"
    sqlwa_cli("record", "--from", str(sql), "--out", str(log))
    replayed = run_summary(tmp_path / "replayed", "-s", str(log), "--fs", "ext4")
    assert_of_the_schema(tmp_path / "replayed")
    assert "replay" in replayed["config"] and "lab" in replayed["config"]


def test_tmpfs_is_of_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_summary(out, "-n", "15", "--fs", "tmpfs")
    assert_of_the_schema(out)
    assert summary["config"]["lab"]["loop_device"] is None


def test_a_lab_matrix_cell_is_of_the_schema(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = lab_matrix(tmp_path_factory, "schema-matrix", "-j", "delete,wal", "--sync", "full", "-n", "10")
    cells = sorted(out.glob("runs/*/summary.json"))
    assert len(cells) == 2
    for cell in cells:
        assert_of_the_schema(cell.parent)
    shutil.rmtree(out, ignore_errors=True)
