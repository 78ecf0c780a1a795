"""A replayed SQL log on a lab ext4: its block bytes are attributed as a scenario's are
(at most 1% left without a cause, counted independently from the raw trace by
tests/trace_truth.py), and its fsyncs per commit are SQLite's documented sequence at the
syscall level (docs/reference/sqlite-commit-syncs.md: DELETE/FULL = J2 + D1 + Dir1)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine, runner
from sqlwa.measure.request import Output
from trace_truth import tally_in_close_windows, unattributed_write_bytes

pytestmark = pytest.mark.root


def small_log(tmp_path: Path) -> Path:
    """Python's sqlite3 running an app-like mix (explicit transactions, reads), traced."""
    events: list[dict] = [{"ev": "open", "conn": 1, "db": str(tmp_path / "app.db"), "t": 0}]
    started = time.monotonic_ns()
    conn = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
    conn.set_trace_callback(
        lambda sql: events.append({"ev": "sql", "conn": 1, "sql": sql, "t": time.monotonic_ns() - started})
    )
    conn.execute("CREATE TABLE msg (id INTEGER PRIMARY KEY, chat INTEGER, body TEXT)")
    for i in range(25):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO msg (chat, body) VALUES (?, ?)", (i % 3, "m" * 100))
        conn.execute("COMMIT")
        conn.execute("SELECT body FROM msg WHERE chat = ? ORDER BY id DESC LIMIT 5", (i % 3,)).fetchall()
    conn.close()
    log = tmp_path / "app.sqllog"
    header = {"sqlwa_sql_log": 1, "source": "record", "timed": True, "redacted": False}
    log.write_text("\n".join(json.dumps(e) for e in [header, *events]) + "\n")
    return log


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_replayed_log_is_attributed_as_a_scenario(tmp_path, journal):
    log = small_log(tmp_path)
    out = tmp_path / f"ext4-{journal}"
    settings = engine.RunSettings(
        journal=journal, sync="full", length=engine.Length(warmup=3), replay=engine.Replay(timing="back-to-back")
    )
    request = runner.RunRequest(
        scenario=str(log),
        settings=settings,
        output=Output(out_dir=out),
        stack=StackSpec.from_flat(fs="ext4", image_size="64M"),
    )
    summary = runner.execute(request).summary
    assert summary["commits"] == 23
    layout = json.loads((out / "layout.json").read_text())
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    truth = unattributed_write_bytes(out / "trace.txt", dev, layout)
    total = sum(summary["bytes_by_category"]["amortized_total"].values())
    assert total > 0 and truth <= 0.01 * total, (truth, total, summary["bytes_by_category"])
    assert summary["bytes_by_category"]["amortized_total"]["unattributed"] == truth
    # syscall level: DELETE/FULL = journal 2 + db 1 + directory 1; WAL/FULL = WAL 1
    assert summary["per_commit"]["fsync_calls"] == pytest.approx({"delete": 4, "wal": 1}[journal], abs=0.05)
    # each BEGIN (before its transaction's first write) and each SELECT: counted apart
    assert summary["config"]["replay"]["reads"]["statements"] == 2 * 25


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_the_close_checkpoint_is_measured_in_its_own_window(tmp_path, journal):
    """The log's connection closes after its last commit: in WAL mode SQLite checkpoints
    then (sqlite3WalClose: the WAL synced, the database written and synced, the WAL
    deleted). Its syscalls and block requests, counted from the raw trace between the
    close markers, are summary.json's ``close``; a rollback journal's close syncs nothing."""
    log = small_log(tmp_path)
    out = tmp_path / f"ext4-{journal}"
    settings = engine.RunSettings(
        journal=journal,
        sync="full",
        length=engine.Length(warmup=3),
        pager=engine.Pager(wal_autocheckpoint=0),
        replay=engine.Replay(timing="back-to-back"),
    )
    request = runner.RunRequest(
        scenario=str(log),
        settings=settings,
        output=Output(out_dir=out),
        stack=StackSpec.from_flat(fs="ext4", image_size="64M"),
    )
    summary = runner.execute(request).summary
    close = summary["close"]
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    truth = tally_in_close_windows(out / "trace.txt", dev, summary["config"]["tid"])
    assert close["connections"] == 1
    assert close["syscalls"]["fsync_calls"] == truth["fsync_calls"] == close["vfs_sync_calls"]
    assert close["block"]["write_requests"] == truth["writes"]
    assert close["block"]["flush_requests"] == truth["flushes"]
    if journal == "wal":
        assert close["vfs_sync_calls"] == 2 and close["by_file"]["wal"]["delete_calls"] == 1
        assert truth["writes"] > 0 and truth["flushes"] > 0
    else:
        assert close["vfs_sync_calls"] == 0 and truth["fsync_calls"] == 0
    # no commit's figures hold the close's syncs (no checkpoint ran in a commit)
    assert summary["per_commit"]["fsync_calls"] == pytest.approx({"delete": 4, "wal": 1}[journal], abs=0.05)


