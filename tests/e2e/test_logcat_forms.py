"""`sqlwa record --from LOGCAT` on Android's statement log in every form people have it
(#44, item 3): each `adb logcat -v` mode, both Android Studio layouts, the pre-4.1
framework format, and excerpts pasted the way posts show them. Each is converted, then
replayed (`sqlwa run -s`, VFS level), and checked against independent truth:

- the statements: what SQLite's own legacy ``sqlite3_trace`` hook (the one Android's
  connection installs) hands its callback for the workload, run here through ctypes on the
  system's libsqlite3: bound text as run, ``-- TRIGGER name`` and ``-- step`` lines;
- the lines around them: rendered from the format strings of the AOSP sources, quoted at
  each renderer below;
- the replayed database: the one that libsqlite3 made running the same statements.

The format strings, as read from the sources:

- frameworks/base core/jni/android_database_SQLiteConnection.cpp (aosp-mirror/
  platform_frameworks_base @035a7b0): ``sqliteTraceCallback``:
  ``ALOG(LOG_VERBOSE, SQLITE_TRACE_TAG, "%s: \\"%s\\"\\n", connection->label, sql)``;
  ``sqliteProfileCallback``: ``ALOG(LOG_VERBOSE, SQLITE_PROFILE_TAG,
  "%s: \\"%s\\" took %0.3f ms\\n", ...)``; the tags ``SQLITE_TRACE_TAG "SQLiteStatements"``,
  ``SQLITE_PROFILE_TAG "SQLiteTime"`` (android_database_SQLiteCommon.h).
- before Android 4.1, core/jni/android_database_SQLiteDatabase.cpp (``#define LOG_TAG
  "Database"``): ``sqlTrace``: ``LOGI("sql_statement|%s|%s\\n", databaseName, sql)``,
  ``sqlProfile``: ``LOGI("elapsedTime4Sql|%s|%.3f ms|%s\\n", databaseName, d, sql)``;
  Android 3's pool: ``sprintf(dbNameStr + strlen(path), "|%03d", connNum)``.
- liblog's logprint.cpp (aosp-mirror/platform_system_core @331249c, liblog/logprint.cpp,
  ``android_log_formatLogLine``): the prefixes in PREFIX below, one line of output per
  line of the message (``while (pm < end && *pm != '\\n') pm++``), each with the prefix.
- Android Studio (JetBrains/android): before 2022 AndroidLogcatFormatter.java,
  ``createCustomFormat``: ``"%1$s %2$s/%3$s %4$c/%5$s: %6$s"``, ``CONTINUATION_LINE =
  "\\n    "``; since then logcat/messages/MessageFormatter.kt with TimestampFormat
  (``"1970-01-01 04:00:01.000 "``), ProcessThreadFormat (``"%5d-%-5d "``), TagFormat
  (``tag.padEnd(23 + 1)``), AppNameFormat (``padEnd(35 + 1)``), LevelFormat (``" V " + " "``),
  and a message's newlines replaced by ``"\\n".padEnd(headerWidth + 1)``."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import re
import sqlite3
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from sql_log_truth import dump, log_events

from helpers import sqlwa_in_process
from sqlwa.record import detect

TRACE_FORMAT = '%s: "%s"\n'  # sqliteTraceCallback
PROFILE_FORMAT = '%s: "%s" took %0.3f ms\n'  # sqliteProfileCallback
OLD_TRACE_FORMAT = "sql_statement|%s|%s\n"  # sqlTrace, before 4.1
OLD_PROFILE_FORMAT = "elapsedTime4Sql|%s|%.3f ms|%s\n"  # sqlProfile, before 4.1
# logprint.cpp, android_log_formatLogLine, per FORMAT_* (uid "" unless -v uid):
PREFIX = {
    "brief": "%c/%-8.*s(%s%5d): ",
    "process": "%c(%s%5d) ",  # and after the message: "  (%.*s)"
    "tag": "%c/%-8.*s: ",
    "thread": "%c(%s%5d:%5d) ",
    "raw": "",
    "time": "%s %c/%-8.*s(%s%5d): ",
    "threadtime": "%s %s%5d %5d %c %-8.*s: ",
    "long": "[ %s %s%5d:%5d %c/%-8.*s ]\n",  # the message whole after it, then "\n\n"
}
PROCESS_SUFFIX = "  (%.*s)"
STUDIO_OLD_FORMAT = "%s %s/%s %c/%s: %s"  # createCustomFormat(true, true, true, true)
STUDIO_OLD_CONTINUATION = "\n    "
STUDIO_PID_TID = "%5d-%-5d "  # ProcessThreadFormat.Style.BOTH


@dataclass
class Entry:
    """One log entry, as logd hands it to logcat."""

    ms: int  # since the first
    pid: int
    tid: int
    level: str
    tag: str
    message: str

    def stamp(self, year: bool = False) -> str:
        seconds, millis = divmod(self.ms, 1000)
        return f"{'2026-' if year else ''}12-03 09:{seconds // 60:02d}:{seconds % 60:02d}.{millis:03d}"


def message_lines(message: str) -> list[str]:
    """logprint.cpp's loop: a line per '\\n'-ended piece, and one for a rest without it."""
    pieces = message.split("\n")
    return pieces[:-1] if message.endswith("\n") else pieces


