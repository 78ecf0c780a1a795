"""Honest labels for PRAGMAs (#15): an extra --pragma that contradicts one of the run's own
settings is refused with one line, and what a run reports is what SQLite reads back, not
what was asked."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa.measure import engine


@pytest.mark.parametrize(
    "args,expected,option",
    [
        (
            ["--sync", "full", "--pragma", "synchronous=off"],
            "extra pragma 'synchronous=off' contradicts the run's setting sync=full "
            "(PRAGMA synchronous read 2 before it, 0 after)",
            "--sync",
        ),
        (
            ["-j", "wal", "--pragma", "journal_mode=delete"],
            "extra pragma 'journal_mode=delete' contradicts the run's setting journal=wal",
            "--journal",
        ),
        (
            ["--page-size", "8192", "--pragma", "page_size=16384"],
            "extra pragma 'page_size=16384' contradicts the run's setting page_size=8192",
            "--page-size",
        ),
    ],
    ids=["sync", "journal", "page-size"],
)
def test_a_pragma_contradicting_the_runs_settings_is_refused(tmp_path, args, expected, option):
    out = tmp_path / "o"
    # mobibench-insert-2013: no auto_vacuum, so a page_size pragma still takes effect there
    proc = sqlwa("run", "-s", "mobibench-insert-2013", "-n", "2", *args, "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"sqlwa: error: {expected}"), proc.stderr
    assert f"sqlwa run {option}" in proc.stderr, proc.stderr
    assert not (out / "summary.json").exists()


def test_a_pragma_that_agrees_is_accepted(tmp_path):
    proc = sqlwa("run", "-n", "2", "--sync", "normal", "--pragma", "synchronous=1", "--out", str(tmp_path / "o"))
    assert proc.returncode == 0


def read_back(db: Path | str, pragma: str, value: str | None = None) -> str:
    """``PRAGMA name`` as Python's sqlite3 reads it, after setting it when ``value`` is given."""
    conn = sqlite3.connect(db)
    try:
        if value is not None:
            conn.execute(f"PRAGMA {pragma}={value}").fetchall()
        return str(conn.execute(f"PRAGMA {pragma}").fetchone()[0])
    finally:
        conn.close()


def test_the_summary_reports_what_sqlite_reads_back(tmp_path):
    work, out = tmp_path / "work", tmp_path / "o"
    work.mkdir()
    sqlwa(
        "run", "-n", "5", "-j", "wal", "--sync", "normal", "--page-size", "8192", "--mmap-size", "99999999999",
        "--keep-db", "--dir", str(work), "--out", str(out),
    )  # fmt: skip
    config = json.loads((out / "summary.json").read_text())["config"]
    (db,) = work.glob("sqlwa-run-*/mobibench-insert.db")
    # kept in the database file
    assert config["journal"] == config["pragmas"]["journal_mode"] == read_back(db, "journal_mode") == "wal"
    assert config["pragmas"]["page_size"] == read_back(db, "page_size") == "8192"
    # per connection: what SQLite makes of the same request
    assert config["pragmas"]["synchronous"] == read_back(":memory:", "synchronous", "normal") == "1"
    assert config["sync"] == engine.SYNC_MODES[int(config["pragmas"]["synchronous"])] == "normal"
    assert config["pragmas"]["mmap_size"] == read_back(db, "mmap_size", "99999999999")
    assert config["settings"]["mmap_size"] == 99999999999  # what was asked, kept apart
