#!/usr/bin/env python3
"""``sqlwa parse -o`` at scale, against blkparse, end to end as a user runs them.

For generated blktrace captures of 10^5, 10^6 and 10^7 events (two per-CPU files, the
crate's ``gen_trace`` example: a database-like mix of queue, issue, complete, flushes,
remaps …), times in one run, each command in its own process:
  * ``blkparse -i NAME -q -o FILE``            the baseline (text out, single-threaded)
  * ``sqlwa parse NAME -o FILE.parquet``       the command line, Python start-up included
and prints each one's wall time (the median of --runs), peak RSS (the process's own, from
wait4; the largest of the runs) and events/s, then the ratio of the rates. Targets (issue
#21): ``sqlwa parse -o`` at least 10x blkparse's rate at 10^7 events, and its peak RSS
bounded: a parse of a trace twice the largest (sqlwa alone) peaks at no more than 1.1x the
largest's, each the smallest peak of its runs, where a whole in-memory table would double.
PASS or FAIL says whether this run met each. Then ftrace text of --text-lines lines and
twice as many (the crate's generator: block and syscall lines, its markers left out),
whose peak RSS must not grow with the text either. Then Perfetto traces of
--perfetto-events events and twice as many (written here with Perfetto's own protos: block
issue/complete and fsync syscalls on two CPUs), ``sqlwa parse -o`` against ``sqlwa parse``
without -o (the whole table in memory) as the baseline: its peak RSS must not grow with
the trace either.

The traces live in a temporary directory under --dir (default /var/tmp), removed at the
end; 10^8 events (--max 1e8) needs about 5 GB there plus blkparse's 7 GB of text, and
the doubled trace 10 GB.

With --lab (root: the host lab), lab runs of --lab-min (10^2, the base), ten times as
many … --lab-max commits (``sqlwa run --fs ext4 -j wal --sync full``): the trace's events,
the analysis time (summary.json ``trace.analysis_s``) per event, the peak RSS of the whole
``sqlwa run`` process tree (wait4: the process and the children it reaped), that peak
above the base run's per trace event (target: at most 300 B), the capture's bytes per
event on disk (the raw capture the run keeps, and the whole run directory), and, for runs
past the first 2000 commits (the WAL's growth), the steady state's per-commit fsyncs,
flushes, write requests and bytes, and how far the longest run's differ from the
shortest's (the tool must not make them drift). Last, the longest run's peak RSS against
the one ten times shorter (issue #37: bounded, within 1.2x), its analysis time per event
against the shortest's (linear: within 1.2x) and its capture on disk per event (at most
40 B; a capture under 64 MiB of text, some 6·10^5 events, is kept as trace.txt, 112 B an
event, so this is met from about 10^5 commits on). --lab-only skips the parse
benchmarks (and needs no blkparse).

Usage: bench/scale.py [--max 1e7] [--runs N] [--dir DIR] [--text-lines 8e6] [--perfetto-events 1e6]
                      [--lab [--lab-min 1e2] [--lab-max 1e5] [--lab-only]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from startup import sqlwa_script  # a sibling script: bench/ is on sys.path when run

ROOT = Path(__file__).resolve().parent.parent
GEN_TRACE = ROOT / "target" / "release" / "examples" / "gen_trace"
TARGET_RATIO = 10.0
RSS_GROWTH_LIMIT = 1.1  # the parse's peak RSS on twice the largest trace, against the largest's
LAB_BYTES_PER_EVENT = 300
LAB_RSS_GROWTH = 1.2  # a lab run's peak RSS against one ten times shorter (issue #37)
LAB_CAPTURE_BYTES = 40  # the capture on disk per trace event at the longest run (issue #37)
LAB_TIME_GROWTH = 1.2  # analysis time per event, the longest run's against the shortest's: linear
DRIFT_FIGURES = ("fdatasync_calls", "fsync_calls", "flush_requests", "write_requests", "write_bytes")


def build_generator() -> None:
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    cmd = [cargo, "build", "-q", "--release", "-p", "blktrace-parse", "--example", "gen_trace"]
    subprocess.run(cmd, cwd=ROOT, check=True)


def run_measured(cmd: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS bytes of one process (its own rusage, from wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        sys.exit(f"bench/scale.py: {' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return wall, usage.ru_maxrss * 1024


def measure(cmd: list[str], cwd: Path, runs: int) -> tuple[float, int, int]:
    """Median wall time, the largest and the smallest peak RSS over `runs` runs.

    The largest is what a user must have; the smallest is what the boundedness checks
    compare, like with like: how far the decoder runs ahead of the encoders, and how much
    freed memory glibc keeps, move one run's peak by up to 10% (heaptrack: the heap's peak
    is 99 MB at 10^7 events and 101 MB at 2x10^7; the RSS drift is the allocator's)."""
    results = [run_measured(cmd, cwd) for _ in range(runs)]
    peaks = [r for _, r in results]
    return statistics.median(w for w, _ in results), max(peaks), min(peaks)