COLOR_PREFIX, COLOR_SUFFIX = "\x1b[38;5;%dm", "\x1b[0m"  # -v color: colorFromPri, the reset
COLORS = {"V": 231, "D": 75, "I": 40, "W": 166, "E": 196}  # ANDROID_COLOR_DEFAULT, _BLUE, ...


def render_logcat(mode: str, entry: Entry, color: bool = False) -> str:
    """What ``adb logcat -v MODE`` prints for the entry (logprint.cpp's format strings)."""
    tag, level = entry.tag, entry.level
    arguments = {
        "brief": (level, len(tag), tag, "", entry.pid),
        "process": (level, "", entry.pid),
        "tag": (level, len(tag), tag),
        "thread": (level, "", entry.pid, entry.tid),
        "raw": (),
        "time": (entry.stamp(), level, len(tag), tag, "", entry.pid),
        "threadtime": (entry.stamp(), "", entry.pid, entry.tid, level, len(tag), tag),
        "long": (entry.stamp(), "", entry.pid, entry.tid, level, len(tag), tag),
    }[mode]
    prefix = (COLOR_PREFIX % COLORS[level] if color else "") + PREFIX[mode] % arguments
    reset = COLOR_SUFFIX if color else ""
    if mode == "long":
        return prefix + entry.message + reset + "\n\n"
    suffix = (PROCESS_SUFFIX % (len(tag), tag) if mode == "process" else "") + reset + "\n"
    return "".join(prefix + line + suffix for line in message_lines(entry.message))


def render_studio_old(entry: Entry, colon: str = ":", package: str = "com.example.tasks") -> str:
    """Android Studio before 2022 (AndroidLogcatFormatter.formatMessage): one line per
    message, its later lines after CONTINUATION_LINE; Studio 1 printed "﹕" (U+FE55)."""
    text = entry.message.rstrip("\n").replace("\n", STUDIO_OLD_CONTINUATION)
    line = STUDIO_OLD_FORMAT % (
        entry.stamp(year=True),
        f"{entry.pid}-{entry.tid}",
        package,
        entry.level,
        entry.tag,
        text,
    )
    return line.replace(f"/{entry.tag}: ", f"/{entry.tag}{colon} ", 1) + "\n"


def render_studio(
    entry: Entry, columns: str = "date pid-tid tag app", package: str = "com.example.tasks", before: str = ""
) -> str:
    """Android Studio since 2022 (MessageFormatter.formatMessages): the columns asked
    for (the default: all; the "compact" preset: the time alone), then the level and the
    message, its later lines indented to headerWidth. With "same-tag" (TagFormat's
    hideDuplicates) a tag the line before had (``before``) is printed as spaces."""
    shown = columns.split()
    if "same-tag" in shown and entry.tag == before:
        shown.remove("tag")
        shown.append("blank-tag")
    stamp = entry.stamp(year=True) if "date" in shown else entry.stamp()[6:]  # TIME: "04:00:01.000"
    header = (
        stamp
        + " "
        + (STUDIO_PID_TID % (entry.pid, entry.tid) if "pid-tid" in shown else "")
        + (f"{entry.pid:<5d} " if "pid" in shown else "")  # ProcessThreadFormat.Style.PID
        + (entry.tag.ljust(23 + 1) if "tag" in shown else "")
        + ("".ljust(23 + 1) if "blank-tag" in shown else "")
        + (package.ljust(35 + 1) if "app" in shown else "")
    )
    newline = "\n".ljust(len(header) + 1)  # headerWidth: timestamp, pid-tid, tag, app
    return header + f" {entry.level} " + " " + entry.message.rstrip("\n").replace("\n", newline) + "\n"


