"""Files named like sqlwa's RUNNING mark that sqlwa did not write. Every output check
looks for a run in each directory above the output (sqlwa.outputs.results_directory_of),
so a user's own `RUNNING` anywhere up the path is read: one holding JSON that is no
object (`[]`, `1`) or nested past the parser's limit was an AttributeError or a
RecursionError traceback in `parse -o`, `run --out` and every other writer.

Such a file marks nothing: an output below it is written (the Parquet file's own magic
bytes say so), a run into the directory holding it is refused as a directory of someone
else's (one `sqlwa: error:` line, exit 2), and the file itself keeps its bytes.

The same holds for the marks `sqlwa lab cleanup` goes by (sqlwa._system.ownership, one
mechanism for labs, scratch directories and record's spools): a directory merely named
like a spool, holding a user's file, keeps it; one holding nothing but a mark cut short
(its recorder killed as it made it) goes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from helpers import REPO, sqlwa, sqlwa_in_process
from sqlwa.record import spool

TRACE = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal" / "trace.txt"
PARQUET_MAGIC = b"PAR1"  # the first and last four bytes of every Parquet file

NOT_MARKS = {
    "a list": b"[]",
    "a number": b"1",
    "a string": b'"sqlwa"',
    "nested past the parser's limit": b"[" * 3000 + b"]" * 1000,
    "not UTF-8": b"\xff\xfe{}",
}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("content", NOT_MARKS)
def test_an_output_below_a_users_running_file_is_written(tmp_path, content):
    (tmp_path / "RUNNING").write_bytes(NOT_MARKS[content])
    before = digest(tmp_path / "RUNNING")
    table = tmp_path / "events" / "events.parquet"
    table.parent.mkdir()
    proc = sqlwa_in_process("parse", str(TRACE), "-o", str(table))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    data = table.read_bytes()
    assert data[:4] == PARQUET_MAGIC and data[-4:] == PARQUET_MAGIC
    assert digest(tmp_path / "RUNNING") == before


@pytest.mark.parametrize("content", NOT_MARKS)
def test_a_run_into_a_directory_holding_a_users_running_file_is_refused(tmp_path, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / "RUNNING").write_bytes(NOT_MARKS[content])
    before = digest(out / "RUNNING")
    proc = sqlwa("run", "-n", "3", "--warmup", "0", "--out", str(out), check=False)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and str(out) in errors[0], proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["RUNNING"] and digest(out / "RUNNING") == before


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_cleanup_goes_by_a_spools_mark_not_its_name(tmp_path):
    base = tmp_path / "tmp"
    base.mkdir()
    users = base / f"{spool.PREFIX}-{dead_pid()}-mine"
    users.mkdir()
    (users / "notes.txt").write_text("a user's own\n")
    wrong = base / f"{spool.PREFIX}-{dead_pid()}-wrong"
    wrong.mkdir()
    (wrong / spool.MARK).write_text("not sqlwa's text\n")
    cut_short = base / f"{spool.PREFIX}-{dead_pid()}-cut"
    cut_short.mkdir()
    (cut_short / spool.MARK).write_text(spool.MARK_TEXT[:7])
    empty = base / f"{spool.PREFIX}-{dead_pid()}-empty"
    empty.mkdir()
    proc = sqlwa("lab", "cleanup", env=dict(os.environ, TMPDIR=str(base)))
    assert (users / "notes.txt").read_text() == "a user's own\n", proc.stdout
    assert (wrong / spool.MARK).read_text() == "not sqlwa's text\n", proc.stdout
    assert not cut_short.exists() and not empty.exists(), proc.stdout
