#!/usr/bin/env python3
"""How long the ``sqlwa`` command takes to start, against the interpreter's own start-up.

Times, each as the median wall time of N runs (the runs of all commands interleaved, in
rotated order, so a burst of load on a shared machine falls on all of them alike):
  * ``python -c pass``                 the interpreter alone (the baseline)
  * ``python -c "import click"``       the floor of any click command line
  * ``python -c "import sqlwa"``       the package
  * ``sqlwa --help``, ``sqlwa parse --help``, ``sqlwa run --help``   the command line
  * ``sqlwa --help`` with an empty cache: the first time, when click renders it
and prints each one's ratio to the baseline. The target (issue #21) is ``sqlwa --help``
within 2x the baseline: PASS or FAIL says whether this run met it. sqlwa's cache is a
temporary directory of the benchmark's (XDG_CACHE_HOME), emptied before every cold run.

The interpreter is this one (run the script with the venv's python); ``sqlwa`` is the
console script beside it, so PYTHONPATH chooses the source tree as it does for the user.

Usage: bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 2.0
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
        COLD: [sqlwa, "--help"],
    }


COLD = "sqlwa --help, empty cache"


def wall_time(name: str, argv: list[str], cache: Path) -> float:
    if name == COLD:
        shutil.rmtree(cache / "sqlwa", ignore_errors=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def measure(cmds: dict[str, list[str]], runs: int, cache: Path) -> dict[str, list[float]]:
    """Wall times per command; round r starts at command r (mod count)."""
    names = list(cmds)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # once each, unmeasured: the page cache holds every file afterwards
        wall_time(name, cmds[name], cache)
    for r in range(runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(wall_time(name, cmds[name], cache))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (default 21)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sqlwa-startup-") as cache:
        times = measure(commands(), args.runs, Path(cache))
    base = statistics.median(times[BASELINE])
    print(f"{args.runs} runs each, {sys.executable}")
    print(f"{'command':28} {'median ms':>10} {'min ms':>8} {'× pass':>7}")
    for name, walls in times.items():
        median = statistics.median(walls)
        print(f"{name:28} {median * 1e3:10.1f} {min(walls) * 1e3:8.1f} {median / base:7.2f}")
    ratio = statistics.median(times["sqlwa --help"]) / base
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print(f"{verdict}: sqlwa --help takes {ratio:.2f}× the interpreter's start-up (target ≤ {TARGET_RATIO:.0f}×)")


if __name__ == "__main__":
    main()
