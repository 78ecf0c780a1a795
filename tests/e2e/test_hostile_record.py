"""`sqlwa record -- PROGRAM` must never lose or destroy the user's data (issue #43, item 3).

Each recorded program here is a real Python program; what it did is read back from the
kernel (/proc/PID/status, process liveness), from SQLite (its own database, opened with
Python's sqlite3 module) and from the files on disk, never from sqlwa's own earlier
output. Waits are on conditions with deadlines, so the signal tests hold on a loaded
machine."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import re
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sql_log_truth import dump, log_events, payload_by_table, replay

from helpers import have_record_preload

pytestmark = pytest.mark.skipif(not have_record_preload(), reason="run ./scripts/setup (it builds record-preload/)")

#: Long enough for a loaded 2-core machine; a condition met earlier ends the wait at once.
DEADLINE_S = 60.0


def wait_for(condition: Callable[[], object], what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s:g} s: {what}")
        time.sleep(0.02)


def sqlwa_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "sqlwa", *args]


def own_env(tmp_path: Path) -> dict[str, str]:
    """The environment for sqlwa: its temp dir (where the spool goes) private to the test."""
    spool_base = tmp_path / "tmp"
    spool_base.mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(spool_base))


def sqlwa(*args: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(sqlwa_argv(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def spools(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("sqlwa-record-*"))


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie, as the kernel says (/proc/PID/stat's state)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def kill_if_alive(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- a) signals ---------------------------------------------------------------------------

# Says how it started (its signal dispositions, mask and what Python made of SIGINT), then
# inserts rows until stopped; a Ctrl-C is counted, and the program waits a moment for a
# second one (a Ctrl-C delivered twice would show here) before it ends by it.
STOPPABLE = """\
import json, os, signal, sqlite3, sys, time
report, db = sys.argv[1], sys.argv[2]
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
started = {k: status[k].strip() for k in ("SigIgn", "SigBlk")}
started["python_sigint"] = repr(signal.getsignal(signal.SIGINT))
started["pid"] = os.getpid()
json.dump(started, open(report + ".tmp", "w")); os.rename(report + ".tmp", report)
got = []
def count(signum, frame):
    got.append(signum)
if len(sys.argv) > 3:
    signal.signal(signal.SIGINT, count); signal.signal(signal.SIGTERM, count)
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("CREATE TABLE IF NOT EXISTS t(i INTEGER PRIMARY KEY, v TEXT)")
i = 0
while not got:
    conn.execute("INSERT INTO t(v) VALUES (?)", (f"row {i}",))
    i += 1
    if i == 50:
        open(report + ".ready", "w").close()
end = time.monotonic() + 1.0
while time.monotonic() < end:
    time.sleep(0.05)
