"""What each setting costs per commit beside what a power cut may cost it: the published
question ("nobarrier makes fsync nearly free ... betting on excellent crash-recovery
abilities of f2fs") answered per configuration, in the VM lab (one guest, a fresh
filesystem per cell).

For ext4 and f2fs, default barriers vs ``nobarrier``, and DELETE/FULL, WAL/NORMAL,
WAL/FULL: fsyncs, cache flushes and block KiB per commit (measured), the p50 commit
latency predicted on a phone's flash (``sqlwa predict``), and of the crash states
(``sqlwa crash``): how many were tried, the most acknowledged commits one lost, and how
many left a corrupt database or a filesystem that did not mount. Prints a Markdown table.

    python bench/durability_table.py [--commits 20] [--samples 4] [--device pixel-2016]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlwa.durability import explore
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine, runner
from sqlwa.measure.targets import vm_lab

NOBARRIER = {"ext4": "barrier=0", "f2fs": "nobarrier"}
SETTINGS = (("delete", "full"), ("wal", "normal"), ("wal", "full"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--device", default="pixel-2016", help="a shipped device profile (sqlwa device list)")
    parser.add_argument("--image-size", default="128M")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sqlwa-durability-table-") as tmp:
        share = Path(tmp)
        kernel = vm_lab.guest_kernel("debian")
        with vm_lab.booted_guest(kernel, share, args.image_size, room=vm_lab.CRASH_IMAGE_ROOM) as guest:
            for fs in ("ext4", "f2fs"):
                for barrier in ("default", "nobarrier"):
                    for journal, sync in SETTINGS:
                        started = time.monotonic()
                        outcome = crash_run(guest, share, fs, barrier, journal, sync, args)
                        rows.append(row(fs, barrier, journal, sync, outcome, args.device))
                        print(f"{rows[-1][0]}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    print_table(rows, args)


def crash_run(guest, share: Path, fs: str, barrier: str, journal: str, sync: str, args) -> runner.RunOutcome:
    request = runner.RunRequest(
        settings=engine.RunSettings(journal=journal, sync=sync, length=engine.Length(txns=args.commits, warmup=2)),
        out_dir=share / f"{fs}-{barrier}-{journal}-{sync}",
        stack=StackSpec(
            fs=fs, image_size=args.image_size, mount_opts=NOBARRIER[fs] if barrier == "nobarrier" else "", vm=True
        ),
        crash=explore.CrashOptions(samples=args.samples, seed=1),
    )
    return runner.execute(request, guest=guest)


def predicted_p50(run_dir: Path, device: str) -> float | None:
    cmd = [sys.executable, "-m", "sqlwa", "predict", str(run_dir), "-d", device, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None
    document = json.loads(proc.stdout)
    configs = document["devices"][0]["configurations"]
    return configs[0]["predicted"]["p50_ms"] if configs else None


def row(fs: str, barrier: str, journal: str, sync: str, outcome: runner.RunOutcome, device: str) -> tuple:
    pc = outcome.summary["per_commit"]
    d = outcome.summary["durability"]
    kib = pc.get("amortized_write_bytes", pc["write_bytes"]) / 1024
    return (
        f"{fs} {barrier} {journal}/{sync}",
        pc["fsync_calls"],
        pc["flush_requests"],
        kib,
        predicted_p50(outcome.out_dir, device),
        d["states"],
        d["lost_commits"]["max"],
        d["lost_commits"]["states_losing"],
        d["corrupt_states"],
        d["unmountable_states"],
    )


def print_table(rows: list[tuple], args) -> None:
    print(
        f"| configuration | fsyncs | flushes | block KiB | p50 ms on {args.device} | crash states | "
        "max lost commits | states losing | corrupt | unmountable |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, fsyncs, flushes, kib, p50, states, lost, losing, corrupt, unmountable in rows:
        p50_text = f"{p50:.2f}" if p50 is not None else "–"
        print(
            f"| {name} | {fsyncs:.2f} | {flushes:.2f} | {kib:.1f} | {p50_text} | {states} | {lost} | "
            f"{losing} | {corrupt} | {unmountable} |"
        )
    print(f"\n{args.commits} commits per run (+2 warm-up), {args.samples} sampled subsets per flush interval.")


if __name__ == "__main__":
    main()