# --- the workload, as SQLite's sqlite3_trace reports it ----------------------------
LABEL = "/data/user/0/com.example.tasks/databases/tasks.db"
WORKLOAD = [
    'CREATE TABLE "tasks" (id INTEGER PRIMARY KEY, title TEXT NOT NULL, done INTEGER DEFAULT 0)',
    "CREATE TABLE audit(task_id INTEGER, what TEXT)",
    "CREATE TRIGGER tasks_done AFTER UPDATE OF done ON tasks BEGIN INSERT INTO audit VALUES(new.id, 'done'); END",
    "BEGIN EXCLUSIVE;",
    "INSERT INTO tasks(title) VALUES('buy \"oat\" milk')",
    # a line that ends in '"' and is not the statement's last, a label-like ': "' inside
    'INSERT INTO tasks(title) VALUES(\'the first line ends in a quote "\nline two: "still the title"\')',
    "COMMIT;",
    "UPDATE tasks SET done = 1 WHERE id = 1",
    'SELECT count(*) FROM "tasks"',
    "DELETE FROM audit WHERE what = 'x: \"y\"'",
]


class Sqlite:
    """The system's libsqlite3 through ctypes, with the legacy ``sqlite3_trace`` hook."""

    TRACE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        self.lib.sqlite3_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        self.lib.sqlite3_trace.argtypes = [ctypes.c_void_p, self.TRACE, ctypes.c_void_p]
        self.lib.sqlite3_exec.argtypes = [ctypes.c_void_p, ctypes.c_char_p] + [ctypes.c_void_p] * 3
        self.lib.sqlite3_close.argtypes = [ctypes.c_void_p]
        self.db = ctypes.c_void_p()
        assert self.lib.sqlite3_open(str(path).encode(), ctypes.byref(self.db)) == 0
        self.traced: list[str] = []
        self.hook = self.TRACE(lambda _, sql: self.traced.append(sql.decode()))
        self.lib.sqlite3_trace(self.db, self.hook, None)

    def run(self, statements: list[str]) -> list[str]:
        for sql in statements:
            assert self.lib.sqlite3_exec(self.db, sql.encode(), None, None, None) == 0, sql
        self.lib.sqlite3_close(self.db)
        return self.traced


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[list[str], Path]:
    """What SQLite traced for WORKLOAD (trigger steps among it), and the database made."""
    db = tmp_path_factory.mktemp("truth") / "tasks.db"
    return Sqlite(db).run(WORKLOAD), db


def entries(traced: list[str], old: bool = False) -> list[Entry]:
    """The log entries of the traced statements, in the order a device logs them: each
    statement, a line of another tag, and the statement's time once it has run (after
    its trigger's steps: SQLite's profile hook reports a statement at its end, and no
    trigger step); a message of two lines of another tag after the first."""
    out: list[Entry] = []
    pid, tid = 4100, 4127
    pending: Entry | None = None
    for n, sql in enumerate(traced):
        ms = 40 * n
        if not sql.startswith("-- ") and pending is not None:
            out.append(pending)
        if old:
            out.append(Entry(ms, pid, tid, "I", "Database", OLD_TRACE_FORMAT % (LABEL, sql)))
            timed = Entry(ms + 1, pid, tid, "I", "Database", OLD_PROFILE_FORMAT % (LABEL, 0.25 + n, sql))
        else:
            out.append(Entry(ms, pid, tid, "V", "SQLiteStatements", TRACE_FORMAT % (LABEL, sql)))
            out.append(Entry(ms, 812, 830, "D", "Choreographer", "Skipped 31 frames!"))
            timed = Entry(ms + 1, pid, tid, "V", "SQLiteTime", PROFILE_FORMAT % (LABEL, sql, 0.25 + n))
        pending = pending if sql.startswith("-- ") else timed
    out += [pending] if pending is not None else []
    out.insert(1, Entry(0, 4100, 4100, "W", "System", "A resource failed to call close.\nsecond line"))
    return out


