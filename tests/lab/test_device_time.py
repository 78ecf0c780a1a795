"""Where a commit's time goes on the device (btt's Q2D and D2C, the device's share of
each commit's latency) and the ``max_flushes_per_commit`` policy key, against a tally
of the run's raw trace.txt written here: regular expressions over the text and a plain
loop, no sqlwa code (btt itself needs a blktrace capture, which the lab does not make).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest

from trace_truth import tally_block_per_commit

pytestmark = pytest.mark.root

BLOCK_LINE = re.compile(
    r"\s(?P<ts>\d+)\.(?P<us>\d+): block_(?P<what>bio_queue|rq_issue|rq_complete): (?P<dev>\d+,\d+) (?P<rwbs>\S+) "
    r"(?:\d+ )?(?:\(\) )?(?P<sector>\d+) \+ (?P<sectors>\d+)"
)
MARKER_LINE = re.compile(
    r"\s(?P<ts>\d+)\.(?P<us>\d+): tracing_mark_write: sqlwa (?P<what>txn_begin|txn_end) i=(?P<i>\d+)"
)
WARMUP = re.compile(r"warmup=(\d)")


def operation(rwbs: str) -> str:
    """blktrace's RWBS: FF alone is a flush request; else the first of R, W, D names it."""
    if rwbs == "FF":
        return "flush"
    for letter, name in (("R", "read"), ("W", "write"), ("D", "discard")):
        if letter in rwbs:
            return name
    return "other"


def requests_from_text(trace: Path, dev: str) -> list[dict]:
    """Every request on ``dev``: its Q (the last bio queued at its first sector), D and C."""
    last_queued: dict[tuple[str, int], int] = {}
    pending: dict[tuple, list[dict]] = defaultdict(list)
    found = []
    for line in trace.read_text(errors="replace").splitlines():
        m = BLOCK_LINE.search(line)
        if not m or m["dev"] != dev:
            continue
        t = (int(m["ts"]) * 1_000_000 + int(m["us"])) * 1000
        op, sector, sectors = operation(m["rwbs"]), int(m["sector"]), int(m["sectors"])
        key = (op, 0 if op == "flush" else sector, sectors)
        if m["what"] == "bio_queue":
            last_queued[(op, sector)] = t
        elif m["what"] == "rq_issue":
            queued = None if op == "flush" else last_queued.get((op, sector))
            request = {"op": op, "issue": t, "queue": queued, "complete": None}
            pending[key].append(request)
            found.append(request)
        elif pending[key]:
            pending[key].pop(0)["complete"] = t
    return found


def commit_windows(trace: Path) -> dict[int, tuple[int, int, bool]]:
    """Commit index → (begin, end, measured) from the marker lines."""
    begins, ends, measured = {}, {}, {}
    for line in trace.read_text(errors="replace").splitlines():
        m = MARKER_LINE.search(line)
        if not m:
            continue
        t = (int(m["ts"]) * 1_000_000 + int(m["us"])) * 1000
        i = int(m["i"])
        if m["what"] == "txn_begin":
            begins[i] = t
            measured[i] = WARMUP.search(line)[1] == "0"
        else:
            ends[i] = t
    return {i: (begins[i], ends[i], measured[i]) for i in begins if i in ends}


def union_inside(intervals: list[tuple[int, int]], start: int, end: int) -> int:
    """The length of the union of ``intervals`` clipped to [start, end]."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if a < end and b > start)
    total, reach = 0, start
    for a, b in clipped:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


@pytest.fixture(scope="module")
def wal_run(tmp_path_factory) -> tuple[Path, dict, pl.DataFrame]:
    out = tmp_path_factory.mktemp("device-time") / "out"
    cmd = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "-n", "30", "-j", "wal"]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "device Q2D (queued → dispatched)" in proc.stdout and "device D2C" in proc.stdout
    assert "device busy (a request in flight) / commit latency" in proc.stdout
    return out, json.loads((out / "summary.json").read_text()), pl.read_parquet(out / "commits.parquet")


def test_q2d_and_d2c_per_request_equal_a_tally_of_the_trace(wal_run):
    out, summary, _ = wal_run
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    windows = commit_windows(out / "trace.txt")
    measured = [(a, b) for a, b, is_measured in windows.values() if is_measured]
    inside = [r for r in requests_from_text(out / "trace.txt", dev) if any(a <= r["issue"] <= b for a, b in measured)]
    device = summary["device_time"]
    assert device["requests"] == len(inside) > 0
    by_op = defaultdict(list)
    for request in inside:
        by_op[request["op"]].append(request)
    assert set(device["by_operation"]) == set(by_op)
    assert {"write", "flush"} <= set(by_op)  # WAL/FULL: the WAL written, then flushed
    for op, requests in by_op.items():
        figures = device["by_operation"][op]
        assert figures["count"] == len(requests)
        d2c = [(r["complete"] - r["issue"]) / 1e6 for r in requests if r["complete"] is not None]
        q2d = [(r["issue"] - r["queue"]) / 1e6 for r in requests if r["queue"] is not None]
        for phase, values in (("d2c_ms", d2c), ("q2d_ms", q2d)):
            if not values:
                assert figures[phase]["p50"] is None, (op, phase)
                continue
            assert figures[phase]["mean"] == pytest.approx(statistics.mean(values), abs=1e-9), (op, phase)
            assert figures[phase]["p50"] == pytest.approx(statistics.median(values), abs=1e-9), (op, phase)
            assert figures[phase]["max"] == pytest.approx(max(values), abs=1e-9), (op, phase)
    assert device["by_operation"]["flush"]["q2d_ms"]["p50"] is None  # a flush request has no bio of its own


def test_device_share_of_each_commit_is_the_union_of_requests_in_flight(wal_run):
    out, summary, commits = wal_run
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    flights = [(r["issue"], r["complete"]) for r in requests_from_text(out / "trace.txt", dev) if r["complete"]]
    windows = commit_windows(out / "trace.txt")
    busy = {i: union_inside(flights, a, b) for i, (a, b, _) in windows.items()}
    assert dict(zip(commits["index"], commits["device_busy_ns"])) == busy
    measured = [i for i, (_, _, is_measured) in windows.items() if is_measured]
    shares = [busy[i] / (windows[i][1] - windows[i][0]) for i in measured]
    share = summary["device_time"]["device_share"]
    total = sum(busy[i] for i in measured) / sum(windows[i][1] - windows[i][0] for i in measured)
    assert share["of_all_commits"] == pytest.approx(total, abs=1e-12)
    assert share["p50"] == pytest.approx(statistics.median(shares), abs=1e-12)
    assert share["max"] == pytest.approx(max(shares), abs=1e-12)
    assert 0 < total <= 1


def test_max_flushes_per_commit_holds_the_flushes_the_trace_shows(wal_run, tmp_path):
    out, summary, commits = wal_run
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    tallies = tally_block_per_commit(out / "trace.txt", dev)
    measured = commits.filter(~pl.col("warmup"))["index"].to_list()
    flushes = statistics.mean(tallies.get(i, Counter())["flush"] for i in measured)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[[rule]]\nname = "flushes"\nmax_flushes_per_commit = {flushes - 0.5}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "sqlwa", "check", "--policy", str(policy), str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    (check,) = json.loads(proc.stdout)["checks"]
    assert check["check"] == "max_flushes_per_commit" and check["outcome"] == "violation"
    assert check["measured"] == pytest.approx(flushes)