json.dump([signal.Signals(s).name for s in got], open(report + ".got", "w"))
conn.close()
signal.signal(got[0], signal.SIG_DFL)
os.kill(os.getpid(), got[0])
"""

SIGINT_DISPOSITION_ONLY = "import json, signal, sys; print(repr(signal.getsignal(signal.SIGINT)))"


def in_a_terminal(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, int]:
    """``argv`` as the foreground job of a new pseudo-terminal: (pid, the terminal's master)."""
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    return pid, master


def read_terminal(master: int, pid: int, deadline_s: float = DEADLINE_S) -> tuple[str, int]:
    """Everything the terminal showed until ``pid`` ended, and its exit status."""
    out, end = b"", time.monotonic() + deadline_s
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every process of the terminal has closed it
                chunk = b""
            out += chunk
            if chunk:
                continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return out.decode(errors="replace"), os.waitstatus_to_exitcode(status)
    kill_if_alive(pid)
    os.waitpid(pid, 0)
    raise AssertionError(f"not ended within {deadline_s:g} s; it said: {out!r}")


def started_as(report: Path) -> dict:
    wait_for(report.exists, f"{report} written by the program")
    return json.loads(report.read_text())


def test_ctrl_c_in_the_terminal_reaches_the_program_once_and_the_recording_is_kept(tmp_path: Path) -> None:
    prog, db, log = tmp_path / "app.py", tmp_path / "app.db", tmp_path / "log.jsonl"
    prog.write_text(STOPPABLE)
    env = own_env(tmp_path)
    # the same program without sqlwa, from the same kind of terminal: how it would start
    direct = tmp_path / "direct.json"
    pid, master = in_a_terminal([sys.executable, str(prog), str(direct), str(tmp_path / "d.db")], tmp_path, env)
    try:
        wait_for((tmp_path / "direct.json.ready").exists, "the direct run inserting rows")
        os.write(master, b"\x03")
        read_terminal(master, pid)
    finally:
        kill_if_alive(pid)
        os.close(master)
    report = tmp_path / "recorded.json"
    argv = sqlwa_argv("record", "--out", str(log), "--", sys.executable, str(prog), str(report), str(db), "count")
    pid, master = in_a_terminal(argv, tmp_path, env)
    program_pid = None
    try:
        program_pid = started_as(report)["pid"]
        wait_for((tmp_path / "recorded.json.ready").exists, "the recorded program inserting rows")
        os.write(master, b"\x03")  # Ctrl-C: the terminal sends SIGINT to its foreground job
        said, code = read_terminal(master, pid)
    finally:
        kill_if_alive(pid)
        if program_pid:
            kill_if_alive(program_pid)
        os.close(master)
    recorded, without = json.loads(report.read_text()), json.loads(direct.read_text())
    for key in ("SigIgn", "SigBlk", "python_sigint"):
        assert recorded[key] == without[key], key
    assert json.loads((tmp_path / "recorded.json.got").read_text()) == ["SIGINT"]  # once, from the terminal
    assert code == 130, said
    assert "interrupted" in said and "Traceback" not in said
    assert json.loads(log.read_text().splitlines()[0])["interrupted"] == "SIGINT"
    # every row the program stored is in the log: a replay rebuilds its database
    (replayed,) = replay(log, tmp_path / "replay").values()
    assert dump(replayed) == dump(db)
    assert len(dump(db)) > 50


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sent_to_record_is_passed_on_and_the_recording_is_kept(tmp_path: Path, signum: int) -> None:
    prog, db, log, report = tmp_path / "app.py", tmp_path / "app.db", tmp_path / "log.jsonl", tmp_path / "r.json"
    prog.write_text(STOPPABLE)
    argv = sqlwa_argv("record", "--out", str(log), "--", sys.executable, str(prog), str(report), str(db), "count")
    proc = subprocess.Popen(argv, cwd=tmp_path, env=own_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    program_pid = None
    try:
        program_pid = started_as(report)["pid"]
        wait_for((tmp_path / "r.json.ready").exists, "the recorded program inserting rows")
        proc.send_signal(signum)  # to sqlwa alone, as a service manager or `kill` sends it
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.wait()
        if program_pid:
            kill_if_alive(program_pid)
    name = signal.Signals(signum).name
    assert json.loads((tmp_path / "r.json.got").read_text()) == [name]
    assert proc.returncode == 128 + signum, err
    assert b"interrupted" in err and b"Traceback" not in err
    assert json.loads(log.read_text().splitlines()[0])["interrupted"] == name
    (replayed,) = replay(log, tmp_path / "replay").values()
    assert dump(replayed) == dump(db)


# --- b) fork in a threaded program ---------------------------------------------------------

# Threads run statements with large values (so the recording is busy) while the main
# thread forks children that each touch an idle connection's trace hook and leave; a
# child that has not ended within its deadline is deadlocked. Without the preload this
# program never deadlocks (the child takes no lock a thread may hold: only the idle
# connection's own mutex).
FORKING = """\
import os, sqlite3, sys, threading, time
children, out = int(sys.argv[1]), sys.argv[2]
idle = sqlite3.connect(":memory:")
stop = threading.Event()
def busy():
    conn = sqlite3.connect(":memory:")
    big = "x" * 200_000
    while not stop.is_set():
        conn.execute("SELECT length(?)", (big,)).fetchone()
threads = [threading.Thread(target=busy) for _ in range(3)]
for t in threads: t.start()
stuck = 0
for n in range(children):
    pid = os.fork()
    if pid == 0:
        idle.set_trace_callback(None)
        os._exit(0)
    end = time.monotonic() + 10
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > end:
            os.kill(pid, 9); os.waitpid(pid, 0); stuck += 1
            break
        time.sleep(0.001)
    if stuck >= 3:
        break
stop.set()
for t in threads: t.join()
open(out, "w").write(f"{stuck} of {n + 1}")
"""


def test_forked_children_of_a_threaded_program_do_not_deadlock(tmp_path: Path) -> None:
    prog = tmp_path / "forking.py"
    prog.write_text(FORKING)
    alone = tmp_path / "alone.txt"
    subprocess.run([sys.executable, str(prog), "40", str(alone)], check=True, timeout=600)
    assert alone.read_text() == "0 of 40"  # the program itself is fork-safe
    recorded = tmp_path / "recorded.txt"
    done = sqlwa(
        "record", "--out", "log.jsonl", "--", sys.executable, str(prog), "40", str(recorded),
        cwd=tmp_path, env=own_env(tmp_path), timeout=600,
    )  # fmt: skip
    assert recorded.read_text() == "0 of 40", done.stderr
    assert done.returncode == 0, done.stderr


# --- c) --out over the user's files -----------------------------------------------------

APP_USING_ITS_DB = """\
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1] if len(sys.argv) > 1 else "app11.db")  # its own, named inside
conn.execute("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)")
conn.execute("INSERT INTO notes(body) VALUES ('precious')")
conn.commit()
"""


def test_out_naming_the_programs_own_database_keeps_the_database(tmp_path: Path) -> None:
    prog, db = tmp_path / "app.py", tmp_path / "app11.db"
    prog.write_text(APP_USING_ITS_DB)
    done = sqlwa("record", "--out", "app11.db", "--", sys.executable, str(prog), cwd=tmp_path, env=own_env(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT body FROM notes").fetchall() == [("precious",)]
    finally:
        conn.close()
    kept = re.search(r"kept in (\S+)", done.stderr)
    assert kept, done.stderr
    log = tmp_path / kept.group(1)
    assert log.parent == tmp_path and log != db
    (replayed,) = replay(log, tmp_path / "replay").values()
    assert dump(replayed) == dump(db)


def test_out_naming_the_programs_script_is_refused_before_it_runs(tmp_path: Path) -> None:
    prog = tmp_path / "prog12.py"
    prog.write_text(APP_USING_ITS_DB)
    before = sha(prog)
    done = sqlwa(
        "record", "--out", "prog12.py", "--", sys.executable, "prog12.py", "x.db", cwd=tmp_path, env=own_env(tmp_path)
    )
    assert done.returncode == 2
    assert "prog12.py" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 2  # the error and its fix
    assert sha(prog) == before
    assert not (tmp_path / "x.db").exists()  # the program did not run


def test_out_over_a_file_that_is_no_sql_log_is_refused_before_it_runs(tmp_path: Path) -> None:
    prog, notes = tmp_path / "app.py", tmp_path / "notes.jsonl"
    prog.write_text(APP_USING_ITS_DB)
    notes.write_text('{"my": "own data"}\n')
    before = sha(notes)
    done = sqlwa(
        "record", "--out", str(notes), "--", sys.executable, str(prog), "x.db", cwd=tmp_path, env=own_env(tmp_path)
    )
    assert done.returncode == 2
    assert "not a sqlwa SQL log" in done.stderr and "Traceback" not in done.stderr
    assert sha(notes) == before
    assert not (tmp_path / "x.db").exists()
    # a log sqlwa wrote may be replaced: the next recording goes over it
    old = tmp_path / "old.jsonl"
    first = sqlwa(
        "record", "--out", str(old), "--", sys.executable, str(prog), "a.db", cwd=tmp_path, env=own_env(tmp_path)
    )
    assert first.returncode == 0, first.stderr
    again = sqlwa(
        "record", "--out", str(old), "--", sys.executable, str(prog), "b.db", cwd=tmp_path, env=own_env(tmp_path)
    )
    assert again.returncode == 0, again.stderr
    assert {e["db"] for e in log_events(old) if e["ev"] == "open"} == {str(tmp_path / "b.db")}


# --- d) SIGKILL, and many processes ---------------------------------------------------------


def test_after_sigkill_the_program_dies_and_cleanup_removes_the_spool(tmp_path: Path) -> None:
    prog, db, report = tmp_path / "app.py", tmp_path / "app.db", tmp_path / "r.json"
    prog.write_text(STOPPABLE)
    env = own_env(tmp_path)
    argv = sqlwa_argv("record", "--out", "log.jsonl", "--", sys.executable, str(prog), str(report), str(db))
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    program_pid = None
    try:
        program_pid = started_as(report)["pid"]
        wait_for((tmp_path / "r.json.ready").exists, "the recorded program inserting rows")
        (spool,) = spools(tmp_path)
        assert stat.S_IMODE(spool.stat().st_mode) == 0o700
        proc.kill()
        proc.wait()
        wait_for(lambda: not pid_alive(program_pid), "the program dying with its recorder")
    finally:
        proc.kill()
        proc.wait()
        if program_pid:
            kill_if_alive(program_pid)
    assert spool.exists()  # left by the kill: private SQL, for cleanup to remove
    done = sqlwa("lab", "cleanup", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert f"removed {spool}" in done.stdout
    assert spools(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_cleanup_removes_the_part_a_dead_spool_names_and_nothing_else(tmp_path: Path) -> None:
    """A killed recorder's spool names the ``.part`` of the log it was writing; the program
    could write that note too, so only a file that still is such a part goes with it."""
    from sqlwa.record import spool

    env = own_env(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid nobody has now
    part = tmp_path / ".log.jsonl.0123456789ab.part"
    part.write_text('{"sqlwa_sql_log": 1, "source": "record"')
    victim = tmp_path / ".notes.txt.0123456789ab.part"  # named like one, but the user's
    victim.write_text("a user's own text\n")
    for token, named in (("a", part), ("b", victim), ("c", tmp_path / "app.py")):
        directory = tmp_path / "tmp" / f"sqlwa-record-{dead.pid}-{token}"
        directory.mkdir(mode=0o700)
        (directory / spool.MARK).write_text(spool.MARK_TEXT)
        (directory / spool.PART_NOTE).write_text(str(named))
    (tmp_path / "app.py").write_text("print('mine')\n")
    done = sqlwa("lab", "cleanup", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert not part.exists() and f"removed {part}" in done.stdout
    assert victim.read_text() == "a user's own text\n"
    assert (tmp_path / "app.py").read_text() == "print('mine')\n"
    assert spools(tmp_path) == []


MANY_CHILDREN = """\
import os, sqlite3, sys
children, db = int(sys.argv[1]), sys.argv[2]
setup = sqlite3.connect(db)
setup.execute("CREATE TABLE t(n INTEGER)")
setup.close()
for n in range(children):
    pid = os.fork()
    if pid == 0:
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("INSERT INTO t VALUES (?)", (n,))
        conn.close()
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_more_children_than_open_files_allowed_are_all_recorded(tmp_path: Path) -> None:
    prog, db, log = tmp_path / "many.py", tmp_path / "many.db", tmp_path / "log.jsonl"
    prog.write_text(MANY_CHILDREN)
    argv = [
        "prlimit",
        "--nofile=1024",
        *sqlwa_argv("record", "--out", str(log), "--", sys.executable, str(prog), "1500", str(db)),
    ]
    done = subprocess.run(argv, cwd=tmp_path, env=own_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(db)
    try:
        stored = sorted(n for (n,) in conn.execute("SELECT n FROM t"))
    finally:
        conn.close()
    assert stored == list(range(1500))
    inserted = [e for e in log_events(log) if e["ev"] == "sql" and e["sql"].startswith("INSERT INTO t")]
    assert sorted(int(re.search(r"\((\d+)\)", e["sql"]).group(1)) for e in inserted) == stored
    assert spools(tmp_path) == []


# --- e) a bound TEXT with a NUL --------------------------------------------------------------

NUL_TEXT = """\
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE t(k TEXT, v TEXT, n INTEGER)")
conn.execute("INSERT INTO t VALUES (?, ?, ?)", ("a\\0b", "it's\\0\\0 two\\0", 7))
conn.execute("INSERT INTO t VALUES (:k, -- a ? here\\n :v, 9)", {"k": "\\0lead", "v": "x '\\0"})
conn.execute("UPDATE t SET v = v || '?', n = n + 1 WHERE k = ?1 AND ?1 IS NOT NULL", ("a\\0b",))
"""


def as_stored(db: Path) -> list[tuple]:
    """Each row as SQLite holds it: every value's type and bytes."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT typeof(k), hex(k), typeof(v), hex(v), n FROM t ORDER BY rowid").fetchall()
    finally:
        conn.close()


def test_a_bound_text_with_a_nul_is_recorded_whole(tmp_path: Path) -> None:
    prog, db, log = tmp_path / "nul.py", tmp_path / "nul.db", tmp_path / "log.jsonl"
    prog.write_text(NUL_TEXT)
    done = sqlwa(
        "record", "--out", str(log), "--", sys.executable, str(prog), str(db), cwd=tmp_path, env=own_env(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    rows = as_stored(db)
    assert rows[0][1] == b"a\0b".hex().upper()  # the program stored the NUL
    (replayed,) = replay(log, tmp_path / "replay").values()
    assert as_stored(replayed) == rows


# --- f) untrusted spool and program files -----------------------------------------------------

SPOILS_THE_SPOOL = """\
import os, sqlite3, sys
spool = os.environ["SQLWA_RECORD_DIR"]
open(os.path.join(spool, "999999999.jsonl"), "w").write('garbage\\n{"ev": "sql"}\\n' + "[" * 100000 + "\\n")
open(os.path.join(spool, "notes.txt"), "w").write("not a spool file\\n")
os.mkfifo(os.path.join(spool, "888888888.jsonl"))
with open(os.path.join(spool, "%d.jsonl" % os.getpid()), "a") as own:
    own.write('{"ev":"sql","pid":1,"conn":"x","t":[],"seq":1,"sql":5,"trigger":false}\\n')
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE t(v)")
conn.execute("INSERT INTO t VALUES ('kept')")
conn.close()
"""


def test_garbage_in_the_spool_is_skipped_and_said(tmp_path: Path) -> None:
    prog, db, log = tmp_path / "spoil.py", tmp_path / "app.db", tmp_path / "log.jsonl"
    prog.write_text(SPOILS_THE_SPOOL)
    done = sqlwa(
        "record",
        "--out",
        str(log),
        "--",
        sys.executable,
        str(prog),
        str(db),
        cwd=tmp_path,
        env=own_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "skipped" in done.stderr
    # as the program wrote them: notes.txt and the FIFO; three lines of 999999999.jsonl
    # and one of its own file
    assert "skipped 2 files that are not the recording's" in done.stderr, done.stderr
    assert "and 4 lines that are no event of the recording" in done.stderr, done.stderr
    (replayed,) = replay(log, tmp_path / "replay").values()
    assert dump(replayed) == dump(db)
    assert spools(tmp_path) == []


def test_a_fifo_as_the_program_is_one_line_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "prog"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o755)
    started = time.monotonic()
    try:
        done = sqlwa("record", "--out", "log.jsonl", "--", str(fifo), cwd=tmp_path, env=own_env(tmp_path), timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("sqlwa record waited on the FIFO")
    assert time.monotonic() - started < 20
    assert done.returncode == 2
    assert "FIFO" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 2
    assert spools(tmp_path) == []


# Lines well formed as JSON and as the preload's events, but with what the preload never
# writes (push_json_string writes its text as UTF-8, lossily, and SQLite's names have no
# NUL): a lone surrogate, a NUL in a database's name, keys of its own, a statement on a
# connection after its close.
FOREIGN_LINES = [
    '{"ev":"open","pid":1,"conn":1,"t":1,"db":"\\ud800.db"}',
    '{"ev":"open","pid":1,"conn":2,"t":1,"db":"a\\u0000b.db"}',
    '{"ev":"open","pid":2,"conn":1,"t":1,"db":":memory:","secret":"s3cret-open"}',
    '{"ev":"sql","pid":2,"conn":1,"t":2,"seq":1,"sql":"SELECT \'\\udcff\'","trigger":false}',
    '{"ev":"sql","pid":2,"conn":1,"t":3,"seq":2,"sql":"SELECT 1","trigger":false,"secret":"s3cret-sql"}',
    '{"ev":"dur","pid":2,"conn":1,"seq":2,"dur":5,"secret":"s3cret-dur"}',
    '{"ev":"close","pid":2,"conn":1,"t":4}',
    '{"ev":"sql","pid":2,"conn":1,"t":5,"seq":3,"sql":"SELECT 2","trigger":false}',
]
WRITES_FOREIGN_LINES = """\
import os, sqlite3, sys
spool = os.environ["SQLWA_RECORD_DIR"]
with open(os.path.join(spool, "%d.jsonl" % os.getpid()), "a") as own:
    own.write(open(sys.argv[2]).read())
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE t(v)")
conn.execute("INSERT INTO t VALUES ('kept')")
conn.close()
"""


def format_1_errors(log: Path) -> list[str]:
    """What breaks docs/sql-log-format.md's rules, read here without sqlwa: UTF-8 JSON
    lines; events only on an open connection; no keys but the format's."""
    keys = {"ev", "conn", "t", "db", "sql", "dur", "trigger", "unexpanded"}
    errors, open_conns = [], set()
    for number, raw in enumerate(log.read_bytes().splitlines()[1:], start=2):
        event = json.loads(raw.decode("utf-8"))  # strict: a lone surrogate cannot be encoded
        if set(event) - keys:
            errors.append(f"{number}: keys {sorted(set(event) - keys)}")
        if event["ev"] == "open":
            open_conns.add(event["conn"])
        elif event["conn"] not in open_conns:
            errors.append(f"{number}: {event['ev']} on connection {event['conn']}, not open")
        elif event["ev"] == "close":
            open_conns.discard(event["conn"])
    return errors


@pytest.mark.parametrize("redact", [False, True])
def test_lines_the_preload_never_writes_are_left_out(tmp_path: Path, redact: bool) -> None:
    prog, db, log = tmp_path / "foreign.py", tmp_path / "app.db", tmp_path / "log.jsonl"
    prog.write_text(WRITES_FOREIGN_LINES)
    lines = tmp_path / "lines.jsonl"  # a file: the command line is in the log's header
    lines.write_text("".join(line + "\n" for line in FOREIGN_LINES))
    args = ["record", "--out", str(log), *(["--redact"] if redact else []), "--"]
    done = sqlwa(*args, sys.executable, str(prog), str(db), str(lines), cwd=tmp_path, env=own_env(tmp_path), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    # the two opens and the statement the preload could not have written
    assert "skipped 3 lines that are no event of the recording" in done.stderr, done.stderr
    assert b"s3cret" not in log.read_bytes()
    assert format_1_errors(log) == []
    sql = [e["sql"] for e in log_events(log) if e["ev"] == "sql"]
    assert "SELECT 2" not in sql  # ran after its connection's close
    (replayed,) = replay(log, tmp_path / "replay").values()
    if redact:  # other values, stored in as many bytes
        assert payload_by_table(replayed) == payload_by_table(db)
    else:
        assert dump(replayed) == dump(db)
    assert spools(tmp_path) == []


# The spool is the program's to write in: a name sqlwa writes there later may already be
# the program's link to a file of the user's.
PLANTS_A_LINK = """\
import os, sqlite3, sys
spool = os.environ["SQLWA_RECORD_DIR"]
os.symlink(sys.argv[2], os.path.join(spool, ".sqlwa-part"))
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE t(v)")
conn.close()
"""


def test_a_link_the_program_leaves_in_the_spool_is_not_written_through(tmp_path: Path) -> None:
    prog, db, log, victim = tmp_path / "link.py", tmp_path / "app.db", tmp_path / "log.jsonl", tmp_path / "mine.txt"
    prog.write_text(PLANTS_A_LINK)
    victim.write_text("the user's own text\n")
    done = sqlwa(
        "record", "--out", str(log), "--", sys.executable, str(prog), str(db), str(victim),
        cwd=tmp_path, env=own_env(tmp_path), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert victim.read_text() == "the user's own text\n"
    assert [e["sql"] for e in log_events(log) if e["ev"] == "sql"] == ["CREATE TABLE t(v)"]
    assert spools(tmp_path) == []