def convert(tmp_path: Path, text: str) -> tuple[Path, str]:
    source, log = tmp_path / "logcat.txt", tmp_path / "app.jsonl"
    source.write_text(text)
    done = sqlwa_in_process("record", "--from", str(source), "--out", str(log))
    assert done.returncode == 0, done.stderr
    return log, done.stdout


def replay(tmp_path: Path, log: Path) -> tuple[dict, Path]:
    """``sqlwa run -s LOG`` (VFS level, as fast as it goes), the replay's kept database."""
    work = tmp_path / "work"
    work.mkdir()
    args = ["-s", str(log), "--timing", "back-to-back", "--dir", str(work), "--keep-db"]
    done = sqlwa_in_process("run", *args, "--out", str(tmp_path / "o"), "--json")
    assert done.returncode == 0, done.stderr
    (kept,) = work.glob("*/*.db")
    return json.loads(done.stdout)["config"]["replay"], kept


def assert_converted_and_replayed(tmp_path: Path, text: str, traced: list[str], truth: Path) -> tuple[list[dict], str]:
    """The log holds the traced statements (trigger steps marked), its replay runs all
    but the trigger steps, and ends with the database libsqlite3 made; the log's
    statements and the conversion's summary line."""
    log, said = convert(tmp_path, text)
    sql = [e for e in log_events(log) if e["ev"] == "sql"]
    assert [e["sql"] for e in sql] == traced
    assert [e["trigger"] for e in sql] == [s.startswith("-- ") for s in traced]
    replayed, kept = replay(tmp_path, log)
    steps = sum(s.startswith("-- ") for s in traced)
    assert (replayed["statements"], replayed["replayed"], replayed["skipped"]["trigger"]) == (
        len(traced),
        len(traced) - steps,
        steps,
    )
    assert replayed["failed"] == {}
    assert dump(kept) == dump(truth)
    return sql, said


def test_sqlites_trace_of_the_workload_has_trigger_steps(traced) -> None:
    """The truth itself: the legacy hook reports the trigger's start and its step."""
    statements, _ = traced
    assert statements[statements.index("UPDATE tasks SET done = 1 WHERE id = 1") + 1 :][:2] == [
        "-- TRIGGER tasks_done",
        "-- INSERT INTO audit VALUES(new.id, 'done')",
    ]


# --- every -v mode of logcat ---------------------------------------------------------
@pytest.mark.parametrize("mode", list(PREFIX))
def test_each_logcat_mode_converts_and_replays(tmp_path: Path, traced, mode: str) -> None:
    statements, truth = traced
    log_entries = entries(statements)
    text = "--------- beginning of main\n" + "".join(render_logcat(mode, e) for e in log_entries)
    sql, _ = assert_converted_and_replayed(tmp_path, text, statements, truth)
    if mode in ("time", "threadtime", "long"):  # the modes that print a time
        assert [e["t"] for e in sql] == [40_000_000 * n for n in range(len(statements))]
    # SQLiteTime's "took N ms", to the statement it ends (trigger steps have no end)
    assert [e.get("dur") for e in sql] == [
        None if s.startswith("-- ") else round((0.25 + n) * 1000) * 1000 for n, s in enumerate(statements)
    ]


@pytest.mark.parametrize("mode", ["threadtime", "brief", "long"])
def test_colored_logcat_converts_and_replays(tmp_path: Path, traced, mode: str) -> None:
    """-v color: each line's colour escape and reset (-v long's around the message)."""
    statements, truth = traced
    text = "".join(render_logcat(mode, e, color=True) for e in entries(statements))
    assert text.startswith("\x1b[38;5;")
    assert_converted_and_replayed(tmp_path, text, statements, truth)


