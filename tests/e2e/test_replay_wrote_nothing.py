"""Transactions that wrote nothing, and the checkpoint at connection close, against
independent truth:

- SQLite's own view, through Python's ``sqlite3`` module: ``total_changes`` of the
  connection that ran each transaction, and ``PRAGMA data_version`` read by a second
  connection, which moves when another connection's commit changed the database file
  (https://sqlite.org/pragma.html#pragma_data_version). An UPDATE matching no row changes
  neither; a TEMP table's row counts in ``total_changes`` but leaves the database as it
  was (its pages live in the temp file). The replay must count as commits exactly the
  transactions ``data_version`` saw, and the others apart.
- strace of a real program nobody here wrote — sqlite-utils, one process per command, on
  a database in DELETE or WAL mode — recorded with ``sqlwa record`` and replayed with
  ``sqlwa run -s LOG``: the replay's commits must equal the transactions strace shows
  writing (DELETE: each ends with the unlink of its -journal; WAL: each writes one commit
  frame, whose header holds the database's size after the commit,
  https://sqlite.org/fileformat2.html#walformat), the ones that wrote nothing counted
  apart, and the closing's syncs (the last connection of each process checkpoints a WAL
  database when it closes) equal to strace's syncs after each process's last commit.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest

from helpers import have_record_preload

HEADER = {"sqlwa_sql_log": 1, "source": "record", "timed": False}
#: (transaction's statements, what it does to the database)
TRANSACTIONS = [
    (["CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)"], "writes the schema"),
    (["INSERT INTO items VALUES (1, 'a'), (2, 'b')"], "inserts two rows"),
    (["UPDATE items SET v = 'x' WHERE id = 999"], "matches no row"),
    (["DELETE FROM items WHERE id = 999"], "matches no row"),
    (["CREATE TEMP TABLE tt (a)"], "makes a TEMP table"),
    (["INSERT INTO tt VALUES (1)"], "writes only the TEMP table"),
    (["BEGIN", "INSERT INTO tt VALUES (2)", "UPDATE items SET v = 'y' WHERE id = 5", "COMMIT"], "TEMP + no row"),
    (["BEGIN", "INSERT INTO tt VALUES (3)", "UPDATE items SET v = 'c' WHERE id = 1", "COMMIT"], "updates a row"),
]


def sqlite_truth(tmp: Path, journal: str) -> list[tuple[int, bool]]:
    """Per transaction, run by Python's sqlite3: (total_changes it added, whether a
    second connection's data_version saw the database change)."""
    db = tmp / "truth.db"
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute(f"PRAGMA journal_mode={journal}")
    reader = sqlite3.connect(db, isolation_level=None)
    version = reader.execute("PRAGMA data_version").fetchone()[0]
    truth = []
    for statements, _ in TRANSACTIONS:
        changes = writer.total_changes
        for sql in statements:
            writer.execute(sql)
        now = reader.execute("PRAGMA data_version").fetchone()[0]
        truth.append((writer.total_changes - changes, now != version))
        version = now
    writer.close()
    reader.close()
    return truth


