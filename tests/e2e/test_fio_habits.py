"""What a hyperfine or frame-pacing user expects: repeats as mean ± sd with the number of
runs (matrix table, JSON and CSV), dropped frames per 1,000 commits at 60/90/120 Hz, and
a p50 limit in a policy. The truth is each run's own files (summary.json and
commits.parquet of every run directory) and Python's ``statistics`` and ``math``.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa

REPEATS = 3


@pytest.fixture(scope="module")
def repeated(tmp_path_factory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("repeats") / "m"
    args = ["matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "12", "--warmup", "2"]
    document = json.loads(sqlwa(*args, "--repeat", str(REPEATS), "--out", str(out), "--json").stdout)
    table = sqlwa("matrix", *args[1:], "--repeat", str(REPEATS), "--out", str(out), "--resume").stdout
    return out, document, table


def per_run(out: Path, journal: str) -> list[dict]:
    """The summary.json of every repeat of one configuration, read from its run directory."""
    found = [json.loads(p.read_text()) for p in sorted((out / "runs").glob(f"*-{journal}-full-r*/summary.json"))]
    assert len(found) == REPEATS
    return found


def figures(summaries: list[dict]) -> dict[str, list[float]]:
    return {
        "vfs_write_kib_per_commit": [s["per_commit"]["vfs_write_bytes"] / 1024 for s in summaries],
        "vfs_sync_calls_per_commit": [s["per_commit"]["vfs_sync_calls"] for s in summaries],
        "p99_ms": [s["latency_ms"]["p99"] for s in summaries],
        "p50_ms": [s["latency_ms"]["p50"] for s in summaries],
        "frame_budget_miss_pct": [s["frame_budget_misses"]["share"] * 100 for s in summaries],
    }


def test_repeats_show_mean_and_sd_of_the_runs_own_figures(repeated):
    out, document, table = repeated
    for configuration in document["configurations"]:
        values = figures(per_run(out, configuration["journal"]))
        assert configuration["repeats"] == REPEATS
        for name, runs in values.items():
            assert configuration["sd"][name] == pytest.approx(statistics.stdev(runs), abs=1e-9), name
            if name not in ("p99_ms", "p50_ms"):  # latency quantiles are over the commits pooled
                assert configuration["metrics"][name] == pytest.approx(statistics.mean(runs), abs=1e-9), name
        kib = values["vfs_write_kib_per_commit"]
        shown = f"{statistics.mean(kib):,.1f} ± {statistics.stdev(kib):,.1f}"
        row = next(line for line in table.splitlines() if f"{configuration['journal']}/full" in line)
        assert shown in row and f"│    {REPEATS} │" in row
    assert "runs" in table and "± = sample standard deviation" in table


def test_csv_export_holds_the_same_means_and_sds(repeated, tmp_path):
    out, _, _ = repeated
    target = tmp_path / "m.csv"
    sqlwa("export", str(out), "--format", "csv", "-o", str(target))
    rows = {row["journal"]: row for row in csv.DictReader(target.open())}
    assert set(rows) == {"delete", "wal"}
    for journal, row in rows.items():
        values = figures(per_run(out, journal))
        assert int(row["repeats"]) == REPEATS
        assert float(row["vfs_write_kib_per_commit"]) == pytest.approx(
            statistics.mean(values["vfs_write_kib_per_commit"])
        )
        assert float(row["p99_ms_sd"]) == pytest.approx(statistics.stdev(values["p99_ms"]))


def test_csv_export_of_a_run_is_its_commits(tmp_path):
    out = tmp_path / "run"
    sqlwa("run", "-n", "8", "--out", str(out))
    target = tmp_path / "commits.csv"
    sqlwa("export", str(out), "--format", "csv", "-o", str(target))
    rows = list(csv.DictReader(target.open()))
    commits = pl.read_parquet(out / "commits.parquet")
    assert [int(r["latency_ns"]) for r in rows] == commits["latency_ns"].to_list()


@pytest.mark.parametrize("rate, frame_ms", [(60, 16.67), (90, 11.11), (120, 8.33)])
def test_dropped_frames_per_1000_commits_at_a_refresh_rate(tmp_path, rate, frame_ms):
    out = tmp_path / "run"
    proc = sqlwa("run", "-n", "40", "--frame-rate", str(rate), "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    commits = pl.read_parquet(out / "commits.parquet").filter(~pl.col("warmup"))
    latencies = commits["latency_ns"].to_list()
    dropped = sum(max(0, math.ceil(ns / (frame_ms * 1e6)) - 1) for ns in latencies)
    misses = summary["frame_budget_misses"]
    assert misses["budget_ms"] == frame_ms
    assert misses["commits"] == sum(ns > frame_ms * 1e6 for ns in latencies)
    assert misses["dropped_frames"] == dropped
    assert misses["dropped_frames_per_1000_commits"] == pytest.approx(dropped * 1000 / len(latencies))
    assert f"frames dropped at {rate} Hz" in proc.stdout
    assert f"{dropped * 1000 / len(latencies):,.1f} per 1,000 commits" in proc.stdout


def test_frame_rate_and_frame_budget_together_is_one_line(tmp_path):
    proc = sqlwa("run", "--frame-rate", "90", "--frame-budget-ms", "5", "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--frame-rate and --frame-budget-ms both set the frame budget" in proc.stderr


def test_max_p50_ms_holds_the_pooled_median(repeated, tmp_path):
    out, _, _ = repeated
    pooled = []
    for run_dir in sorted((out / "runs").glob("*-wal-full-r*")):
        commits = pl.read_parquet(run_dir / "commits.parquet").filter(~pl.col("warmup"))
        pooled += [ns / 1e6 for ns in commits["latency_ns"].to_list()]
    median = statistics.median(pooled)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[[rule]]\nname = "median"\njournal = "wal"\nmax_p50_ms = {median / 2}\n')
    proc = sqlwa("check", "--policy", str(policy), str(out), "--json", check=False)
    assert proc.returncode == 1, proc.stderr
    (check,) = json.loads(proc.stdout)["checks"]
    assert check["check"] == "max_p50_ms" and check["outcome"] == "violation"
    assert check["measured"] == pytest.approx(median, abs=1e-9)


def test_a_matrix_at_120_hz_counts_misses_of_an_8_33_ms_frame(tmp_path):
    out = tmp_path / "m"
    args = ["matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "10", "--frame-rate", "120"]
    document = json.loads(sqlwa(*args, "--out", str(out), "--json").stdout)
    assert document["plan"]["frame_rate"] == 120
    for cell in document["cells"]:
        run_dir = Path(cell["run_dir"])
        assert json.loads((run_dir / "summary.json").read_text())["frame_budget_misses"]["budget_ms"] == 8.33
        commits = pl.read_parquet(run_dir / "commits.parquet").filter(~pl.col("warmup"))
        slower = sum(ns > 8.33e6 for ns in commits["latency_ns"].to_list())
        assert cell["metrics"]["frame_budget_misses"] == slower


def test_the_layer_cost_table_says_how_many_runs_each_ratio_is_over():
    from sqlwa.views import report

    plain = {"scenario": "mobibench-insert", "fs": "ext4", "profile": "none", "crypt": "none", "fuse": "none"}
    means = pl.DataFrame(
        [
            {**plain, "encrypt": "none", "journal": "wal", "sync": "full", "repeats": 3, "p99_ms": 2.0},
            {**plain, "encrypt": "fscrypt", "journal": "wal", "sync": "full", "repeats": 1, "p99_ms": 3.0},
        ]
    )
    (section,) = report.layer_sections(means)
    assert "mobibench-insert ext4+fscrypt wal/full (1 run)" in section.html
    assert "mobibench-insert ext4 wal/full (mean of 3 runs)" in section.html
    assert "Ratios from a single run on either side are one sample each" in section.note
    means = means.with_columns(pl.lit(3).alias("repeats"))
    (section,) = report.layer_sections(means)
    assert "(1 run)" not in section.html and "single run" not in section.note
