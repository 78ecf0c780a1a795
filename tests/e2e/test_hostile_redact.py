"""`sqlwa record --redact` against a program that puts secrets everywhere SQL takes a
literal (#43, item 2): VALUES, WHERE, ON, LIMIT, a partial index's WHERE, DEFAULT,
trigger bodies (and the trigger steps SQLite reports), CREATE TABLE … AS SELECT, views,
comments, double-quoted strings, integers past 2**63, reals, blobs, bound values, and
the program's own command line.

Hypothesis draws the secrets (markers: random letters and digits, wrapped in quotes,
semicolons, comment starts and non-ASCII text), a real Python program runs them under
`sqlwa record --redact`, and the log's bytes must hold none of them; while the log,
replayed with Python's sqlite3 module (tests/sql_log_truth.py), must build a database
that SQLite's own dbstat finds byte for byte the size of the program's own: every
table's and index's record bytes, free bytes, cells and pages."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_log_truth import dump, replay

from helpers import have_record_preload

pytestmark = pytest.mark.skipif(not have_record_preload(), reason="run ./scripts/setup (it builds record-preload/)")

PROGRAM = """\
import json, sqlite3, sys
statements, db = json.load(open(sys.argv[1])), sys.argv[2]
conn = sqlite3.connect(db, isolation_level=None)
for sql, params in statements:
    bound = [bytes.fromhex(p["blob"]) if isinstance(p, dict) else p for p in params]
    conn.execute(sql, bound).fetchall()
conn.close()
"""

core = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=12, max_size=16).map(
    lambda text: "Q" + text  # never all digits: a number's marker is drawn apart
)
#: what may surround a secret inside a string: quotes, statement ends, comment starts
noise = st.lists(st.sampled_from(["'", '"', ";", "--", "/*", "*/", " ", "é", "€", "\n", "x'"]), max_size=4).map("".join)


@st.composite
def secret_text(draw: st.DrawFn) -> tuple[str, str]:
    """(the marker to look for, the text that holds it)."""
    marker = draw(core)
    return marker, draw(noise) + marker + draw(noise)


@dataclass
class Secrets:
    texts: dict[str, tuple[str, str]]
    ints: dict[str, int]
    huge: str
    real: str
    blobs: dict[str, bytes]
    comments: list[str]
    argv: str

    def markers(self) -> list[str]:
        out = [marker for marker, _ in self.texts.values()] + [str(v) for v in self.ints.values()]
        out += [self.huge, self.real, *self.comments, self.argv]
        out += [b.hex() for b in self.blobs.values()] + [b.hex().upper() for b in self.blobs.values()]
        return out


TEXT_SLOTS = ("default", "trigger", "insert", "bound", "update", "dq", "ctas", "view", "on")
INT_SLOTS = ("trigger", "insert", "bound", "update", "limit", "ctas", "index", "where")


@st.composite
def secrets(draw: st.DrawFn) -> Secrets:
    # integers of 10 digits and more: SQLite's 4-, 6- and 8-byte classes, told apart
    ints = {slot: draw(st.integers(10**9, 2**63 - 1)) for slot in INT_SLOTS}
    # a real of 7 to 9 digits before the point, 2 to 4 after, the last not 0
    whole, fraction = draw(st.integers(10**6, 10**9 - 1)), draw(st.integers(10, 9999).filter(lambda f: f % 10))
    return Secrets(
        texts={slot: draw(secret_text()) for slot in TEXT_SLOTS},
        ints=ints,
        huge=str(draw(st.integers(10**19, 10**40))),
        real=f"{whole}.{fraction}",
        blobs={slot: draw(st.binary(min_size=8, max_size=24)) for slot in ("insert", "bound", "ctas")},
        comments=[draw(core) for _ in range(4)],
        argv="SECRET_ARGV_password=" + draw(core),
    )


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def sql_dq(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def statements(s: Secrets) -> list[tuple[str, list[object]]]:
    """The program's statements, a secret in each place SQL takes a literal."""
    t = {slot: text for slot, (_, text) in s.texts.items()}
    i, c = s.ints, s.comments
    return [
        (
            f"CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, n INTEGER, r REAL, b BLOB, "
            f"d TEXT DEFAULT {sql_string(t['default'])} /* {c[0]} */)",
            [],
        ),
        ("CREATE TABLE u(id INTEGER PRIMARY KEY, w TEXT, m INTEGER)", []),
        (
            f"CREATE TRIGGER tr AFTER INSERT ON t BEGIN "
            f"INSERT INTO u(w, m) VALUES({sql_string(t['trigger'])}, {i['trigger']}); END",
            [],
        ),
        (
            f"INSERT INTO t(k, n, r, b) VALUES({sql_string(t['insert'])}, {i['insert']}, {s.real}, "
            f"x'{s.blobs['insert'].hex()}') -- {c[1]}",
            [],
        ),
        (f"INSERT INTO t(k, n) VALUES({sql_dq(t['dq'])}, {s.huge})", []),
        (
            "INSERT INTO t(k, n, r, b) VALUES(?, ?, ?, ?)",
            [t["bound"], i["bound"], 0.5, {"blob": s.blobs["bound"].hex()}],
        ),
        (
            f"UPDATE t SET k = {sql_string(t['update'])}, n = {i['update']} "
            f"WHERE k = {sql_string(t['insert'])} AND n = {i['insert']}",
            [],
        ),
        ("UPDATE t SET r = 2.5 WHERE id = 2", []),  # a key SQLite chose: the replay must find its row
        (
            f"INSERT INTO u(w, m) SELECT t.k, t.n FROM t JOIN u ON u.w = {sql_string(t['trigger'])} "
            f"WHERE t.k = {sql_dq(t['dq'])} OR t.n = {i['bound']} LIMIT {i['limit']}",
            [],
        ),
        (
            f"CREATE TABLE c AS SELECT {sql_string(t['ctas'])} AS v, {i['ctas']} AS z, x'{s.blobs['ctas'].hex()}' AS bb",
            [],
        ),
        (f"CREATE VIEW vw AS SELECT k FROM t WHERE k != {sql_string(t['view'])} /* {c[2]} */", []),
        (f"CREATE INDEX ix ON t(k) WHERE n != {i['index']}", []),
        (f"DELETE FROM u WHERE w = {sql_string(t['on'])} OR m = {i['where']} -- {c[3]}", []),
        (f"SELECT * FROM vw JOIN c ON c.v = {sql_string(t['on'])}", []),
    ]


