"""``sqlwa predict`` (and check, report and the API that use it) on real lab runs.

Truth: with a profile whose writes take exactly 1 ms and flushes 3 ms, one at a time,
each commit's predicted device time is 1 ms per write plus 3 ms per flush it waited
for — counted here from the raw trace.txt (the requests issued on the lab device while
the SQL thread was inside fsync/fdatasync, by regular expression, no sqlwa code)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

import sqlwa as api
from helpers import sqlwa
from sqlwa.device.profile import Distribution, Level, Profile, Provenance, save
from trace_truth import requests_issued_in_syncs

pytestmark = [pytest.mark.root, pytest.mark.tracefs]

WRITE_MS, FLUSH_MS = 1.0, 3.0


@pytest.fixture(scope="module")
def lab_matrix(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("predict") / "m"
    sqlwa("matrix", "--fs", "ext4", "-j", "delete,wal", "--sync", "full", "-n", "40", "--out", str(out))
    return out


@pytest.fixture(scope="module")
def exact_profile(tmp_path_factory) -> Path:
    level = Level(
        measures={"write": Distribution(mean_ms=WRITE_MS), "flush": Distribution(mean_ms=FLUSH_MS)}, queue_depth=1
    )
    path = tmp_path_factory.mktemp("profile") / "exact.toml"
    about = Provenance("writes 1 ms, flushes 3 ms", "this test")
    save(Profile("exact-1-3", "measured", about, levels=[level]), path)
    return path


def run_dirs(matrix: Path) -> dict[str, Path]:
    return {d.name.split("-ext4-")[1].split("-")[0]: d for d in sorted((matrix / "runs").iterdir())}


def test_each_commit_pays_for_the_writes_and_flushes_it_waited_for(lab_matrix: Path, exact_profile: Path) -> None:
    frame = api.predict(lab_matrix, exact_profile, per_commit=True, draws=3)
    for journal, run in run_dirs(lab_matrix).items():
        summary = json.loads((run / "summary.json").read_text())
        tid = int(re.search(r"sqlwa run_begin .*\btid=(\d+)", (run / "trace.txt").read_text())[1])
        truth = requests_issued_in_syncs(run / "trace.txt", summary["config"]["lab"]["dev"].replace(":", ","), tid)
        rows = frame.filter(pl.col("journal") == journal)
        assert rows.height == 40
        for row in rows.iter_rows(named=True):
            counted = truth[row["index"]]
            expected = WRITE_MS * counted["writes"] + FLUSH_MS * counted["flushes"]
            assert row["predicted_mean_ms"] - row["base_ms"] == pytest.approx(expected), (journal, row["index"])
            assert 0 <= row["base_ms"] <= row["measured_ms"]
        # the commit sequences of docs/findings.md's table: WAL 2 flushes, DELETE 4
        flushes = sorted(truth[i]["flushes"] for i in rows["index"])
        assert flushes[len(flushes) // 2] == {"wal": 2, "delete": 4}[journal]


def test_predict_prints_measured_beside_predicted_and_json_holds_the_same(lab_matrix: Path) -> None:
    table = sqlwa("predict", "-d", "pixel-2016", "-d", "moto-z-2016", str(lab_matrix))
    assert "predicted on pixel-2016" in table.stdout and "predicted on moto-z-2016" in table.stdout
    assert (
        "mobibench-insert ext4 delete/full" in table.stdout and "base time (cpu)" in table.stdout
    )  # the runs record CPU time
    doc = json.loads(sqlwa("predict", "-d", "pixel-2016", str(lab_matrix), "--json").stdout)
    assert doc["schema_version"] == 1 and doc["draws"] == 200 and doc["budget_ms"] == 16.67
    confs = {c["journal"]: c for c in doc["devices"][0]["configurations"]}
    measured = pl.read_parquet(run_dirs(lab_matrix)["wal"] / "commits.parquet").filter(~pl.col("warmup"))
    assert confs["wal"]["measured"]["p99_ms"] == pytest.approx(
        measured["latency_ns"].cast(pl.Float64).quantile(0.99, "linear") / 1e6
    )
    # a Pixel's durable write is 3.3 ms: every flush the commit waits for costs one
    assert confs["wal"]["predicted"]["p50_ms"] > 2 * 3.3 and confs["delete"]["predicted"]["p50_ms"] > 4 * 3.3
    assert sum(confs["wal"]["shares"].values()) == pytest.approx(1.0)


def test_check_holds_predicted_limits_and_names_the_device(lab_matrix: Path, tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(
        '[[rule]]\nname = "pixel"\ndevice = "pixel-2016"\njournal = "delete"\nmax_predicted_p50_ms = 1\n'
        '[[rule]]\nname = "moto"\ndevice = "moto-z-2016"\njournal = "wal"\nmax_predicted_p99_ms = 1000\n'
    )
    done = sqlwa("check", "-p", str(policy), str(lab_matrix), check=False)
    assert done.returncode == 1, done.stderr
    assert "FAIL mobibench-insert ext4 delete/full: max_predicted_p50_ms: predicted on pixel-2016" in done.stdout
    doc = json.loads(sqlwa("check", "-p", str(policy), str(lab_matrix), "--json", check=False).stdout)
    checks = {c["rule"]: c for c in doc["checks"]}
    assert checks["moto"]["outcome"] == "pass" and checks["moto"]["unit"] == "ms"
    assert checks["pixel"]["metric"] == "predicted_p50_ms" and checks["pixel"]["measured"] > 4 * 3.3
    assert doc["rules"][0]["device"] == "pixel-2016"


def test_the_report_sets_predicted_beside_measured(lab_matrix: Path, tmp_path: Path) -> None:
    sqlwa("report", str(lab_matrix), "-o", str(tmp_path / "r.html"), "-d", "moto-z-2016")
    page = (tmp_path / "r.html").read_text()
    assert "predicted on other devices" in page and "plot-predicted" in page and "taras.glek.net" in page
