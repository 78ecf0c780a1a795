"""Ctrl-C or SIGTERM during a long ``sqlwa parse -o X`` (#32): the parse stops within a
row group, says so ("interrupted", "terminated by SIGTERM"; exit 130) and leaves X as it
was, byte for byte, with no partial file beside it. Before, the Rust parse held on until
the end, replaced X, and only then said it was interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

# Each trace takes several seconds to parse here (about 3 s for the text, 9 s for the
# binary on an idle core): long enough to be stopped in the middle.
TEXT_LINES = 6_000_000
BLKTRACE_RECORDS = 10_000_000
# Signals are looked at before each row group (2^18 rows: 0.13 s of the text's, 0.24 s of
# the binary's on an idle core), then the unnamed table is dropped and the process exits:
# ~0.35 s idle, 1 s on a core shared four ways (the other worker, the flake finder's hog).
# 2 s allowed; the parse held on to its end (the fault of #32) for the rest of its 3-9 s,
# slowed by the same load, so it still fails.
STOPPED_WITHIN_S = 2.0
# Without -o the answer comes from a check every 0.1 s; unwinding and the line take
# 0.1-0.2 s more, four times that on a shared core: 1 s, against the whole parse's 4.4 s.
ANSWERED_WITHIN_S = 1.0
STARTUP_S = 1.5  # without -o nothing shows the parse has begun: Python's start-up is over by then


def ftrace_text(path: Path) -> None:
    block = "".join(
        f"         mmcqd/0-123   [000] ...1   {100 + i * 1e-6:.6f}: block_rq_issue: 179,0 W 4096 () {i * 8} + 8 "
        "[mmcqd/0]\n"
        for i in range(100_000)
    )
    with path.open("w") as f:
        for _ in range(TEXT_LINES // 100_000):
            f.write(block)


def blkparse_text(path: Path) -> None:
    """Lines as blkparse prints them (blkparse_fmt.c: "%3d,%-3d %2d %8d %5d.%09lu %5u %2s %3s ")."""
    block = "".join(
        f"{179:3d},{0:<3d} {0:2d} {i:8d} {i // 1000:5d}.{i % 1000 * 1000:09d} {120:5d} {'D':>2s} {'W':>3s} "
        f"{i * 8} + 8 [mmcqd/0]\n"
        for i in range(1, 100_001)
    )
    with path.open("w") as f:
        for _ in range(TEXT_LINES // 100_000):
            f.write(block)


def blktrace_binary(path: Path) -> None:
    """Little-endian ``struct blk_io_trace`` records (include/uapi/linux/blktrace_api.h),
    each a write issued: magic | version 7, sequence, time, sector, bytes, action
    (__BLK_TA_ISSUE with BLK_TC_WRITE and BLK_TC_ISSUE above BLK_TC_SHIFT), pid, device,
    cpu, error, pdu_len."""
    fields = ["magic", "sequence", "time", "sector", "bytes", "action", "pid", "device", "cpu", "error", "pdu_len"]
    types = ["<u4", "<u4", "<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<u4", "<u2", "<u2"]
    records = np.zeros(BLKTRACE_RECORDS, dtype=np.dtype(list(zip(fields, types))))
    records["magic"] = 0x65617400 | 7
    records["sequence"] = np.arange(1, BLKTRACE_RECORDS + 1)
    records["time"] = np.arange(1, BLKTRACE_RECORDS + 1, dtype=np.uint64) * 1000
    records["sector"] = np.arange(BLKTRACE_RECORDS, dtype=np.uint64) * 8
    records["bytes"], records["pid"], records["device"] = 4096, 42, 8 << 20
    records["action"] = 7 | ((1 << 1) | (1 << 6)) << 16
    records.tofile(path)


TRACES = {"ftrace": ("big.trace.txt", ftrace_text), "blkparse": ("big.blkparse.txt", blkparse_text)}
TRACES["blktrace"] = ("big.blktrace.0", blktrace_binary)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    made = {}
    directory = tmp_path_factory.mktemp("big-traces")
    for fmt, (name, write) in TRACES.items():
        write(directory / name)
        made[fmt] = directory / name
    return made


def interrupted_parse(trace: Path, output: Path, signum: int) -> tuple[subprocess.CompletedProcess, float]:
    """``sqlwa parse TRACE -o OUTPUT`` sent ``signum`` mid-parse; its outcome and the
    seconds from the signal to its exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", "parse", str(trace), "-o", str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not writing_into(proc.pid, output.parent) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    time.sleep(0.3)  # a few row groups in
    assert proc.poll() is None, "the parse should still be going"
    proc.send_signal(signum)
    sent = time.monotonic()
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), time.monotonic() - sent


def writing_into(pid: int, directory: Path) -> bool:
    """Whether process ``pid`` has a file open in ``directory`` other than what is there by
    name: the table it writes, unnamed until whole (the kernel's /proc/PID/fd says so)."""
    named = {str(p) for p in directory.iterdir()}
    try:
        targets = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return any(t.startswith(f"{directory}/") and t.split(" (deleted)")[0] not in named for t in targets)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("fmt", list(TRACES))
def test_a_signal_stops_the_parse_at_once_and_leaves_the_output_as_it_was(traces, tmp_path, fmt, signum):
    output = tmp_path / "events.parquet"
    before = b"an earlier table the user keeps\n" * 1000
    output.write_bytes(before)
    proc, seconds = interrupted_parse(traces[fmt], output, signum)
    assert proc.returncode == 130, proc.stderr
    said = {signal.SIGINT: "sqlwa: interrupted", signal.SIGTERM: "sqlwa: terminated by SIGTERM"}[signum]
    assert proc.stderr.strip().splitlines()[-1] == said and "Traceback" not in proc.stderr
    assert seconds < STOPPED_WITHIN_S, f"stopped {seconds:.2f} s after the signal"
    assert output.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet"], "no partial file is left behind"


def test_ctrl_c_stops_a_parse_without_output_at_once(traces):
    # Without -o the table is built in memory: Ctrl-C used to wait for the whole parse.
    # The ftrace text's: the binary and blkparse traces here are parsed in memory (on all
    # cores) before Python's start-up and a signal's delivery can tell them apart.
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", "parse", str(traces["ftrace"])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[tuple[float, str]] = []  # stderr's lines, each with the time it came

    def read() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            said.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    time.sleep(STARTUP_S)
    assert proc.poll() is None, "the parse should still be going"
    reader.start()
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    proc.wait(timeout=60)
    reader.join(timeout=10)
    assert proc.returncode == 130 and said and said[-1][1] == "sqlwa: interrupted", said
    # Measured to the answer, as the parse's own checks (every 0.1 s) give it: the exit
    # after it frees the table the abandoned parse is still building on both cores, beside
    # the other worker (to the exit 1.23 s was seen in a full run, and the fault, the whole
    # parse, took 4.4 s: no bound on the exit tells the two apart under load).
    seconds = said[-1][0] - sent
    assert seconds < ANSWERED_WITHIN_S, f"said 'interrupted' {seconds:.2f} s after Ctrl-C"