def replay(tmp: Path, log: Path, journal: str, extra: list[str] | None = None) -> dict:
    """``sqlwa run -s LOG`` (VFS only); summary.json, its commits.parquet as ``commits``."""
    out, work = tmp / f"out-{journal}", tmp / f"work-{journal}"
    work.mkdir()
    run = [sys.executable, "-m", "sqlwa", "run", "-s", str(log), "-j", journal, "--sync", "full"]
    run += [*(extra or []), "--timing", "back-to-back", "--dir", str(work), "--out", str(out)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    summary["commits.parquet"] = pl.read_parquet(out / "commits.parquet")
    summary["terminal"] = done.stdout
    return summary


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_the_transactions_sqlite_saw_change_nothing_are_no_commits(tmp_path, journal):
    truth = sqlite_truth(tmp_path, journal)
    # SQLite's own counters: total_changes counts the TEMP table's rows, data_version not
    assert [changes for changes, _ in truth] == [0, 2, 0, 0, 0, 1, 1, 2]
    changed = [seen for _, seen in truth]
    assert changed == [True, True, False, False, False, False, False, True]
    events = [HEADER, {"ev": "open", "conn": 1, "db": "/data/app.db"}]
    events += [{"ev": "sql", "conn": 1, "sql": sql} for statements, _ in TRANSACTIONS for sql in statements]
    events.append({"ev": "close", "conn": 1})
    log = tmp_path / "app.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = replay(tmp_path, log, journal)
    assert summary["config"]["replay"]["failed"] == {}
    assert summary["commits"] == sum(changed) == 3
    empty = summary["wrote_nothing"]
    assert empty["transactions"] == len(changed) - sum(changed) == 5
    firsts = [e["statement"] for e in empty["first"]]
    # a transaction is named by its first statement that could write
    assert firsts == ["UPDATE items SET v = 'x' WHERE id = 999", "DELETE FROM items WHERE id = 999",
                      "CREATE TEMP TABLE tt (a)", "INSERT INTO tt VALUES (1)", "INSERT INTO tt VALUES (2)"]  # fmt: skip
    assert empty["vfs_sync_calls"] == 0 and set(empty["by_file"]) <= {"temp"}
    # every per-commit figure is of the three that wrote: FULL's documented syncs, each commit
    commits = summary["commits.parquet"]
    syncs = commits.select("vfs_journal_sync_calls", "vfs_db_sync_calls", "vfs_wal_sync_calls").rows()
    # (docs/reference/sqlite-commit-syncs.md: WAL's first commit syncs its header too)
    assert syncs == ([(2, 1, 0)] * 3 if journal == "delete" else [(0, 0, 2), (0, 0, 1), (0, 0, 1)])
    assert summary["per_commit"]["vfs_sync_calls"] == pytest.approx(3.0 if journal == "delete" else 4 / 3)
    assert summary["config"]["replay"]["databases"][0]["wrote_nothing"] == 5
    assert "5 transactions changed no database file" in " ".join(summary["terminal"].split())


# ------------------------------------------------------------------ sqlite-utils under strace

SQLITE_UTILS = importlib.util.find_spec("sqlite_utils") is not None
STRACE = ["strace", "-f", "-y", "-qq", "-xx", "-s", "32", "-e", "trace=fsync,fdatasync,pwrite64,unlink,unlinkat"]
#: sqlite-utils commands, one process each: what each does to the database
COMMANDS = [
    (["query", "UPDATE items SET v = 'x' WHERE id = 999"], None, "matches no row"),
    (["query", "CREATE TEMP TABLE tt AS SELECT 1 AS a"], None, "writes only a TEMP table"),
    (["query", "UPDATE items SET v = 'c' WHERE id = 1"], None, "updates a row"),
    (["insert", "items", "-", "--pk", "id"], '[{"id": 3, "v": "d"}, {"id": 4, "v": "e"}]', "inserts two rows"),
    (["query", "DELETE FROM items WHERE id = 999"], None, "matches no row"),
    (["query", "DELETE FROM items WHERE id = 2"], None, "deletes a row"),
]
HEX = re.compile(r"\\x([0-9a-f]{2})")
PATH = r"<((?:\\x[0-9a-f]{2})*)>"
PWRITE = re.compile(rf'^(\d+)\s+pwrite64\(\d+{PATH}, "((?:\\x[0-9a-f]{{2}})*)"(?:\.\.\.)?, (\d+), (\d+)\) = (-?\d+)')
SYNC = re.compile(rf"^(\d+)\s+f(?:data)?sync\(\d+{PATH}\) = 0")
UNLINK = re.compile(r'^(\d+)\s+unlink(?:at)?\((?:[^,]*, )?"((?:\\x[0-9a-f]{2})*)"(?:, \d+)?\) = 0')


def unhex(text: str) -> bytes:
    return bytes(int(h, 16) for h in HEX.findall(text))


@dataclass
class Process:
    """What strace saw one process do to the database: in order, ``commit`` (a WAL
    commit frame written, or a rollback journal unlinked) and ``sync`` events."""

    events: list[str] = field(default_factory=list)

    def commits(self) -> int:
        return self.events.count("commit")

    def syncs_after_last_commit(self, journal: str) -> int:
        """The syncs after the last commit (for WAL, after the commit's own sync of the
        WAL, which follows its commit frame); all of them without a commit."""
        if "commit" not in self.events:
            return self.events.count("sync")
        after = self.events[len(self.events) - 1 - self.events[::-1].index("commit") + 1 :]
        if journal == "wal":
            after = after[after.index("sync") + 1 :]  # the commit's own
        return after.count("sync")


def strace_processes(trace: Path, db: Path, journal: str) -> list[Process]:
    """Per process, the commits and syncs strace saw on ``db``, its -wal and -journal."""
    files = {str(db), f"{db}-wal", f"{db}-journal", str(db.parent)}
    seen: dict[str, Process] = defaultdict(Process)
    for line in trace.read_text(errors="replace").splitlines():
        if m := PWRITE.match(line):
            pid, path, head, size = m[1], unhex(m[2]).decode(), unhex(m[3]), int(m[4])
            # a WAL frame's 24-byte header: bytes 4-7 the database's size in pages after a
            # commit, 0 in the other frames of a transaction
            if path == f"{db}-wal" and size == 24 and int.from_bytes(head[4:8], "big"):
                seen[pid].events.append("commit")
        elif m := SYNC.match(line):
            if unhex(m[2]).decode() in files:
                seen[m[1]].events.append("sync")
        elif (m := UNLINK.match(line)) and unhex(m[2]).decode() == f"{db}-journal":
            seen[m[1]].events.append("commit")
    return list(seen.values())


def commands_script(db: Path, script: Path) -> None:
    """The sqlite-utils commands as a shell script: one program to record and trace."""
    lines = []
    for args, stdin, _ in COMMANDS:
        command = shlex.join([sys.executable, "-m", "sqlite_utils", args[0], str(db), *args[1:]])
        lines.append(f"printf '%s' {shlex.quote(stdin)} | {command}" if stdin else f"{command} </dev/null")
    script.write_text("set -e\n" + "\n".join(lines) + "\n")


def make_database(path: Path, journal: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("INSERT INTO items VALUES (1, 'a'), (2, 'b')")
    conn.close()


@pytest.mark.skipif(not have_record_preload(), reason="run ./scripts/setup (it builds record-preload/)")
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (scripts/system-deps)")
@pytest.mark.skipif(not SQLITE_UTILS, reason="sqlite-utils is not installed (requirements.lock)")
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_sqlite_utils_replayed_commits_what_strace_saw_written_and_its_close_checkpoints(tmp_path, journal):
    db, snapshot = tmp_path / "app.db", tmp_path / "snapshot.db"
    make_database(db, journal)
    shutil.copyfile(db, snapshot)
    log, trace = tmp_path / "app.jsonl", tmp_path / "app.strace"
    record = [sys.executable, "-m", "sqlwa", "record", "--out", str(log), "--"]
    # one recorded program: a shell running the six commands, all under one strace
    script = tmp_path / "commands.sh"
    commands_script(db, script)
    done = subprocess.run(
        [*record, *STRACE, "-o", str(trace), "sh", str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    processes = strace_processes(trace, db, journal)
    wrote = sum(p.commits() for p in processes)
    # the three commands that change a row each commit once (the INSERT: one transaction)
    assert wrote == 3, [p.events for p in processes]
    summary = replay(tmp_path, log, journal, ["--from", str(snapshot)])
    assert summary["config"]["replay"]["failed"] == {}, summary["config"]["replay"]["first_failures"]
    assert summary["commits"] == wrote
    # the other three opened a write transaction that changed nothing (SQLite: no journal,
    # no WAL frame), counted apart
    empty = summary["wrote_nothing"]
    assert empty["transactions"] == 3
    assert [e["statement"] for e in empty["first"]] == [
        "UPDATE items SET v = 'x' WHERE id = 999",
        "CREATE TEMP TABLE tt AS SELECT 1 AS a",
        "DELETE FROM items WHERE id = 999",
    ]
    close = summary["close"]
    assert close["connections"] == len(COMMANDS)
    after = sum(p.syncs_after_last_commit(journal) for p in processes)
    # WAL: each process that wrote checkpoints when it closes (the WAL, then the database)
    assert after == (0 if journal == "delete" else 2 * wrote)
    assert close["vfs_sync_calls"] == after
    per_database = summary["config"]["replay"]["databases"][0]["close"]["vfs"]
    assert sum(k["sync_calls"] for k in per_database.values()) == after
    assert "close checkpoint" in summary["terminal"]
