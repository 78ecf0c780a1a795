"""A store's runs rows whose JSON parses but is not of sqlwa's shape (store.check_row):
findings that are no list of findings, crash states without their counts, levels that
are no list of names. Each reader must refuse the store in one `sqlwa: error:` line
(exit 2) naming it, and write nothing.

Each damaged store is made by changing a sweep's store with Python's sqlite3, not
through sqlwa; the page's absence is the kernel's word.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from helpers import sqlwa, sqlwa_in_process

MATRIX = ("--vfs-only", "-j", "wal", "--sync", "full", "-n", "3", "--warmup", "0")

FINDINGS, CRASH_STATES, LEVELS = "findings are not", "crash states", "levels is not"
# (the change, a word of the refusal)
DAMAGE = {
    "findings no list": ("UPDATE runs SET summary_json = json_set(summary_json, '$.findings', 'many')", FINDINGS),
    "a finding without its check": (
        "UPDATE runs SET summary_json = json_set(summary_json, '$.findings', json('[{}]'))",
        FINDINGS,
    ),
    "a summary that is a list": ("UPDATE runs SET summary_json = '[]'", FINDINGS),
    "crash states without counts": (
        "UPDATE runs SET summary_json = json_set(summary_json, '$.durability', json('{}'))",
        CRASH_STATES,
    ),
    "levels of numbers": ("UPDATE runs SET levels = '[1, 2]'", LEVELS),
    "levels an object": ("UPDATE runs SET levels = '{}'", LEVELS),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("rows")
    sqlwa("matrix", *MATRIX, "--out", str(base / "m"))
    return base / "m"


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_row_of_another_shape_is_refused(pristine, tmp_path, damage):
    matrix = tmp_path / "m"
    shutil.copytree(pristine, matrix)
    with sqlite3.connect(matrix / "results.sqlite") as conn:
        conn.execute(DAMAGE[damage][0])
    conn.close()
    page = tmp_path / "page.html"
    proc = sqlwa_in_process("report", str(matrix), "-o", str(page))
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and str(matrix) in errors[0] and DAMAGE[damage][1] in errors[0], proc.stderr
    assert not page.exists()
