"""Files named like sqlwa's RUNNING mark that sqlwa did not write. Every output check
looks for a run in each directory above the output (sqlwa.outputs.results_directory_of),
so a user's own `RUNNING` anywhere up the path is read: one holding JSON that is no
object (`[]`, `1`) or nested past the parser's limit was an AttributeError or a
RecursionError traceback in `parse -o`, `run --out` and every other writer.

Such a file marks nothing: an output below it is written (the Parquet file's own magic
bytes say so), a run into the directory holding it is refused as a directory of someone
else's (one `sqlwa: error:` line, exit 2), and the file itself keeps its bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from helpers import REPO, sqlwa, sqlwa_in_process

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
