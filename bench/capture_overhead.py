#!/usr/bin/env python3
"""Cost of the tracefs capture: commits/s with the capture on and off, same filesystem.

The lab image sits on tmpfs by default: the host disk under a loop device is noisy
(same-setting runs varied 7x here) and would swamp the capture's CPU cost.
Baseline: the same workload on a fresh lab filesystem of the same kind without any
tracefs instance (markers go to /dev/null so the engine does identical work apart from
the tracing itself). Repetitions alternate on/off, each on a fresh filesystem; the
median of each side is compared (target: the capture costs at most 10%).

Usage (root): .venv/bin/python bench/capture_overhead.py [--fs ext4] [--journal wal]
              [--sync full] [--txns 1000] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from pathlib import Path

from sqlwa import capture, engine, lab


def commits_per_second(result: engine.WorkloadResult) -> float:
    measured = result.measured
    span_ns = measured["end_ns"].max() - measured["start_ns"].min()
    return measured.height / (span_ns / 1e9)


def one_run(fs: str, settings: engine.RunSettings, traced: bool, workdir: str) -> float:
    scenario = engine.load_scenario("mobibench-insert")
    with lab.LabFilesystem(fs, image_size="1G", workdir=workdir) as lab_fs, tempfile.TemporaryDirectory() as out:
        if not traced:
            result = engine.run_workload(scenario, settings, Path(lab_fs.mountpoint), marker_path=Path("/dev/null"))
            return commits_per_second(result)
        dev = (lab_fs.dev_major, lab_fs.dev_minor) if lab_fs.loop_device else None
        with capture.TraceCapture(out, dev=dev, pid=threading.get_native_id()) as cap:
            result = engine.run_workload(scenario, settings, Path(lab_fs.mountpoint), marker_path=Path(cap.marker_path))
        return commits_per_second(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fs", default="ext4")
    parser.add_argument("--journal", default="wal")
    parser.add_argument("--sync", default="full")
    parser.add_argument("--txns", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workdir", default="/dev/shm",
                        help="where the lab image lives; tmpfs (default) keeps host-disk noise out of the figure")
    args = parser.parse_args()
    settings = engine.RunSettings(journal=args.journal, sync=args.sync, txns=args.txns, warmup=20)
    rates: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(args.reps):
        for traced in (False, True):
            rate = one_run(args.fs, settings, traced, args.workdir)
            rates[traced].append(rate)
            print(f"rep {rep + 1}: capture {'on ' if traced else 'off'} {rate:10.1f} commits/s", flush=True)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    cost = (off - on) / off * 100
    print(f"\n{args.fs} journal={args.journal} sync={args.sync} txns={args.txns} reps={args.reps}")
    print(f"capture off (baseline): {off:10.1f} commits/s (median)")
    print(f"capture on:             {on:10.1f} commits/s (median)")
    print(f"ratio on/off: {on / off:.3f}   capture cost: {cost:+.1f}%   (target <= 10%)")


if __name__ == "__main__":
    main()
