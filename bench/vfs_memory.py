#!/usr/bin/env python3
"""Peak memory of VFS-only runs against their length (issues #34 and #37): the engine
hands its commit records over in chunks, written as they come, so a run ten times longer
must peak within 1.2x of the shorter one's RSS.

Two pairs, each command in its own process (peak RSS from wait4, the smallest of --runs):
  * ``sqlwa run -s mobibench-insert -n N`` (no --fs) at --txns and ten times as many;
  * ``sqlwa run -s LOG --timing back-to-back``: a generated SQL log (format 1) of
    --statements and ten times as many statements (transactions of a BEGIN, 8 INSERTs
    and a COMMIT: a tenth as many commits), replayed back to back.
Both in WAL mode, synchronous NORMAL: no sync per commit, so the runs are about the
engine and the tool, not the disk under --dir.
Prints each run's wall time, commits, peak RSS and the pair's ratio, PASS or FAIL.
Everything lives in a temporary directory under --dir (default /var/tmp), removed at the
end (a 10^7-statement log is ~1.5 GB).

Usage: bench/vfs_memory.py [--txns 1e5] [--statements 1e6] [--runs 1] [--dir DIR] [--only scenario|replay]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sql_log_stream import HEADER  # the generated log's header: a sibling script's
from startup import sqlwa_script  # a sibling script: bench/ is on sys.path when run

RSS_GROWTH = 1.2  # a run's peak RSS against one ten times shorter (issues #34, #37)
PER_TXN = 8  # INSERTs per transaction of the generated log


def write_log(path: Path, statements: int) -> None:
    """A log of about ``statements`` statements: a CREATE TABLE, then transactions."""
    with open(path, "w") as f:
        f.write(json.dumps(HEADER) + "\n")
        f.write(json.dumps({"ev": "open", "conn": 1, "db": "/data/app.db", "t": 0}) + "\n")
        t = 0

        def sql(text: str) -> None:
            nonlocal t
            t += 1000
            f.write(json.dumps({"ev": "sql", "conn": 1, "t": t, "sql": text, "trigger": False, "dur": 900}) + "\n")

        sql("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
        i = 0
        while i + PER_TXN + 2 <= statements - 1:
            sql("BEGIN")
            for _ in range(PER_TXN):
                sql(f"INSERT INTO notes(id, body) VALUES({i}, 'note {i} with some text')")
                i += 1
            sql("COMMIT")
            i += 2
        f.write(json.dumps({"ev": "close", "conn": 1, "t": t + 1000}) + "\n")


def run_measured(cmd: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS bytes of one process (its own rusage, from wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench/vfs_memory.py: {' '.join(cmd)} failed: {err.strip()[-500:]}")
    return wall, usage.ru_maxrss * 1024


def pair(label: str, commands: list[tuple[str, list[str]]], work: Path, runs: int) -> bool:
    """Runs the commands (short first) and says whether the long one's peak is bounded."""
    peaks = []
    for what, cmd in commands:
        out = work / "out"
        results = [run_measured([*cmd, "--out", str(out), "--dir", str(work)], work) for _ in range(runs)]
        wall, rss = min(w for w, _ in results), min(r for _, r in results)
        summary = json.loads((out / "summary.json").read_text())
        commits = summary["commits"] + summary["warmup_commits"]
        size = (out / "commits.parquet").stat().st_size
        print(
            f"{label:<8} {what:<24} {wall:8.1f} s {commits:>10,} commits {rss / 2**20:8.1f} MiB peak RSS"
            f"  commits.parquet {size / 2**20:6.1f} MiB",
            flush=True,
        )
        peaks.append(rss)
        for path in out.iterdir():
            path.unlink()
        out.rmdir()
    growth = peaks[-1] / peaks[0]
    met = growth <= RSS_GROWTH
    print(
        f"{label:<8} peak RSS, 10x longer: {growth:.2f}x (bounded: at most {RSS_GROWTH}x): {'PASS' if met else 'FAIL'}"
    )
    return met


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--txns", type=float, default=1e5, help="the shorter scenario run, in transactions")
    ap.add_argument("--statements", type=float, default=1e6, help="the shorter log, in statements")
    ap.add_argument("--runs", type=int, default=1, help="runs of each command; the smallest peak counts")
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where the runs and logs go")
    ap.add_argument("--only", choices=("scenario", "replay"), help="only the scenario runs, or only the replays")
    args = ap.parse_args()
    sqlwa = sqlwa_script()
    ok = True
    with tempfile.TemporaryDirectory(prefix="sqlwa-vfsmem-", dir=args.dir) as tmp:
        work = Path(tmp)
        n = int(args.txns)
        scenario = [sqlwa, "run", "-s", "mobibench-insert", "-j", "wal", "--sync", "normal"]
        if args.only != "replay":
            ok &= pair("scenario", [(f"-n {k:,}", [*scenario, "-n", str(k)]) for k in (n, 10 * n)], work, args.runs)
        if args.only != "scenario":
            s = int(args.statements)
            commands = []
            for k in (s, 10 * s):
                log = work / f"log{k}.jsonl"
                write_log(log, k)
                commands.append(
                    (
                        f"{k:,}-statement log",
                        [sqlwa, "run", "-s", str(log), "--timing", "back-to-back", "-j", "wal", "--sync", "normal"],
                    )
                )
            ok &= pair("replay", commands, work, args.runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
