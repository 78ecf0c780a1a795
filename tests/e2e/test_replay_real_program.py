"""A real program nobody here wrote — IPython, keeping its history in SQLite through
Python's `sqlite3` module and the system's libsqlite3 — recorded with `sqlwa record` and
replayed with `sqlwa run -s LOG`, checked against two independent truths:

- strace of the program itself (the recorded run is the one strace watched): its
  transactions, each ended by the unlink of its rollback journal (IPython leaves SQLite's
  default journal, DELETE), with the fsync/fdatasync calls and pwrite bytes of each,
  attributed to the database, its journal and its directory by strace's `-y` fd paths;
  the replay, run under strace the same way, must make the same calls per transaction,
  and its own per-commit figures (commits.parquet) must count them as strace did;
- the sqlite3 shell's `.dump` of the program's final database, equal to the replayed one.

The replay starts from nothing (IPython's first session) or from a snapshot of an earlier
session's database (`--from`). A log with a transaction dropped or duplicated must fail
these checks (the last test)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from helpers import have_record_preload

IPYTHON = Path(sys.executable).with_name("ipython")


pytestmark = [
    pytest.mark.skipif(not have_record_preload(), reason="run ./scripts/setup (it builds record-preload/)"),
    pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (scripts/system-deps)"),
    pytest.mark.skipif(shutil.which("sqlite3") is None, reason="needs the sqlite3 shell (scripts/system-deps)"),
    pytest.mark.skipif(not IPYTHON.exists(), reason="IPython is not installed"),
]

STRACE = ["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,pwrite64,write,unlink,unlinkat"]
SESSIONS = [
    "import math\nr = math.sqrt(2)\ndef area(x):\n    return x * x * r\n\narea(3)\n",
    "names = ['a' * n for n in range(40)]\nlen(names)\nfor n in names[:3]:\n    print(n)\n\nsorted(names)[-1]\n",
]
CALL = re.compile(r"^\d+\s+(?P<call>\w+)\((?P<args>.*?)(?:\) += (?P<ret>-?\d+)| <unfinished \.\.\.>)")
RESUMED = re.compile(r"^\d+\s+<\.\.\. (?P<call>\w+) resumed>.*\) += (?P<ret>-?\d+)")
FD_PATH = re.compile(r"^\d+<(?P<path>[^>]*)>")


@dataclass
class Transaction:
    syncs: list[tuple[str, str]]  # (fsync|fdatasync, db|journal|dir), in order
    writes: dict[str, tuple[int, int]]  # file kind -> (pwrite calls, bytes)


def strace_transactions(trace: Path, db: Path) -> list[Transaction]:
    """The write transactions strace saw on ``db``: each ends with its journal's unlink."""
    kinds = {str(db): "db", f"{db}-journal": "journal", str(db.parent): "dir"}
    done: list[Transaction] = []
    current = Transaction([], {})
    pending: dict[str, tuple[str, str]] = {}  # pid -> (call, kind) of an unfinished pwrite
    for line in trace.read_text(errors="replace").splitlines():
        pid = line.split(maxsplit=1)[0]
        if resumed := RESUMED.match(line):
            if pid in pending:
                call, kind = pending.pop(pid)
                if call == "pwrite64":
                    calls, size = current.writes.get(kind, (0, 0))
                    current.writes[kind] = (calls + 1, size + int(resumed["ret"]))
            continue
        if not (m := CALL.match(line)):
            continue
        call, args = m["call"], m["args"]
        if call in ("unlink", "unlinkat"):
            if f'"{db}-journal"' in args and m["ret"] in ("0", None):  # None: unfinished, another thread ran
                done.append(current)
                current = Transaction([], {})
            continue
        fd = FD_PATH.match(args)
        kind = kinds.get(fd["path"]) if fd else None
        if kind is None:
            continue
        if call in ("fsync", "fdatasync"):
            current.syncs.append((call, kind))
        elif call == "pwrite64":
            if m["ret"] is None:
                pending[pid] = (call, kind)
            else:
                calls, size = current.writes.get(kind, (0, 0))
                current.writes[kind] = (calls + 1, size + int(m["ret"]))
    assert not current.syncs and not current.writes, f"writes after the last commit: {current}"
    return done


