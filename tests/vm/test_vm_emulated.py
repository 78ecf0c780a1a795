"""Timings of a run under TCG (this host's VM lab: KVM cannot boot the guest) are an
emulated CPU's. They feed no prediction, no timing rule and no timing chart unless the
user passes --use-emulated-timings, and every place that shows them marks them; the
run's counts and bytes stay usable everywhere.

Truth: the run's own summary.json (``config.vm``: which accelerator ran it), its
commits.parquet (the measured latencies), and pixel-2016's published figure — one number,
3.3 ms per durable write, priced to each cache flush and FUA write while a plain write
costs its transfer time, 0 without a bandwidth: so a prediction without any emulated CPU
time in it is a whole multiple of 3.3 ms per commit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa_in_process
from helpers import sqlwa_vm_run as vm_run

pytestmark = [pytest.mark.vm, pytest.mark.slow]

COMMITS = 20
PIXEL_MS = 3.3  # pixel-2016's durable 4 KiB write, its file's only figure


@pytest.fixture(scope="module")
def tcg_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vm-emulated") / "out"
    summary = vm_run(out, "--fs", "ext4", "-j", "delete", "--sync", "full", "-n", str(COMMITS), "--image-size", "64M")
    if summary["config"]["vm"]["accelerator"] != "tcg":
        pytest.skip("the guest ran under KVM here: its timings are comparable")
    assert summary["config"]["vm"]["timings_comparable"] is False
    return out


def measured_ms(run: Path) -> pl.Series:
    commits = pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup"))
    return commits["latency_ns"].cast(pl.Float64) / 1e6


def sqlwa_ok(*args: str, code: int = 0) -> str:
    result = sqlwa_in_process(*args)
    assert result.returncode == code, result.stdout + result.stderr
    return result.stdout


def write_policy(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------ predict


def test_a_tcg_run_is_predicted_from_its_requests_alone(tcg_run: Path) -> None:
    document = json.loads(sqlwa_ok("predict", "-d", "pixel-2016", str(tcg_run), "--json"))
    conf = document["devices"][0]["configurations"][0]
    assert conf["base_source"] == "none"
    assert conf["shares"]["base"] == 0
    assert conf["timings_emulated"] is True
    assert set(conf["measured"].values()) == {None}  # not shown beside the prediction
    for figure in ("p50_ms", "p99_ms"):
        flushes = conf["predicted"][figure] / PIXEL_MS
        assert flushes >= 1 and flushes == pytest.approx(round(flushes), abs=1e-9), conf["predicted"]
    assert conf["requests_per_commit"] > 0  # the counts are the run's


def test_predict_uses_emulated_timings_only_when_asked_and_says_so(tcg_run: Path) -> None:
    document = json.loads(sqlwa_ok("predict", "-d", "pixel-2016", str(tcg_run), "--json", "--use-emulated-timings"))
    conf = document["devices"][0]["configurations"][0]
    assert conf["base_source"] == "cpu" and conf["shares"]["base"] > 0
    assert conf["measured"]["p50_ms"] == pytest.approx(measured_ms(tcg_run).quantile(0.5, "linear"))
    assert conf["timings_emulated"] is True
    assert any("used because --use-emulated-timings" in note for note in conf["notes"])


def test_the_prediction_table_marks_the_emulated_measured_figures(tcg_run: Path) -> None:
    out = sqlwa_ok("predict", "-d", "pixel-2016", str(tcg_run))
    row = next(line for line in out.splitlines() if "delete/full" in line)
    assert row.count("emulated") == 3  # measured p50, p99, frame misses
    assert "base time (none): left out: the run ran on an emulated CPU (TCG)" in out
    asked = sqlwa_ok("predict", "-d", "pixel-2016", str(tcg_run), "--use-emulated-timings")
    row = next(line for line in asked.splitlines() if "delete/full" in line)
    assert f"{measured_ms(tcg_run).quantile(0.5, 'linear'):.2f} (emulated)" in row


def test_a_profile_whose_source_left_syncing_unstated_says_so_in_the_prediction(tcg_run: Path) -> None:
    out = sqlwa_ok("predict", "-d", "nexus6-encrypted", "-d", "pixel-2016", str(tcg_run))
    said = [line for line in out.splitlines() if "did not state whether the writes it measured were synced" in line]
    assert len(said) == 1 and said[0].startswith("note: nexus6-encrypted")
    document = json.loads(sqlwa_ok("predict", "-d", "nexus6-encrypted", "-d", "pixel-2016", str(tcg_run), "--json"))
    nexus, pixel = document["devices"]
    assert nexus["device"]["sync_stated"] is False and pixel["device"]["sync_stated"] is True
    assert any("did not state whether" in note for note in nexus["notes"])
    assert not any("did not state whether" in note for note in pixel["notes"])


# ------------------------------------------------------------------ check


def test_a_timing_limit_on_a_tcg_run_is_not_checked_while_counts_are(tcg_run: Path, tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "p.toml",
        '[[rule]]\nname = "latency"\nmax_p99_ms = 1\nmax_frame_budget_miss_pct = 0\nmax_fsync_calls_per_commit = 100\n',
    )
    document = json.loads(sqlwa_ok("check", "-p", str(policy), str(tcg_run), "--json"))
    outcomes = {check["check"]: check["outcome"] for check in document["checks"]}
    assert outcomes == {
        "max_p99_ms": "not_checked",
        "max_frame_budget_miss_pct": "not_checked",
        "max_fsync_calls_per_commit": "pass",
    }
    assert document["passed"] is True and document["counts"]["not_checked"] == 2
    lines = sqlwa_in_process("check", "-p", str(policy), str(tcg_run))
    assert "NOT CHECKED" in lines.stdout and "not checked: emulated timings" in lines.stdout
    assert "FAIL" not in lines.stdout
    asked = sqlwa_in_process("check", "-p", str(policy), str(tcg_run), "--use-emulated-timings")
    assert asked.returncode == 1 and "FAIL" in asked.stdout and "emulated timings (TCG), checked" in asked.stdout


def test_a_check_of_emulated_timings_alone_checks_nothing_and_says_so(tcg_run: Path, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.toml", "[[rule]]\nmax_p99_ms = 1\n")
    result = sqlwa_in_process("check", "-p", str(policy), str(tcg_run))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "every check was of timings an emulated CPU (TCG) measured" in result.stderr


def test_a_predicted_limit_on_a_tcg_run_is_a_lower_bound(tcg_run: Path, tmp_path: Path) -> None:
    """The device time alone over the limit is a violation; under it, nothing is known."""
    rules = (
        '[[rule]]\nname = "phone"\ndevice = "pixel-2016"\nmax_predicted_p50_ms = {}\nmax_fsync_calls_per_commit = 100\n'
    )
    under = write_policy(tmp_path / "under.toml", rules.format(1))
    document = json.loads(sqlwa_in_process("check", "-p", str(under), str(tcg_run), "--json").stdout)
    found = {check["check"]: check for check in document["checks"]}
    assert found["max_predicted_p50_ms"]["outcome"] == "violation"
    assert "from the device time alone" in found["max_predicted_p50_ms"]["line"]
    over = write_policy(tmp_path / "over.toml", rules.format(10_000))
    document = json.loads(sqlwa_ok("check", "-p", str(over), str(tcg_run), "--json"))
    found = {check["check"]: check for check in document["checks"]}
    assert found["max_predicted_p50_ms"]["outcome"] == "not_checked"


def test_a_timing_regression_against_a_tcg_baseline_is_not_checked(tcg_run: Path, tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "p.toml", '[[rule]]\nmax_regression_pct = 5\nmetrics = ["p99_ms", "fsync_calls_per_commit"]\n'
    )
    document = json.loads(sqlwa_ok("check", "-p", str(policy), str(tcg_run), "-b", str(tcg_run), "--json"))
    outcomes = {check["check"]: check["outcome"] for check in document["checks"]}
    assert outcomes["max_regression_pct p99_ms"] == "not_checked"
    assert outcomes["max_regression_pct fsync_calls_per_commit"] == "pass"


# ------------------------------------------------------------------ report and compare


def plot_names(page: str, div_id: str) -> list[str]:
    """The trace names of one plot of the report (its Plotly call's JSON)."""
    start = page.find(f'id="{div_id}"')
    if start < 0:
        return []
    call = page[start : page.find("</script>", start)]
    return [json.loads(f'"{name}"') for name in re.findall(r'"name":"((?:[^"\\]|\\.)*)"', call)]


def test_the_report_draws_no_emulated_latency_without_a_mark(tcg_run: Path, tmp_path: Path) -> None:
    page_path = tmp_path / "r.html"
    sqlwa_ok("report", str(tcg_run), "-o", str(page_path), "-d", "pixel-2016")
    page = page_path.read_text()
    assert "Emulated timings." in page and "under TCG" in page
    assert plot_names(page, "plot-latency") == []  # no latency chart of this run
    assert not [name for name in plot_names(page, "plot-predicted") if "measured here" in name]
    assert 'class="emulated"' in page  # the every-number table marks its latencies
    sqlwa_ok("report", str(tcg_run), "-o", str(page_path), "-d", "pixel-2016", "--use-emulated-timings")
    page = page_path.read_text()
    names = plot_names(page, "plot-latency") + plot_names(page, "plot-predicted")
    assert names and all("(emulated CPU)" in name for name in names), names


def test_compare_marks_emulated_timings_and_judges_them_neither_way(tcg_run: Path) -> None:
    document = json.loads(sqlwa_ok("compare", str(tcg_run), str(tcg_run), "--json"))
    metrics = document["configurations"][0]["metrics"]
    assert metrics["p99_ms"]["timings_emulated"] is True and metrics["p99_ms"]["verdict"] == "emulated"
    assert metrics["fsync_calls_per_commit"]["timings_emulated"] is False
    assert metrics["fsync_calls_per_commit"]["verdict"] == "unchanged"
    table = sqlwa_ok("compare", str(tcg_run), str(tcg_run))
    p99 = next(line for line in table.splitlines() if "p99_ms" in line)
    assert p99.count("emulated") == 3
