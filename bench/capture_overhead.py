#!/usr/bin/env python3
"""Cost of the tracefs capture: commits/s with the capture on and off, same filesystem.

Baseline ("off"): the same workload, same settings, on a fresh lab filesystem of the same
kind, with no tracefs instance at all; the engine writes its markers to /dev/null, so it
does the same work apart from the tracing itself. "on": a full `TraceCapture` as
`sqlwa run --fs` makes it (block, syscall and marker events, the drain thread), markers
to the instance's trace_marker. Each repetition runs one off and one on, each on a fresh
filesystem, in alternating order; the figures are the medians of each side, and the
median of the per-pair ratios (pairs run seconds apart, so they see the same background
load). Target: the capture costs at most 10%. On a shared machine the background load
only ever slows runs down, by up to 10x here; two steadier views are printed as well:
the best run of each side, and the median commit latency.

The capture's cost per commit is printed for commit time (txn_begin to COMMIT returned)
and for the SQL thread's CPU time per commit, each as the mean over the pairs of
(on / off - 1) with a 95% bootstrap interval: the target (issue #21) is at most 3% of
commit time on a disk-backed image, judged on the interval's upper end. The image lives
first on the disk (/var/tmp: a loop device over a file, as `sqlwa run --fs` makes it),
then on tmpfs (/dev/shm), where commits are nearly free of I/O wait: the worst case for
the capture's relative cost, every microsecond of tracing CPU shows. The host disk is
noisy (same-setting runs varied 7x on a shared machine): more pairs narrow the interval.

Usage (root): .venv/bin/python bench/capture_overhead.py [--fs ext4] [--journal wal]
              [--sync full] [--txns 2000] [--reps 10] [--workdirs DIR,...] [--all]
  --all: every fs in --fs-list (ext4,xfs,btrfs) x journal in --journals (wal,delete),
         one table at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from sqlwa import _system
from sqlwa.capture import tracing
from sqlwa.lab import filesystem
from sqlwa.measure import engine

TARGET_PCT = 3.0  # issue #21: the capture costs at most 3% of commit time on a disk-backed image


def commits_per_second(result: engine.WorkloadResult) -> float:
    measured = result.measured
    span_ns = measured["end_ns"].max() - measured["start_ns"].min()
    return measured.height / (span_ns / 1e9)


def latency_us(result: engine.WorkloadResult, quantile: float) -> float:
    return float(result.measured["latency_ns"].quantile(quantile)) / 1e3


def commit_means_us(result: engine.WorkloadResult) -> tuple[float, float]:
    """Mean commit time (txn_begin to COMMIT returned) and the SQL thread's CPU time per commit, µs."""
    measured = result.measured
    return float(measured["latency_ns"].mean()) / 1e3, float(measured["cpu_ns"].mean()) / 1e3


@dataclasses.dataclass
class Run:
    rate: float  # commits/s over the measured commits
    p50_us: float = 0.0  # median commit latency (txn_begin to COMMIT returned)
    p10_us: float = 0.0  # 10th percentile: the commits least disturbed by other processes
    events: int = 0  # trace events of the whole capture
    drains: int = 0  # times the drain formatted events while recording
    lost: int = 0
    commit_us: float = 0.0  # mean commit time
    cpu_us: float = 0.0  # mean CPU time of the SQL thread per commit (user + system)


def one_run(fs: str, settings: engine.RunSettings, traced: bool, workdir: str, buffer_kb: int) -> Run:
    scenario = engine.load_scenario("mobibench-insert")
    with (
        filesystem.LabFilesystem(fs, filesystem.LabOptions(image_size="1G", workdir=workdir)) as lab_fs,
        tempfile.TemporaryDirectory() as out,
    ):
        mountpoint = Path(lab_fs.mountpoint)
        if not traced:
            result = engine.run_workload(scenario, settings, mountpoint, marker_path=Path("/dev/null"))
            return Run(
                commits_per_second(result),
                latency_us(result, 0.5),
                latency_us(result, 0.1),
                *(0, 0, 0),
                *commit_means_us(result),
            )
        dev = lab_fs.dev
        with tracing.TraceCapture(out, dev=dev, pid=threading.get_native_id(), buffer_kb=buffer_kb) as cap:
            result = engine.run_workload(scenario, settings, mountpoint, marker_path=Path(cap.marker_path))
            _system.mounts.syncfs(lab_fs.mountpoint)  # as sqlwa run does; after the last commit, not measured
        summary = cap.trace_summary or {}
        drains = cap._drain.drains if cap._drain else 0
        return Run(
            commits_per_second(result),
            latency_us(result, 0.5),
            latency_us(result, 0.1),
            summary.get("events", 0),
            drains,
            summary.get("lost_events", 0),
            *commit_means_us(result),
        )


