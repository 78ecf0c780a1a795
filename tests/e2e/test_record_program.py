"""`sqlwa record -- COMMAND` on real programs nobody here wrote (the sqlite3 shell,
IPython), checked against each program's own view of what it ran (the shell's `.trace`,
Python's set_trace_callback) and against its final database, rebuilt by replaying the
log with Python's sqlite3 module (tests/sql_log_truth.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sql_log_truth import dump, log_events, payload_by_table, replay

from helpers import have_record_preload

pytestmark = [
    pytest.mark.skipif(not have_record_preload(), reason="run ./scripts/setup (it builds record-preload/)"),
    pytest.mark.skipif(shutil.which("sqlite3") is None, reason="needs the sqlite3 shell"),
]

SHELL_SCRIPT = """\
.trace {trace} --expanded
PRAGMA journal_mode=WAL;
CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT, pic BLOB, score REAL);
CREATE TABLE audit(note INTEGER, what TEXT);
CREATE TRIGGER notes_ai AFTER INSERT ON notes BEGIN INSERT INTO audit VALUES(new.id, 'insert; new'); END;
BEGIN;
INSERT INTO notes(title, body, pic, score) VALUES('first', 'it''s; here', x'00ff10', 1.5);
INSERT INTO notes(title, body, pic, score) VALUES('second', 'héllo wörld', zeroblob(300), 2e3);
COMMIT;
INSERT INTO notes(title, body) VALUES('third', 'autocommit');
UPDATE notes SET body = body || ' (edited)', score = 70000 WHERE id = 2;
SAVEPOINT s1; DELETE FROM notes WHERE id = 3; ROLLBACK TO s1; RELEASE s1;
SELECT count(*) FROM notes;
"""


def sqlwa(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlwa", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


def shell_run(tmp_path: Path, extra: tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """The sqlite3 shell running SHELL_SCRIPT under `sqlwa record`: (log, trace, db)."""
    trace, db, log = tmp_path / "trace.sql", tmp_path / "app.db", tmp_path / "log.jsonl"
    script = tmp_path / "work.sql"
    script.write_text(SHELL_SCRIPT.format(trace=trace))
    done = sqlwa("record", "--out", str(log), *extra, "--", "sqlite3", str(db), f".read {script}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 connections to 1 database files" in done.stdout
    return log, trace, db


def shell_statements(trace: Path) -> list[str]:
    """The shell's own trace: each statement (or trigger step) on a line ending in ';'."""
    return [line.removesuffix(";") for line in trace.read_text().splitlines() if line]


def test_the_sqlite3_shell_is_recorded_as_it_traced_itself(tmp_path: Path) -> None:
    log, trace, db = shell_run(tmp_path)
    events = log_events(log)
    recorded = [e["sql"].rstrip(";") for e in events if e["ev"] == "sql"]
    assert recorded == shell_statements(trace)
    triggers = [e["sql"] for e in events if e["ev"] == "sql" and e["trigger"]]
    assert triggers == ["-- TRIGGER notes_ai", "-- INSERT INTO audit VALUES(new.id, 'insert; new')"] * 3
    assert [e["ev"] for e in events][:1] == ["open"] and events[-1]["ev"] == "close"
    assert events[0]["db"] == str(db)
    # times rise, and each statement (not the trigger steps) ran for a measured while
    times = [e["t"] for e in events]
    assert times == sorted(times)
    assert all(e["dur"] > 0 for e in events if e["ev"] == "sql" and not e["trigger"])
    # the program's final database, rebuilt from the log alone
    replayed = replay(log, tmp_path / "replay")
    assert dump(replayed[str(db)]) == dump(db)


def test_redaction_keeps_every_size_and_hides_every_value(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "red").mkdir()
    plain_log, _, _ = shell_run(tmp_path / "plain")
    redacted_log, _, _ = shell_run(tmp_path / "red", ("--redact",))
    assert json.loads(redacted_log.read_text().splitlines()[0])["redacted"] is True
    text = redacted_log.read_text()
    for secret in ("first", "it''s; here", "héllo wörld", "autocommit", "00ff10", "70000"):
        assert secret not in text
    plain_db = replay(plain_log, tmp_path / "r1")
    redacted_db = replay(redacted_log, tmp_path / "r2")
    (plain,), (redacted,) = plain_db.values(), redacted_db.values()
    # SQLite's own account of every table's and index's record bytes and pages
    assert payload_by_table(redacted) == payload_by_table(plain)
    assert dump(redacted) != dump(plain)


