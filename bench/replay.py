#!/usr/bin/env python3
"""Replay speed: a 10^5-statement SQL log replayed back to back on tmpfs by the engine,
against the `sqlite3` shell running the same statements from a .sql file, same PRAGMAs,
in one run (issue #34: the replay runs at least 0.7x the shell's rate).

The workload is app-like: transactions of a few inserts, an update and a read, with
autocommit reads between them. The replay's time is the whole of `sqlwa run`'s engine
part as `sqlwa run -s LOG` does it: checking the log (one streamed pass) and replaying it
(a second pass) through the counting VFS, with commit records, as a measurement does; the
shell's is the wall-clock of `sqlite3 DB < FILE`, a process start included (a few ms).
Each repetition runs both on fresh files in /dev/shm, alternating which goes first; the
figures are the medians.

Usage: .venv/bin/python bench/replay.py [--statements 100000] [--reps 3]
       [--journal wal] [--sync normal] [--shell /usr/bin/sqlite3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sqlwa.measure import engine

TARGET_RATIO = 0.7


def workload(statements: int) -> list[str]:
    """The statements: the schema (indexed, so no statement scans the table), then rounds of BEGIN, 5 inserts, an update, a read,
    COMMIT and an autocommit read (10 statements a round) until `statements`."""
    out = [
        "CREATE TABLE msg (id INTEGER PRIMARY KEY, chat INTEGER, body TEXT, seen INTEGER)",
        "CREATE INDEX msg_chat ON msg (chat, id)",
    ]
    i = 0
    while len(out) < statements:
        chat = i % 17
        out.append("BEGIN")
        for k in range(5):
            body = f"message {i}-{k} " + "x" * (60 + (i * 7 + k) % 80)
            out.append(f"INSERT INTO msg (chat, body, seen) VALUES ({chat}, '{body}', 0)")
        out.append(f"UPDATE msg SET seen = 1 WHERE chat = {chat} AND id > {max(0, 5 * i - 20)}")
        out.append(f"SELECT count(*) FROM msg WHERE chat = {chat} AND id > {max(0, 5 * i - 50)}")
        out.append("COMMIT")
        out.append(f"SELECT body FROM msg WHERE id = {5 * i + 1}")
        i += 1
    return out[:statements]


def write_inputs(work: Path, statements: list[str], pragmas: list[str]) -> tuple[Path, Path]:
    log = work / "bench.sqllog"
    header = {"sqlwa_sql_log": 1, "source": "sql-file", "timed": False, "redacted": False}
    with log.open("w") as f:
        f.write(json.dumps(header) + "\n")
        f.write(json.dumps({"ev": "open", "conn": 1, "db": "/bench/app.db"}) + "\n")
        for sql in statements:
            f.write(json.dumps({"ev": "sql", "conn": 1, "sql": sql}) + "\n")
    script = work / "bench.sql"
    script.write_text("".join(f"{p};\n" for p in pragmas) + "".join(f"{s};\n" for s in statements))
    return log, script


def replay_seconds(log: Path, run_dir: Path, journal: str, sync: str) -> float:
    started = time.perf_counter()
    workload_ = engine.load_scenario(str(log))
    settings = engine.RunSettings(journal=journal, sync=sync, replay=engine.Replay(timing="back-to-back"))
    result = engine.run_workload_raw(workload_, settings, run_dir)
    elapsed = time.perf_counter() - started
    failed = result["info"]["replay"]["failed"]
    assert not failed, failed
    return elapsed


def shell_seconds(shell: str, script: Path, db: Path) -> float:
    started = time.perf_counter()
    with script.open() as stdin:
        subprocess.run([shell, "-bail", str(db)], stdin=stdin, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--journal", default="wal")
    parser.add_argument("--sync", default="normal")
    parser.add_argument("--shell", default="/usr/bin/sqlite3")
    args = parser.parse_args()
    statements = workload(args.statements)
    pragmas = [f"PRAGMA journal_mode={args.journal}", f"PRAGMA synchronous={args.sync}"]
    shell_version = subprocess.run([args.shell, "--version"], capture_output=True, text=True).stdout.split()[0]
    replay_s, shell_s = [], []
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="sqlwa-bench-replay-") as tmp:
        work = Path(tmp)
        log, script = write_inputs(work, statements, pragmas)
        for rep in range(args.reps):
            for side in ("replay", "shell") if rep % 2 == 0 else ("shell", "replay"):
                if side == "replay":
                    replay_s.append(replay_seconds(log, work / f"replay-{rep}", args.journal, args.sync))
                else:
                    shell_s.append(shell_seconds(args.shell, script, work / f"shell-{rep}.db"))
    n = len(statements)
    replay_rate, shell_rate = n / statistics.median(replay_s), n / statistics.median(shell_s)
    ratio = replay_rate / shell_rate
    print(f"{n} statements, {args.journal}/{args.sync}, tmpfs, median of {args.reps}")
    print(f"  sqlwa replay (check + replay, counting VFS): {replay_rate:10.0f} statements/s")
    print(f"  sqlite3 shell {shell_version:>8} from a .sql file:     {shell_rate:10.0f} statements/s")
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(f"  ratio {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target)")


if __name__ == "__main__":
    main()
