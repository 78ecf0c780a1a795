"""--json on the commands that print tables (#16, point 16): the JSON says what the
table says, checked against independent truth where there is one."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from helpers import REPO, sqlwa, sqlwa_in_process
from sqlwa.catalogue import METRICS
from sqlwa.lab.filesystem import FILESYSTEMS
from sqlwa.results.check import LIMITS

KEKS = REPO / "traces" / "samples" / "blktrace-keks" / "keks"


def test_parse_json_counts_agree_with_blkparse(tmp_path):
    report = json.loads(sqlwa("parse", str(KEKS), "--json").stdout)
    assert [f["format"] for f in report["files"]] == ["blktrace"] * len(report["files"])
    if subprocess.run(["which", "blkparse"], capture_output=True).returncode:
        pytest.skip("blkparse (Debian package blktrace) is not installed")
    # blkparse's own count of completions and their bytes, as independent truth
    fmt = "%a %n\n"
    out = subprocess.run(
        ["blkparse", "-i", KEKS.name, "-D", str(KEKS.parent), "-q", "-f", fmt, "-a", "complete"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    completes = [line.split() for line in out if line.startswith("C ")]
    assert report["per_action"]["C"] == len(completes)
    assert report["bytes_per_action"]["C"] == 512 * sum(int(n) for _, n in completes)


def test_lab_check_json_lists_every_filesystem():
    lines = json.loads(sqlwa("lab", "check", "--json").stdout)
    assert {"root", "tracefs"} <= {line["what"] for line in lines}
    assert {f"--fs {fs}" for fs in FILESYSTEMS} <= {line["what"] for line in lines}
    assert all(set(line) == {"what", "ok", "reason", "hint"} for line in lines)


# ------------------------------------------------------------------ truth from the store

CONFIG_KEYS = ("scenario", "fs", "journal", "sync")
LATENCY_QUANTILES = {"p50_ms": 0.50, "p99_ms": 0.99, "p999_ms": 0.999}
# What a VFS-only run measures of the figures compare shows; every one is a cost.
VFS_COMPARED = ("vfs_sync_calls_per_commit", "vfs_write_kib_per_commit", *LATENCY_QUANTILES, "frame_budget_misses")


def label(config: tuple) -> str:
    scenario, fs, journal, sync = config
    return f"{scenario} {fs} {journal}/{sync}"


def store_rows(matrix: Path, where: str = "1") -> list[dict]:
    """The runs table as SQLite itself reads it, not through sqlwa."""
    conn = sqlite3.connect(matrix / "results.sqlite")
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(f"SELECT * FROM runs WHERE {where} ORDER BY id")]
    finally:
        conn.close()


def linear_quantile(values: list[float], q: float) -> float:
    """The quantile between the two nearest order statistics (numpy's and Polars' "linear")."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def pooled_latencies_ms(matrix: Path) -> dict[tuple, list[float]]:
    """Every measured commit's latency of each configuration's successful runs, in ms."""
    conn = sqlite3.connect(matrix / "results.sqlite")
    try:
        rows = conn.execute(
            "SELECT r.scenario, r.fs, r.journal, r.sync, c.latency_ns FROM commits c JOIN runs r ON r.id = c.run_id "
            "WHERE r.status = 'ok' AND NOT c.warmup"
        ).fetchall()
    finally:
        conn.close()
    pooled: dict[tuple, list[float]] = {}
    for *config, latency_ns in rows:
        pooled.setdefault(tuple(config), []).append(latency_ns / 1e6)
    return pooled


def config_means(matrix: Path) -> dict[str, dict[str, float]]:
    """Each configuration's figures as the tables define them: the mean over its
    successful repeats, latency quantiles over their commits pooled."""
    runs: dict[tuple, list[dict]] = {}
    for row in store_rows(matrix, "status = 'ok'"):
        runs.setdefault(tuple(row[key] for key in CONFIG_KEYS), []).append(row)
    latencies = pooled_latencies_ms(matrix)
    means = {}
    for config, rows in runs.items():
        figures = {name: sum(row[name] for row in rows) / len(rows) for name in VFS_COMPARED}
        figures.update({name: linear_quantile(latencies[config], q) for name, q in LATENCY_QUANTILES.items()})
        means[label(config)] = figures
    return means


def vfs_matrix(tmp_path_factory, name: str, *args: str) -> Path:
    out = tmp_path_factory.mktemp(name) / "m"
    sqlwa("matrix", "--vfs-only", "--sync", "full", "--warmup", "1", *args, "--out", str(out))
    return out