@dataclasses.dataclass
class Result:
    fs: str
    journal: str
    sync: str
    off: list[Run]
    on: list[Run]

    @property
    def off_median(self) -> float:
        return statistics.median(r.rate for r in self.off)

    @property
    def on_median(self) -> float:
        return statistics.median(r.rate for r in self.on)

    @property
    def pair_ratios(self) -> list[float]:
        return [on.rate / off.rate for off, on in zip(self.off, self.on)]

    @property
    def best_ratio(self) -> float:
        """Fastest on / fastest off: background load only ever slows a run down, so the
        best of each side is the least disturbed estimate."""
        return max(r.rate for r in self.on) / max(r.rate for r in self.off)

    @property
    def p50_ratio(self) -> float:
        """Median commit latency off / on (as a speed ratio, like on/off commits/s): a
        commit stalled by another process moves the mean, not the median."""
        return statistics.median(r.p50_us for r in self.off) / statistics.median(r.p50_us for r in self.on)

    @property
    def p10_ratio(self) -> float:
        """10th-percentile commit latency off / on: the intrinsic per-commit cost of
        recording, least blurred by other processes."""
        return statistics.median(r.p10_us for r in self.off) / statistics.median(r.p10_us for r in self.on)

    @property
    def cost_pct(self) -> float:
        return (1 - statistics.median(self.pair_ratios)) * 100

    def pair_costs_pct(self, field: str) -> list[float]:
        """Per pair, how much longer ``field`` (commit_us or cpu_us) was with the capture, %."""
        return [(getattr(on, field) / getattr(off, field) - 1) * 100 for off, on in zip(self.off, self.on)]

    def spread(self, runs: list[Run]) -> str:
        rates = [r.rate for r in runs]
        return f"{min(rates):.0f}..{max(rates):.0f}"


def measure(fs: str, settings: engine.RunSettings, reps: int, workdir: str, buffer_kb: int, verbose: bool) -> Result:
    result = Result(fs, settings.journal, settings.sync, [], [])
    for rep in range(reps):
        order = (False, True) if rep % 2 == 0 else (True, False)
        for traced in order:
            run = one_run(fs, settings, traced, workdir, buffer_kb)
            (result.on if traced else result.off).append(run)
            if verbose:
                extra = f"  events {run.events} drains-while-recording {run.drains} lost {run.lost}" if traced else ""
                print(
                    f"  rep {rep + 1}: capture {'on ' if traced else 'off'} {run.rate:10.1f} commits/s{extra}",
                    flush=True,
                )
    return result


def mean_with_ci95(values: list[float], resamples: int = 4000) -> tuple[float, float, float]:
    """The mean and a 95% percentile-bootstrap interval of it (seeded: the same pairs
    give the same interval)."""
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.fmean(values), means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def on_tmpfs(path: str) -> bool:
    """Whether ``path`` is on a RAM-backed filesystem (the longest mount prefix decides)."""
    real = os.path.realpath(path)
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    fits = [(mnt, kind) for _, mnt, kind, *_ in mounts if real == mnt or real.startswith(mnt.rstrip("/") + "/")]
    return max(fits, key=lambda fit: len(fit[0]))[1] in ("tmpfs", "ramfs")


def print_commit_cost(r: Result, workdir: str) -> None:
    """The capture's cost per commit, wall and CPU, with 95% intervals over the pairs."""
    for label, field in (("commit time", "commit_us"), ("SQL thread CPU", "cpu_us")):
        mean, low, high = mean_with_ci95(r.pair_costs_pct(field))
        off = statistics.median(getattr(x, field) for x in r.off)
        on = statistics.median(getattr(x, field) for x in r.on)
        verdict = ""
        if field == "commit_us" and not on_tmpfs(workdir):
            verdict = (
                f"   target <= {TARGET_PCT:.0f}% on a disk-backed image: {'PASS' if high <= TARGET_PCT else 'FAIL'}"
            )
        print(
            f"  {label:15s} off {off:9.1f} µs  on {on:9.1f} µs  capture cost {mean:+6.2f}% "
            f"(95% CI {low:+.2f}..{high:+.2f}, {len(r.off)} pairs, image in {workdir}){verdict}"
        )


