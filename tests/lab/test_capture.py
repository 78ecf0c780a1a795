"""The tracefs capture: one instance per run, block events of the lab's loop device only,
syscalls of the workload thread only, markers on the same monotonic timeline, losses
counted, and the instance removed on exit, exceptions and signals.

The checks read trace.txt with a few regular expressions written here, independently of
sqlwa's trace parser.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_lab import kill_at_stage_and_check

from sqlwa._system.mounts import syncfs as sync_fs
from sqlwa._system.tracefs import tracefs_root
from sqlwa.capture.tracing import TraceCapture, kernel_dev, lost_in_stats, remove_instance, tracefs_available
from sqlwa.errors import CaptureError, NeedsRoot, TraceLossError, hint_of
from sqlwa.lab.filesystem import LabFilesystem, LabOptions

LINE_RE = re.compile(r"^\s*(?P<task>.+)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+): (?P<body>.*)$")
BLOCK_RE = re.compile(r"^(?P<event>block_\w+): (?P<major>\d+),(?P<minor>\d+) (?P<rwbs>[A-Z]+) ")


def parse(trace: Path) -> list[dict]:
    rows = []
    for line in trace.read_text().splitlines():
        match = LINE_RE.match(line)
        assert match, f"unexpected trace line: {line!r}"
        rows.append({**match.groupdict(), "pid": int(match["pid"]), "ts": float(match["ts"])})
    return rows


def block_rows(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        match = BLOCK_RE.match(row["body"])
        if match:
            out.append({**row, **match.groupdict()})
    return out


def syscall_rows(rows: list[dict], tid: int) -> list[dict]:
    return [r for r in rows if r["pid"] == tid and r["body"].startswith("sys_")]


class Workload(threading.Thread):
    """A thread that does what a commit does (pwrite, fsync, fdatasync, ftruncate, unlink)
    between two markers, so its tid can be the capture's filter."""

    def __init__(self, directory: str, marker_path: str) -> None:
        super().__init__()
        self.directory, self.marker_path = directory, marker_path
        self.tid: int | None = None
        self.ready = threading.Event()
        self.go = threading.Event()
        self.marker_ns: list[int] = []

    def run(self) -> None:
        self.tid = threading.get_native_id()
        self.ready.set()
        self.go.wait(10)
        marker = os.open(self.marker_path, os.O_WRONLY)
        try:
            self._mark(marker, "commit-begin 1")
            path = os.path.join(self.directory, "db")
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            os.pwrite(fd, os.urandom(16384), 0)
            os.fsync(fd)
            os.pwrite(fd, os.urandom(4096), 16384)
            os.fdatasync(fd)
            os.ftruncate(fd, 8192)
            os.close(fd)
            os.unlink(path)
            self._mark(marker, "commit-end 1")
        finally:
            os.close(marker)

    def _mark(self, fd: int, text: str) -> None:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.marker_ns.append(now)
        os.write(fd, f"sqlwa-test {text} {now}\n".encode())


def _write_noise() -> None:
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        os.write(fd, b"main-thread noise")
    finally:
        os.close(fd)


def run_workload_in_capture(lab: LabFilesystem, out_dir: Path, **capture_args) -> tuple[TraceCapture, Workload]:
    worker = Workload(lab.mountpoint, "")
    worker.start()
    worker.ready.wait(10)
    dev = lab.dev
    try:
        with TraceCapture(out_dir, dev=dev, pid=worker.tid, **capture_args) as cap:
            worker.marker_path = cap.marker_path
            cap.clock_seen = (cap.instance_dir / "trace_clock").read_text()
            worker.go.set()
            worker.join(30)
            _write_noise()  # the main thread's own syscalls must not be traced
            sync_fs(lab.mountpoint)
    finally:
        worker.go.set()
        worker.join(30)
    return cap, worker


# --------------------------------------------------------------------------- no root needed


def test_kernel_dev_is_the_internal_device_number() -> None:
    assert kernel_dev(7, 0) == 7 << 20
    assert kernel_dev(7, 3) == 7340035
    assert kernel_dev(259, 1) == (259 << 20) | 1


def test_lost_in_stats_sums_overruns_and_drops() -> None:
    stats = "entries: 5\noverrun: 3\ncommit overrun: 1\nbytes: 100\ndropped events: 2\nread events: 9\n"
    assert lost_in_stats(stats) == 6