def assert_one_error_line(proc: subprocess.CompletedProcess, message: str) -> None:
    """A user mistake: exit 2, nothing on stdout, one error line (and its fix) on stderr."""
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    [error, *rest] = proc.stderr.splitlines()
    assert error.startswith("sqlwa: error: ") and message in error, proc.stderr
    assert all(line.startswith("  fix: ") for line in rest), proc.stderr


# ------------------------------------------------------------------ sqlwa compare --json


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[Path, Path]:
    """A: delete and wal; B: wal (the one configuration in both, two repeats) and wal/normal."""
    a = vfs_matrix(tmp_path_factory, "compare-a", "-j", "delete,wal", "-n", "5")
    b = vfs_matrix(tmp_path_factory, "compare-b", "-j", "wal", "--sync", "full,normal", "--repeat", "2", "-n", "6")
    return a, b


def test_compare_json_holds_both_stores_figures_and_their_change(compared):
    a, b = compared
    document = json.loads(sqlwa("compare", str(a), str(b), "--json").stdout)
    truth_a, truth_b = config_means(a), config_means(b)
    assert (document["a"], document["b"]) == (str(a), str(b))
    configurations = {entry["label"]: entry for entry in document["configurations"]}
    assert set(configurations) == set(truth_a) | set(truth_b)
    for name, entry in configurations.items():
        assert set(entry["metrics"]) == set(VFS_COMPARED) and entry["durability"] is None  # VFS level only
        for metric, compared_metric in entry["metrics"].items():
            before, after = truth_a.get(name, {}).get(metric), truth_b.get(name, {}).get(metric)
            assert compared_metric["a"] == pytest.approx(before) and compared_metric["b"] == pytest.approx(after)
            assert_change(compared_metric, before, after)


def assert_change(compared_metric: dict, before: float | None, after: float | None) -> None:
    """B − A, in percent of A where A is not 0, and its verdict: every figure compared here
    is a cost, so more is worse."""
    if before is None or after is None:
        assert compared_metric["change"] is compared_metric["change_pct"] is compared_metric["verdict"] is None
        return
    change = after - before
    assert compared_metric["change"] == pytest.approx(change, abs=1e-9)
    assert compared_metric["change_pct"] == (pytest.approx(change / before * 100, abs=1e-9) if before else None)
    verdict = "worse" if change > 0 else "better" if change < 0 else "unchanged"
    assert compared_metric["verdict"] == verdict


def test_compare_json_names_each_unit(compared):
    a, _ = compared
    document = json.loads(sqlwa("compare", str(a), str(a), "--json").stdout)
    units = {metric: figures["unit"] for metric, figures in document["configurations"][0]["metrics"].items()}
    assert units == {
        "vfs_sync_calls_per_commit": "calls",
        "vfs_write_kib_per_commit": "KiB",
        **dict.fromkeys(LATENCY_QUANTILES, "ms"),
        "frame_budget_misses": "commits",
    }


def test_compare_json_of_a_missing_side_is_one_error_line_and_no_json(compared, tmp_path):
    a, _ = compared
    proc = sqlwa("compare", str(a), str(tmp_path / "nothing"), "--json", check=False)
    assert_one_error_line(proc, "holds neither results.sqlite nor summary.json")


# ------------------------------------------------------------------ sqlwa matrix --json

# A scenario whose second commit breaks its primary key: its cells fail at the VFS level too.
FAILING_SCENARIO = """
name = "clash"
description = "the second insert of the one key breaks the primary key"
autocommit = true

[[table]]
name = "t"
columns = ["key INTEGER PRIMARY KEY", "value TEXT NOT NULL"]

[[txn]]
op = "insert"
table = "t"
values = { key = { kind = "int", min = 1, max = 1 }, value = { kind = "text", min = 8, max = 8 } }
"""


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, Path]:
    """A --json sweep of two repeats of delete and wal for mobibench-insert and for the
    failing scenario: (its directory, the process, the failing scenario's file)."""
    root = tmp_path_factory.mktemp("matrix-json")
    scenario = root / "clash.toml"
    scenario.write_text(FAILING_SCENARIO)
    out = root / "m"
    proc = sqlwa(
        "matrix", "--vfs-only", "-s", f"mobibench-insert,{scenario}", "-j", "delete,wal", "--sync", "full",
        "--repeat", "2", "-n", "5", "--warmup", "1", "--out", str(out), "--json", check=False,
    )  # fmt: skip
    return out, proc, scenario