def record(tmp: Path, s: Secrets, *extra: str) -> tuple[Path, Path]:
    """Runs the program under `sqlwa record --redact`: (the log, the program's database)."""
    (tmp / "statements.json").write_text(json.dumps(statements(s)))
    (tmp / "prog.py").write_text(PROGRAM)
    log, db = tmp / "log.jsonl", tmp / "app.db"
    argv = [sys.executable, str(tmp / "prog.py"), str(tmp / "statements.json"), str(db), s.argv]
    done = subprocess.run(
        [sys.executable, "-m", "sqlwa", "record", "--redact", *extra, "--out", str(log), "--", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
    )
    assert done.returncode == 0, done.stderr
    return log, db


def storage(db: Path) -> dict[str, tuple[int, int, int, int]]:
    """SQLite's own account of each table and index: record bytes, free bytes, cells, pages."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT name, sum(payload), sum(unused), sum(ncell), count(*) FROM dbstat GROUP BY name"
        ).fetchall()
    finally:
        conn.close()
    return {name: (payload, unused, cells, pages) for name, payload, unused, cells, pages in rows}


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(s=secrets())
def test_a_redacted_log_holds_no_secret_and_replays_to_the_same_bytes(tmp_path_factory, s: Secrets) -> None:
    tmp = tmp_path_factory.mktemp("redact")
    log, db = record(tmp, s)
    raw = log.read_bytes()
    found = [marker for marker in s.markers() if marker.encode() in raw]
    assert not found, found
    header = json.loads(raw.split(b"\n", 1)[0])
    assert header["redacted"] is True and header["program"] is None
    replayed = replay(log, tmp / "replay")
    (copy,) = replayed.values()
    assert storage(copy) == storage(db)
    assert copy.stat().st_size == db.stat().st_size
    assert dump(copy) != dump(db)


def test_keep_argv_keeps_the_command_line(tmp_path: Path) -> None:
    s = Secrets(
        texts={slot: ("Qsecret", "Qsecret") for slot in TEXT_SLOTS},
        ints={slot: 1234567890 for slot in INT_SLOTS},
        huge="1" * 20,
        real="1234567.25",
        blobs={slot: b"12345678" for slot in ("insert", "bound", "ctas")},
        comments=["Qcomment"] * 4,
        argv="SECRET_ARGV_password=hunter2",
    )
    log, _ = record(tmp_path, s, "--keep-argv")
    header = json.loads(log.read_text().split("\n", 1)[0])
    assert header["program"][-1] == s.argv
