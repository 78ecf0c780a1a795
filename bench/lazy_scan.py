#!/usr/bin/env python3
"""Peak memory and time of a query over a large event table: loaded whole, as
``sqlwa.load(RUN).events`` and ``pl.read_parquet`` do (the baseline, and the only way
before ``sqlwa.scan``), against ``sqlwa.scan`` (a Polars LazyFrame).

The table is the bundled blktrace sample (traces/samples/blktrace-keks, parsed by
``sqlwa.parse``) repeated end to end, each copy later in time, to N events (default 5
million), each row's sector and time shifted by a hash of its position (so it compresses
as a real trace does, not as copies), written to Parquet as ``sqlwa parse -o`` writes it. Each query runs in a fresh
interpreter that reports its own peak RSS: VmHWM of /proc/self/status, the high-water
mark of its own memory (getrusage's ru_maxrss would carry over the parent's across the
exec, and the parent has held the whole table); the peak of an interpreter that only
imports sqlwa's API (and Polars) is the base the figures are read against.
Queries:
  * select: the issued writes of 64 KiB and more, three columns (filter + select);
  * aggregate: requests and bytes per operation at issue (group by).
Both ways must give the same rows; the script fails if they do not.

Usage: bench/lazy_scan.py [--events N] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "traces" / "samples" / "blktrace-keks" / "keks"

# Each child: open the table one way, run one query, report rows, a checksum and its peak RSS.
CHILD = """
import json, sys, time
import polars as pl
import sqlwa
import sqlwa.api  # in every child, the base too: what the API imports is no query's cost

how, query, path = sys.argv[1:4]
start = time.perf_counter()
if how == "base":
    result = pl.DataFrame()
else:
    table = sqlwa.scan(path) if how == "lazy" else pl.read_parquet(path).lazy()
    issued = table.filter(pl.col("action") == "D")
    if query == "select":
        result = issued.filter((pl.col("operation") == "write") & (pl.col("bytes") >= 65536))
        result = result.select("time_ns", "sector", "bytes").collect()
    else:
        result = issued.group_by(pl.col("operation").cast(pl.String)).agg(pl.len(), pl.col("bytes").sum())
        result = result.sort("operation").collect()
seconds = time.perf_counter() - start
checksum = [int(result.hash_rows().sum())] if result.height else []
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({"rows": result.height, "checksum": checksum, "seconds": seconds,
                  "peak_kib": int(status["VmHWM"].split()[0])}))
"""


def generate(events: int, path: Path) -> int:
    """The sample's events repeated to ``events`` rows, written as ``sqlwa parse -o`` does."""
    import polars as pl

    import sqlwa
    from sqlwa.results import rundir

    sample = sqlwa.parse(SAMPLE).events
    span = int(sample["time_ns"].max()) - int(sample["time_ns"].min()) + 1
    copies = -(-events // sample.height)
    table = pl.concat([sample.with_columns(pl.col("time_ns") + copy * span) for copy in range(copies)]).head(events)
    # Copies as alike as these compress to nothing: each row gets its own sector and a
    # time jitter (a hash of its position), as distinct as a real trace's.
    noise = pl.int_range(pl.len(), dtype=pl.UInt64).hash(seed=21)
    table = table.with_columns(
        (pl.col("sector") + noise % (1 << 30)).cast(table.schema["sector"]),
        (pl.col("time_ns") + noise % 1000).cast(table.schema["time_ns"]),
    )
    rundir.write_parquet(table, path)
    return table.height


def child(how: str, query: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, how, query, str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench/lazy_scan.py: the {how} {query} child failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5_000_000, help="events in the table (default 5 million)")
    parser.add_argument("--keep", type=Path, help="write the table here and keep it (default: a temporary file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sqlwa-lazy-scan-") as tmp:
        path = args.keep or Path(tmp) / "events.parquet"
        started = time.perf_counter()
        rows = generate(args.events, path)
        size_mb = path.stat().st_size / 1e6
        print(f"{rows:,} events, {size_mb:.0f} MB of Parquet ({time.perf_counter() - started:.1f} s to generate)")
        base_mb = child("base", "", path)["peak_kib"] / 1024
        print(f"base: python + import sqlwa.api (polars, pyarrow, plotly) = {base_mb:.0f} MB peak RSS")
        print(f"{'query':10} {'how':6} {'rows':>10} {'seconds':>8} {'peak MB':>8} {'above base':>10}")
        for query in ("select", "aggregate"):
            figures = {how: child(how, query, path) for how in ("eager", "lazy")}
            for how, fig in figures.items():
                peak = fig["peak_kib"] / 1024
                print(f"{query:10} {how:6} {fig['rows']:>10,} {fig['seconds']:8.2f} {peak:8.0f} {peak - base_mb:10.0f}")
            eager, lazy = figures["eager"], figures["lazy"]
            if (eager["rows"], eager["checksum"]) != (lazy["rows"], lazy["checksum"]):
                sys.exit(f"bench/lazy_scan.py: {query}: the lazy scan's rows differ from the eager load's")
            above = [max(fig["peak_kib"] / 1024 - base_mb, 1.0) for fig in (eager, lazy)]
            print(
                f"{query:10} same rows; lazy/eager above base: {above[1] / above[0]:.3f} of the memory, "
                f"{lazy['seconds'] / eager['seconds']:.2f} of the time"
            )


if __name__ == "__main__":
    main()