def test_matrix_json_with_a_failed_cell_exits_1_with_the_document(failing_sweep):
    out, proc, scenario = failing_sweep
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)
    assert document["out"] == str(out)
    assert document["counts"] == {"cells": 8, "ok": 4, "done-earlier": 0, "skipped": 0, "failed": 4}
    assert "cell(s) into" not in proc.stdout and "8 cell(s) into" in proc.stderr  # progress: stderr
    conn = sqlite3.connect(out / "results.sqlite")
    [(plan,)] = conn.execute("SELECT plan_json FROM matrix_plan").fetchall()
    conn.close()
    assert document["plan"] == json.loads(plan)
    assert document["plan"]["scenarios"] == ["mobibench-insert", str(scenario)]
    assert (document["plan"]["repeat"], document["plan"]["txns"], document["plan"]["lab"]) == (2, 5, False)


def test_matrix_json_cells_are_the_runs_in_the_store(failing_sweep):
    out, proc, scenario = failing_sweep
    cells = {cell["key"]: cell for cell in json.loads(proc.stdout)["cells"]}
    rows = {row["run_key"]: row for row in store_rows(out)}
    assert set(cells) == set(rows)
    for key, cell in cells.items():
        row = rows[key]
        assert [cell[name] for name in (*CONFIG_KEYS, "repeat", "status", "reason", "commits")] == [
            row[name] for name in (*CONFIG_KEYS, "repeat", "status", "reason", "commits")
        ]
        assert cell["run_dir"] == (str((out / row["run_dir"]).resolve()) if row["run_dir"] else None)
        assert cell["lost_events"] == 0  # the VFS level has no trace to lose events of
        assert cell["metrics"] == {name: row[name] for name in cell["metrics"]}
        if cell["scenario"] == str(scenario):
            assert cell["status"] == "failed" and "UNIQUE constraint failed" in cell["reason"]
        else:  # the run as asked for, measured at the VFS level only
            assert (cell["status"], cell["commits"], cell["levels"]) == ("ok", 5, ["vfs"])
            assert cell["metrics"]["fsync_calls_per_commit"] is None


def test_matrix_json_configurations_are_the_means_of_their_repeats(failing_sweep):
    out, proc, _ = failing_sweep
    configurations = {entry["label"]: entry for entry in json.loads(proc.stdout)["configurations"]}
    truth = config_means(out)
    assert set(configurations) == set(truth)  # the failed scenario has no configuration to show
    for name, entry in configurations.items():
        assert (entry["repeats"], entry["commits"], entry["lost_events"]) == (2, 10, 0)
        for metric, value in truth[name].items():
            assert entry["metrics"][metric] == pytest.approx(value), metric


def test_matrix_json_of_a_resumed_sweep_says_which_cells_were_done_earlier(tmp_path):
    out = tmp_path / "m"
    sweep = (
        "matrix",
        "--vfs-only",
        "-j",
        "delete,wal",
        "--sync",
        "full",
        "-n",
        "5",
        "--warmup",
        "1",
        "--out",
        str(out),
    )
    sqlwa(*sweep)
    (wal_dir,) = [row["run_dir"] for row in store_rows(out) if row["journal"] == "wal"]
    shutil.rmtree(out / wal_dir)  # as if Ctrl-C had hit that cell
    document = json.loads(sqlwa(*sweep, "--resume", "--json").stdout)
    cells = {cell["journal"]: cell for cell in document["cells"]}
    assert (cells["delete"]["status"], cells["delete"]["seconds"]) == ("done-earlier", 0)
    assert cells["wal"]["status"] == "ok" and Path(cells["wal"]["run_dir"], "summary.json").exists()
    rows = {row["journal"]: row for row in store_rows(out)}
    for journal, cell in cells.items():
        assert cell["metrics"]["vfs_write_kib_per_commit"] == rows[journal]["vfs_write_kib_per_commit"]


def test_matrix_json_with_an_unknown_mode_is_one_error_line_and_no_json(tmp_path):
    proc = sqlwa("matrix", "--vfs-only", "-j", "delete,walrus", "--out", str(tmp_path / "m"), "--json", check=False)
    assert_one_error_line(proc, "unknown journal mode 'walrus'")


# ------------------------------------------------------------------ sqlwa check --json


def check_json(policy_text: str, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text)
    proc = sqlwa_in_process("check", "--policy", str(policy), *args, "--json")
    return proc, json.loads(proc.stdout)


