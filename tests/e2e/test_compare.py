"""``sqlwa compare``: matrices matched by configuration, single runs with each other, deltas."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa.results import compare, store


@pytest.fixture(scope="module")
def matrix_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("compare") / "m"
    sqlwa("matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "10", "--warmup", "1", "--out", str(out))
    return out


def test_same_matrix_has_zero_deltas(matrix_dir):
    rows = compare.compare(store.load_results(matrix_dir), store.load_results(matrix_dir))
    assert set(rows["config"]) == {"mobibench-insert none delete/full", "mobibench-insert none wal/full"}
    assert rows["delta"].abs().max() == 0
    # unmeasured levels are absent from both sides, not rows of zeros
    assert "fsync_calls_per_commit" not in set(rows["metric"])


def test_two_runs_with_different_configs_are_compared_with_each_other(matrix_dir, tmp_path):
    runs = store.load_results(matrix_dir)
    delete_dir, wal_dir = sorted(runs["run_dir"])
    rows = compare.compare(store.load_results(Path(delete_dir)), store.load_results(Path(wal_dir)))
    fs = json.loads((Path(delete_dir) / "summary.json").read_text())["config"]["fs"]  # the scratch dir's fs
    assert rows["config"].unique().to_list() == [f"mobibench-insert {fs} delete/full → mobibench-insert {fs} wal/full"]
    sync = rows.filter(rows["metric"] == "vfs_sync_calls_per_commit").row(0, named=True)
    a = json.loads((Path(delete_dir) / "summary.json").read_text())["per_commit"]["vfs_sync_calls"]
    b = json.loads((Path(wal_dir) / "summary.json").read_text())["per_commit"]["vfs_sync_calls"]
    assert (sync["a"], sync["b"], sync["delta"]) == (a, b, b - a)
    assert sync["pct"] == (pytest.approx((b - a) / a * 100) if a else None)


def test_cli_prints_both_sides_and_a_missing_configuration(matrix_dir, tmp_path):
    other = tmp_path / "other"
    sqlwa("matrix", "--vfs-only", "-j", "wal", "--sync", "full", "-n", "10", "--warmup", "1", "--out", str(other))
    proc = sqlwa("compare", str(matrix_dir), str(other))
    assert "mobibench-insert none delete/full" in proc.stdout and "mobibench-insert none wal/full" in proc.stdout
    assert "vfs_write_kib_per_commit" in proc.stdout and "—" in proc.stdout
    bad = sqlwa("compare", str(matrix_dir), str(tmp_path / "nothing"), check=False)
    assert bad.returncode == 2 and "neither" in bad.stderr


def test_one_result_without_by_is_one_line(matrix_dir):
    proc = sqlwa("compare", str(matrix_dir), check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "sqlwa: error: compare needs two results, A and B",
        "  fix: give B, or --by kernel to split A by kernel",
    ]


def test_by_kernel_on_runs_of_one_kernel_is_one_line(matrix_dir):
    proc = sqlwa("compare", str(matrix_dir), "--by", "kernel", check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        f"sqlwa: error: {matrix_dir} holds runs of 1 kernel ({os.uname().release}); --by kernel compares two"
    )