@pytest.mark.parametrize("mode", list(PREFIX))
def test_other_tags_lines_are_counted_in_the_summary_line(tmp_path: Path, traced, mode: str) -> None:
    statements, _ = traced
    log_entries = entries(statements)
    text = "".join(render_logcat(mode, e) for e in log_entries)
    _, said = convert(tmp_path, text)
    others = [e for e in log_entries if e.tag not in ("SQLiteStatements", "SQLiteTime")]
    lines = sum(len(message_lines(e.message)) + (mode == "long") for e in others)
    steps = sum(s.startswith("-- ") for s in statements)
    assert f"{len(statements) - steps} statements ({steps} trigger steps besides)" in said
    # -v raw prints no header: there another tag's lines are lines of no logcat's kind
    what = "lines of no logcat form skipped" if mode == "raw" else "lines of other tags skipped"
    assert f"; {lines} {what}" in said, said


@pytest.mark.parametrize(
    "variant",
    ["collapsed", "leading-spaces", "windows", "year", "uid"],
)
def test_threadtime_as_it_arrives_pasted(tmp_path: Path, traced, variant: str) -> None:
    """threadtime with its padding collapsed, each line indented (a post's code block),
    CRLF line ends, -v year, -v uid."""
    statements, truth = traced
    lines = "".join(render_logcat("threadtime", e) for e in entries(statements)).splitlines()
    if variant == "collapsed":  # the header's runs of spaces, one space each
        lines = [re.sub(" +", " ", head) + colon + rest for head, colon, rest in (x.partition(": ") for x in lines)]
    elif variant == "leading-spaces":
        lines = ["    " + line for line in lines]
    elif variant == "year":
        lines = ["2026-" + line for line in lines]
    elif variant == "uid":
        lines = [line[:19] + "10143 " + line[19:] for line in lines]  # "%5d:", its ':' made ' '
    text = ("\r\n" if variant == "windows" else "\n").join(lines) + "\n"
    assert_converted_and_replayed(tmp_path, text, statements, truth)


# --- Android Studio ------------------------------------------------------------------
STUDIO_LAYOUTS = {
    "studio": render_studio,
    "studio-no-app": lambda e: render_studio(e, "date pid-tid tag"),
    "studio-pid": lambda e: render_studio(e, "date pid tag app"),
    "studio-compact": lambda e: render_studio(e, "time"),
    "studio-old": render_studio_old,
    "studio-1": lambda e: render_studio_old(e, colon="\ufe55"),
}


@pytest.mark.parametrize("layout", [*STUDIO_LAYOUTS, "studio-same-tags"])
def test_android_studio_copies_convert_and_replay(tmp_path: Path, traced, layout: str) -> None:
    """Both layouts (the newer one with some of its columns left out, the compact view
    without a tag), each message's later lines indented without a header."""
    statements, truth = traced
    if layout == "studio-same-tags":
        log_entries = [e for e in entries(statements) if e.tag != "Choreographer"]  # tags in runs
        before = [""] + [e.tag for e in log_entries]
        text = "".join(render_studio(e, "date pid-tid tag app same-tag", before=b) for e, b in zip(log_entries, before))
        assert re.search(r"\n\S+ \S+ +\d+-\d+ {26}com\.example", text)  # a blank tag column
    else:
        text = "".join(STUDIO_LAYOUTS[layout](e) for e in entries(statements))
    assert "\n    line two" in text or not layout.startswith("studio-old")
    sql, _ = assert_converted_and_replayed(tmp_path, text, statements, truth)
    # the compact view's time has no date: the same day, as the workload's times are
    assert [e["t"] for e in sql] == [40_000_000 * n for n in range(len(statements))]


# --- Android before 4.1 ------------------------------------------------------------
@pytest.mark.parametrize("mode", ["brief", "threadtime"])
def test_the_pre_4_1_database_tag_converts_and_replays(tmp_path: Path, traced, mode: str) -> None:
    statements, truth = traced
    opened = Entry(0, 4100, 4127, "V", "Database", "Registering sqlite logging func \n")
    text = "".join(render_logcat(mode, e) for e in [opened, *entries(statements, old=True)])
    sql, said = assert_converted_and_replayed(tmp_path, text, statements, truth)
    assert [e.get("dur") for e in sql][:2] == [250_000, 1_250_000]
    # "Registering sqlite logging func", and System's message of two lines
    assert "; 3 lines of other tags skipped" in said, said