def print_one(r: Result, txns: int, reps: int) -> None:
    ratios = sorted(r.pair_ratios)
    print(f"\n{r.fs} journal={r.journal} sync={r.sync} txns={txns} reps={reps}")
    print(
        f"capture off (baseline, no tracefs instance): {r.off_median:10.1f} commits/s (median; range {r.spread(r.off)})"
    )
    print(
        f"capture on:                                  {r.on_median:10.1f} commits/s (median; range {r.spread(r.on)})"
    )
    print(f"ratio on/off of the medians: {r.on_median / r.off_median:.3f}")
    print(
        f"per-pair ratios on/off: median {statistics.median(ratios):.3f}  (min {ratios[0]:.3f}, max {ratios[-1]:.3f})"
    )
    print(
        f"best of {reps} on / best off: {r.best_ratio:.3f};  median commit latency off/on: {r.p50_ratio:.3f} "
        f"({statistics.median(x.p50_us for x in r.off):.1f} / {statistics.median(x.p50_us for x in r.on):.1f} µs); "
        f"p10 latency off/on: {r.p10_ratio:.3f} ({statistics.median(x.p10_us for x in r.off):.1f} / "
        f"{statistics.median(x.p10_us for x in r.on):.1f} µs)"
    )
    print(f"capture cost (median pair): {r.cost_pct:+.1f}%   (target <= 10%)")


def print_table(results: list[Result], txns: int, reps: int) -> None:
    print(
        f"\ncapture overhead, mobibench-insert, txns={txns}, reps={reps} (medians; cost from the median on/off pair ratio)"
    )
    header = (
        f"{'fs':7s} {'journal':8s} {'sync':5s} {'off c/s':>9s} {'on c/s':>9s} {'on/off':>7s} {'pair med':>8s} "
        f"{'pair min..max':>14s} {'best':>6s} {'p50lat':>6s} {'p10lat':>6s} {'p10 off/on µs':>14s} {'cost':>7s}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ratios = sorted(r.pair_ratios)
        print(
            f"{r.fs:7s} {r.journal:8s} {r.sync:5s} {r.off_median:9.0f} {r.on_median:9.0f} {r.on_median / r.off_median:7.3f} "
            f"{statistics.median(ratios):8.3f} {ratios[0]:6.3f}..{ratios[-1]:.3f} {r.best_ratio:6.3f} {r.p50_ratio:6.3f} "
            f"{r.p10_ratio:6.3f} {statistics.median(x.p10_us for x in r.off):6.1f}/{statistics.median(x.p10_us for x in r.on):<7.1f} "
            f"{r.cost_pct:+6.1f}%"
        )
    print(
        "on/off: ratio of the median commits/s; pair med: median of per-pair on/off ratios (the cost column);\n"
        "best: fastest on / fastest off; p50lat, p10lat: median / 10th-percentile commit latency off/on\n"
        "(medians over the runs). All ratios: 1.0 = free."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fs", default="ext4")
    parser.add_argument("--journal", default="wal")
    parser.add_argument("--sync", default="full")
    parser.add_argument("--txns", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=10, help="pairs of runs (capture off, on) per image location")
    parser.add_argument("--all", action="store_true", help="loop over --fs-list x --journals and print one table")
    parser.add_argument("--fs-list", default="ext4,xfs,btrfs")
    parser.add_argument("--journals", default="wal,delete")
    parser.add_argument(
        "--buffer-kb",
        type=int,
        default=tracing.DEFAULT_BUFFER_KB,
        help="ring buffer per CPU; a small one makes the drain format events while the run goes",
    )
    parser.add_argument(
        "--no-map-extents",
        action="store_true",
        help="leave out the engine's extents markers (sqlwa run --fs turns them on)",
    )
    parser.add_argument(
        "--workdirs",
        default="/var/tmp,/dev/shm",
        help="where the lab image lives, each in turn: a directory on the disk (the target's case) and tmpfs "
        "(no I/O wait: the capture's worst case)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-run lines")
    args = parser.parse_args()
    settings = engine.RunSettings(
        journal=args.journal,
        sync=args.sync,
        length=engine.Length(txns=args.txns, warmup=20),
        instruments=engine.Instruments(map_extents=not args.no_map_extents),
    )
    combos = (
        [(fs, j) for fs in args.fs_list.split(",") for j in args.journals.split(",")]
        if args.all
        else [(args.fs, args.journal)]
    )
    results = []
    started = time.monotonic()
    for workdir in args.workdirs.split(","):
        for fs, journal in combos:
            if not args.quiet:
                print(f"{fs} journal={journal} sync={args.sync}, image in {workdir}", flush=True)
            run_settings = settings.replace(journal=journal)
            results.append(measure(fs, run_settings, args.reps, workdir, args.buffer_kb, not args.quiet))
            if not args.all:
                print_one(results[-1], args.txns, args.reps)
            print_commit_cost(results[-1], workdir)
    if args.all:
        print_table(results, args.txns, args.reps)
    print(
        f"\n({time.monotonic() - started:.0f} s; map_extents={getattr(settings, 'map_extents', False)}, "
        f"buffer_kb={args.buffer_kb}, workdirs={args.workdirs})"
    )


if __name__ == "__main__":
    main()
