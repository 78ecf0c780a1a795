"""A run directory says whether it is complete (#15, point 11): a re-run into a directory
that held a finished run, interrupted part-way, is refused by every reader instead of
passing for the run before it; the next complete run clears the mark."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sqlwa
from helpers import REPO
from helpers import sqlwa as sqlwa_cli
from sqlwa.results import rundir

POLICY = REPO / "examples" / "policy.toml"


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def interrupt_rerun(out: Path, signum: int) -> None:
    """Start a long `sqlwa run` into ``out``, let it get going, then send it ``signum``:
    in its warm-up, so that nothing measured is kept (a signal between measured commits
    keeps them: tests/e2e/test_long_runs.py) and the run stays unfinished."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", "run", "-n", "1", "--warmup", "200000", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not (out / rundir.RUNNING_FILE).exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # well into the workload
    assert proc.poll() is None, "the run should still be going"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0, stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupted_rerun_is_refused_by_every_reader(tmp_path, signum):
    out = tmp_path / "run"
    sqlwa_cli("run", "-n", "20", "--warmup", "0", "--out", str(out))
    (out / "notes.txt").write_text("mine\n")  # the user's own file: not sqlwa's to remove
    assert isinstance(sqlwa.load(out), sqlwa.Run)

    interrupt_rerun(out, signum)

    assert not (out / rundir.SUMMARY_FILE).exists(), "the earlier run's summary went first"
    with pytest.raises(sqlwa.UsageError, match="unfinished run"):
        sqlwa.load(out)
    with pytest.raises(sqlwa.UsageError, match="unfinished run"):
        sqlwa.Run(out)
    for args in (
        ("report", str(out), "-o", str(tmp_path / "r.html")),
        ("check", "--policy", str(POLICY), str(out)),
        ("compare", str(out), str(out)),
    ):
        assert "unfinished run" in one_error_line(sqlwa_cli(*args, check=False))
    assert not (tmp_path / "r.html").exists()
    assert (out / "notes.txt").read_text() == "mine\n"

    # the next complete run into the directory is whole again
    sqlwa_cli("run", "-n", "20", "--warmup", "0", "--out", str(out))
    assert not (out / rundir.RUNNING_FILE).exists()
    assert sqlwa.load(out).commits.height == 20
    assert (out / "notes.txt").read_text() == "mine\n"


def test_vfs_rerun_over_a_lab_run_leaves_none_of_its_files(tmp_path):
    """A VFS-only run into a directory that held a lab run: the old trace, events and
    layout do not stand beside the new summary (the reader would show them as its trace)."""
    out = tmp_path / "run"
    sqlwa_cli("run", "-n", "20", "--warmup", "0", "--out", str(out))
    for name in (rundir.TRACE_FILE, rundir.EVENTS_FILE, rundir.WRITES_FILE, rundir.LAYOUT_FILE):
        (out / name).write_text("an earlier lab run's file\n")
    sqlwa_cli("run", "-n", "20", "--warmup", "0", "--out", str(out))
    run = sqlwa.load(out)
    assert isinstance(run, sqlwa.Run) and not run.has_trace
    assert sorted(p.name for p in out.iterdir()) == [rundir.COMMITS_FILE, rundir.SUMMARY_FILE]