def test_without_root_the_capture_says_so_and_how_to_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    availability = tracefs_available()
    assert not availability.available and "root" in availability.reason
    with pytest.raises(NeedsRoot) as err:
        with TraceCapture(tmp_path):
            pass
    assert "--dir" in hint_of(err.value)


@pytest.mark.root
def test_unmounted_tracefs_is_reported_with_the_mount_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("sqlwa._system.tracefs.TRACEFS_MOUNTS", (str(tmp_path / "nope"),))
    availability = tracefs_available()
    assert not availability.available and "not mounted" in availability.reason
    assert "mount -t tracefs nodev /sys/kernel/tracing" in availability.hint
    with pytest.raises(CaptureError) as err:
        with TraceCapture(tmp_path):
            pass
    assert "mount -t tracefs" in hint_of(err.value)


# --------------------------------------------------------------------------- real captures


@pytest.mark.root
@pytest.mark.tracefs
@pytest.mark.parametrize("fs", ["ext4", "ext4-journal", "xfs", "btrfs"])
def test_capture_records_block_syscalls_and_markers_of_the_run(fs: str, tmp_path: Path) -> None:
    with LabFilesystem(fs, LabOptions(image_size="320M")) as lab:
        cap, worker = run_workload_in_capture(lab, tmp_path / "out")
        dev = lab.dev
    rows = parse(cap.trace_path)
    summary = cap.describe()
    assert cap.trace_summary == {"events": len(rows), "lost_events": 0}
    assert summary["levels"]["block"]["captured"] and summary["levels"]["syscall"]["captured"]

    blocks = block_rows(rows)
    assert {(int(b["major"]), int(b["minor"])) for b in blocks} == {dev}, "only the lab's device is recorded"
    issues = [b for b in blocks if b["event"] == "block_rq_issue"]
    assert any("W" in b["rwbs"] for b in issues) and any(b["event"] == "block_rq_complete" for b in blocks)

    syscalls = syscall_rows(rows, worker.tid)
    names = [re.match(r"sys_(\w+)", r["body"]).group(1) for r in syscalls]
    for call in ("pwrite64", "fsync", "fdatasync", "ftruncate", "unlink", "openat"):
        assert call in names, f"no {call} in the workload thread's syscalls"
    # write(2) is not traced (the thread's writes are its marker writes, already in the
    # trace as markers); sys_exit only for the sync family and openat
    assert "write" not in names
    assert names.count("fsync") == 2 and names.count("fdatasync") == 2 and names.count("openat") >= 2
    assert names.count("pwrite64") == 2 and names.count("ftruncate") == 1 and names.count("unlink") == 1
    main_tid = threading.get_native_id()
    assert not [r for r in rows if r["pid"] == main_tid and r["body"].startswith("sys_")], "main thread not filtered"

    fsync_enter = next(r for r in syscalls if r["body"].startswith("sys_fsync("))
    fsync_exit = next(r for r in syscalls if r["body"].startswith("sys_fsync ->"))
    during_fsync = rows[rows.index(fsync_enter) : rows.index(fsync_exit)]
    flushes = [b for b in block_rows(during_fsync) if b["event"] == "block_rq_issue" and b["rwbs"].startswith("F")]
    assert flushes, "fsync must reach the device as a cache flush (FF / preflush)"

    markers = [r for r in rows if r["body"].startswith("tracing_mark_write: sqlwa-test")]
    assert [m["body"].split()[2] for m in markers] == ["commit-begin", "commit-end"]
    assert rows.index(markers[0]) < rows.index(fsync_enter) < rows.index(markers[1])
    assert "[mono]" in cap.clock_seen
    for marker, stamped_ns in zip(markers, worker.marker_ns):
        # recorded just after the thread read CLOCK_MONOTONIC (the trace prints whole µs)
        assert -1e-5 <= marker["ts"] - stamped_ns / 1e9 < 1.0, "trace clock must be CLOCK_MONOTONIC"

    counts = summary["event_counts"]
    assert counts["sys_enter_fsync"] == 1 and counts["tracing_mark_write"] == 2
    assert counts["block_rq_issue"] == len(issues)


