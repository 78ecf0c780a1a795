#!/usr/bin/env python3
"""How long the ``sqlwa`` command takes to start, against the interpreter's own start-up.

Times, each as the median wall time of N runs (the runs of all commands interleaved, in
rotated order, so a burst of load on a shared machine falls on all of them alike):
  * ``python -c pass``                 the interpreter alone (the baseline)
  * ``python -c "import click"``       the floor of any click command line
  * ``python -c "import sqlwa"``       the package
  * ``sqlwa --help``, ``sqlwa parse --help``, ``sqlwa run --help``   the command line
and prints each one's ratio to the baseline. The target (issue #35) is ``sqlwa --help``
under 150 ms: PASS or FAIL says whether this run met it.

The interpreter is this one (run the script with the venv's python); ``sqlwa`` is the
console script beside it, so PYTHONPATH chooses the source tree as it does for the user.

Usage: bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_MS = 150.0
BASELINE = "python -c pass"


def sqlwa_script() -> str:
    """The ``sqlwa`` console script of this interpreter's environment."""
    beside = Path(sys.executable).with_name("sqlwa")
    found = str(beside) if beside.exists() else shutil.which("sqlwa")
    if found is None:
        sys.exit(f"{sys.argv[0]}: no sqlwa console script beside this python or on PATH; run scripts/setup")
    return found


def commands() -> dict[str, list[str]]:
    sqlwa = sqlwa_script()
    return {
        BASELINE: [sys.executable, "-c", "pass"],
        'python -c "import click"': [sys.executable, "-c", "import click"],
        'python -c "import sqlwa"': [sys.executable, "-c", "import sqlwa"],
        "sqlwa --help": [sqlwa, "--help"],
        "sqlwa parse --help": [sqlwa, "parse", "--help"],
        "sqlwa run --help": [sqlwa, "run", "--help"],
    }


def wall_time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(cmds: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """Wall times per command; round r starts at command r (mod count)."""
    names = list(cmds)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # once each, unmeasured: the page cache holds every file afterwards
        wall_time(cmds[name])
    for r in range(runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(wall_time(cmds[name]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (default 21)")
    args = parser.parse_args()
    times = measure(commands(), args.runs)
    base = statistics.median(times[BASELINE])
    print(f"{args.runs} runs each, {sys.executable}")
    print(f"{'command':28} {'median ms':>10} {'min ms':>8} {'× pass':>7}")
    for name, walls in times.items():
        median = statistics.median(walls)
        print(f"{name:28} {median * 1e3:10.1f} {min(walls) * 1e3:8.1f} {median / base:7.2f}")
    help_ms = statistics.median(times["sqlwa --help"]) * 1e3
    verdict = "PASS" if help_ms < TARGET_MS else "FAIL"
    print(f"{verdict}: sqlwa --help takes {help_ms:.0f} ms (target < {TARGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()
