"""A matrix interrupted part-way (#32): Ctrl-C in cell 2 of 4 leaves a partial matrix,
and every command that reads it says "partial: 1 of 4 cells"; `check` fails on it unless
--allow-partial; `--resume` completes it, after which it is no longer partial. Before,
`check` passed it ("7 checks: 7 passed", exit 0) and `report` wrote a normal page."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import REPO, sqlwa
from sqlwa.results import rundir, store

# The example policy, its rules about the levels a VFS-only sweep does not measure allowed.
POLICY_TEXT = (
    (REPO / "examples" / "policy.toml").read_text().replace("allow_unmeasured = false", "allow_unmeasured = true")
)
# Four VFS-level cells (delete/off, delete/normal, wal/off, wal/normal), the second long
# enough to be caught while it runs (FULL's fsyncs in the others cost a minute on CI's disk).
SWEEP = ("matrix", "--vfs-only", "-j", "delete,wal", "--sync", "off,normal", "-n", "1500", "--warmup", "0")
SECOND_CELL = "mobibench-insert-none-delete-normal-r1"
PARTIAL = "partial: 1 of 4 cells"


def interrupt_in_second_cell(out: Path) -> subprocess.CompletedProcess:
    """Start the sweep into ``out`` and send it SIGINT (Ctrl-C) while its second cell runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", *SWEEP, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = out / "runs" / SECOND_CELL / rundir.RUNNING_FILE
    deadline = time.monotonic() + 300
    while not marker.exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.3)  # into the cell's workload
    assert proc.poll() is None, "the second cell should still be running"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_an_interrupted_matrix_is_partial_everywhere_until_resumed(tmp_path):
    out, policy = tmp_path / "m", tmp_path / "policy.toml"
    policy.write_text(POLICY_TEXT)
    interrupted = interrupt_in_second_cell(out)
    assert interrupted.returncode == 130, interrupted.stderr
    assert "in cell 2" in interrupted.stderr and PARTIAL in interrupted.stderr
    assert store.load_results(out)["status"].to_list() == ["ok"]  # the store's own truth: one cell ran

    check = sqlwa("check", "--policy", str(policy), str(out), check=False)
    assert check.returncode == 1 and PARTIAL in check.stderr, check.stderr
    allowed = sqlwa("check", "--policy", str(policy), str(out), "--allow-partial", check=False)
    assert allowed.returncode == 0 and PARTIAL in allowed.stderr, allowed.stderr
    as_json = sqlwa("check", "--policy", str(policy), str(out), "--json", check=False)
    assert as_json.returncode == 1 and '"cells_run": 1' in as_json.stdout and '"passed": false' in as_json.stdout

    report = sqlwa("report", str(out), "-o", str(tmp_path / "r.html"))
    assert PARTIAL in report.stderr and "Partial: 1 of 4 cells" in (tmp_path / "r.html").read_text()
    compare = sqlwa("compare", str(out), str(out))
    assert PARTIAL in compare.stderr
    predict = sqlwa("predict", str(out), "-d", "moto-z-2016", check=False)
    assert PARTIAL in predict.stderr

    resumed = sqlwa(*SWEEP, "--out", str(out), "--resume")
    assert resumed.stderr.count("done-earlier") == 1
    assert store.load_results(out).height == 4
    whole = sqlwa("check", "--policy", str(policy), str(out))
    assert "partial" not in whole.stderr
    report = sqlwa("report", str(out), "-o", str(tmp_path / "r.html"))
    assert "partial" not in report.stderr and "Partial" not in (tmp_path / "r.html").read_text()