def sizes_up_to(largest: int) -> list[int]:
    sizes, n = [], 100_000
    while n <= largest:
        sizes.append(n)
        n *= 10
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=float, default=1e7, help="largest trace, in events (powers of ten from 1e5)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each command per size; the median counts")
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where the generated traces go")
    ap.add_argument("--text-lines", type=float, default=8e6, help="the ftrace text's lines (and twice as many)")
    ap.add_argument(
        "--perfetto-events", type=float, default=1e6, help="the Perfetto trace's events (and twice as many)"
    )
    ap.add_argument("--lab", action="store_true", help="also lab runs (root), analysis time and memory per event")
    ap.add_argument("--lab-min", type=float, default=1e2, help="the shortest lab run (the base), in commits")
    ap.add_argument("--lab-max", type=float, default=1e5, help="the longest lab run, in commits")
    ap.add_argument("--lab-only", action="store_true", help="only the lab runs (implies --lab)")
    args = ap.parse_args()
    args.lab = args.lab or args.lab_only
    if args.lab and os.geteuid() != 0:
        sys.exit("bench/scale.py: --lab runs the host lab, which needs root")
    if args.lab_only:
        with tempfile.TemporaryDirectory(prefix="sqlwa-scale-", dir=args.dir) as tmp:
            return lab(sqlwa_script(), Path(tmp), int(args.lab_max), int(args.lab_min))
    if not shutil.which("blkparse"):
        sys.exit("bench/scale.py: blkparse is not installed (Debian package blktrace): it is the baseline")
    build_generator()
    sqlwa = sqlwa_script()
    print(f"{'events':>12}  {'command':<22} {'wall s':>8} {'M events/s':>11} {'peak RSS MB':>12}")
    figures: dict[int, dict[str, tuple[float, int, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="sqlwa-scale-", dir=args.dir) as tmp:
        work = Path(tmp)
        for events in sizes_up_to(int(args.max)):
            subprocess.run(
                [str(GEN_TRACE), "blktrace", str(work / "t"), str(events), "2"], check=True, capture_output=True
            )
            runs = args.runs if events < 10**8 else 1
            figures[events] = {
                "blkparse -o": measure(["blkparse", "-i", "t", "-q", "-o", "ref.txt"], work, runs),
                "sqlwa parse -o": measure([sqlwa, "parse", "t", "-o", "ev.parquet"], work, runs),
            }
            for name, (wall, rss, _) in figures[events].items():
                print(f"{events:>12,}  {name:<22} {wall:>8.2f} {events / wall / 1e6:>11.2f} {rss / 2**20:>12.0f}")
            clear(work)
        doubled = parse_rss_of_twice(sqlwa, work, int(args.max), args.runs)
        parsed = verdict(figures, doubled) | text_traces(sqlwa, work, args.text_lines, args.runs)
        parsed |= perfetto_traces(sqlwa, work, int(args.perfetto_events), args.runs)
        return parsed | (lab(sqlwa, work, int(args.lab_max)) if args.lab else 0)


def parse_rss_of_twice(sqlwa: str, work: Path, largest: int, runs: int) -> int:
    """``sqlwa parse -o``'s smallest peak RSS over `runs` on a trace twice the largest (no
    baseline: only whether doubling the trace grows the parse's memory)."""
    events = 2 * max(sizes_up_to(largest))
    subprocess.run([str(GEN_TRACE), "blktrace", str(work / "t"), str(events), "2"], check=True, capture_output=True)
    wall, rss, least = measure([sqlwa, "parse", "t", "-o", "ev.parquet"], work, runs)
    print(f"{events:>12,}  {'sqlwa parse -o':<22} {wall:>8.2f} {events / wall / 1e6:>11.2f} {rss / 2**20:>12.0f}")
    clear(work)
    return least


def text_traces(sqlwa: str, work: Path, lines: float, runs: int) -> int:
    """``sqlwa parse -o`` of generated ftrace text of ``lines`` and twice as many lines:
    wall time and peak RSS; 0 when doubling the text grows the peak by no more than
    RSS_GROWTH_LIMIT (streamed, like the binary traces). The generator's marker lines are
    left out, so that the figure is the parse's: a trace with sqlwa's markers also gets
    its per-commit figures, which hold its issued requests, syscalls and markers (about
    16 B per line here)."""
    print(f"\n{'ftrace lines':>12}  {'text MB':>14} {'wall s':>8} {'M lines/s':>10} {'peak RSS MB':>12}")
    peaks = []
    for n in (int(lines), 2 * int(lines)):
        generated, text = work / "generated.txt", work / "trace.txt"
        subprocess.run([str(GEN_TRACE), "ftrace", str(generated), str(n)], check=True, capture_output=True)
        with text.open("wb") as out:
            subprocess.run(["grep", "-vF", "tracing_mark_write", str(generated)], stdout=out, check=True)
        generated.unlink()
        size = text.stat().st_size
        wall, rss, least = measure([sqlwa, "parse", str(text), "-o", "ev.parquet"], work, runs)
        print(f"{n:>12,}  {size / 2**20:>14.0f} {wall:>8.2f} {n / wall / 1e6:>10.2f} {rss / 2**20:>12.0f}")
        peaks.append(least)
        clear(work)
    return growth_verdict(peaks, "the text twice as long")


def perfetto_traces(sqlwa: str, work: Path, events: int, runs: int) -> int:
    """``sqlwa parse -o`` of generated Perfetto traces of ``events`` and twice as many,
    beside the whole parse (no -o); 0 when doubling the trace grows the streamed parse's
    smallest peak by no more than RSS_GROWTH_LIMIT."""
    print(f"\n{'Perfetto events':>15}  {'command':<22} {'wall s':>8} {'M events/s':>11} {'peak RSS MB':>12}")
    peaks = []
    for n in (events, 2 * events):
        trace = work / "trace.perfetto-trace"
        write_perfetto_trace(trace, n)
        for name, extra in (("sqlwa parse (whole)", []), ("sqlwa parse -o", ["-o", "ev.parquet"])):
            wall, rss, least = measure([sqlwa, "parse", str(trace), *extra], work, runs)
            print(f"{n:>15,}  {name:<22} {wall:>8.2f} {n / wall / 1e6:>11.2f} {rss / 2**20:>12.0f}")
        peaks.append(least)
        clear(work)
    return growth_verdict(peaks, "the Perfetto trace twice as long")


def growth_verdict(peaks: list[int], doubled: str) -> int:
    """0 when the second of two smallest peaks is within RSS_GROWTH_LIMIT of the first."""
    growth = peaks[1] / peaks[0]
    met = growth <= RSS_GROWTH_LIMIT
    print(
        f"smallest peak RSS of the runs of {doubled}: {growth:.2f}x (bounded: at most {RSS_GROWTH_LIMIT}x): "
        + ("PASS" if met else "FAIL")
    )
    return 0 if met else 1


def clear(work: Path) -> None:
    """Removes the last size's files (its trace and outputs) before the next."""
    for leftover in work.iterdir():
        leftover.unlink()


def write_perfetto_trace(path: Path, events: int, per_bundle: int = 1000) -> None:
    """A phone-like Perfetto trace written a packet at a time with Perfetto's own protos:
    bundles of ``per_bundle`` events alternating between two CPUs, each event a block
    request issued or completed on an eMMC (179,0) or an fsync."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    emmc, ts = 179 << 20, 10**9
    with path.open("wb") as f:
        for first in range(0, events, per_bundle):
            trace = pb.Trace()  # one packet: a trace file is the packets' concatenation
            bundle = trace.packet.add().ftrace_events
            bundle.cpu = first // per_bundle % 2
            for n in range(first, min(first + per_bundle, events)):
                ts += 1000
                event = bundle.event.add(timestamp=ts, pid=1234)
                if n % 3 == 0:
                    event.block_rq_issue.MergeFrom(
                        pb.BlockRqIssueFtraceEvent(dev=emmc, sector=n, nr_sector=8, bytes=4096, rwbs="WS", comm="db")
                    )
                elif n % 3 == 1:
                    event.block_rq_complete.MergeFrom(
                        pb.BlockRqCompleteFtraceEvent(dev=emmc, sector=n - 1, nr_sector=8, rwbs="WS", error=0)
                    )
                else:
                    event.sys_enter.MergeFrom(pb.SysEnterFtraceEvent(id=82, args=[5, 0, 0, 0, 0, 0]))
            f.write(trace.SerializeToString())


def lab(sqlwa: str, work: Path, longest: int, shortest: int = 100) -> int:
    """Lab runs of growing length against the shortest (the base); 0 when the target holds."""
    print(
        f"\n{'commits':>10} {'events':>11} {'analysis s':>11} {'µs/event':>9} {'peak RSS MB':>12} {'B/event':>8}"
        f" {'capture B/ev':>12} {'run dir B/ev':>12}  steady state per commit"
    )
    base_rss: int | None = None
    per_event = 0.0
    steady: dict[int, dict[str, float]] = {}
    peaks: dict[int, int] = {}
    captured: dict[int, float] = {}  # the capture on disk per event
    per_event_s: dict[int, float] = {}  # analysis seconds per event
    commits = shortest
    while commits <= longest:
        out = work / f"run{commits}"
        cmd = [sqlwa, "run", "--fs", "ext4", "-j", "wal", "--sync", "full", "-n", str(commits), "--out", str(out)]
        _, rss = run_measured(cmd, work)
        peaks[commits] = rss
        summary = json.loads((out / "summary.json").read_text())
        events, analysis_s = summary["trace"]["events"], summary["trace"]["analysis_s"]
        capture, whole = capture_bytes(out), sum(f.stat().st_size for f in out.iterdir() if f.is_file())
        captured[commits], per_event_s[commits] = capture / events, analysis_s / events
        above = "(base)"
        if base_rss is None:
            base_rss = rss
        else:
            per_event = (rss - base_rss) / events
            above = f"{per_event:.0f}"
        if commits > STEADY_FROM:
            steady[commits] = steady_state(out)
        shown = "  ".join(f"{k} {v:,.2f}" for k, v in steady.get(commits, {}).items())
        print(
            f"{commits:>10,} {events:>11,} {analysis_s:>11.2f} {analysis_s / events * 1e6:>9.2f} {rss / 2**20:>12.0f} {above:>8}"
            f" {capture / events:>12.1f} {whole / events:>12.1f}  {shown}"
        )
        shutil.rmtree(out)
        commits *= 10
    if len(steady) > 1:
        first, last = min(steady), max(steady)
        drift = max(abs(steady[last][k] / steady[first][k] - 1) for k in DRIFT_FIGURES if steady[first][k])
        print(f"steady state of {last:,} commits vs {first:,}: the figures differ by at most {drift:.1%}")
    bounded = True
    if len(peaks) > 1:
        last, before = sorted(peaks)[-1], sorted(peaks)[-2]
        growth = peaks[last] / peaks[before]
        bounded = growth <= LAB_RSS_GROWTH
        print(
            f"peak RSS of {last:,} commits against {before:,}: {growth:.2f}x (bounded: at most {LAB_RSS_GROWTH}x): "
            + ("PASS" if bounded else "FAIL")
        )
        longest_run, shortest_run = max(per_event_s), min(per_event_s)
        slower = per_event_s[longest_run] / per_event_s[shortest_run]
        linear = slower <= LAB_TIME_GROWTH
        print(
            f"analysis time per event of {longest_run:,} commits against {shortest_run:,}: {slower:.2f}x "
            f"(linear: at most {LAB_TIME_GROWTH}x): " + ("PASS" if linear else "FAIL")
        )
        bounded = bounded and linear
    compact = captured[max(captured)] <= LAB_CAPTURE_BYTES
    print(
        f"capture on disk at the longest run: {captured[max(captured)]:.1f} B per trace event "
        f"(target at most {LAB_CAPTURE_BYTES}): " + ("PASS" if compact else "FAIL")
    )
    met = per_event <= LAB_BYTES_PER_EVENT
    print(
        f"lab analysis peak RSS above the base at the longest run: {per_event:.0f} B per trace event "
        f"(target {LAB_BYTES_PER_EVENT}): " + ("PASS" if met else "FAIL")
    )
    return 0 if met and bounded and compact else 1


def capture_bytes(run_dir: Path) -> int:
    """The raw capture's bytes on disk: trace.txt, or the compact capture that replaces it."""
    names = ("trace.txt", "trace.txt.zst", "capture.parquet", "events.parquet")
    for name in names:
        if (run_dir / name).is_file():
            return (run_dir / name).stat().st_size
    return 0


#: Commits before the WAL reaches its steady size (it wraps after the first checkpoint, at
#: 1000 pages): fdatasync then no longer grows the file, and ext4 commits no journal for it.
STEADY_FROM = 2_000


def steady_state(run_dir: Path) -> dict[str, float]:
    """Per-commit means of the run's commits after the first STEADY_FROM."""
    import polars as pl

    commits = pl.read_parquet(run_dir / "commits.parquet").filter(pl.col("index") >= STEADY_FROM)
    return {name: float(commits[name].mean() or 0.0) for name in DRIFT_FIGURES if name in commits.columns}


def verdict(figures: dict[int, dict[str, tuple[float, int, int]]], doubled_rss: int) -> int:
    largest = max(figures)
    ratio = figures[largest]["blkparse -o"][0] / figures[largest]["sqlwa parse -o"][0]
    met_speed = largest >= 10**7 and ratio >= TARGET_RATIO
    print(
        f"\nsqlwa parse -o vs blkparse -o at {largest:,} events: {ratio:.1f}x the rate (target {TARGET_RATIO:.0f}x at 10^7): "
        + ("PASS" if met_speed else "FAIL")
    )
    peaks = [figures[largest]["sqlwa parse -o"][2], doubled_rss]
    return growth_verdict(peaks, f"{2 * largest:,} events against {largest:,}") | (0 if met_speed else 1)


if __name__ == "__main__":
    sys.exit(main())
