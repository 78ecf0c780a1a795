"""The SQL log readers: format 1 (validated), Android's logcat and plain .sql files, each
converted and checked against independent truth (the statements the fixture was made
from, the sqlite3 shell's own statement splitting, Python's sqlite3 module)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from sql_log_truth import dump, log_events, replay

from sqlwa.cli import _group as sqlwa_group
from sqlwa.record import SqlLogError, detect, to_sql_log, validate
from sqlwa.record.redact import Redactor


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(sqlwa_group, list(args), catch_exceptions=False, standalone_mode=False)
    return result.exit_code, result.output


def sqlwa(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run([sys.executable, "-m", "sqlwa", *args], cwd=tmp_path, capture_output=True, text=True)


# --- Android's logcat ---------------------------------------------------------------
# The message formats, as frameworks/base core/jni/android_database_SQLiteConnection.cpp
# logs them (aosp-mirror/platform_frameworks_base @035a7b0, sqliteTraceCallback line 93
# and sqliteProfileCallback line 100; tags from android_database_SQLiteCommon.h):
TRACE_FORMAT = '%s: "%s"\n'  # ALOG(LOG_VERBOSE, SQLITE_TRACE_TAG, ...)
PROFILE_FORMAT = '%s: "%s" took %0.3f ms\n'  # ALOG(LOG_VERBOSE, SQLITE_PROFILE_TAG, ...)
# and the line prefixes of liblog's logprint.cpp, android_log_formatLogLine:
THREADTIME_PREFIX = "%s %s%5d %5d %c %-8.*s: "  # FORMAT_THREADTIME (uid empty unless -v uid)
TIME_PREFIX = "%s %c/%-8.*s(%s%5d): "  # FORMAT_TIME


def logcat_lines(stamp: str, pid: int, tid: int, tag: str, message: str, time_format: bool = False) -> list[str]:
    """What logcat prints for one message: trailing newlines dropped, one line per message
    line, each with the header (logprint.cpp)."""
    lines = []
    for part in message.rstrip("\n").split("\n"):
        if time_format:
            prefix = TIME_PREFIX.replace("%-8.*s", "%-8s") % (stamp, "V", tag, "", pid)
        else:
            prefix = THREADTIME_PREFIX.replace("%-8.*s", "%-8s") % (stamp, "", pid, tid, "V", tag)
        lines.append(prefix + part)
    return lines


APP_DB = "/data/user/0/com.example.notes/databases/notes.db"
OTHER_DB = "/data/user/0/com.example.notes/databases/cache.db"
# (milliseconds into the log, pid, label, statement, ms it took)
WORKLOAD = [
    (0, 4100, APP_DB, "PRAGMA journal_mode=WAL", 0.412),
    (3, 4100, APP_DB, "CREATE TABLE notes (_id INTEGER PRIMARY KEY,\n  title TEXT,\n  body TEXT)", 1.250),
    (9, 4100, APP_DB, "BEGIN EXCLUSIVE;", 0.031),
    (10, 4100, APP_DB, "INSERT INTO notes(title,body) VALUES ('a \"quoted\" title','x: \"y\"')", 0.205),
    (11, 4100, APP_DB, "INSERT INTO notes(title,body) VALUES ('two','second')", 0.098),
    (12, 4100, APP_DB, "COMMIT;", 3.875),
    (20, 4100, OTHER_DB, "CREATE TABLE c(k TEXT PRIMARY KEY, v BLOB)", 0.9),
    (25, 4100, OTHER_DB, "INSERT INTO c VALUES('k1', X'0102')", 0.1),
    (1500, 4100, APP_DB, "UPDATE notes SET body='edited' WHERE _id=1", 0.5),
    (1502, 5200, APP_DB, "SELECT COUNT(*) FROM notes", 0.02),
]


def write_logcat(path: Path, time_format: bool = False, cut: bool = False) -> None:
    lines = ["--------- beginning of main"]
    for ms, pid, label, sql, took in WORKLOAD:
        stamp = f"11-28 07:{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"
        lines += logcat_lines(stamp, pid, pid + 7, "SQLiteStatements", TRACE_FORMAT % (label, sql), time_format)
        lines += logcat_lines(stamp, 999, 1000, "ActivityManager", "Displayed com.example.notes/.Main", time_format)
        lines += logcat_lines(stamp, pid, pid + 7, "SQLiteTime", PROFILE_FORMAT % (label, sql, took), time_format)
    if cut:  # a message longer than liblog's limit arrives without its end
        long_sql = "INSERT INTO notes(body) VALUES('" + "z" * 5000
        lines += logcat_lines("11-28 07:00:02.000", 4100, 4107, "SQLiteStatements", f'{APP_DB}: "{long_sql[:4000]}')
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("time_format", [False, True], ids=["threadtime", "time"])
def test_logcat_becomes_the_statements_times_and_connections_it_logged(tmp_path: Path, time_format: bool) -> None:
    logcat = tmp_path / "logcat.txt"
    write_logcat(logcat, time_format)
    assert detect(logcat) == "android-logcat"
    out = to_sql_log(logcat, tmp_path)
    header = json.loads(out.read_text().splitlines()[0])
    assert header["source"] == "android-logcat" and header["timed"] is True
    events = log_events(out)
    sql = [e for e in events if e["ev"] == "sql"]
    assert [e["sql"] for e in sql] == [w[3] for w in WORKLOAD]
    assert [e["t"] for e in sql] == [w[0] * 1_000_000 for w in WORKLOAD]
    assert [e["dur"] for e in sql] == [round(w[4] * 1000) * 1000 for w in WORKLOAD]
    opens = [(e["conn"], e["db"]) for e in events if e["ev"] == "open"]
    assert opens == [(1, APP_DB), (2, OTHER_DB), (3, APP_DB)]  # pid 5200 is another process
    assert [e["conn"] for e in sql] == [1] * 6 + [2, 2, 1, 3]
    validate(out)


def test_a_logcat_replays_to_the_database_its_statements_make(tmp_path: Path) -> None:
    logcat = tmp_path / "logcat.txt"
    write_logcat(logcat)
    files = replay(to_sql_log(logcat, tmp_path), tmp_path / "replay")
    truth = tmp_path / "truth.db"
    conn = sqlite3.connect(truth, isolation_level=None)
    for _, _, label, sql, _ in WORKLOAD:
        if label == APP_DB:
            conn.execute(sql).fetchall()
    conn.close()
    assert dump(files[APP_DB]) == dump(truth)


def test_a_statement_logcat_cut_short_is_counted_and_left_out(tmp_path: Path) -> None:
    logcat, log = tmp_path / "logcat.txt", tmp_path / "log.jsonl"
    write_logcat(logcat, cut=True)
    done = sqlwa(tmp_path, "record", "--from", str(logcat), "--out", str(log))
    assert done.returncode == 0, done.stderr
    assert "1 statements cut short by logcat left out" in done.stdout
    assert len([e for e in log_events(log) if e["ev"] == "sql"]) == len(WORKLOAD)


# --- plain .sql files ---------------------------------------------------------------
TRICKY_SQL = """\
-- a comment; with a semicolon
CREATE TABLE t(a TEXT, b);  CREATE TABLE u(x);
INSERT INTO t VALUES('semi;colon', 'it''s');INSERT INTO t VALUES('multi
line; value', /* c; */ 2);
CREATE TRIGGER tr AFTER INSERT ON t BEGIN
  INSERT INTO u VALUES('in; trigger');
  INSERT INTO u VALUES(new.b);
END;
BEGIN; UPDATE t SET b = b + 1; COMMIT;
INSERT INTO t VALUES("dq", X'00ff') ;
"""


def test_a_sql_file_splits_where_sqlite_itself_splits_it(tmp_path: Path) -> None:
    script = tmp_path / "work.sql"
    script.write_text(TRICKY_SQL)
    # SQLite's own split: executescript prepares statement after statement (the tail of
    # each sqlite3_prepare), and the trace callback sees each one's text
    truth_db = tmp_path / "truth.db"
    conn = sqlite3.connect(truth_db, isolation_level=None)
    seen: list[str] = []
    conn.set_trace_callback(lambda text: seen[-1:] != [text] and seen.append(text))  # a trigger repeats its statement
    conn.executescript(TRICKY_SQL)
    conn.close()
    truth = [re.sub(r"^(\s*--[^\n]*\n)+", "", text).strip().removesuffix(";").strip() for text in seen]
    out = to_sql_log(script, tmp_path)
    ours = [e["sql"] for e in log_events(out) if e["ev"] == "sql"]
    assert ours == truth
    assert len(ours) == 9
    files = replay(out, tmp_path / "replay")
    assert dump(next(iter(files.values()))) == dump(truth_db)


def test_the_shell_s_trace_output_is_a_sql_file_with_trigger_steps(tmp_path: Path) -> None:
    trace = tmp_path / "trace.sql"
    trace.write_text("INSERT INTO t VALUES(1);\n-- TRIGGER tr;\n-- INSERT INTO u VALUES(new.a);\nCOMMIT;\n")
    events = log_events(to_sql_log(trace, tmp_path))
    assert [(e["sql"], e["trigger"]) for e in events if e["ev"] == "sql"] == [
        ("INSERT INTO t VALUES(1)", False),
        ("-- TRIGGER tr", True),
        ("-- INSERT INTO u VALUES(new.a)", True),
        ("COMMIT", False),
    ]


# Comments as SQLite's tokenizer defines them (https://sqlite.org/lang_comment.html): "--"
# to the end of the line, "/*" to "*/" or to the end of the input; either may stand
# wherever white space may. Those before a statement's first token and after its last are
# no part of it; those between its tokens are (SQLite keeps them in sqlite_schema).
COMMENTED_SQL = """\
/* a header block;
   over two lines */
-- a line comment; with a semicolon
PRAGMA page_size=8192; -- why: 8 KiB pages
/* c */ PRAGMA journal_mode=WAL;
CREATE TABLE t(a, -- the a column; inside
  b /* the b */) /* after its last token */ ;
INSERT INTO t VALUES(1, 'x -- no comment /* in a string */'); -- done
INSERT INTO t VALUES(2, 'y');/**/
;
SELECT 1; /* x */
"""
COMMENTED_STATEMENTS = [
    "PRAGMA page_size=8192",
    "PRAGMA journal_mode=WAL",
    "CREATE TABLE t(a, -- the a column; inside\n  b /* the b */)",
    "INSERT INTO t VALUES(1, 'x -- no comment /* in a string */')",
    "INSERT INTO t VALUES(2, 'y')",
    "SELECT 1",
]


def shell(db: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Debian's sqlite3 shell running ``script`` on ``db`` (the independent truth)."""
    return subprocess.run(["sqlite3", "-bail", str(db)], input=script, capture_output=True, text=True, check=True)


def test_comments_around_statements_are_left_out_as_sqlite_leaves_them(tmp_path: Path) -> None:
    script = tmp_path / "commented.sql"
    script.write_text(COMMENTED_SQL)
    truth = tmp_path / "truth.db"
    shell(truth, COMMENTED_SQL)  # the shell runs it all, the trailing comment too
    ours = [e["sql"] for e in log_events(to_sql_log(script, tmp_path)) if e["ev"] == "sql"]
    assert ours == COMMENTED_STATEMENTS
    # what SQLite stored of the CREATE: from its first token to its last, inner comments kept
    stored = shell(truth, ".mode list\nSELECT sql FROM sqlite_schema WHERE name = 't';").stdout.rstrip("\n")
    assert stored == ours[2]
    files = replay(to_sql_log(script, tmp_path), tmp_path / "replay")
    (replayed,) = files.values()
    assert dump(replayed) == dump(truth)


def test_a_commented_pragma_is_overridden_and_an_early_page_size_applied(tmp_path: Path) -> None:
    """The replay sees each PRAGMA without the comments before it: journal_mode is the
    run's (overridden, listed by its own text), page_size=8192 is applied before the
    database's first page is written, as the shell applied it."""
    script, log = tmp_path / "commented.sql", tmp_path / "commented.jsonl"
    script.write_text(COMMENTED_SQL)
    truth = tmp_path / "truth.db"
    shell(truth, COMMENTED_SQL)
    assert sqlwa(tmp_path, "record", "--from", str(script), "--out", str(log)).returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    done = sqlwa(tmp_path, "run", "-s", str(log), "--dir", str(work), "--keep-db", "--out", "o", "--json")
    assert done.returncode == 0, done.stderr
    replayed = json.loads(done.stdout)["config"]["replay"]
    assert replayed["failed"] == {}
    assert {p["statement"]: p["action"] for p in replayed["pragmas"]} == {
        "PRAGMA page_size=8192": "kept",
        "PRAGMA journal_mode=WAL": "overridden",
    }
    (kept,) = work.glob("*/commented.db")
    page_size = lambda db: shell(db, "PRAGMA page_size;").stdout.strip()  # noqa: E731
    assert page_size(kept) == page_size(truth) == "8192"


# --- bad input: one line with file and line, exit 2 ---------------------------------
def good_log(path: Path) -> list[str]:
    lines = [
        json.dumps(
            {
                "sqlwa_sql_log": 1,
                "source": "record",
                "program": ["x"],
                "sqlite_version": "3.40.1",
                "started_unix_ns": 1,
                "timed": True,
                "redacted": False,
            }
        ),
        json.dumps({"ev": "open", "conn": 1, "db": "/tmp/a.db", "t": 1}),
        json.dumps({"ev": "sql", "conn": 1, "sql": "CREATE TABLE t(x)", "t": 2, "dur": 5, "trigger": False}),
        json.dumps({"ev": "close", "conn": 1, "t": 9}),
    ]
    path.write_text("\n".join(lines) + "\n")
    return lines


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda lines: "\n".join(lines)[:-7], ":4: the line is cut short"),
        (lambda lines: "\n".join([*lines[:2], lines[2][:30] + "}", lines[3]]) + "\n", ":3: not a JSON object"),
        (
            lambda lines: "\n".join([lines[0], lines[2], lines[3]]) + "\n",
            ":2: sql event on connection 1, which is not open",
        ),
        (
            lambda lines: "\n".join([lines[0].replace('"sqlwa_sql_log": 1', '"sqlwa_sql_log": 2'), *lines[1:]]) + "\n",
            ":1: SQL log format 2",
        ),
        (lambda lines: "The quick brown fox;\njumps over the lazy dog.\n", ":1: not an SQL statement"),
        (lambda lines: "", ":1: empty"),
    ],
    ids=["truncated", "garbled", "no-open", "format-2", "prose", "empty"],
)
def test_bad_input_is_one_line_naming_file_and_line(tmp_path: Path, damage, said: str) -> None:
    log = tmp_path / "in.jsonl"
    log.write_text(damage(good_log(log)))
    done = sqlwa(tmp_path, "record", "--from", str(log), "--out", "out.jsonl")
    assert done.returncode == 2, done.stdout
    first = done.stderr.splitlines()[0]
    assert f"{log}{said}" in first, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in.jsonl"]  # nothing left behind