@pytest.mark.root
@pytest.mark.tracefs
def test_tmpfs_has_no_block_level_and_no_tid_means_no_syscall_level(tmp_path: Path) -> None:
    with LabFilesystem("tmpfs", LabOptions(image_size="32M")) as lab:
        with TraceCapture(tmp_path / "out", dev=None, pid=None) as cap:
            with open(cap.marker_path, "w") as marker:
                marker.write("sqlwa-test only a marker\n")
    levels = cap.describe()["levels"]
    assert levels["block"]["captured"] is False and "absent" in levels["block"]["reason"]
    assert levels["syscall"]["captured"] is False
    assert cap.trace_summary == {"events": 1, "lost_events": 0}
    assert not (tracefs_root() / "instances" / cap.instance_name).exists()
    del lab


@pytest.mark.root
@pytest.mark.tracefs
def test_lost_events_fail_the_capture_unless_allowed(tmp_path: Path) -> None:
    payload = tmp_path / "markers.txt"
    payload.write_bytes((b"x" * 1000 + b"\n") * 20000)  # 20000 one-KiB markers in one burst

    def flood(marker_path: str) -> None:
        subprocess.run(["dd", f"if={payload}", f"of={marker_path}", "bs=1001", "status=none"], check=True)

    with pytest.raises(TraceLossError) as err:
        with TraceCapture(tmp_path / "strict", buffer_kb=8) as cap:
            flood(cap.marker_path)
    assert "lost" in str(err.value) and "--allow-loss" in hint_of(err.value) and "--buffer-kb" in hint_of(err.value)
    assert cap.trace_summary["lost_events"] > 0
    assert not (tracefs_root() / "instances" / cap.instance_name).exists()

    with TraceCapture(tmp_path / "lenient", buffer_kb=8, allow_loss=True) as cap:
        flood(cap.marker_path)
    assert cap.trace_summary["lost_events"] > 0
    assert cap.trace_summary["events"] + cap.trace_summary["lost_events"] >= 20000


@pytest.mark.root
@pytest.mark.tracefs
def test_a_run_longer_than_the_buffer_is_drained_while_it_goes(tmp_path: Path) -> None:
    """The drain waits until a CPU's buffer is a quarter full; a run that writes several
    times the buffer (2.6 MB through 512 KiB per CPU) must still lose nothing."""
    line = b"sqlwa-test " + b"y" * 100 + b"\n"
    with TraceCapture(tmp_path / "out", buffer_kb=512) as cap:
        fd = os.open(cap.marker_path, os.O_WRONLY)
        try:
            for _ in range(100):
                for _ in range(200):
                    os.write(fd, line)
                time.sleep(0.01)
        finally:
            os.close(fd)
    assert cap.trace_summary == {"events": 20000, "lost_events": 0}
    assert cap._drain.drains > 0, "the drain must run while recording, not only at the end"
    assert cap.describe()["event_counts"]["tracing_mark_write"] == 20000


@pytest.mark.root
@pytest.mark.tracefs
def test_instance_and_drain_are_gone_after_an_exception(tmp_path: Path) -> None:
    threads_before = threading.active_count()
    with pytest.raises(RuntimeError, match="boom"):
        with TraceCapture(tmp_path / "out", pid=threading.get_native_id()) as cap:
            with open(cap.marker_path, "w") as marker:
                marker.write("sqlwa-test before the error\n")
            raise RuntimeError("boom")
    assert not (tracefs_root() / "instances" / cap.instance_name).exists()
    assert threading.active_count() == threads_before
    assert "before the error" in cap.trace_path.read_text()  # the raw capture is kept


@pytest.mark.root
@pytest.mark.tracefs
def test_a_marker_file_left_open_is_reported(tmp_path: Path) -> None:
    cap = TraceCapture(tmp_path / "out")
    marker = None
    try:
        with pytest.raises(CaptureError, match="still open") as err:
            with cap:
                marker = open(cap.marker_path, "w")
        assert "close the marker file" in hint_of(err.value)
    finally:
        if marker:
            marker.close()
        remove_instance(tracefs_root() / "instances" / cap.instance_name)


@pytest.mark.root
@pytest.mark.tracefs
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("stage", ["instance", "configure", "drain", "capturing"])
def test_a_signal_during_the_capture_leaves_nothing(tmp_path: Path, stage: str, signum: int) -> None:
    kill_at_stage_and_check(tmp_path, "ext4", stage, signum, pause=True, capture=True)


@pytest.mark.root
@pytest.mark.tracefs
def test_output_on_the_traced_device_is_refused() -> None:
    with LabFilesystem("ext4", LabOptions(image_size="320M")) as lab:
        with pytest.raises(CaptureError, match="on the traced device"):
            with TraceCapture(Path(lab.mountpoint) / "out", dev=lab.dev):
                pass
