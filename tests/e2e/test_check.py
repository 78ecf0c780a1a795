"""``sqlwa check``: limits held against real runs, exit codes 0 / 1 / 2, violation lines,
unmeasured levels reported, lossy traces failed, baselines, JUnit XML, the example policy."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from junitparser import Skipped
from junitparser.xunit2 import JUnitXml

import helpers
from helpers import REPO, sqlwa, sqlwa_in_process

ROOT = REPO
EXAMPLE_POLICY = ROOT / "examples" / "policy.toml"


@pytest.fixture(scope="module")
def vfs_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("check") / "wal-full"
    sqlwa("run", "-j", "wal", "--sync", "full", "-n", "20", "--warmup", "2", "--out", str(out))
    return out


@pytest.fixture(scope="module")
def lab_matrix(tmp_path_factory) -> Path:
    return helpers.lab_matrix(tmp_path_factory, "check-lab", "-j", "delete,wal", "--sync", "full", "-n", "20")


def policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def check(*args: str) -> subprocess.CompletedProcess:
    """``sqlwa check ARGS`` in this process."""
    return sqlwa_in_process("check", *args)


def test_violated_limit_exits_1_with_one_line(tmp_path, vfs_run):
    p = policy(tmp_path, '[[rule]]\nname = "impossible"\njournal = "wal"\nmax_p99_ms = 0.0001\n')
    proc = check("--policy", str(p), str(vfs_run))
    assert proc.returncode == 1, proc.stderr
    p99 = json.loads((vfs_run / "summary.json").read_text())["latency_ms"]["p99"]
    line = (
        f"FAIL mobibench-insert {json.loads((vfs_run / 'summary.json').read_text())['config']['fs']} wal/full: "
        f"max_p99_ms measured {p99:,.3f}, limit 0.0001 [rule: impossible]"
    )
    assert proc.stdout.splitlines() == [line]


def test_holding_limits_exit_0(tmp_path, vfs_run):
    p = policy(
        tmp_path, "[[rule]]\nmax_p99_ms = 100000\nmax_frame_budget_misses = 1000\nmax_frame_budget_miss_pct = 100\n"
    )
    proc = check("--policy", str(p), str(vfs_run))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "" and "3 passed" in proc.stderr


def test_rule_out_of_scope_does_not_apply(tmp_path, vfs_run):
    text = '[[rule]]\nmax_p99_ms = 100000\n[[rule]]\nname = "rollback"\njournal = ["delete", "truncate"]\nmax_p99_ms = 0.0001\n'
    proc = check("--policy", str(policy(tmp_path, text)), str(vfs_run))
    assert proc.returncode == 0 and "rule 'rollback' matches no measured configuration" in proc.stderr


@pytest.mark.parametrize("scope", ['fs = "ext5"', 'journal = "delete"\nsync = ["off", "normal"]'])
def test_a_policy_that_checks_nothing_is_a_usage_error(tmp_path, vfs_run, scope):
    # Zero checks is not a pass (pytest exits 5 when it collects no test): the line names
    # the rule and what its scope asked for that the results do not hold.
    text = f'[[rule]]\nname = "nothing"\n{scope}\nmax_p99_ms = 0.0001\n'
    proc = check("--policy", str(policy(tmp_path, text)), str(vfs_run), "--junit", str(tmp_path / "c.xml"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    fs = json.loads((vfs_run / "summary.json").read_text())["config"]["fs"]
    [error, fix] = proc.stderr.splitlines()
    assert error.startswith("sqlwa: error: no rule checked anything: rule 'nothing' matches no measured configuration")
    if "ext5" in scope:
        assert error.endswith(f"(fs = ext5; the results have fs {fs})")
    else:
        assert error.endswith("(journal = delete, sync = off/normal; the results have journal wal, sync full)")
    assert fix.startswith("  fix: ") and proc.stdout == "" and not (tmp_path / "c.xml").exists()


def test_unmeasured_level_is_reported_not_passed(tmp_path, vfs_run):
    text = "[[rule]]\nmax_write_kib_per_commit = 1000\nmax_fsync_calls_per_commit = 10\n"
    proc = check("--policy", str(policy(tmp_path, text)), str(vfs_run))
    assert proc.returncode == 1
    assert "NOT MEASURED" in proc.stdout and "needs the block level" in proc.stdout
    assert "needs the syscall level" in proc.stdout
    allowed = check("--policy", str(policy(tmp_path, "[options]\nallow_unmeasured = true\n" + text)), str(vfs_run))
    assert allowed.returncode == 0 and "NOT MEASURED" in allowed.stdout and "(allowed)" in allowed.stderr


def lossy_copy(run: Path, tmp_path: Path, lost: int) -> Path:
    copy = tmp_path / "lossy"
    shutil.copytree(run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["trace"] = {"events": 1000, "lost_events": lost}
    (copy / "summary.json").write_text(json.dumps(summary))
    return copy


def test_lossy_trace_fails_unless_allowed(tmp_path, vfs_run):
    lossy = lossy_copy(vfs_run, tmp_path, 7)
    rule = "[[rule]]\nmax_p99_ms = 100000\n"
    proc = check("--policy", str(policy(tmp_path, rule)), str(lossy))
    assert proc.returncode == 1 and "the trace lost 7 events" in proc.stdout
    proc = check("--policy", str(policy(tmp_path, "[options]\nallow_lossy_trace = true\n" + rule)), str(lossy))
    assert proc.returncode == 0


def test_regression_against_baseline(tmp_path, vfs_run):
    baseline = tmp_path / "baseline"
    shutil.copytree(vfs_run, baseline)
    summary = json.loads((baseline / "summary.json").read_text())
    summary["per_commit"]["vfs_write_bytes"] /= 2  # the baseline wrote half as much
    (baseline / "summary.json").write_text(json.dumps(summary))
    rule = '[[rule]]\nname = "no regressions"\nmax_regression_pct = 10\nmetrics = ["vfs_write_kib_per_commit", "vfs_sync_calls_per_commit"]\n'
    p = policy(tmp_path, rule)
    junit = tmp_path / "check.xml"
    proc = check("--policy", str(p), str(vfs_run), "--baseline", str(baseline), "--junit", str(junit))
    assert proc.returncode == 1
    assert len(proc.stdout.splitlines()) == 1
    assert (
        "FAIL" in proc.stdout
        and "max_regression_pct vfs_write_kib_per_commit" in proc.stdout
        and "+100.0%" in proc.stdout
    )
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert "vfs_write_kib_per_commit" in failure.get("message")
    same = check("--policy", str(p), str(vfs_run), "--baseline", str(vfs_run))
    assert same.returncode == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[rule]]\nmax_p99 = 3\n", "unknown key 'max_p99'"),
        ('[[rule]]\njournal = "wal"\n', "sets no limit"),
        ('[[rule]]\nmax_p99_ms = "fast"\n', "must be a finite number"),
        ("[[rule]]\nmax_p99_ms = nan\n", "max_p99_ms must be a finite number, not nan"),
        ("rule = 5\n", "rules must be [[rule]] tables"),
        ("rule = [1]\n", "rules must be [[rule]] tables"),
        ("options = 5\n[[rule]]\nmax_p99_ms = 1\n", "options must be a table"),
        ("[options]\nallow_unmeasured = []\n[[rule]]\nmax_p99_ms = 1\n", "allow_unmeasured must be true or false"),
        ("[[rule]]\nmax_regression_pct = 5\nmetrics = 5\n", "metrics must be a list of metric names"),
        ("[[rule]]\nmax_p99_ms = 1\nname = [1]\n", "name must be a string"),
        ("[[rule]]\nmax_regression_pct = 5\n", "no --baseline"),
        ("[rule\n", "not valid TOML"),
        ("[options]\nallow_loss = true\n[[rule]]\nmax_p99_ms = 1\n", "unknown option"),
        ('[[rule]]\nforbid_findings = ["fsync_flushed_nada"]\n', "unknown finding 'fsync_flushed_nada'"),
        ("[[rule]]\nforbid_findings = 3\n", "forbid_findings must be a list of names"),
    ],
)
def test_policy_mistakes_exit_2_with_one_line(tmp_path, vfs_run, text, message):
    proc = check("--policy", str(policy(tmp_path, text)), str(vfs_run))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "fix:" in proc.stderr and "Traceback" not in proc.stderr


def test_an_endless_policy_is_refused_not_read_forever(vfs_run):
    # /dev/zero never ends: read whole, it grew until memory ran out, deaf to Ctrl-C (found
    # by the CLI fuzz). A subprocess, so that reading it forever fails the test by its timeout.
    proc = sqlwa("check", "--policy", "/dev/zero", str(vfs_run), check=False, timeout=60)
    assert proc.returncode == 2 and "policy /dev/zero is a character device, not a regular file" in proc.stderr


def test_a_junit_path_in_no_directory_is_refused_before_checking(tmp_path, vfs_run):
    # It was found only when the report was written, after the findings and notes were
    # printed: half an answer, then the error (found by the CLI fuzz).
    p = policy(tmp_path, "[[rule]]\nmax_p99_ms = 1000\n")
    proc = check("--policy", str(p), str(vfs_run), "-v", "--junit", str(tmp_path / "new" / "check.xml"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"sqlwa: error: --junit {tmp_path / 'new' / 'check.xml'}: ")
    assert "does not exist" in proc.stderr.splitlines()[0]
    assert not (tmp_path / "new").exists()


def test_missing_results_exit_2(tmp_path):
    proc = sqlwa("check", "--policy", str(EXAMPLE_POLICY), str(tmp_path), check=False)  # the real command once
    assert proc.returncode == 2 and "neither results.sqlite nor summary.json" in proc.stderr


@pytest.mark.root
def test_example_policy_holds_for_a_lab_matrix(lab_matrix, tmp_path):
    proc = check("--policy", str(EXAMPLE_POLICY), str(lab_matrix), "-v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok mobibench-insert ext4 wal/full: max_fsync_calls_per_commit measured 1.000, limit 1.1" in proc.stdout


@pytest.mark.root
def test_lab_run_breaking_an_fsync_limit_fails(lab_matrix, tmp_path):
    p = policy(
        tmp_path, '[[rule]]\nname = "one fsync"\nfs = "ext4"\njournal = "delete"\nmax_fsync_calls_per_commit = 1\n'
    )
    proc = check("--policy", str(p), str(lab_matrix))
    assert proc.returncode == 1
    [line] = proc.stdout.splitlines()
    assert line.startswith("FAIL mobibench-insert ext4 delete/full: max_fsync_calls_per_commit measured ")
    assert line.endswith("limit 1 [rule: one fsync]")


def test_example_policy_without_block_level_says_not_measured(vfs_run):
    proc = check("--policy", str(EXAMPLE_POLICY), str(vfs_run))
    assert proc.returncode == 1 and "NOT MEASURED" in proc.stdout and "FAIL" not in proc.stdout
    # a run without the block level has not shown that its fsyncs reached the device
    assert (
        "forbid_findings fsync_flushed_nothing: needs the block level, which was not measured "
        "[rule: durable commits]" in proc.stdout
    )


@pytest.mark.root
def test_junit_counts_skipped_cells_times_and_measured_values(tmp_path, tmp_path_factory):
    # f2fs is skipped where the kernel lacks it; the XML is read with junitparser's
    # xunit2 flavour (pytest's own default), as a CI system reads it
    from sqlwa.lab.filesystem import filesystem_support

    if filesystem_support("f2fs").available:
        pytest.skip("f2fs is available here: no cell is skipped")
    started = time.monotonic()
    matrix = helpers.lab_matrix(
        tmp_path_factory, "junit", "--fs", "ext4,f2fs", "-j", "wal", "--sync", "full", "-n", "20"
    )
    wall = time.monotonic() - started
    junit = tmp_path / "check.xml"
    proc = check("--policy", str(EXAMPLE_POLICY), str(matrix), "--junit", str(junit), "-v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    xml = JUnitXml.fromfile(str(junit))
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"mobibench-insert ext4 wal/full", "mobibench-insert f2fs wal/full"}
    f2fs = suites["mobibench-insert f2fs wal/full"]
    [cell] = list(f2fs)
    assert (f2fs.tests, f2fs.skipped, f2fs.failures, f2fs.errors) == (1, 1, 0, 0)
    assert cell.is_skipped and isinstance(cell.result[0], Skipped) and "f2fs" in cell.result[0].message
    ext4 = suites["mobibench-insert ext4 wal/full"]
    cases = list(ext4)
    passed = [line for line in proc.stdout.splitlines() if line.startswith("ok mobibench-insert ext4 wal/full")]
    assert ext4.tests == len(cases) == len(passed) and ext4.skipped == ext4.failures == 0
    # time: the seconds measuring the cell, within the sweep's wall time, shared by its cases
    assert 0 < ext4.time < wall and sum(c.time for c in cases) == pytest.approx(ext4.time, abs=0.001 * len(cases))
    assert all(re.fullmatch(r"\d+\.\d{3}", c._elem.get("time")) for c in cases)
    assert xml.time == pytest.approx(ext4.time + f2fs.time, abs=0.002)
    # every passing case's measured value, as a property of its suite named as the case
    properties = {prop.name: float(prop.value) for prop in ext4.properties()}
    assert properties["WAL: max_fsync_calls_per_commit"] == 1.0  # one fdatasync of the WAL per commit
    for case in cases:
        assert case.is_passed and case.system_out.startswith("ok mobibench-insert ext4 wal/full: ")
        assert case.name in properties
    totals = xml._elem.attrib
    assert (totals["tests"], totals["failures"], totals["errors"]) == (str(len(cases) + 1), "0", "0")
