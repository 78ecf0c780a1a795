"""Memory of reading a long SQL log: a format-1 log of N events (default 10^7) validated
line by line (sqlwa.record.validate), and a .sql file of N statements converted to
format 1 (sqlwa.record.convert). Prints each step's time and the process's peak RSS
after it (getrusage's ru_maxrss: the most the process ever held), which stays flat when
reading streams. The files are written in a temporary directory and removed.

    python bench/sql_log_stream.py            # 10^7 lines
    python bench/sql_log_stream.py -n 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from sqlwa.record import convert, validate

HEADER = {
    "sqlwa_sql_log": 1,
    "source": "record",
    "program": ["bench"],
    "sqlite_version": "3.40.1",
    "started_unix_ns": 0,
    "timed": True,
    "redacted": False,
}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def statement(i: int) -> str:
    """A transaction of three statements, over and over: BEGIN, an INSERT, COMMIT."""
    kind = i % 3
    if kind == 0:
        return "BEGIN"
    if kind == 1:
        return f"INSERT INTO notes(id, body) VALUES({i}, 'note {i} with some text; and a semicolon')"
    return "COMMIT"


def write_log(path: Path, n: int) -> None:
    with open(path, "w") as f:
        f.write(json.dumps(HEADER) + "\n")
        f.write(json.dumps({"ev": "open", "conn": 1, "db": "/tmp/app.db", "t": 0}) + "\n")
        for i in range(n - 2):
            event = {"ev": "sql", "conn": 1, "t": 1000 * (i + 1), "sql": statement(i), "trigger": False, "dur": 900}
            f.write(json.dumps(event) + "\n")
        f.write(json.dumps({"ev": "close", "conn": 1, "t": 1000 * n}) + "\n")


def write_sql(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            f.write(statement(i) + ";\n")


def step(label: str, work) -> None:
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    print(f"{label:<34} {seconds:8.1f} s   peak RSS so far {peak_rss_mib():7.1f} MiB   {result}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000_000, help="lines (events or statements)")
    args = parser.parse_args()
    print(f"peak RSS at start: {peak_rss_mib():.1f} MiB")
    with tempfile.TemporaryDirectory(prefix="sqlwa-bench-") as tmp:
        log, sql, out = Path(tmp) / "big.jsonl", Path(tmp) / "big.sql", Path(tmp) / "out.jsonl"
        step(f"write a {args.n:,}-line log", lambda: f"{write_log(log, args.n) or log.stat().st_size / 2**20:.0f} MiB")
        step("validate it (streamed)", lambda: f"{validate(log)[1]:,} events")
        log.unlink()
        step(
            f"write a {args.n:,}-statement .sql",
            lambda: f"{write_sql(sql, args.n) or sql.stat().st_size / 2**20:.0f} MiB",
        )

        def to_log() -> str:
            with open(out, "wb") as f:
                return f"{convert(sql, f).counts['sql']:,} statements"

        step("convert it to format 1 (streamed)", to_log)


if __name__ == "__main__":
    main()
