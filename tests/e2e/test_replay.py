"""Replaying a recorded SQL log (format 1) with ``sqlwa run -s LOG``: SQLite's documented
sync sequence per commit, the final database equal to the one the original statements
made, the recorded gaps kept, and bad logs refused in one line with file and line.

The logs are written here by hand, or from Python's own ``sqlite3`` module through its
trace callback (the statements as SQLite ran them, values expanded): independent of the
engine that replays them."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa_in_process

HEADER = {
    "sqlwa_sql_log": 1,
    "source": "record",
    "program": ["python3", "test"],
    "sqlite_version": sqlite3.sqlite_version,
    "started_unix_ns": None,
    "timed": True,
    "redacted": False,
}


def write_log(path: Path, events: list[dict], timed: bool = True) -> Path:
    lines = [json.dumps({**HEADER, "timed": timed})] + [json.dumps(e) for e in events]
    path.write_text("\n".join(lines) + "\n")
    return path


def record(db: Path, workload: Callable[[sqlite3.Connection], None], log: Path) -> Path:
    """Runs ``workload`` on ``db`` with Python's sqlite3 (autocommit: the statements as
    written), logging every statement SQLite traced, with its time."""
    events: list[dict] = [{"ev": "open", "conn": 1, "db": str(db), "t": 0}]
    started = time.monotonic_ns()

    def traced(sql: str) -> None:
        events.append({"ev": "sql", "conn": 1, "sql": sql, "t": time.monotonic_ns() - started})

    conn = sqlite3.connect(db, isolation_level=None)
    conn.set_trace_callback(traced)
    workload(conn)
    conn.close()
    events.append({"ev": "close", "conn": 1, "t": time.monotonic_ns() - started})
    return write_log(log, events)


def run_json(*args: str) -> dict:
    proc = sqlwa_in_process("run", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def single_row_inserts(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    for _ in range(30):
        conn.execute("INSERT INTO t (v) VALUES (?)", ("x" * 100,))


# SQLite's documented xSync calls per commit (docs/reference/sqlite-commit-syncs.md);
# at the VFS level the directory sync is inside the journal's first xSync.
VFS_SYNCS = {
    ("wal", "off"): {"wal": 0, "db": 0},
    ("wal", "normal"): {"wal": 0, "db": 0},
    ("wal", "full"): {"wal": 1, "db": 0},
    ("wal", "extra"): {"wal": 1, "db": 0},
    ("delete", "off"): {"journal": 0, "db": 0},
    ("delete", "normal"): {"journal": 1, "db": 1},
    ("delete", "full"): {"journal": 2, "db": 1},
    ("delete", "extra"): {"journal": 2, "db": 1},
    ("truncate", "normal"): {"journal": 1, "db": 1},
    ("truncate", "full"): {"journal": 3, "db": 1},
    ("persist", "normal"): {"journal": 2, "db": 1},
    ("persist", "full"): {"journal": 3, "db": 1},
}


@pytest.fixture(scope="module")
def insert_log(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("log")
    return record(tmp / "app.db", single_row_inserts, tmp / "app.sqllog")


@pytest.mark.parametrize("journal,sync", list(VFS_SYNCS))
def test_replayed_syncs_per_commit_follow_sqlites_documented_sequence(tmp_path, insert_log, journal, sync):
    summary = run_json(
        "-s", str(insert_log), "-j", journal, "--sync", sync, "--warmup", "3", "--wal-autocheckpoint", "0",
        "--timing", "back-to-back", "--out", str(tmp_path / "o"),
    )  # fmt: skip
    # the CREATE and 30 inserts are 31 transactions, 3 of them warm-up
    assert summary["commits"] == 28
    for kind, syncs in VFS_SYNCS[(journal, sync)].items():
        assert summary["vfs_by_file"][kind]["sync_calls"] == syncs, (kind, summary["vfs_by_file"])


def mixed_workload(conn: sqlite3.Connection) -> None:
    """Writes of every shape a replay must reproduce: quotes, unicode, blobs, NULLs, exact
    floats, explicit transactions, savepoints rolled back in part, updates and deletes."""
    conn.execute("BEGIN")
    for i in range(40):
        conn.execute(
            "INSERT INTO notes (title, body, data, score) VALUES (?, ?, ?, ?)",
            (f"it's #{i} ✓", "é" * (i % 7) or None, bytes(range(i % 256)) * 3, i / 4),
        )
    conn.execute("COMMIT")
    conn.execute("UPDATE notes SET score = score * 2 WHERE id % 3 = 0")
    conn.execute("SAVEPOINT s1")
    conn.execute("DELETE FROM notes WHERE id < 5")
    conn.execute("SAVEPOINT s2")
    conn.execute("DELETE FROM notes WHERE id > 30")
    conn.execute("ROLLBACK TO s2")
    conn.execute("RELEASE s1")
    conn.execute("SELECT count(*) FROM notes").fetchall()
    conn.execute("CREATE INDEX notes_score ON notes (score)")
    conn.execute("INSERT INTO tags VALUES ('a', 1), ('b', NULL)")


def test_replay_from_a_snapshot_ends_with_the_original_database(tmp_path):
    original = tmp_path / "app" / "notes.db"
    original.parent.mkdir()
    with sqlite3.connect(original) as conn:
        conn.executescript(
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT, data BLOB, score REAL);"
            "CREATE TABLE tags (name TEXT, n INTEGER);"
            "INSERT INTO notes (title) VALUES ('before');"
        )
    conn.close()
    snapshot = tmp_path / "snapshot.db"
    shutil.copyfile(original, snapshot)
    log = record(original, mixed_workload, tmp_path / "notes.sqllog")
    work = tmp_path / "work"
    work.mkdir()
    summary = run_json(
        "-s", str(log), "--from", str(snapshot), "-j", "wal", "--dir", str(work), "--keep-db",
        "--out", str(tmp_path / "o"),
    )  # fmt: skip
    replayed = summary["config"]["replay"]
    assert replayed["failed"] == {} and replayed["from_db"] == str(snapshot)
    (kept,) = work.glob("*/notes.db")
    dump = lambda path: list(sqlite3.connect(path).iterdump())  # noqa: E731
    assert dump(kept) == dump(original)


def test_recorded_gaps_are_kept(tmp_path):
    # Gaps of tens of milliseconds, ten times the scheduling noise a loaded 2-core host
    # adds to one wake-up: the woken replay thread queues behind the runnable tasks'
    # EEVDF slices (~1.5 ms each; 2.8 and 5.4 ms late seen at load 11), which a 1 ms
    # bound on 3-40 ms gaps did not allow for (workloads/tests/replay_timing.rs, the same).
    gaps_ms = [30, 170, 80, 400, 50, 250, 120, 300, 60, 200, 90, 150]
    events: list[dict] = [{"ev": "open", "conn": 1, "db": "/data/app.db", "t": 0}]
    t = 1_000_000
    events.append({"ev": "sql", "conn": 1, "sql": "CREATE TABLE t (v)", "t": t})
    for gap in gaps_ms:
        t += gap * 1_000_000
        events.append({"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (randomblob(100))", "t": t, "dur": 5000})
    log = write_log(tmp_path / "gaps.sqllog", events)
    out = tmp_path / "o"
    summary = run_json("-s", str(log), "-j", "wal", "--sync", "off", "--out", str(out))
    assert summary["config"]["replay"]["timing"] == "recorded"
    starts = pl.read_parquet(out / "commits.parquet").sort("index")["start_ns"].to_list()
    replayed_gaps = [(b - a) / 1e6 for a, b in zip(starts, starts[1:], strict=False)]
    errors = [abs(got - want) for got, want in zip(replayed_gaps, gaps_ms, strict=True)]
    # A dozen slices of lateness at most; a pacing that ignored the gaps (back-to-back)
    # or scaled them would miss by 30-400 ms.
    assert statistics.median(errors) <= 20.0, list(zip(replayed_gaps, gaps_ms, strict=True))


def good_lines() -> list[str]:
    return [
        json.dumps({**HEADER, "timed": False}),
        json.dumps({"ev": "open", "conn": 1, "db": "/d/app.db"}),
        json.dumps({"ev": "sql", "conn": 1, "sql": "CREATE TABLE t (v)"}),
        json.dumps({"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (1)"}),
    ]


@pytest.mark.parametrize(
    "lines,line",
    [
        (good_lines()[:3] + [good_lines()[3][:25]], 4),  # truncated last line
        (good_lines()[:2] + ['{"ev": "sql", "conn": 1,, "sql": "x"}'] + good_lines()[3:], 3),  # garbled
        (good_lines()[:2] + ['{"ev": "sql", "conn": 1}'], 3),  # a key missing
        (good_lines() + ['{"ev": "sql", "conn": 1, "sql": "INSERT INTO missing VALUES (1)"}'], 5),  # --strict
    ],
    ids=["truncated", "garbled", "missing-key", "missing-table-strict"],
)
def test_bad_logs_are_one_line_naming_file_and_line_and_leave_nothing(tmp_path, lines, line):
    log = tmp_path / "bad.sqllog"
    log.write_text("\n".join(lines))
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "o"
    proc = sqlwa_in_process("run", "-s", str(log), "--strict", "--dir", str(work), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"sqlwa: error: SQL log {log}, line {line}: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and list(work.iterdir()) == []


NO_LOGS = {
    "empty.jsonl": b"",
    "binary.jsonl": bytes(range(256)) * 8,
    "other.json": b'{"name": "not a log", "rows": [1, 2]}\n{"ev": "sql"}\n',
    "statements.sqllog": b"CREATE TABLE t (v);\nINSERT INTO t VALUES (1);\n",
}


@pytest.mark.parametrize("name", list(NO_LOGS))
@pytest.mark.parametrize("command", ["run", "matrix", "crash"])
def test_a_file_named_as_a_log_that_is_none_is_one_line_and_leaves_nothing(tmp_path, name, command):
    """Not read as a scenario's TOML (whose error would speak of keys and columns): the
    file is no SQL log, said with its first line, before any lab or guest is made."""
    log = tmp_path / name
    log.write_bytes(NO_LOGS[name])
    out = tmp_path / "o"
    proc = sqlwa_in_process(command, "-s", str(log), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    first, *rest = proc.stderr.splitlines()
    assert first.startswith(f"sqlwa: error: SQL log {log}, line 1: "), proc.stderr
    assert "SQL log" in first.split(", line 1: ", 1)[1], proc.stderr  # "no SQL log", "not a SQL log"
    assert [line.lstrip().startswith("fix: ") for line in rest] == [True]
    assert not out.exists()


def test_a_missing_table_without_strict_is_counted_and_the_run_goes_on(tmp_path):
    log = tmp_path / "app.sqllog"
    missing = '{"ev": "sql", "conn": 1, "sql": "INSERT INTO missing VALUES (1)"}'
    log.write_text("\n".join([*good_lines()[:2], missing, *good_lines()[2:]]) + "\n")
    summary = run_json("-s", str(log), "--out", str(tmp_path / "o"))
    replayed = summary["config"]["replay"]
    assert replayed["failed"] == {"no such table": 1}
    assert replayed["first_failures"][0]["line"] == 3
    assert summary["commits"] == 2  # the CREATE and the insert
    assert replayed["databases"][0]["file_name"] == "app.db"


def test_a_matrix_sweeps_a_replayed_log(tmp_path, insert_log):
    out = tmp_path / "m"
    proc = sqlwa_in_process(
        "matrix", "-s", str(insert_log), "--vfs-only", "-j", "delete,wal", "--sync", "full", "--warmup", "3",
        "--timing", "back-to-back", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for journal in ("delete", "wal"):
        summary = json.loads((out / "runs" / f"app-none-{journal}-full-r1" / "summary.json").read_text())
        assert summary["config"]["replay"]["timing"] == "back-to-back"
        for kind, syncs in VFS_SYNCS[(journal, "full")].items():
            assert summary["vfs_by_file"][kind]["sync_calls"] == pytest.approx(syncs, abs=0.05), kind


def test_a_sql_file_is_refused_with_its_conversion_then_replays_once_converted(tmp_path):
    """A .sql file given to -s names `sqlwa record --from`; converted, it replays to the
    database the sqlite3 module makes of the same file."""
    script = (
        "CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);\n"
        "BEGIN;\nINSERT INTO t (body) VALUES ('a;b');\nINSERT INTO t (body) VALUES ('c');\nCOMMIT;\n"
        "UPDATE t SET body = 'd' WHERE id = 2;\n"
    )
    sql = tmp_path / "app.sql"
    sql.write_text(script)
    refused = sqlwa_in_process("run", "-s", str(sql), "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2 and f"sqlwa record --from {sql}" in refused.stderr
    assert not (tmp_path / "refused").exists()
    log = tmp_path / "app.jsonl"
    converted = sqlwa_in_process("record", "--from", str(sql), "--out", str(log))
    assert converted.returncode == 0, converted.stderr
    work = tmp_path / "work"
    work.mkdir()
    run_json("-s", str(log), "--dir", str(work), "--keep-db", "--out", str(tmp_path / "o"))
    (kept,) = work.glob("*/app.db")
    truth = tmp_path / "truth.db"
    with sqlite3.connect(truth) as conn:
        conn.executescript(script)
    conn.close()
    rows = lambda path: sqlite3.connect(path).execute("SELECT * FROM t ORDER BY id").fetchall()  # noqa: E731
    assert rows(kept) == rows(truth) == [(1, "a;b"), (2, "d")]
