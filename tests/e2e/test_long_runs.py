"""Long runs (#37, item 2): `sqlwa run --duration`, bounded in the engine, checked against
strace's clock and the sqlite3 shell's row count; a Ctrl-C between measured commits keeps
what was measured; a bad duration is one line and exit 2. The lab's counterpart:
tests/lab/test_long_lab_runs.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import leftovers_after_release, sqlwa
from sqlwa.results import rundir

TABLES = ("tblMyList0", "tblMyList1", "tblMyList2")  # mobibench-insert: a row in each per commit
UNLINK = re.compile(r"^\d+\s+(?P<t>\d+\.\d+) unlink(?:at)?\(.*-journal\"")


def rows(db: Path) -> list[int]:
    """Rows of each table, as the sqlite3 shell counts them."""
    return [
        int(subprocess.run(["sqlite3", str(db), f"SELECT count(*) FROM {t}"], capture_output=True, text=True).stdout)
        for t in TABLES
    ]


def kept_db(stdout: str) -> Path:
    kept = re.search(r"kept the database in (\S+)", stdout)
    assert kept, stdout
    return Path(kept[1]) / "mobibench-insert.db"


@pytest.mark.skipif(not shutil.which("strace") or not shutil.which("sqlite3"), reason="needs strace and sqlite3")
def test_a_duration_ends_the_run_within_a_commit_of_it(tmp_path: Path) -> None:
    """Rollback journal: every commit unlinks its -journal, which strace timestamps; the
    run's transactions are its last unlinks, as many as the rows in the kept database."""
    out, trace = tmp_path / "out", tmp_path / "strace.txt"
    argv = [sys.executable, "-m", "sqlwa", "run", "--duration", "3s", "--keep-db", "-o", str(out)]
    proc = subprocess.run(
        ["strace", "-f", "-ttt", "-e", "trace=unlink,unlinkat", "-o", str(trace), *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    db = kept_db(proc.stdout)
    try:
        per_table = rows(db)
    finally:
        shutil.rmtree(db.parent)
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    transactions = summary["commits"] + summary["warmup_commits"]
    assert per_table == [transactions] * 3, (per_table, transactions)
    assert summary["stopped"]["by"] == "duration" and "partial" not in summary["stopped"]
    unlinks = [float(m["t"]) for line in trace.read_text().splitlines() if (m := UNLINK.match(line))]
    assert len(unlinks) >= transactions  # the schema's commit unlinks one too
    ends = unlinks[-transactions:]  # each transaction's end, by strace's clock
    longest = max(b - a for a, b in zip(ends, ends[1:], strict=False))  # a commit, and what runs between
    span = ends[-1] - ends[0]  # the first commit's end to the last's: 3 s, give or take a commit
    # The deadline is 3 s after the first transaction began and none starts after it: the
    # last ends at most one gap (a commit and the progress call before it) past 3 s, and the
    # span lacks the first commit; 0.1 s for that first commit, the first progress call
    # (which reads the disk use) and the unlink's place inside its commit, beyond one gap.
    assert abs(span - 3.0) <= longest + 0.1, (span, longest)


def test_a_duration_with_fewer_transactions_stops_at_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = sqlwa("run", "--duration", "1h", "-n", "7", "--warmup", "0", "--keep-db", "-o", str(out))
    db = kept_db(proc.stdout)
    try:
        assert rows(db) == [7, 7, 7]
    finally:
        shutil.rmtree(db.parent)
    stopped = json.loads((out / rundir.SUMMARY_FILE).read_text())["stopped"]
    assert stopped["by"] == "txns" and stopped["txns_asked"] == 7 and stopped["duration_s_asked"] == 3600


@pytest.mark.parametrize("bad", ["3x", "0", "-5s", "", "1y", "400d", "s", "nan"])
def test_a_bad_duration_is_one_line_and_exit_2(tmp_path: Path, bad: str) -> None:
    out = tmp_path / "out"
    proc = sqlwa("run", "--duration", bad, "-o", str(out), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and "--duration" in errors[0], proc.stderr
    assert not out.exists()


def test_durations_read_as_people_write_them() -> None:
    from sqlwa.cli.run import parse_duration

    cases = {"30s": 30, "10m": 600, "24h": 86400, "2d": 172800, "1h30m": 5400, "1.5h": 5400, "90": 90, "500ms": 0.5}
    assert {text: parse_duration(text) for text in cases} == cases


def test_a_replay_takes_no_duration(tmp_path: Path) -> None:
    from helpers import REPO

    out = tmp_path / "out"
    proc = sqlwa(
        "run", "-s", str(REPO / "examples" / "ipython-history.jsonl"), "--duration", "3s", "-o", str(out), check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")] == [
        f"sqlwa: error: --duration bounds a scenario's run, and {REPO / 'examples' / 'ipython-history.jsonl'} "
        "is a SQL log, replayed to its end"
    ]
    assert not out.exists()


def test_crash_and_vm_runs_take_no_duration(tmp_path: Path) -> None:
    crash = sqlwa("crash", "--duration", "3s", check=False)
    assert crash.returncode == 2 and "--duration" in crash.stderr
    vm = sqlwa("run", "--vm", "--duration", "3s", "-o", str(tmp_path / "o"), check=False)
    assert vm.returncode == 2 and "--duration is for a run on this host" in vm.stderr, vm.stderr


def wait_for_progress(proc: subprocess.Popen, err_path: Path, timeout: float = 120) -> None:
    """Until the run's first progress line (printed every 10 s when stderr is a file)."""
    deadline = time.monotonic() + timeout
    while "commits," not in err_path.read_text():
        assert proc.poll() is None, err_path.read_text()
        assert time.monotonic() < deadline, "no progress line"
        time.sleep(0.1)


@pytest.mark.skipif(not shutil.which("sqlite3"), reason="needs sqlite3")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_workload_keeps_what_was_measured(tmp_path: Path, signum: int) -> None:
    out, err_path, work = tmp_path / "out", tmp_path / "err.txt", tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, "-m", "sqlwa", "run", "--duration", "1h", "--keep-db", "--dir", str(work), "-o", str(out)]
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            wait_for_progress(proc, err_path)
            proc.send_signal(signum)
            stdout, _ = proc.communicate(timeout=120)
        finally:
            proc.kill()
            proc.wait()
    stderr = err_path.read_text()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert f"{out} holds what was measured" in last, stderr
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    stopped = summary["stopped"]
    assert stopped["by"] == "interrupted"
    assert stopped["partial"].startswith(f"{'interrupted' if signum == signal.SIGINT else 'terminated by SIGTERM'}")
    assert f"after {summary['commits']} commits" in stopped["partial"]
    assert rows(kept_db(stdout)) == [summary["commits"] + summary["warmup_commits"]] * 3
    assert summary["commits"] > 0
    assert leftovers_after_release(proc.pid) == [], "only the database --keep-db asked for is left"
    readers_say_it_is_partial(out, stopped["partial"], tmp_path)


def readers_say_it_is_partial(out: Path, interrupted: str, tmp_path: Path) -> None:
    """report and check read a kept run as partial, as they read a partial matrix; check
    fails it unless --allow-partial."""
    from helpers import REPO

    said = f"{out} is a partial run: {interrupted}"
    report = sqlwa("report", str(out), "-o", str(tmp_path / "r.html"))
    assert said in report.stderr, report.stderr
    assert f"Partial run: {interrupted}" in (tmp_path / "r.html").read_text()
    policy = str(REPO / "examples" / "policy.toml")
    gate = sqlwa("check", "--policy", policy, "--json", str(out), check=False)
    assert gate.returncode == 1 and said in gate.stderr, gate.stderr
    document = json.loads(gate.stdout)
    assert document["partial"] == {"interrupted": interrupted} and document["passed"] is False
    allowed = sqlwa("check", "--policy", policy, "--allow-partial", str(out), check=False)
    assert f"{said} (allowed: --allow-partial)" in allowed.stderr, allowed.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs: needs root")
def test_a_duration_run_outgrowing_its_disk_is_warned_of(tmp_path: Path) -> None:
    """A --duration run on a 128 MiB tmpfs: its files grow (the database, the chunk file)
    faster than that holds for an hour, so the progress line warns once; the run then
    stops by the full disk, in one line that says to make room. (32 MiB filled before the
    rate is first projected, 5 s in, on a fast host: no warning.) The fill is CPU-bound,
    ~290 B of files a DELETE/FULL commit on a tmpfs: 1.9 MiB/s on this 2-core machine at
    load average 9, 6.4 MiB/s or more on the fast host; filling 128 MiB before the first
    projection (5-6 s) takes 25 MiB/s, a commit every 11 us, four times that host's pace."""
    work, out, err_path = tmp_path / "work", tmp_path / "out", tmp_path / "err.txt"
    work.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "sqlwa-test-room", str(work)], check=True)
    try:
        argv = [sys.executable, "-m", "sqlwa", "run", "--duration", "1h", "--dir", str(work), "-o", str(out)]
        with open(err_path, "w") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                # a hang detector: 128 MiB at the 1.9 MiB/s of a loaded run fill in ~70 s;
                # a run the full disk does not stop goes on for its hour
                proc.communicate(timeout=600)
            finally:
                proc.kill()
                proc.wait()
        stderr = err_path.read_text()
    finally:
        subprocess.run(["umount", str(work)], check=True)
    warnings = [line for line in stderr.splitlines() if line.startswith("sqlwa: warning: at this rate")]
    assert len(warnings) == 1, stderr
    assert "it will stop when the disk fills" in warnings[0]
    assert proc.returncode == 2 and "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and ("no space left" in errors[0].lower()), stderr
    assert "fix: make room on that filesystem" in stderr, stderr