LIMITS_POLICY = """
[[rule]]
name = "loose"
max_p99_ms = 100000
max_frame_budget_misses = 1000

[[rule]]
name = "tight"
sync = "normal"
max_p99_ms = 0.000001

[[rule]]
name = "needs the syscall level"
max_fsync_calls_per_commit = 10
"""


def test_check_json_measured_values_are_the_stores_and_verdicts_follow_the_limits(compared, tmp_path):
    _, results = compared
    proc, document = check_json(LIMITS_POLICY, tmp_path, str(results))
    truth = config_means(results)
    assert proc.returncode == 1 and document["passed"] is False  # "tight" is broken, fsyncs were not measured
    assert {check["label"] for check in document["checks"]} == set(truth)
    for check in document["checks"]:
        scenario, fs, journal, sync = check["label"].replace("/", " ").split()  # a plain label: no layers
        named = {"scenario": scenario, "fs": fs, "journal": journal, "sync": sync}
        assert check["configuration"] == {
            **named,
            "encrypt": "none",
            "fuse": "none",
            "profile": "none",
            "crypt": "none",
        }
        if check["metric"] == "fsync_calls_per_commit":  # a VFS-level run has no syscall figures
            assert (check["measured"], check["outcome"], check["fails"]) == (None, "unmeasured", True)
            continue
        measured = truth[check["label"]][check["metric"]]
        assert check["measured"] == pytest.approx(measured)
        assert (
            check["limit"]
            == {"loose": {"p99_ms": 100000, "frame_budget_misses": 1000}, "tight": {"p99_ms": 1e-6}}[check["rule"]][
                check["metric"]
            ]
        )
        assert check["outcome"] == ("violation" if measured > check["limit"] else "pass")
        assert check["fails"] == (check["outcome"] == "violation")
    outcomes = [check["outcome"] for check in document["checks"]]
    assert document["counts"] == {
        "checks": len(outcomes),
        **{outcome: outcomes.count(outcome) for outcome in ("pass", "violation", "unmeasured", "not_checked")},
        "failing": sum(check["fails"] for check in document["checks"]),
    }
    assert [rule["scope"]["sync"] for rule in document["rules"]] == [None, ["normal"], None]


def test_check_json_of_a_passing_gate_exits_0_and_names_what_was_allowed(compared, tmp_path):
    _, results = compared
    policy = "[options]\nallow_unmeasured = true\n[[rule]]\nmax_p99_ms = 100000\nmax_fsync_calls_per_commit = 10\n"
    proc, document = check_json(policy, tmp_path, str(results))
    assert proc.returncode == 0 and document["passed"] is True and document["options"]["allow_unmeasured"] is True
    unmeasured = [check for check in document["checks"] if check["outcome"] == "unmeasured"]
    assert unmeasured and not any(check["fails"] for check in unmeasured)
    assert document["counts"]["failing"] == 0


def mann_whitney_p(new: list[float], old: list[float]) -> float:
    """One-sided exact Mann–Whitney U (new larger): the share of all ways to split the
    pooled values into the two groups whose U is at least the observed one."""
    pooled = new + old

    def u(group: tuple[int, ...]) -> int:
        rest = [pooled[i] for i in range(len(pooled)) if i not in group]
        return sum(pooled[i] > value for i in group for value in rest)

    splits = list(itertools.combinations(range(len(pooled)), len(new)))
    observed = u(tuple(range(len(new))))
    return sum(u(split) >= observed for split in splits) / len(splits)


REGRESSION_POLICY = """
[[rule]]
max_regression_pct = 10
metrics = ["vfs_write_kib_per_commit", "vfs_sync_calls_per_commit", "p99_ms"]
"""