def test_binary_data_is_no_log(tmp_path: Path) -> None:
    blob = tmp_path / "x.bin"
    blob.write_bytes(b"\x7fELF\x00\x01" * 100)
    with pytest.raises(SqlLogError, match=r"x\.bin:1: binary data"):
        to_sql_log(blob, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]


def test_a_format_1_log_is_returned_as_it_is(tmp_path: Path) -> None:
    log = tmp_path / "in.jsonl"
    good_log(log)
    assert to_sql_log(log) == log
    assert validate(log)[1] == 3


# --- redaction, literal by literal --------------------------------------------------
def test_each_literal_keeps_its_type_and_stored_size() -> None:
    redactor = Redactor(b"fixed key")
    conn = sqlite3.connect(":memory:")
    values = ["'héllo; wörld'", "'it''s'", "X'00ff10'", "12", "300", "70000", "2147483648", "1.5", "2e3", "'0123'"]
    for literal in values:
        redacted = redactor.redact(f"INSERT INTO t VALUES({literal})").removeprefix("INSERT INTO t VALUES(")[:-1]
        assert redacted != literal
        # SQLite's own storage: the type and the record's size for the value
        query = "SELECT typeof(v), length(CAST(v AS BLOB)), CAST(v AS INTEGER) = v FROM (SELECT {} AS v)"
        before, after = conn.execute(query.format(literal)).fetchone(), conn.execute(query.format(redacted)).fetchone()
        assert before[0] == after[0], (literal, redacted)
        if before[0] in ("text", "blob"):
            assert before[1] == after[1], (literal, redacted)  # bytes stored
        if before[0] == "integer":
            assert int_class(conn.execute(f"SELECT {literal}").fetchone()[0]) == int_class(
                conn.execute(f"SELECT {redacted}").fetchone()[0]
            )
        if before[0] == "real":
            assert before[2] == after[2]  # integral stays integral
    assert redactor.redact("PRAGMA user_version = 7") == "PRAGMA user_version = 7"
    # a number that picks rows is replaced as any other, by the same replacement (#43)
    chosen = redactor.redact("SELECT * FROM t WHERE id = 5000 LIMIT 10").split()
    assert chosen[7] == redactor.redact("INSERT INTO t VALUES(5000)")[21:-1] != "5000"
    assert chosen[9] != "10" and len(chosen[9]) == 2
    same = redactor.redact("INSERT INTO t VALUES('k1')"), redactor.redact("UPDATE t SET v = 'k1' WHERE k = 'k1'")
    assert same[0].split("'")[1] == same[1].split("'")[1] == same[1].split("'")[3]


def int_class(value: int) -> int:
    """The bytes of SQLite's record field for an integer (fileformat2.html, serial types)."""
    if value in (0, 1):
        return 0
    return next(size for size in (1, 2, 3, 4, 6, 8) if -(2 ** (8 * size - 1)) <= value < 2 ** (8 * size - 1))
