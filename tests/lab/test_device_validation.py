"""The prediction against a device of known latency (issue #19, "Done when").

The device: a FUSE filesystem (sqlwa-fuse over a directory in RAM) that sleeps a known
time in every write (10 ms) and every fsync (30 ms) before passing it on; a loop device
whose image lives there turns each block write into one FUSE write and each cache flush
into one fsync. The daemon serves one request at a time, at real-time priority where
chrt exists: this machine is shared, and the delays must be the device's, not the
scheduler's (they are chosen large for the same reason: a busy host's stalls of tens of
milliseconds must not decide the tail).

1. `sqlwa device probe` measures it through a lab ext4 made on it: its medians must be
   the injected delays (plus what the loop device and FUSE add, under a millisecond).
2. `sqlwa matrix` measures DELETE/FULL and WAL/FULL on a fresh ext4 on it.
3. `sqlwa predict` replays those commits on the probed profile: predicted p50 within 15%
   and p99 within 25% of the measured ones, read here from commits.parquet.

The premise is a device of known latency. On a shared machine the host sometimes stalls
the loop device's kernel threads for tens or hundreds of milliseconds, and then the device
is not the one injected: when more than 1% of the runs' writes or flushes took more than
2.5 times their injected delay (each request timed from its issue, or the previous
completion, to its completion, read from trace.txt here), or fio saw more than 5% of the
probe's take 5 ms more (its 95th percentile), the test skips with those figures instead
of judging the model — after trying the probe and the runs up to three times each. (A
write of fio's may also wait behind ext4's periodic journal commit of the file's mtime,
about 80 ms on this device: that is the device's own tail, and the profile keeps it.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers import sqlwa
from sqlwa.lab import fuse
from sqlwa.lab.filesystem import LabFilesystem, LabOptions
from trace_truth import served_one_at_a_time_ms

pytestmark = [pytest.mark.root, pytest.mark.tracefs, pytest.mark.slow]

WRITE_MS, FLUSH_MS = 10, 30
COMMITS = 300
DISTURBED_MS = 5  # fio: a request this much slower than its injected delay was held up
DISTURBED_FACTOR = 2.5  # the runs: a request this many times its injected delay was held up


def delaying_daemon() -> str:
    """sqlwa-fuse with --delay-write-us, or a skip saying how to get it."""
    binary = fuse.daemon_binary(fuse.SQLWA_DAEMON)
    if binary is None:
        pytest.skip("sqlwa-fuse is not built: run ./scripts/setup")
    probe = subprocess.run(
        [binary, "/nonexistent", "/nonexistent", "--delay-write-us", "x"], capture_output=True, text=True
    )
    if "whole microseconds" not in probe.stderr:
        pytest.skip(f"{binary} has no --delay-write-us (an older build): run ./scripts/setup")
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed (apt-get install fio)")
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: the slow device's lower directory must be in RAM, so only the delays cost time")
    return binary


@pytest.fixture
def slow_device(tmp_path: Path) -> Iterator[Path]:
    """A FUSE mount whose writes take WRITE_MS and fsyncs FLUSH_MS more."""
    binary = delaying_daemon()
    lower = Path(tempfile.mkdtemp(prefix="sqlwa-test-slow-", dir="/dev/shm"))
    mountpoint = tmp_path / "slow"
    mountpoint.mkdir()
    realtime = ["chrt", "-f", "50"] if shutil.which("chrt") else []
    argv = [binary, str(lower), str(mountpoint), "--delay-write-us", f"{WRITE_MS * 1000}"]
    argv += ["--delay-flush-us", f"{FLUSH_MS * 1000}", "--fsname", "sqlwa-test-slow"]
    daemon = subprocess.Popen([*realtime, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = daemon.stdout.readline() if daemon.stdout else ""
        assert ready.startswith("{"), daemon.stderr.read() if daemon.stderr else ready
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], capture_output=True)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(lower, ignore_errors=True)


ATTEMPTS = 3  # of the probe and of the runs, while the host disturbs the device; never of the judgement


def probe_disturbance(level: dict) -> str | None:
    """Why fio did not see the device of known latency, or None."""
    for measure, delay in (("write", WRITE_MS), ("flush", FLUSH_MS)):
        p95 = level[measure]["percentiles_ms"]["95"]
        if p95 > delay + DISTURBED_MS:
            return f"while it was probed: {measure} p95 {p95:.1f} ms (injected {delay})"
    return None


def run_disturbance(run_dir: Path) -> str | None:
    """Why a run's trace shows another device than the injected one, or None."""
    dev = json.loads((run_dir / "summary.json").read_text())["config"]["lab"]["dev"].replace(":", ",")
    served = served_one_at_a_time_ms(run_dir / "trace.txt", dev)
    # writes up to FUSE's largest (128 KiB): one FUSE write, one delay
    for name, delay, times in (
        ("writes", WRITE_MS, [ms for rwbs, size, ms in served if "W" in rwbs and rwbs != "FF" and size <= 131072]),
        ("flushes", FLUSH_MS, [ms for rwbs, _, ms in served if rwbs == "FF"]),
    ):
        slow = sum(ms > delay * DISTURBED_FACTOR for ms in times)
        if slow > 0.01 * len(times):
            return (
                f"in {run_dir.name}: {slow} of {len(times)} {name} took more than {delay * DISTURBED_FACTOR:g} ms "
                f"(injected {delay}; the slowest {max(times):.0f} ms)"
            )
    return None