def test_check_json_regressions_hold_both_sides_and_the_significance_of_timing(compared, tmp_path):
    baseline, results = compared
    proc, document = check_json(REGRESSION_POLICY, tmp_path, str(results), "--baseline", str(baseline))
    assert document["baseline"] == str(baseline)
    now, before = config_means(results), config_means(baseline)
    checks = {(check["label"], check["metric"]): check for check in document["checks"]}
    # wal/normal is not in the baseline: one unmeasured check for the configuration
    absent = checks[("mobibench-insert none wal/normal", None)]
    assert (absent["kind"], absent["outcome"], absent["fails"]) == ("regression", "unmeasured", True)
    name = "mobibench-insert none wal/full"
    for metric in ("vfs_write_kib_per_commit", "vfs_sync_calls_per_commit", "p99_ms"):
        check = checks[(name, metric)]
        assert check["baseline"] == pytest.approx(before[name][metric])
        assert check["current"] == pytest.approx(now[name][metric])
        change = (now[name][metric] - before[name][metric]) / before[name][metric] * 100
        assert (check["measured"], check["unit"], check["limit"]) == (pytest.approx(change), "%", 10)
    for metric in ("vfs_write_kib_per_commit", "vfs_sync_calls_per_commit"):  # counts: exact rules
        check = checks[(name, metric)]
        assert check["p_value"] is None and check["outcome"] == ("violation" if check["measured"] > 10 else "pass")
    p99 = checks[(name, "p99_ms")]
    runs = lambda matrix: [row["p99_ms"] for row in store_rows(matrix, "journal = 'wal' AND sync = 'full'")]  # noqa: E731
    assert p99["p_value"] == pytest.approx(mann_whitney_p(runs(results), runs(baseline)))
    # 2 runs against 1 are too few (the two-sided smallest p is 2 / C(3, 2)): never called a regression
    assert p99["outcome"] == ("pass" if p99["measured"] <= 10 else "unmeasured")
    assert proc.returncode == 1  # the unmeasured configuration fails the gate


def test_check_json_policy_mistake_is_one_error_line_and_no_json(compared, tmp_path):
    _, results = compared
    policy = tmp_path / "policy.toml"
    policy.write_text("[[rule]]\nmax_p99 = 3\n")
    proc = sqlwa_in_process("check", "--policy", str(policy), str(results), "--json")
    assert_one_error_line(proc, "unknown key 'max_p99'")


@pytest.mark.parametrize(
    "args",
    [
        ("check", "--json", "--bogus", "{tmp}"),
        ("compare", "--json", "{tmp}"),
        ("matrix", "--json", "--vfs-only", "--repeat", "0", "--out", "{tmp}/m"),
    ],
)
def test_a_bad_option_with_json_exits_2_with_one_error_line(args, tmp_path):
    proc = sqlwa_in_process(*(arg.format(tmp=tmp_path) for arg in args))
    assert proc.returncode == 2 and proc.stdout == ""
    # click's usage errors, or sqlwa's own (compare without B: B is optional with --by)
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("Error: ", "sqlwa: error: "))]
    assert len(errors) == 1, proc.stderr


# ------------------------------------------------------------------ the docs' examples

# Objects keyed by metric (or by a rule's limit): the docs' examples show a few of them.
NAME_MAPS = {"metrics", "units", "limits", "sd"}  # sd: a configuration's spread over its repeats, by metric
KNOWN_NAMES = set(METRICS) | set(LIMITS)


def readme_example(command: str) -> dict:
    """The JSON example after the paragraph on ``sqlwa COMMAND --json`` of the output reference."""
    page = REPO / "docs" / "reference" / "outputs.md"
    section = page.read_text().split("## Machine-readable output: `--json`")[1].split("\n## ")[0]
    paragraph = section.split(f"**`sqlwa {command} --json`**")[1]
    return json.loads(paragraph.split("```json\n")[1].split("```")[0])


def value_kind(value) -> str:
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def assert_same_shape(example, actual, where: str = "document") -> None:
    """The example has the real document's keys (a few of a name map's), and values of
    the same kind; null on either side matches anything (not measured)."""
    if example is None or actual is None:
        return
    if isinstance(example, dict):
        assert isinstance(actual, dict), where
        if where.rsplit(".", 1)[-1] in NAME_MAPS:
            assert set(example) <= KNOWN_NAMES, where
            pairs = [(key, actual.get(key, next(iter(actual.values()), None))) for key in example]
        else:
            assert set(example) == set(actual), f"{where}: {sorted(set(example) ^ set(actual))}"
            pairs = [(key, actual[key]) for key in example]
        for key, value in pairs:
            assert_same_shape(example[key], value, f"{where}.{key}")
    elif isinstance(example, list):
        assert isinstance(actual, list), where
        if example and actual:
            assert_same_shape(example[0], actual[0], f"{where}[0]")
    else:
        assert value_kind(example) == value_kind(actual), where


def test_the_readme_examples_have_the_shape_of_the_real_documents(failing_sweep, compared, tmp_path):
    a, b = compared
    compare_document = json.loads(sqlwa_in_process("compare", str(a), str(b), "--json").stdout)
    _, check_document = check_json(LIMITS_POLICY, tmp_path, str(b))
    assert_same_shape(readme_example("matrix"), json.loads(failing_sweep[1].stdout))
    assert_same_shape(readme_example("compare"), compare_document)
    assert_same_shape(readme_example("check"), check_document)
