"""A SQL log nobody here wrote cannot reach past its run (#43, item 1).

A log is a file people pass around (a bug report, a CI artifact) and sqlwa runs as root,
so each case replays a hostile log through the real ``sqlwa`` process (``run -s``,
``matrix -s --vfs-only``, a logcat converted by ``record --from``) with a victim database
beside the run (in ``--dir``, next to the run's own directory) and one in a directory of
its own, and checks what a user would, against independent truth:

- the victims' bytes (SHA-256) before and after;
- every path the process opened, created, renamed or removed, as the kernel saw it
  (``strace -f``): none in the victims' directories, in the directory a PRAGMA points
  SQLite's temporary files at (they are unlinked at once, or O_TMPFILE: invisible to a
  listing), nor any file named ESCAPED;
- the syncs the process made (fsync, fdatasync): under ``-j delete --sync full`` each
  commit makes four (docs/reference/sqlite-commit-syncs.md, the journal's directory
  included), whatever the log's own PRAGMAs;
- one line on stderr and exit 2 when the run refuses, never a traceback.

The generated case draws every way SQLite lets a statement name another file or change
the run's settings (hostile_statements.py: ATTACH spellings, VACUUM INTO, load_extension,
PRAGMA names quoted, bracketed, backticked, single-quoted or with a schema, comments
between tokens, after a harmless PRAGMA in one batch). Its examples are the same every
run (conftest.py's profile "ci").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hostile_statements import batches
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

HEADER = {
    "sqlwa_sql_log": 1,
    "source": "record",
    "program": ["app"],
    "sqlite_version": None,
    "started_unix_ns": None,
    "timed": False,
    "redacted": False,
}
APP_DB = "/data/user/0/com.example/databases/app.db"
#: DELETE/FULL's syncs a commit at the syscall level: the journal twice, its directory, the database
SYNCS_A_COMMIT = 4
INSERTS = 4
TRACED = "openat,open,creat,truncate,unlink,unlinkat,rename,renameat,renameat2,mkdir,mkdirat,fsync,fdatasync"
EXAMPLES = int(os.environ.get("SQLWA_HOSTILE_EXAMPLES", "12"))


@dataclass
class World:
    """A victim beside the run and one outside it, and where the run goes."""

    tmp: Path
    runs: Path = field(init=False)  # --dir: the run's directory is made in it
    beside: Path = field(init=False)
    outside: Path = field(init=False)
    temp_target: Path = field(init=False)  # a directory a PRAGMA points temporary files at
    sums: dict[Path, str] = field(init=False)

    def __post_init__(self) -> None:
        self.runs = self.tmp / "runs"
        elsewhere, self.temp_target = self.tmp / "elsewhere", self.tmp / "tempdir"
        for d in (self.runs, elsewhere, self.temp_target):
            d.mkdir()
        self.beside, self.outside = self.runs / "victim.db", elsewhere / "victim.db"
        for db in (self.beside, self.outside):
            with sqlite3.connect(db) as conn:
                conn.execute("CREATE TABLE secrets (s TEXT)")
                conn.execute("INSERT INTO secrets VALUES ('hunter2')")
            conn.close()
        self.sums = {db: sha256(db) for db in (self.beside, self.outside)}

    def forbidden(self, path: str) -> bool:
        """Whether the run had no business with ``path``: a victim's directory, the
        temporary files' target, a file next to the run's own directory, an ESCAPED file."""
        p = Path(path)
        return (
            "ESCAPED" in path
            or p.is_relative_to(self.outside.parent)
            or p.is_relative_to(self.temp_target)
            or (p.parent == self.runs and not p.name.startswith("sqlwa-run-"))
        )

    def check_victims(self) -> None:
        assert {db: sha256(db) for db in self.sums} == self.sums, "a victim database changed"
        assert not list(self.tmp.rglob("ESCAPED*")), "a file was written outside the run"
        assert list(self.temp_target.iterdir()) == []


@dataclass
class Traced:
    proc: subprocess.CompletedProcess
    paths: list[str]
    syncs: int

    def summary(self, out: Path) -> dict:
        assert self.proc.returncode == 0, self.proc.stderr
        return json.loads((out / "summary.json").read_text())

    def one_line_refusal(self) -> str:
        assert self.proc.returncode == 2, (self.proc.stdout, self.proc.stderr)
        assert "Traceback" not in self.proc.stderr
        errors = [line for line in self.proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
        assert len(errors) == 1, self.proc.stderr
        return errors[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_log(path: Path, sqls: list[str]) -> Path:
    events = [{"ev": "open", "conn": 1, "db": APP_DB}] + [{"ev": "sql", "conn": 1, "sql": s} for s in sqls]
    path.write_text("\n".join(json.dumps(e) for e in [HEADER, *events]) + "\n")
    return path


def hostile_log(path: Path, hostile: str) -> Path:
    """A table, the hostile event, statements that make SQLite use temporary files (a
    temp table spilled from a tiny cache), then INSERTS single-row commits."""
    temp_files = [
        "PRAGMA temp_store=FILE",
        "PRAGMA temp.cache_size=2",
        "CREATE TEMP TABLE big (x)",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000) "
        "INSERT INTO big SELECT randomblob(200) FROM n",
    ]
    inserts = [f"INSERT INTO t VALUES ('row {i}')" for i in range(INSERTS)]
    return write_log(path, ["CREATE TABLE t (v TEXT)", hostile, *temp_files, *inserts])


def traced_sqlwa(world: World, *args: str) -> Traced:
    """``sqlwa ARGS`` under strace: the paths it touched and the syncs it made."""
    trace = world.tmp / f"strace-{len(list(world.tmp.glob('strace-*')))}.txt"
    command = ["strace", "-f", "-qq", "-s", "4096", "-e", f"trace={TRACED}", "-o", str(trace)]
    command += [sys.executable, "-m", "sqlwa", *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    text = trace.read_text(errors="replace")
    trace.unlink()
    paths = re.findall(r'"(/[^"]*)"', text)
    syncs = len(re.findall(r"\b(?:fsync|fdatasync)\(", text))
    return Traced(proc, paths, syncs)


def run_log(world: World, log: Path, out: Path, *extra: str) -> Traced:
    args = ["run", "-s", str(log), "-j", "delete", "--sync", "full", "--timing", "back-to-back"]
    return traced_sqlwa(world, *args, "--dir", str(world.runs), "--out", str(out), *extra)


def check_confined(world: World, traced: Traced) -> None:
    """Nothing outside the run was touched, whatever the command's outcome."""
    world.check_victims()
    assert not [p for p in traced.paths if world.forbidden(p)], "paths outside the run were opened"