def shell_dump(db: Path) -> str:
    """The database as the sqlite3 shell dumps it."""
    return subprocess.run(["sqlite3", str(db), ".dump"], capture_output=True, text=True, check=True).stdout


def ipython(tmp: Path, history: Path, cells: str, argv_prefix: list[str]) -> None:
    env = dict(os.environ, IPYTHONDIR=str(tmp / "ipythondir"))
    argv = [str(IPYTHON), f"--HistoryManager.hist_file={history}", "--no-banner", "--simple-prompt"]
    done = subprocess.run(
        [*argv_prefix, *argv], input=cells, cwd=tmp, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


@dataclass
class Original:
    log: Path
    history: Path
    snapshot: Path | None
    transactions: list[Transaction]


def record_ipython(tmp: Path, earlier_session: bool) -> Original:
    """IPython's session under `sqlwa record -- strace … ipython`: one run, recorded and
    traced (after an unrecorded earlier session when ``earlier_session``)."""
    history, log, trace = tmp / "history.sqlite", tmp / "ipython.jsonl", tmp / "ipython.strace"
    snapshot = None
    if earlier_session:
        ipython(tmp, history, SESSIONS[0], [])
        snapshot = tmp / "snapshot.sqlite"
        shutil.copyfile(history, snapshot)
    record = [sys.executable, "-m", "sqlwa", "record", "--out", str(log), "--"]
    ipython(tmp, history, SESSIONS[1], [*record, *STRACE, "-o", str(trace)])
    return Original(log, history, snapshot, strace_transactions(trace, history))


@dataclass
class Replayed:
    db: Path
    transactions: list[Transaction]
    commits: pl.DataFrame
    replay: dict


def replay_under_strace(tmp: Path, original: Original, log: Path) -> Replayed:
    """`sqlwa run -s LOG` under the program's own journal and synchronous (SQLite's
    defaults, which IPython leaves: the log has no PRAGMA), traced by strace."""
    probe = sqlite3.connect(":memory:")
    journal, sync = (
        "delete",
        {0: "off", 1: "normal", 2: "full", 3: "extra"}[probe.execute("PRAGMA synchronous").fetchone()[0]],
    )
    probe.close()
    work, out, trace = tmp / "work", tmp / "out", tmp / "replay.strace"
    work.mkdir()
    start = ["--from", str(original.snapshot)] if original.snapshot else []
    run = [sys.executable, "-m", "sqlwa", "run", "-s", str(log), *start, "-j", journal, "--sync", sync]
    run += ["--timing", "back-to-back", "--dir", str(work), "--keep-db", "--out", str(out)]
    done = subprocess.run([*STRACE, "-o", str(trace), *run], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (db,) = work.glob(f"*/{original.history.name}")
    summary = json.loads((out / "summary.json").read_text())
    commits = pl.read_parquet(out / "commits.parquet").filter(~pl.col("warmup")).sort("index")
    return Replayed(db, strace_transactions(trace, db), commits, summary["config"]["replay"])


def mismatches(original: Original, replayed: Replayed) -> list[str]:
    """What differs between the program and its replay (empty: none)."""
    found = []
    if replayed.replay["failed"]:
        found.append(f"statements failed on replay: {replayed.replay['failed']}")
    if len(replayed.transactions) != len(original.transactions):
        found.append(f"{len(original.transactions)} transactions in the program, {len(replayed.transactions)} replayed")
    for i, (want, got) in enumerate(zip(original.transactions, replayed.transactions, strict=False)):
        if want != got:
            found.append(f"transaction {i}: program {want}, replay {got}")
    # sqlwa's own per-commit figures, of the commits that synced, against the program's strace
    synced = replayed.commits.filter(pl.col("vfs_sync_calls") > 0)
    counted = [
        {"journal": row["vfs_journal_sync_calls"], "db": row["vfs_db_sync_calls"]}
        for row in synced.iter_rows(named=True)
    ]
    traced = [{k: sum(1 for _, kind in t.syncs if kind == k) for k in ("journal", "db")} for t in original.transactions]
    if counted != traced:
        found.append(f"per-commit syncs: sqlwa counted {counted}, strace of the program {traced}")
    if shell_dump(replayed.db) != shell_dump(original.history):
        found.append("the replayed database's .dump differs from the program's")
    return found


@pytest.fixture(scope="module")
def first_session(tmp_path_factory) -> Original:
    return record_ipython(tmp_path_factory.mktemp("ipython"), earlier_session=False)


@pytest.fixture(scope="module")
def later_session(tmp_path_factory) -> Original:
    return record_ipython(tmp_path_factory.mktemp("ipython"), earlier_session=True)


@pytest.fixture(params=["first_session", "later_session"])
def original(request) -> Original:
    return request.getfixturevalue(request.param)


def test_ipython_replayed_makes_its_transactions_syncs_and_database(tmp_path, original):
    events = [json.loads(line) for line in original.log.read_text().splitlines()[1:]]
    statements = [e["sql"] for e in events if e["ev"] == "sql"]
    assert not any(s.lstrip().upper().startswith("PRAGMA") for s in statements)
    # the program's own history table holds the session's cells, each once, as the log's inserts do
    conn = sqlite3.connect(original.history)
    cells = [row[0] for row in conn.execute("SELECT source_raw FROM history ORDER BY session, line")]
    conn.close()
    inserted = [s for s in statements if s.startswith("INSERT INTO history")]
    assert len(inserted) == len(cells) - (4 if original.snapshot else 0) > 0
    # rollback journal, FULL: journal twice, its directory once, the database once per commit
    assert original.transactions and all(
        sorted(kind for _, kind in t.syncs) == ["db", "dir", "journal", "journal"] for t in original.transactions
    ), original.transactions
    replayed = replay_under_strace(tmp_path, original, original.log)
    assert mismatches(original, replayed) == []


def tampered(log: Path, into: Path, how: str) -> tuple[Path, int]:
    """The log with its last history transaction (BEGIN … INSERT … COMMIT) dropped or
    played twice, and how many history rows that transaction inserts. (IPython's other
    transaction, the session's closing UPDATE, played twice writes nothing: SQLite leaves
    a page alone when a cell is rewritten unchanged.)"""
    lines = log.read_text().splitlines()
    events = [json.loads(line) for line in lines[1:]]
    last_insert = max(i for i, e in enumerate(events) if e.get("sql", "").startswith("INSERT INTO history"))
    begin = max(i for i in range(last_insert) if events[i].get("sql", "").startswith("BEGIN"))
    end = next(i for i in range(last_insert, len(events)) if events[i].get("sql", "").startswith("COMMIT"))
    block = lines[1 + begin : 2 + end]
    kept = lines[: 1 + begin] + lines[2 + end :] if how == "dropped" else lines[: 2 + end] + block + lines[2 + end :]
    into.write_text("\n".join(kept) + "\n")
    # IPython's history thread batches the cells it has when it writes: one or more rows
    rows = sum(1 for e in events[begin : end + 1] if e.get("sql", "").startswith("INSERT INTO history"))
    return into, rows


@pytest.mark.parametrize("how", ["dropped", "duplicated"])
def test_a_transaction_dropped_or_duplicated_is_caught(tmp_path, later_session, how):
    log, rows = tampered(later_session.log, tmp_path / f"{how}.jsonl", how)
    found = mismatches(later_session, replay_under_strace(tmp_path, later_session, log))
    # each row played again breaks the history table's primary key (session, line)
    caught = {"dropped": "transactions in the program", "duplicated": f"'constraint': {rows}"}[how]
    assert any(caught in f for f in found), found