THREADS_PROGRAM = """\
import json, os, sqlite3, subprocess, sys, threading

out = sys.argv[1]
own = {}

def work(name, n):
    seen = own.setdefault(name, [])
    conn = sqlite3.connect(os.path.join(out, name + ".db"), isolation_level=None)
    conn.set_trace_callback(seen.append)
    conn.execute("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v TEXT)")
    for i in range(n):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t(v) VALUES(?)", (name * (i % 7 + 1),))
        conn.execute("COMMIT")
    conn.close()

threads = [threading.Thread(target=work, args=(f"thread{i}", 40)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
if os.fork() == 0:
    work("forked", 10)
    json.dump(own["forked"], open(os.path.join(out, "forked.json"), "w"))
    os._exit(0)
os.wait()
subprocess.run([sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                "c.execute('CREATE TABLE c(x)'); c.execute('INSERT INTO c VALUES (42)'); c.commit()",
                os.path.join(out, "child.db")], check=True)
json.dump(own, open(os.path.join(out, "own.json"), "w"))
"""


def test_threads_forks_and_children_all_land_in_one_log(tmp_path: Path) -> None:
    script = tmp_path / "threads.py"
    script.write_text(THREADS_PROGRAM)
    log = tmp_path / "log.jsonl"
    done = sqlwa("record", "--out", str(log), "--", sys.executable, str(script), str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    own = json.loads((tmp_path / "own.json").read_text())
    own["forked"] = json.loads((tmp_path / "forked.json").read_text())
    events = log_events(log)
    by_db: dict[str, list[str]] = {}
    db_of = {e["conn"]: Path(e["db"]).stem for e in events if e["ev"] == "open"}
    for e in events:
        if e["ev"] == "sql":
            by_db.setdefault(db_of[e["conn"]], []).append(e["sql"])
    # each connection's statements as its own trace callback saw them, none lost or torn
    for name, statements in own.items():
        assert by_db[name] == statements, name
    assert by_db["child"] == ["CREATE TABLE c(x)", "BEGIN ", "INSERT INTO c VALUES (42)", "COMMIT"]
    assert len(db_of) == 6 and len(set(db_of)) == 6  # unique connection numbers across processes
    files = replay(log, tmp_path / "replay")
    for db, replayed in files.items():
        assert dump(replayed) == dump(Path(db)), db


def test_ipython_history_is_rebuilt_from_its_log(tmp_path: Path) -> None:
    ipython = Path(sys.executable).with_name("ipython")
    if not ipython.exists():
        pytest.skip("IPython is not installed")
    history, log = tmp_path / "history.sqlite", tmp_path / "log.jsonl"
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"))
    done = sqlwa(
        "record",
        "--out",
        str(log),
        "--",
        str(ipython),
        f"--HistoryManager.hist_file={history}",
        "-c",
        "x = 1 + 1",
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    events = log_events(log)
    assert {e["db"] for e in events if e["ev"] == "open"} == {str(history)}
    assert any(e["ev"] == "sql" and e["sql"].startswith("INSERT INTO sessions") for e in events)
    (replayed,) = replay(log, tmp_path / "replay").values()
    assert dump(replayed) == dump(history)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["/sbin/ldconfig", "-p"], "statically linked"),
        (["/usr/bin/passwd", "--help"], "set-user/group-ID"),
        (["true"], "opened no SQLite database"),
        (["no-such-program-here"], "no such program"),
    ],
)
def test_a_program_the_preload_cannot_reach_is_one_line(tmp_path: Path, argv: list[str], said: str) -> None:
    if not Path(argv[0]).exists() and argv[0].startswith("/"):
        pytest.skip(f"{argv[0]} is not on this system")
    spool = tmp_path / "tmp"
    spool.mkdir()
    done = sqlwa("record", "--out", "log.jsonl", "--", *argv, cwd=tmp_path, env=dict(os.environ, TMPDIR=str(spool)))
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 2  # the error and its fix
    assert not (tmp_path / "log.jsonl").exists()
    assert list(spool.iterdir()) == []  # the per-process spool is gone too


def test_the_program_s_failure_is_its_exit_status_and_the_log_is_kept(tmp_path: Path) -> None:
    code = textwrap.dedent("""\
        import sqlite3, sys
        sqlite3.connect(sys.argv[1]).execute('CREATE TABLE t(x)')
        sys.exit(7)""")
    spool = tmp_path / "tmp"
    spool.mkdir()
    argv = ["record", "--out", "log.jsonl", "--", sys.executable, "-c", code, str(tmp_path / "a.db")]
    done = sqlwa(*argv, cwd=tmp_path, env=dict(os.environ, TMPDIR=str(spool)))
    assert done.returncode == 7
    assert list(spool.iterdir()) == []  # the per-process spool files are merged and gone
    assert "exited with status 7" in done.stderr
    assert [e["sql"] for e in log_events(tmp_path / "log.jsonl") if e["ev"] == "sql"] == ["CREATE TABLE t(x)"]


