"""Every count a crash run prints is one a user can read: never negative, never more lost
than acknowledged, warm-up commits named as such.

Independent truth: real SQLite databases written here (a schema, then one row per
commit), one of them (or none, or garbage) put where a crash state's database would be;
what it holds is its row count as the sqlite3 module reads it, and what had been
acknowledged is what the test drew. The verdict, summary.json's ``durability`` and the
terminal's lines must agree with that, for every draw.
"""

from __future__ import annotations

import io
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from helpers import numbers_in
from sqlwa.durability import explore, reference, states, verdict, writelog
from sqlwa.results import compare, store
from sqlwa.results.findings import ConfigFindings, CrashTally
from sqlwa.views import report, terminal

TXNS = 6  # commits the reference has
KEY = ("mobibench-insert", "ext4", "none", "none", "none", "none", "wal", "normal")  # a configuration


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory) -> Path:
    """setup.db (the schema) and txn-<i>.db (i + 1 rows), as the engine's snapshots are."""
    where = tmp_path_factory.mktemp("snapshots")
    conn = sqlite3.connect(where / "work.db", isolation_level=None)
    conn.execute("CREATE TABLE t (i INTEGER)")
    conn.execute(f"VACUUM INTO '{where / 'setup.db'}'")
    for i in range(TXNS):
        conn.execute("INSERT INTO t VALUES (?)", (i,))
        conn.execute(f"VACUUM INTO '{where / f'txn-{i}.db'}'")
    conn.close()
    return where


def commits_on_disk(db: Path) -> int:
    """The truth: commits a database holds, read with sqlite3 (the schema's counts as one)."""
    if not db.exists() or db.stat().st_size == 0:
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        has_table = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 't'").fetchone()[0]
        return 1 + conn.execute("SELECT count(*) FROM t").fetchone()[0] if has_table else 0
    finally:
        conn.close()


# what a crash state's disk may hold: no file, an empty file, a snapshot, or garbage
ON_DISK = st.one_of(st.just("absent"), st.just("empty"), st.just("garbage"), st.just("setup"), st.integers(0, TXNS - 1))
ACKED = st.builds(states.Acked, setup=st.booleans(), commits=st.integers(0, TXNS)).filter(
    lambda a: a.setup or a.commits == 0
)  # no commit is acknowledged before the schema


def put(disk: object, snapshots: Path, db: Path) -> None:
    if disk == "empty":
        db.touch()
    elif disk == "garbage":
        db.write_bytes(b"SQLite format 3\0" + b"\xff" * 4080)
    elif disk != "absent":
        shutil.copyfile(snapshots / ("setup.db" if disk == "setup" else f"txn-{disk}.db"), db)


@settings(max_examples=60, deadline=None)
@given(
    draws=st.lists(st.tuples(ACKED, ON_DISK), min_size=1, max_size=8),
    warmup=st.integers(0, TXNS),
)
def test_every_count_is_a_users_count(snapshots: Path, draws: list, warmup: int) -> None:
    ref = reference.from_snapshots(snapshots, TXNS, warmup)
    judged = []
    with tempfile.TemporaryDirectory() as scratch:
        for point, (acked, disk) in enumerate(draws):
            db = Path(scratch) / f"state-{point}.db"
            put(disk, snapshots, db)
            truth = None if disk == "garbage" else commits_on_disk(db)
            state = states.CrashState("none", point, point, (), acked)
            v = verdict.judge(state, verdict.inspect_database(db, ref))
            acknowledged = acked.commits + int(acked.setup)
            held = None if truth is None else min(truth, acknowledged)
            assert (v.acknowledged, v.held) == (acknowledged, held), (acked, disk)
            assert v.lost == acknowledged - (held or 0)
            judged.append((state, v))
    log = writelog.WriteLog(Path("unused"), 512, [])
    durability = explore.summarise(judged, log, explore.CrashOptions(), len(judged), 1.0, warmup)

    assert all(n >= 0 for n in numbers_in(durability)), durability
    assert all(n is None or n >= 0 for n in store.crash_figures(durability).values())
    ends = durability["acknowledged"]
    assert ends["commits"] == ends["schema"] + ends["warmup"] + ends["measured"]
    assert ends["warmup"] <= warmup
    assert durability["lost_commits"]["max"] <= ends["commits"]
    for first in durability["first"].values():
        phases, lost_of = first["acknowledged"], first["lost_of"]
        assert first["acknowledged_commits"] == sum(phases.values())
        assert 0 <= first["lost"] <= first["acknowledged_commits"]
        assert sum(lost_of.values()) == first["lost"]
        assert all(0 <= lost_of[p] <= phases[p] for p in phases)
        assert "present" not in first  # a reference position is no count
    printed = printed_durability(durability)
    assert not re.search(r"(?<![\w.])-\d", printed), printed
    tally = ConfigFindings({"syscall"}, crash=CrashTally())
    assert tally.crash is not None
    tally.crash.add(durability)
    assert 0 <= tally.crash.states_losing <= tally.crash.states and tally.crash.max_lost <= ends["commits"]
    table, note = report.crash_table({KEY: tally})
    said = f"{table} {note} {compare.durability_state(tally)}"
    assert not re.search(r"(?<![\w.#])-\d", said), said


def printed_durability(durability: dict) -> str:
    out = io.StringIO()
    terminal.print_durability(durability, Console(file=out, width=400, no_color=True))
    return out.getvalue()


def test_the_first_loss_says_what_the_lost_commits_were(snapshots: Path, tmp_path: Path) -> None:
    """The issue's case in small: 10 warm-up and 30 measured commits acknowledged, a
    database file with no schema on the disk. Acknowledged 41 (the schema's too), held
    none, and the line says so in those terms."""
    ref = reference.Reference({reference.EMPTY_DIGEST: reference.BEFORE_SETUP}, 40, warmup=10)
    state = states.CrashState("none", 130, 120, (), states.Acked(True, 40))
    (tmp_path / "db").touch()
    v = verdict.judge(state, verdict.inspect_database(tmp_path / "db", ref))
    durability = explore.summarise(
        [(state, v)], writelog.WriteLog(tmp_path, 512, []), explore.CrashOptions(), 1, 1.0, 10
    )
    first = durability["first"]["lost"]
    assert (first["acknowledged_commits"], first["held"], first["lost"]) == (41, 0, 41)
    assert first["acknowledged"] == {"schema": 1, "warmup": 10, "measured": 30}
    printed = printed_durability(durability)
    assert "held none of the 41 acknowledged commits (the schema's, 10 warm-up, 30 measured)" in printed
    assert "1 of 1 crash states lost acknowledged commits" in printed