def test_android_3s_pooled_connections_are_connections(tmp_path: Path) -> None:
    """Android 3 appends "|%03d" (the pool's connection number) to the database name."""
    lines = [
        f"I/Database( 4100): sql_statement|{LABEL}|000|CREATE TABLE t(a)",
        f"I/Database( 4100): sql_statement|{LABEL}|001|SELECT a FROM t",
        f"I/Database( 4100): sql_statement|{LABEL}|000|INSERT INTO t VALUES('a|b')",
    ]
    log, _ = convert(tmp_path, "\n".join(lines) + "\n")
    events = log_events(log)
    assert [(e["conn"], e["db"]) for e in events if e["ev"] == "open"] == [(1, LABEL), (2, LABEL)]
    assert [(e["conn"], e["sql"]) for e in events if e["ev"] == "sql"] == [
        (1, "CREATE TABLE t(a)"),
        (2, "SELECT a FROM t"),
        (1, "INSERT INTO t VALUES('a|b')"),
    ]


# --- excerpts as posts show them -----------------------------------------------------
# Written here in the style of public posts (a Room app's trigger trace copied from Android
# Studio, a Stack Overflow answer's tag-only lines, an old blog's brief lines), with SQL of
# our own; each one's statements are listed beside it, and checked against what SQLite's
# trace prints for them.
MUSIC_DB = "/data/user/0/com.example.music/databases/music.db"
ROOM_STUDIO = textwrap.dedent(
    f"""\
    ---------------------------- PROCESS STARTED (7311) for package com.example.music ----------------------------
    2024-05-02 18:41:07.220  7311-7311  ActivityThread          com.example.music                    I  Displayed com.example.music/.MainActivity
    2024-05-02 18:41:07.301  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "CREATE TABLE IF NOT EXISTS `songs` (`id` INTEGER NOT NULL, `name` TEXT, PRIMARY KEY(`id`))"
    2024-05-02 18:41:07.305  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "CREATE TEMP TABLE change_log(table_id INTEGER PRIMARY KEY, dirty INTEGER NOT NULL DEFAULT 0)"
    2024-05-02 18:41:07.306  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "INSERT OR IGNORE INTO change_log VALUES(0, 0)"
    2024-05-02 18:41:07.309  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "CREATE TEMP TRIGGER IF NOT EXISTS `change_songs_INSERT` AFTER INSERT ON `songs` BEGIN UPDATE change_log SET dirty = 1 WHERE table_id = 0 AND dirty = 0; END"
    2024-05-02 18:41:07.412  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "BEGIN IMMEDIATE;"
    2024-05-02 18:41:07.413  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "INSERT OR REPLACE INTO `songs` (`id`,`name`) VALUES (1,'Blue "Moon"')"
    2024-05-02 18:41:07.413  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "-- TRIGGER change_songs_INSERT"
    2024-05-02 18:41:07.413  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "-- UPDATE change_log SET dirty = 1 WHERE table_id = 0 AND dirty = 0"
    2024-05-02 18:41:07.414  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "INSERT OR REPLACE INTO `songs` (`id`,`name`)
                                                                                                    VALUES (2,'So What')"
    2024-05-02 18:41:07.414  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "-- TRIGGER change_songs_INSERT"
    2024-05-02 18:41:07.414  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "-- UPDATE change_log SET dirty = 1 WHERE table_id = 0 AND dirty = 0"
    2024-05-02 18:41:07.420  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "COMMIT;"
    2024-05-02 18:41:07.431  7311-7333  OpenGLRenderer          com.example.music                    D  Davey! duration=912ms; Flags=1
    2024-05-02 18:41:07.440  7311-7360  SQLiteStatements        com.example.music                    V  {MUSIC_DB}: "SELECT * FROM change_log WHERE dirty = 1;"
    """
)
ROOM_STATEMENTS = [
    "CREATE TABLE IF NOT EXISTS `songs` (`id` INTEGER NOT NULL, `name` TEXT, PRIMARY KEY(`id`))",
    "CREATE TEMP TABLE change_log(table_id INTEGER PRIMARY KEY, dirty INTEGER NOT NULL DEFAULT 0)",
    "INSERT OR IGNORE INTO change_log VALUES(0, 0)",
    "CREATE TEMP TRIGGER IF NOT EXISTS `change_songs_INSERT` AFTER INSERT ON `songs` BEGIN UPDATE change_log "
    "SET dirty = 1 WHERE table_id = 0 AND dirty = 0; END",
    "BEGIN IMMEDIATE;",
    "INSERT OR REPLACE INTO `songs` (`id`,`name`) VALUES (1,'Blue \"Moon\"')",
    "INSERT OR REPLACE INTO `songs` (`id`,`name`)\nVALUES (2,'So What')",
    "COMMIT;",
    "SELECT * FROM change_log WHERE dirty = 1;",
]