def check_settings_held(traced: Traced, out: Path) -> dict:
    """The run measured the DELETE/FULL its summary states, as the kernel saw its syncs."""
    summary = traced.summary(out)
    config = summary["config"]
    assert (config["journal"], config["sync"]) == ("delete", "full")
    assert (config["pragmas"]["journal_mode"], config["pragmas"]["synchronous"]) == ("delete", "2")
    assert traced.syncs >= SYNCS_A_COMMIT * (INSERTS + 1), traced.syncs  # the CREATE and the inserts
    return summary


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# ------------------------------------------------------------------ the cases


@pytest.mark.parametrize("where", ["beside", "outside"])
@pytest.mark.parametrize(
    "then",
    ["PRAGMA user_version=2; DELETE FROM e.secrets", "PRAGMA cache_size=10; INSERT INTO t SELECT * FROM e.secrets"],
    ids=["delete", "insert-select"],
)
def test_a_batch_after_a_pragma_cannot_attach_a_foreign_database(world: World, where: str, then: str) -> None:
    victim = getattr(world, where)
    log = write_log(
        world.tmp / "app.sqllog",
        [
            "CREATE TABLE t (v TEXT)",
            f"PRAGMA user_version=1; ATTACH '{victim}' AS e",
            then,
            "INSERT INTO t VALUES ('own')",
        ],
    )
    out = world.tmp / "out"
    traced = run_log(world, log, out, "--keep-db")
    check_confined(world, traced)
    replay = traced.summary(out)["config"]["replay"]
    assert replay["failed"]["refused"] == 1
    assert replay["first_failures"][0]["line"] == 4
    (db,) = world.runs.glob("sqlwa-run-*/app.db")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT v FROM t").fetchall() == [("own",)], "no foreign row came in"
    conn.close()