def test_transactions_that_wrote_nothing_are_no_commit_windows_in_the_lab(tmp_path):
    """UPDATEs and DELETEs matching no row and TEMP-table writes between real commits: in
    the raw trace each is a txn_begin … txn_void pair holding no sync syscall, and the
    per-commit figures are of the commits that wrote (DELETE/FULL: 4 fsyncs each)."""
    events: list[dict] = [{"ev": "open", "conn": 1, "db": str(tmp_path / "app.db")}]
    sql = ["CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", "CREATE TEMP TABLE tt (a)"]
    for i in range(10):
        sql += [f"INSERT INTO t (v) VALUES ('{'v' * 50}')", f"UPDATE t SET v = 'x' WHERE id = {1000 + i}"]
        sql += [f"INSERT INTO tt VALUES ({i})", f"DELETE FROM t WHERE id = {2000 + i}"]
    events += [{"ev": "sql", "conn": 1, "sql": s} for s in sql]
    log = tmp_path / "app.sqllog"
    header = {"sqlwa_sql_log": 1, "source": "record", "timed": False}
    log.write_text("\n".join(json.dumps(e) for e in [header, *events, {"ev": "close", "conn": 1}]) + "\n")
    out = tmp_path / "ext4"
    settings = engine.RunSettings(
        journal="delete", sync="full", length=engine.Length(warmup=1), replay=engine.Replay(timing="back-to-back")
    )
    request = runner.RunRequest(
        scenario=str(log),
        settings=settings,
        output=Output(out_dir=out),
        stack=StackSpec.from_flat(fs="ext4", image_size="64M"),
    )
    summary = runner.execute(request).summary
    text = (out / "trace.txt").read_text(errors="replace")
    voids = len(re.findall(r"tracing_mark_write: sqlwa txn_void i=", text))
    # CREATE TEMP TABLE, and per round the missed UPDATE, the TEMP INSERT, the missed DELETE
    assert summary["wrote_nothing"]["transactions"] == voids == 1 + 3 * 10
    assert summary["commits"] + summary["warmup_commits"] == 1 + 10
    tid = summary["config"]["tid"]
    assert syncs_between(out / "trace.txt", tid, "txn_void") == [0] * voids
    # journal 2 + database 1 + directory 1 in each commit, as the raw trace counts them
    assert syncs_between(out / "trace.txt", tid, "txn_end") == [4] * 11
    assert summary["per_commit"]["fsync_calls"] == 4.0


def syncs_between(trace: Path, tid: int, end: str) -> list[int]:
    """Per ``txn_begin`` … ``end`` pair of the raw trace's markers (``txn_end`` or
    ``txn_void``): the sync syscalls thread ``tid`` entered inside it."""
    counts: list[int] = []
    current: int | None = None
    for line in trace.read_text(errors="replace").splitlines():
        marker = re.search(r"tracing_mark_write: sqlwa (txn_begin|txn_end|txn_void) ", line)
        if marker and marker[1] == "txn_begin":
            current = 0
        elif marker:
            if marker[1] == end and current is not None:
                counts.append(current)
            current = None
        elif current is not None and f"-{tid} " in line and re.search(r": sys_f(?:data)?sync\(", line):
            current += 1
    return counts