NOTES_DB = "/data/data/com.example.notes/databases/notes.db"
# a Stack Overflow answer's lines: -v tag, indented as the answer's code block
SO_TAG_ONLY = textwrap.indent(
    textwrap.dedent(
        f"""\
        V/SQLiteStatements: {NOTES_DB}: "CREATE TABLE notes (_id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT)"
        D/NotesActivity: onCreate
        V/SQLiteStatements: {NOTES_DB}: "INSERT INTO notes(text) VALUES ('he said "ok"')"
        V/SQLiteStatements: {NOTES_DB}: "SELECT _id, text FROM notes ORDER BY _id DESC"
        """
    ),
    "    ",
)
SO_STATEMENTS = [
    "CREATE TABLE notes (_id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT)",
    "INSERT INTO notes(text) VALUES ('he said \"ok\"')",
    "SELECT _id, text FROM notes ORDER BY _id DESC",
]

SHOP_DB = "/data/data/com.example.shop/databases/shop.db"
# an old blog's excerpt: Android 2.3's brief lines, its framework's "Database" tag
BLOG_BRIEF = textwrap.dedent(
    f"""\
    I/Database(  312): sql_statement|{SHOP_DB}|CREATE TABLE cart (item TEXT, qty INTEGER)
    I/Database(  312): elapsedTime4Sql|{SHOP_DB}|1.204 ms|CREATE TABLE cart (item TEXT, qty INTEGER)
    I/ActivityManager(   61): Displayed com.example.shop/.Cart: +412ms
    I/Database(  312): sql_statement|{SHOP_DB}|INSERT INTO cart VALUES('12" pizza', 2)
    I/Database(  312): elapsedTime4Sql|{SHOP_DB}|0.310 ms|INSERT INTO cart VALUES('12" pizza', 2)
    I/Database(  312): sql_statement|{SHOP_DB}|UPDATE cart SET qty = qty + 1
    I/Database(  312): WHERE item LIKE '12%'
    """
)
BLOG_STATEMENTS = [
    "CREATE TABLE cart (item TEXT, qty INTEGER)",
    "INSERT INTO cart VALUES('12\" pizza', 2)",
    "UPDATE cart SET qty = qty + 1\nWHERE item LIKE '12%'",
]


def traced_by_sqlite(tmp_path: Path, statements: list[str]) -> tuple[list[str], Path]:
    """What SQLite's trace prints for the statements (their trigger steps among them),
    and the database they make."""
    db = tmp_path / "truth" / "tasks.db"
    db.parent.mkdir()
    return Sqlite(db).run(statements), db


@pytest.mark.parametrize(
    "excerpt,statements,others",
    [(ROOM_STUDIO, ROOM_STATEMENTS, 2), (SO_TAG_ONLY, SO_STATEMENTS, 1), (BLOG_BRIEF, BLOG_STATEMENTS, 1)],
    ids=["room-studio", "stackoverflow-tag", "blog-brief-database"],
)
def test_pasted_excerpts_convert_and_replay(tmp_path: Path, excerpt: str, statements: list[str], others: int) -> None:
    # the excerpt holds exactly what SQLite traces for its statements, trigger steps too
    traced, truth = traced_by_sqlite(tmp_path, statements)
    _, said = assert_converted_and_replayed(tmp_path, excerpt, traced, truth)
    assert f"; {others} lines of other tags skipped" in said, said


