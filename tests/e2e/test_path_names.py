"""Paths as users have them: names that are not UTF-8 (a file system takes any bytes but
/ and NUL), found by the command-line fuzz (tests/e2e/test_cli_fuzz.py). Python holds
such a name with surrogates, which Polars cannot take: sqlwa writes and reads its tables
through files it opens itself, and refuses to build a results table from such a path
with one line instead of a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl
import pytest

import sqlwa
from helpers import REPO, sqlwa_as_nobody
from helpers import sqlwa as sqlwa_cli

KEKS = REPO / "traces" / "samples" / "blktrace-keks" / "keks"
NOT_UTF8 = os.fsdecode(b"\x94")  # a Latin-1 name seen through UTF-8 eyes


def test_tables_are_written_and_read_under_a_name_that_is_not_utf8(tmp_path):
    events = tmp_path / f"ev{NOT_UTF8}.parquet"
    sqlwa_cli("parse", str(KEKS), "-o", str(events), errors="surrogateescape")
    with open(events, "rb") as f:
        assert pl.read_parquet(f).height == 2398
    out = tmp_path / f"run{NOT_UTF8}"
    sqlwa_cli("run", "-n", "2", "--warmup", "0", "-o", str(out), errors="surrogateescape")
    assert sqlwa.load(out).commits.height == 2


def test_results_under_a_name_that_is_not_utf8_are_refused_in_one_line(tmp_path):
    out = tmp_path / f"run{NOT_UTF8}"
    sqlwa_cli("run", "-n", "2", "--warmup", "0", "-o", str(out), errors="surrogateescape")
    for args in (["report", str(out), "-o", str(tmp_path / "r.html")], ["compare", str(out), str(out)]):
        proc = sqlwa_cli(*args, check=False, errors="surrogateescape")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.splitlines()[0].endswith("sqlwa reads results only where their path is UTF-8 text")


def test_a_name_that_is_not_utf8_is_echoed_as_its_bytes_under_a_utf8_locale(tmp_path):
    # Under a UTF-8 locale (not C.UTF-8) Python's stdout is strict: echoing the name was a
    # UnicodeEncodeError traceback after the work was done.
    strict = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    for args, echoed in (
        (["parse", str(KEKS), "-o", str(tmp_path / f"ev{NOT_UTF8}.parquet")], b"ev\x94.parquet"),
        (["run", "-n", "2", "--warmup", "0", "-o", str(tmp_path / f"run{NOT_UTF8}")], b"run\x94/summary.json"),
    ):
        proc = subprocess.run([sys.executable, "-m", "sqlwa", *args], capture_output=True, env=strict, timeout=120)
        assert proc.returncode == 0 and echoed in proc.stdout, proc.stderr.decode()


LONG = "a" * 300  # longer than a name may be (NAME_MAX 255)


@pytest.mark.parametrize(
    "args",
    [
        ["report", LONG],
        ["compare", LONG, LONG],
        ["run", "-n", "1", "-s", f"{LONG}.toml"],
        ["run", "-n", "1", "--dir", LONG],
    ],
    ids=["report", "compare", "run-scenario", "run-dir"],
)
def test_a_name_the_system_refuses_is_one_line(tmp_path, args):
    # Path.is_file() and friends raise for ENAMETOOLONG and EACCES: a traceback (the fuzz).
    proc = sqlwa_cli(*args, check=False, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[0].endswith(": File name too long"), proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.root
def test_a_path_this_user_may_not_look_into_is_one_line(tmp_path):
    hidden = tmp_path / "x"  # pytest's tmp_path is root's alone
    with sqlwa_as_nobody("report", str(hidden), prefix="sqlwa-test-private-") as (proc, _):
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.splitlines()[0] == f"sqlwa: error: {hidden}: Permission denied"


def test_a_symlink_loop_as_results_is_one_line(tmp_path):
    # Path.resolve() raises RuntimeError on a loop (Python 3.11): a traceback (the fuzz).
    (tmp_path / "loop").symlink_to("loop")
    proc = sqlwa_cli("report", str(tmp_path / "loop"), "-o", str(tmp_path / "r.html"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"sqlwa: error: {tmp_path / 'loop'} holds neither results.sqlite nor summary.json")