def logcat(path: Path, sqls: list[str]) -> Path:
    """Android's statement log as ``adb logcat`` (threadtime) prints it."""
    lines = [f'11-28 07:00:0{i}.000  4100  4107 V SQLiteStatements: {APP_DB}: "{sql}"' for i, sql in enumerate(sqls)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("command", ["run", "matrix", "record --from logcat"])
def test_vacuum_into_after_a_pragma_writes_nothing_outside(world: World, command: str) -> None:
    escaped = world.outside.parent / "ESCAPED.db"
    sqls = ["CREATE TABLE t (v TEXT)", f"PRAGMA cache_size=10; VACUUM INTO '{escaped}'", "INSERT INTO t VALUES (1)"]
    out = world.tmp / "out"
    if command == "matrix":
        log = write_log(world.tmp / "app.sqllog", sqls)
        args = ["matrix", "-s", str(log), "--vfs-only", "-j", "delete", "--sync", "full", "--timing", "back-to-back"]
        traced = traced_sqlwa(world, *args, "-o", str(out))
        assert traced.proc.returncode == 0, traced.proc.stderr
    else:
        if command == "run":
            log = write_log(world.tmp / "app.sqllog", sqls)
        else:
            log = world.tmp / "converted.jsonl"
            converted = traced_sqlwa(
                world, "record", "--from", str(logcat(world.tmp / "logcat.txt", sqls)), "--out", str(log)
            )
            assert converted.proc.returncode == 0, converted.proc.stderr
        traced = run_log(world, log, out)
        assert traced.summary(out)["config"]["replay"]["failed"] == {"refused": 1}
    check_confined(world, traced)


@pytest.mark.parametrize(
    "pragma",
    ['PRAGMA "synchronous"=OFF', 'PRAGMA "journal_mode"=OFF', 'PRAGMA main."journal_mode"=OFF; PRAGMA [synchronous]=0'],
)
def test_quoted_pragmas_cannot_change_what_the_run_measures(world: World, pragma: str) -> None:
    out = world.tmp / "out"
    traced = run_log(world, hostile_log(world.tmp / "app.sqllog", pragma), out)
    check_confined(world, traced)
    replay = check_settings_held(traced, out)["config"]["replay"]
    listed = [p for p in replay["pragmas"] if "journal_mode" in p["statement"] or "synchronous" in p["statement"]]
    assert {p["action"] for p in listed} == {"overridden"}, listed


@pytest.mark.parametrize(
    "spelling", ['"temp_store_directory"', "[temp_store_directory]", "main.`temp_store_directory`"]
)
def test_temporary_files_stay_out_of_a_directory_a_quoted_pragma_names(world: World, spelling: str) -> None:
    out = world.tmp / "out"
    log = hostile_log(world.tmp / "app.sqllog", f"PRAGMA {spelling}='{world.temp_target}'")
    traced = run_log(world, log, out)
    check_confined(world, traced)
    assert traced.summary(out)["config"]["replay"]["failed"] == {"refused": 1}


def test_load_extension_after_a_pragma_is_refused(world: World) -> None:
    """(Extension loading was already off on main; this keeps it so in a batch.)"""
    library = world.outside.parent / "evil.so"
    library.write_bytes(b"")
    log = hostile_log(world.tmp / "app.sqllog", f"PRAGMA user_version=1; SELECT load_extension('{library}')")
    out = world.tmp / "out"
    traced = run_log(world, log, out)
    library.unlink()
    check_confined(world, traced)
    assert traced.summary(out)["config"]["replay"]["failed"] == {"refused": 1}


# ------------------------------------------------------------------ generated hostile statements

HOSTILE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking re-runs processes for minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@HOSTILE
@given(data=st.data())
@example(data=None)  # the issue's own case, below
def test_no_hostile_statement_reaches_another_file_or_changes_the_runs_settings(tmp_path_factory, data) -> None:
    world = World(tmp_path_factory.mktemp("hostile"))
    if data is None:
        hostile = f"PRAGMA user_version=1; ATTACH '{world.outside}' AS e; DELETE FROM e.secrets"
    else:
        hostile = data.draw(batches(world), label="hostile event")
    out = world.tmp / "out"
    traced = run_log(world, hostile_log(world.tmp / "app.sqllog", hostile), out)
    check_confined(world, traced)
    if traced.proc.returncode == 0:
        check_settings_held(traced, out)
    else:
        assert "line 4" in traced.one_line_refusal()  # the hostile event's