def test_the_room_excerpt_s_trigger_lines_are_marked_and_not_replayed(tmp_path: Path) -> None:
    log, said = convert(tmp_path, ROOM_STUDIO)
    steps = [e["sql"] for e in log_events(log) if e["ev"] == "sql" and e["trigger"]]
    assert (
        steps
        == ["-- TRIGGER change_songs_INSERT", "-- UPDATE change_log SET dirty = 1 WHERE table_id = 0 AND dirty = 0"] * 2
    )
    assert "9 statements (4 trigger steps besides)" in said


def test_a_double_quote_in_sql_round_trips(tmp_path: Path) -> None:
    """The framework prints the statement inside '"' without escaping: the statement is
    everything up to the message's last '"', quotes of its own kept."""
    sqls = ['SELECT "a" FROM "t" WHERE b = \'"\'', 'INSERT INTO "t"("a", b) VALUES(\'x: "\', \'"\')']
    text = "".join(
        render_logcat("threadtime", Entry(n, 4100, 4100, "V", "SQLiteStatements", TRACE_FORMAT % (LABEL, sql)))
        for n, sql in enumerate(sqls)
    )
    log, _ = convert(tmp_path, text)
    assert [e["sql"] for e in log_events(log) if e["ev"] == "sql"] == sqls
    conn = sqlite3.connect(":memory:")
    conn.execute('CREATE TABLE "t"("a", b)')
    assert [conn.execute(sql).fetchall() for sql in reversed(sqls)] == [[], [('x: "',)]]


def test_a_sql_file_with_dashed_rules_is_still_a_sql_file(tmp_path: Path) -> None:
    """Lines of dashes are logcat's banners only as logcat prints them."""
    script = tmp_path / "schema.sql"
    script.write_text(
        "-------- Schema --------\nCREATE TABLE t(a);\n---------- data ----------\nINSERT INTO t VALUES(1);\n"
    )
    assert detect(script) == "sql-file"
    banner = tmp_path / "banner.txt"
    banner.write_text("--------- beginning of main\n" + render_logcat("brief", entries(["SELECT 1"])[0]))
    assert detect(banner) == "android-logcat"


def test_lines_of_no_logcat_form_are_counted_and_leave_statements_whole(tmp_path: Path) -> None:
    """A post's elisions ("[...]") and remarks between the lines: counted, skipped, and
    the statement before each one kept whole."""
    head = "12-03 09:00:00.000  4100  4127 V SQLiteStatements: " + LABEL
    text = textwrap.dedent(
        f"""\
        {head}: "CREATE TABLE t(a TEXT)"
        [...]
        {head}: "INSERT INTO t VALUES('a "b"')"
        (a few hundred lines later)

        {head}: "SELECT a FROM t"
        """
    )
    log, said = convert(tmp_path, text)
    assert [e["sql"] for e in log_events(log) if e["ev"] == "sql"] == [
        "CREATE TABLE t(a TEXT)",
        "INSERT INTO t VALUES('a \"b\"')",
        "SELECT a FROM t",
    ]
    assert said.rstrip().endswith("; 2 lines of no logcat form skipped"), said


def test_two_messages_under_one_header_are_two_statements(tmp_path: Path) -> None:
    """One thread's two statements in one millisecond share their header: the second
    starts with the label again, even one that is no absolute path."""
    head = "12-03 09:00:00.000  4100  4127 V SQLiteStatements: "
    text = f'{head}notes.db: "BEGIN;"\n{head}notes.db: "CREATE TABLE t(a)"\n{head}:memory:: "SELECT 1"\n'
    log, _ = convert(tmp_path, text)
    events = log_events(log)
    assert [e["sql"] for e in events if e["ev"] == "sql"] == ["BEGIN;", "CREATE TABLE t(a)", "SELECT 1"]
    assert [e["db"] for e in events if e["ev"] == "open"] == ["notes.db", ":memory:"]
