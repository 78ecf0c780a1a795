#!/usr/bin/env python3
"""What the phone's layers cost a commit: latency and CPU per commit for each stack,
against the plain filesystem measured in the same run.

Stacks (all on a fresh ext4 of the lab, one per run): plain; fscrypt (file-based
encryption, AES-256-XTS); sqlwa-fuse with every call through the daemon (passthrough);
with the kernel's FUSE passthrough (passthrough-kernel, as Android 12+'s /sdcard); with
the writeback cache (passthrough-writeback); Debian's bindfs as an off-the-shelf
daemon. Journal modes DELETE and WAL, synchronous FULL. Each repetition runs every stack
once, in an order rotated per repetition, so all stacks see the same background load;
the figures are medians over repetitions, and each ratio is the median of the
per-repetition ratios against that repetition's plain run (the baseline, named "plain").

Printed per stack: commit latency p50 and p99 (ms), the SQL thread's CPU per commit (p50,
ms; user + sys), the FUSE daemon's CPU per transaction (ms; whole run / transactions, 10
ms resolution), cache flushes and block KiB per commit — and latency and CPU ratios.

Usage (root): .venv/bin/python bench/stack_cost.py [--txns 200] [--reps 3]
              [--journals delete,wal] [--stacks plain,fscrypt,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

STACKS = {
    "plain": [],
    "fscrypt": ["--encrypt", "fscrypt"],
    "fuse": ["--fuse", "passthrough"],
    "fuse-kernel-passthrough": ["--fuse", "passthrough-kernel"],
    "fuse-writeback": ["--fuse", "passthrough-writeback"],
    "bindfs": ["--fuse", "bindfs"],
}
BASELINE = "plain"


def one_run(stack: str, journal: str, txns: int, scratch: Path) -> dict:
    out = scratch / f"{stack}-{journal}"
    cmd = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "256M", *STACKS[stack]]
    cmd += ["-j", journal, "--sync", "full", "-n", str(txns), "-o", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{stack} {journal}: {proc.stderr.strip().splitlines()[-1]}")
    summary = json.loads(proc.stdout)
    daemon = ((summary.get("fuse") or {}).get("daemon_cpu") or {}).get("per_transaction_ms")
    return {
        "p50": summary["latency_ms"]["p50"],
        "p99": summary["latency_ms"]["p99"],
        "cpu": summary["cpu_ms"]["p50"],
        "daemon": daemon,
        "flushes": summary["per_commit"]["flush_requests"],
        "kib": summary["per_commit"]["amortized_write_bytes"] / 1024,
    }


def measure(journal: str, stacks: list[str], txns: int, reps: int) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {stack: [] for stack in stacks}
    with tempfile.TemporaryDirectory(prefix="sqlwa-stack-cost-") as scratch:
        for rep in range(reps):
            order = stacks[rep % len(stacks) :] + stacks[: rep % len(stacks)]
            for stack in order:
                runs[stack].append(one_run(stack, journal, txns, Path(scratch) / f"r{rep}"))
                print(f"  {journal} rep {rep + 1}/{reps}: {stack} done", file=sys.stderr, flush=True)
    return runs


def median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio(runs: dict[str, list[dict]], stack: str, key: str) -> float:
    return statistics.median(r[key] / b[key] for r, b in zip(runs[stack], runs[BASELINE]))


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def report(journal: str, runs: dict[str, list[dict]]) -> None:
    print(
        f"\n{journal.upper()}/FULL ({len(runs[BASELINE])} repetitions; ratios against {BASELINE} in the same repetition)"
    )
    print("| stack | p50 ms | p99 ms | CPU p50 ms | daemon CPU ms/txn | flushes | KiB | p50 ratio | CPU ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for stack, results in runs.items():
        med = {key: median([r[key] for r in results]) for key in results[0]}
        print(
            f"| {stack} | {fmt(med['p50'])} | {fmt(med['p99'])} | {fmt(med['cpu'])} | {fmt(med['daemon'])} "
            f"| {fmt(med['flushes'])} | {fmt(med['kib'], 1)} | {ratio(runs, stack, 'p50'):.2f} "
            f"| {ratio(runs, stack, 'cpu'):.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--txns", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--journals", default="delete,wal")
    parser.add_argument("--stacks", default=",".join(STACKS))
    args = parser.parse_args()
    stacks = args.stacks.split(",")
    if BASELINE not in stacks:
        stacks.insert(0, BASELINE)
    unknown = [s for s in stacks if s not in STACKS]
    if unknown:
        raise SystemExit(f"unknown stack(s) {', '.join(unknown)}; choose from {', '.join(STACKS)}")
    for journal in args.journals.split(","):
        report(journal, measure(journal, stacks, args.txns, args.reps))


if __name__ == "__main__":
    main()