# A program that defines an SQL function of its own (as fossil defines now(), sqlite-utils
# convert its function), and says what it ran: its SQLite's version, and per statement
# whether its function ran in it (the function itself tells: independent of any text).
APP_FUNCTION_PROGRAM = """\
import json, sqlite3, sys
db, out = sys.argv[1], sys.argv[2]
called = []
def now():
    called[-1] = True
    return "2026-12-03 08:00:00"
conn = sqlite3.connect(db, isolation_level=None)
conn.create_function("now", 0, now)
def run(sql):
    called.append(False)
    conn.execute(sql)
run("CREATE TABLE events(id INTEGER PRIMARY KEY, at TEXT, what TEXT)")
run("INSERT INTO events(at, what) VALUES(now(), 'start')")
run("BEGIN")
run("INSERT INTO events(at, what) VALUES('2026-12-03', 'plain')")
run("UPDATE events SET at = now() WHERE id = 1")
run("COMMIT")
run("INSERT INTO events(what) VALUES('now() is in a string, not called')")
conn.close()
json.dump({"sqlite_version": sqlite3.sqlite_version, "called": called}, open(out, "w"))
"""


def test_a_program_s_own_function_and_its_sqlite_are_named_in_the_replay(tmp_path: Path) -> None:
    from sqlwa import _native

    script, db, log, own = tmp_path / "app.py", tmp_path / "app.db", tmp_path / "log.jsonl", tmp_path / "own.json"
    script.write_text(APP_FUNCTION_PROGRAM)
    done = sqlwa("record", "--out", str(log), "--", sys.executable, str(script), str(db), str(own), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    truth = json.loads(own.read_text())
    # the header names the SQLite the program loaded, as the program's sqlite3 module says
    assert json.loads(log.read_text().splitlines()[0])["sqlite_version"] == truth["sqlite_version"]
    calling = sum(truth["called"])
    assert calling == 2
    replayed = sqlwa("run", "-s", str(log), "--out", "o", "--json", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    summary = json.loads(replayed.stdout)
    replay = summary["config"]["replay"]
    assert replay["failed"] == {"app-defined function": calling}
    assert replay["missing_functions"] == {
        "functions": [{"name": "now", "statements": calling, "sqlite_option": None}],
        "in_transaction": 1,  # the UPDATE inside BEGIN…COMMIT
        "commits_without_them": 1,
    }
    # the program's four writing transactions, less the autocommit INSERT that never ran
    assert summary["commits"] == 3
    assert replay["recorded_sqlite_version"] == truth["sqlite_version"]
    assert replay["replayed_sqlite_version"] == summary["config"]["sqlite_version"] == _native.__sqlite_version__
    if truth["sqlite_version"] != _native.__sqlite_version__:
        assert f"recorded with SQLite {truth['sqlite_version']}" in replay["sqlite_note"]
    # and the terminal says it all
    shown = sqlwa("run", "-s", str(log), "--out", "o2", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert f"SQLite {_native.__sqlite_version__} (recorded with {truth['sqlite_version']})" in text
    assert "app-defined function 2" in text
    assert "app-defined functions now() ×2: the program defines them" in text
    # and the report, per run
    page = tmp_path / "report.html"
    reported = sqlwa("report", "o", "-o", str(page), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    html = page.read_text()
    assert f"{_native.__sqlite_version__} (recorded with {truth['sqlite_version']})" in html
    assert f"SQLite {_native.__sqlite_version__} replayed a log recorded with SQLite {truth['sqlite_version']}" in html
    assert "app-defined functions now() ×2" in html


FOREIGN_KEY_PROGRAM = """\
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)  # foreign keys as SQLite starts them
conn.execute("CREATE TABLE p(id INTEGER PRIMARY KEY)")
conn.execute("CREATE TABLE c(pid INTEGER REFERENCES p(id) ON DELETE CASCADE, v)")
conn.execute("INSERT INTO p VALUES(1)")
conn.execute("INSERT INTO c VALUES(1, 'child')")
conn.execute("INSERT INTO c VALUES(7, 'orphan')")
conn.execute("DELETE FROM p WHERE id = 1")
"""


def test_a_replay_keeps_foreign_keys_as_the_program_s_sqlite_had_them(tmp_path: Path) -> None:
    """The program's SQLite starts each connection without foreign key constraints (as
    SQLite documents); the bundled one is built with them on. Replayed, the program's
    orphan row and its child stay: the final database dumps as the program's."""
    script, db, log = tmp_path / "fk.py", tmp_path / "fk.db", tmp_path / "fk.jsonl"
    script.write_text(FOREIGN_KEY_PROGRAM)
    done = sqlwa("record", "--out", str(log), "--", sys.executable, str(script), str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    work = tmp_path / "work"
    work.mkdir()
    ran = sqlwa("run", "-s", str(log), "--dir", str(work), "--keep-db", "--out", "o", "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["config"]["replay"]["failed"] == {}
    (kept,) = work.glob("*/fk.db")
    shell_dump = lambda path: subprocess.run(["sqlite3", str(path), ".dump"], capture_output=True, text=True).stdout  # noqa: E731
    assert shell_dump(kept) == shell_dump(db)
    assert "'orphan'" in shell_dump(db)
