"""Whether a WAL run reached SQLite's first checkpoint, and how long a run would (#44,
item 7: ``sqlwa crash``'s 30 commits never reach one, so under synchronous=NORMAL every
commit is at risk). The truth is SQLite's documented behaviour as Python's sqlite3 shows
it on the same workload (https://www.sqlite.org/wal.html#automatic_checkpoint: a commit
that leaves the WAL at ``wal_autocheckpoint`` pages or more runs a checkpoint): the
-wal file's frames, and the database file, which only a checkpoint writes in WAL mode."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa.analysis.phases import wal_checkpoint_reach

WARMUP = 10  # mobibench-insert's
PAGE = 4096
FRAME = PAGE + 24  # a WAL frame: its 24-byte header and the page
VALUE = "aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeeeffffffffffgggggggggghhhhhhhhhhiiiiiiiiiijjjjjjjjjj"


def _python_mobibench(db: Path, txns: int) -> dict:
    """mobibench-insert (workloads/scenarios/mobibench-insert.toml) in Python's sqlite3,
    WAL/NORMAL: the frames its transactions appended and the transaction (1-based, setup
    not counted) whose commit ran the first checkpoint (None: none did)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"PRAGMA page_size={PAGE}")
    conn.execute("PRAGMA auto_vacuum=full")
    assert conn.execute("PRAGMA journal_mode=wal").fetchone() == ("wal",)
    conn.execute("PRAGMA synchronous=normal")
    for t in range(3):
        conn.execute(f"CREATE TABLE tblMyList{t} (id INTEGER PRIMARY KEY, Value TEXT not null, creation_date long)")
    wal, size = Path(f"{db}-wal"), os.path.getsize(db)
    before = (wal.stat().st_size - 32) // FRAME
    first = None
    for i in range(txns):
        conn.execute("BEGIN")
        for t in range(3):
            conn.execute(f"INSERT INTO tblMyList{t}(id, Value) VALUES (?, ?)", (i, VALUE))
        conn.execute("COMMIT")
        if first is None and os.path.getsize(db) != size:
            first = i + 1
    frames = (wal.stat().st_size - 32) // FRAME - before
    conn.close()
    return {"frames": frames, "first_checkpoint": first}


def _summary(out: Path, txns: int) -> dict:
    sqlwa("run", "-j", "wal", "--sync", "normal", "-n", str(txns), "-o", str(out))
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def truth(tmp_path_factory) -> dict:
    return _python_mobibench(tmp_path_factory.mktemp("py") / "m.db", 400)


def test_thirty_commits_reach_no_checkpoint_and_say_how_many_would(tmp_path, truth):
    reach = wal_checkpoint_reach(_summary(tmp_path / "r", 30))
    assert reach is not None and reach["reached"] is False
    assert truth["first_checkpoint"] > WARMUP + 30  # SQLite ran none in those either
    assert reach["wal_autocheckpoint"] == 1000
    # every transaction appends the same frames in both: 98 in the 30 after the warm-up
    python_30 = _python_mobibench(tmp_path / "p.db", WARMUP + 30)
    python_10 = _python_mobibench(tmp_path / "q.db", WARMUP)
    assert reach["wal_pages"] == pytest.approx(python_30["frames"], abs=10)  # the setup's frames aside
    measured_frames = python_30["frames"] - python_10["frames"]
    assert reach["pages_per_commit"] == pytest.approx(measured_frames / 30, rel=0.01)
    # the length that reaches the first checkpoint, measured commits: SQLite's within 5%
    assert reach["txns_to_first"] == pytest.approx(truth["first_checkpoint"] - WARMUP, rel=0.05)


def test_a_run_that_reached_one_says_so(tmp_path, truth):
    txns = truth["first_checkpoint"] - WARMUP + 20
    summary = _summary(tmp_path / "r", txns)
    reach = wal_checkpoint_reach(summary)
    assert reach is not None and reach["reached"] is True
    first = next(p for p in summary["phases"]["phases"] if p["phase"] == "checkpoint")["first_index"]
    assert abs((first + 1) - truth["first_checkpoint"]) <= 3  # the setups differ by a few frames


def test_a_rollback_run_has_no_checkpoint_to_reach(tmp_path):
    sqlwa("run", "-j", "delete", "-n", "5", "-o", str(tmp_path / "r"))
    assert wal_checkpoint_reach(json.loads((tmp_path / "r" / "summary.json").read_text())) is None