def probed_profile(slow_device: Path, out: Path) -> dict:
    """The slow device's profile, probed until the host let fio see the injected device."""
    why = None
    for _ in range(ATTEMPTS):
        with LabFilesystem("ext4", LabOptions(image_size="128M", workdir=slow_device)) as lab:
            sqlwa("device", "probe", lab.mountpoint, "--seconds", "8", "--size", "16", "--name", "slow", "-o", str(out))
        level = json.loads(sqlwa("device", "show", str(out), "--json").stdout)["levels"][0]
        write_p50, flush_p50 = level["write"]["percentiles_ms"]["50"], level["flush"]["percentiles_ms"]["50"]
        print(
            f"\nprobed: write p50 {write_p50:.2f} ms (injected {WRITE_MS}), flush p50 {flush_p50:.2f} (injected {FLUSH_MS})"
        )
        assert WRITE_MS <= write_p50 <= WRITE_MS + 1.5 and FLUSH_MS <= flush_p50 <= FLUSH_MS + 1.5
        assert level["queue_depth"] == 1  # one daemon thread: one request at a time
        why = probe_disturbance(level)
        if why is None:
            return level
        print(f"the host disturbed the device {why}")
    pytest.skip(f"the host disturbed the device {why} ({ATTEMPTS} attempts)")


def measured_matrix(slow_device: Path, out: Path) -> Path:
    """DELETE/FULL and WAL/FULL measured on the slow device, until the host let them."""
    why = None
    env = {**os.environ, "TMPDIR": str(slow_device)}  # the lab's image goes on the slow device
    for attempt in range(ATTEMPTS):
        matrix = out / f"m{attempt}"
        sqlwa(
            "matrix", "--fs", "ext4", "-j", "delete,wal", "--sync", "full", "-n", str(COMMITS), "--image-size", "64M",
            "--out", str(matrix), env=env,
        )  # fmt: skip
        why = next((w for r in sorted((matrix / "runs").iterdir()) if (w := run_disturbance(r))), None)
        if why is None:
            return matrix
        print(f"the host disturbed the device {why}")
        shutil.rmtree(matrix)
    pytest.skip(f"the host disturbed the device {why} ({ATTEMPTS} attempts)")


def measured_ms(run_dir: Path) -> np.ndarray:
    commits = pl.read_parquet(run_dir / "commits.parquet").filter(~pl.col("warmup"))
    return commits["latency_ns"].to_numpy() / 1e6


def test_a_device_of_known_latency_is_predicted_from_its_probe(slow_device: Path, tmp_path: Path) -> None:
    profile = tmp_path / "slow.toml"
    probed_profile(slow_device, profile)
    matrix = measured_matrix(slow_device, tmp_path)
    doc = json.loads(sqlwa("predict", "-d", str(profile), str(matrix), "--json").stdout)
    predicted = {c["journal"]: c["predicted"] for c in doc["devices"][0]["configurations"]}
    for run_dir in sorted((matrix / "runs").iterdir()):
        journal = json.loads((run_dir / "summary.json").read_text())["config"]["journal"]
        ms = measured_ms(run_dir)
        p50, p99 = np.quantile(ms, 0.5), np.quantile(ms, 0.99)
        got = predicted[journal]
        print(
            f"{journal}/full: measured p50 {p50:.2f} p99 {p99:.2f} ms; predicted p50 {got['p50_ms']:.2f} "
            f"({got['p50_ms'] / p50 - 1:+.1%}) p99 {got['p99_ms']:.2f} ({got['p99_ms'] / p99 - 1:+.1%})"
        )
        assert abs(got["p50_ms"] / p50 - 1) <= 0.15, (journal, "p50", got["p50_ms"], p50)
        # The p99 of 300 commits is their third-largest latency, each a sample of the
        # device's tail: how many of 300 fall above the true p99 is Binomial(300, 0.01),
        # 3 on average and 9 or more one time in 800. So a right prediction lies within
        # 25% of the measured p99 or, where the measured tail is that ragged (a WAL commit
        # waiting behind ext4's periodic journal commit), between the measured p97 and the
        # slowest commit. A model off by the tail (a p50-like 40 ms for WAL's ~200) fails.
        p97, slowest = np.quantile(ms, 0.97), ms.max()
        assert abs(got["p99_ms"] / p99 - 1) <= 0.25 or p97 <= got["p99_ms"] <= slowest, (
            journal, "p99", got["p99_ms"], {"measured p97": p97, "p99": p99, "max": slowest},
        )  # fmt: skip
