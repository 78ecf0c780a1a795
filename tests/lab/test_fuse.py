"""--fuse: a FUSE daemon between SQLite and the lab filesystem (#17).

Truth is the daemon's own syscalls as strace sees them (``strace -f -Y`` of the run, the
daemon's lines told apart by its name), the block bytes counted from the raw trace with
the tests' own regular expressions (trace_truth), where the lower files' blocks are by
``filefrag`` (FIEMAP asked by e2fsprogs, not by sqlwa), the daemon's CPU time as the
kernel counts it for its process (/proc/PID/stat, read by the test), and SQLite's
documented sync sequence at the VFS level. Every exit path leaves neither daemon nor
mount: exceptions, SIGINT and SIGTERM of a run, and SIGKILL followed by ``sqlwa lab
cleanup``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from helpers import filefrag_sectors, leftovers_after_release, sqlwa, sqlwa_leftovers
from sqlwa import _system
from sqlwa.analysis import attribution, traceparse, windows
from sqlwa.analysis.fuse_effect import changes
from sqlwa.capture import tracing
from sqlwa.capture.tracing import checked_comm
from sqlwa.errors import CaptureError, UnsupportedFilesystem, UsageError
from sqlwa.lab import fslayout, fuse
from sqlwa.lab.cleanup import cleanup_leftovers
from sqlwa.lab.filesystem import LAB_MARK, LAB_MARK_TEXT, LabFilesystem, LabOptions
from sqlwa.lab.layers import FuseDaemonLayer
from sqlwa.measure import engine
from trace_truth import (
    ISSUE_BODY,
    ISSUE_SECTOR,
    MARKER,
    in_commit_windows,
    trace_records,
    unattributed_write_bytes,
    write_bytes_since_commit,
)

needs_daemon = pytest.mark.skipif(fuse.daemon_binary(fuse.SQLWA_DAEMON) is None, reason="run ./scripts/setup")
needs_bindfs = pytest.mark.skipif(
    shutil.which("bindfs") is None, reason="bindfs is not installed (scripts/system-deps)"
)

# ----------------------------------------------------------------------------- no root needed


def test_a_layer_is_one_of_the_named_ones_and_needs_a_lab() -> None:
    with pytest.raises(UsageError, match="not a FUSE layer"):
        fuse.check_fuse("sshfs")
    proc = sqlwa("run", "--fuse", "passthrough", "-n", "3", "-o", "/nonexistent/x", check=False)
    assert proc.returncode == 2 and "--fuse shapes a lab filesystem" in proc.stderr


def test_a_kernel_without_fuse_or_dev_fuse_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_system.mounts, "kernel_filesystems", lambda: {"ext4"})
    with pytest.raises(UnsupportedFilesystem, match="the kernel has no FUSE"):
        fuse.check_fuse("passthrough")
    monkeypatch.setattr(_system.mounts, "kernel_filesystems", lambda: {"ext4", "fuse"})
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: False if p == "/dev/fuse" else real_exists(p))
    with pytest.raises(UnsupportedFilesystem, match="there is no /dev/fuse"):
        fuse.check_fuse("passthrough")


def test_a_daemon_that_is_not_installed_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_system.mounts, "kernel_filesystems", lambda: {"fuse"})
    monkeypatch.setattr(fuse, "daemon_binary", lambda daemon: None)
    with pytest.raises(UnsupportedFilesystem, match="bindfs is not installed") as caught:
        fuse.check_fuse("bindfs")
    assert "apt-get install bindfs" in str(caught.value.args[1])


def test_a_comm_the_filter_cannot_quote_is_refused() -> None:
    assert checked_comm("fuse-0a1b2c3d") == "fuse-0a1b2c3d"
    for bad in ('a"b', "x" * 16, "", "a b"):
        with pytest.raises(CaptureError):
            checked_comm(bad)


def test_changes_are_said_only_where_the_counts_show_them() -> None:
    calls = dict.fromkeys(("fsync", "fdatasync", "sync_file_range", "pwrite64", "pwrite64_bytes", "ftruncate"), 0.0)
    sqlite = {**calls, "fdatasync": 4.0, "pwrite64": 5.0, "pwrite64_bytes": 20480.0}
    bindfs = {**calls, "fsync": 4.0, "pwrite64": 5.0, "pwrite64_bytes": 20480.0}
    assert changes(sqlite, bindfs) == [
        "the FUSE layer turned fdatasync into fsync: SQLite's 4.00 fdatasync per commit reached the lab "
        "filesystem as 4.00 fsync"
    ]
    same = {**calls, "fdatasync": 4.0, "pwrite64": 5.0, "pwrite64_bytes": 20480.0}
    assert changes(sqlite, same) == ["the FUSE layer passed fdatasync on as fdatasync (4.00 → 4.00 per commit)"]
    kernel = {**calls, "fdatasync": 4.0}
    assert changes(sqlite, kernel)[-1].startswith("no write went through the daemon")


# ----------------------------------------------------------------------------- the layer itself

MODES = {
    "passthrough": {"writeback_cache": False, "passthrough": False},
    "passthrough-writeback": {"writeback_cache": True, "passthrough": False},
    "passthrough-kernel": {"writeback_cache": False, "passthrough": True},
}


@pytest.mark.root
@needs_daemon
@pytest.mark.parametrize("mode", list(MODES))
def test_the_daemon_mirrors_the_lower_directory_and_reports_what_it_was_granted(mode: str) -> None:
    with LabFilesystem("tmpfs", LabOptions(image_size="16M"), [FuseDaemonLayer(mode)]) as lab:
        data, lower = Path(lab.data_dir), Path(lab.mountpoint)
        assert data == Path(lab.lab.lab_dir) / "fuse" and _system.mounts.mount_at(str(data)).fstype == "fuse"  # type: ignore[union-attr]
        fd = os.open(data / "a.db", os.O_CREAT | os.O_RDWR, 0o640)
        os.pwrite(fd, b"x" * 5000, 0)
        os.fdatasync(fd)
        os.ftruncate(fd, 4096)
        os.close(fd)
        os.rename(data / "a.db", data / "b.db")
        (data / "d").mkdir()
        assert (lower / "b.db").read_bytes() == b"x" * 4096 and (lower / "d").is_dir()
        assert sorted(os.listdir(data)) == ["b.db", "d"] and os.stat(data / "b.db").st_mode & 0o777 == 0o640
        os.unlink(data / "b.db")
        assert not (lower / "b.db").exists()
        facts = lab.describe()["fuse"]
        assert {k: facts["granted"][k] for k in ("writeback_cache", "passthrough")} == MODES[mode]
        assert facts["comm"] == f"fuse-{lab.name.rsplit('-', 1)[1]}"
        threads = Path(f"/proc/{facts['pid']}/task")
        # fuser's event loop thread took the daemon's name back: the trace's filter sees it
        assert {(t / "comm").read_text().strip() for t in threads.iterdir()} == {facts["comm"]}
    assert leftovers_after_release(os.getpid()) == []


@pytest.mark.root
@needs_daemon
def test_passthrough_the_kernel_refuses_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A stack depth of 0 makes the kernel keep passthrough off (a test-only option)."""
    (tmp_path / "lower").mkdir()
    (tmp_path / "mnt").mkdir()
    daemon = fuse.daemon_binary(fuse.SQLWA_DAEMON)
    argv = [daemon, str(tmp_path / "lower"), str(tmp_path / "mnt"), "--kernel-passthrough", "--max-stack-depth", "0"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)  # type: ignore[arg-type]
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "sqlwa-fuse: FUSE passthrough refused: the kernel did not turn passthrough on for this connection "
        "(FUSE_DEV_IOC_BACKING_OPEN: EPERM)"
    ]
    assert _system.mounts.mount_at(str(tmp_path / "mnt")) is None


@pytest.mark.root
def test_a_daemon_refusal_becomes_one_error_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What sqlwa makes of a daemon that exits 2 with its reason (as sqlwa-fuse does when
    the kernel refuses an option): that line, as an UnsupportedFilesystem (exit 2)."""
    fake = tmp_path / "sqlwa-fuse"
    fake.write_text("#!/bin/sh\necho 'sqlwa-fuse: FUSE passthrough refused: test' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setattr(fuse, "daemon_binary", lambda daemon: str(fake))
    with pytest.raises(UnsupportedFilesystem, match=r"^--fuse passthrough-kernel: FUSE passthrough refused: test$"):
        with LabFilesystem("tmpfs", LabOptions(image_size="16M"), [FuseDaemonLayer("passthrough-kernel")]):
            pass
    assert leftovers_after_release(os.getpid()) == []


@pytest.mark.root
@needs_daemon
def test_an_exception_inside_leaves_no_daemon_and_no_mount() -> None:
    with pytest.raises(RuntimeError):
        with LabFilesystem("tmpfs", LabOptions(image_size="16M"), [FuseDaemonLayer("passthrough")]) as lab:
            pid = lab.fuse.process.pid  # type: ignore[union-attr]
            (Path(lab.data_dir) / "open").write_text("x")
            held = open(Path(lab.data_dir) / "open")  # still open on the FUSE mount
            raise RuntimeError("boom")
    with pytest.raises(OSError, match="not connected"):  # its daemon is gone
        held.close()
    assert _system.processes.pid_is_dead(pid)
    assert leftovers_after_release(os.getpid()) == []


# ----------------------------------------------------------------------------- a run through the layer

# SQLite's documented per-commit xSync sequence (docs/reference/sqlite-commit-syncs.md),
# as tests/e2e/test_run_cli.py checks it without a layer.
VFS_SYNCS = {("delete", "full"): 3, ("wal", "full"): 1}
STRACE_LINE = re.compile(r"^(\d+)<(?P<comm>[^>]*)>\s+(?P<name>\w+)\(")


def fuse_run(tmp_path: Path, layer: str, journal: str = "delete", txns: int = 30) -> tuple[dict, Path, Counter]:
    """A run through ``layer`` under ``strace -f -Y``; returns its summary, its output
    directory and strace's count of the daemon's fsync-family calls by name."""
    out, log = tmp_path / "out", tmp_path / "strace.log"
    strace = ["strace", "-f", "-Y", "-qq", "-o", str(log), "-e", "trace=fsync,fdatasync,sync_file_range"]
    cmd = [*strace, sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M"]
    cmd += ["--fuse", layer, "-j", journal, "--sync", "full", "-n", str(txns), "--warmup", "2", "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    comm = summary["config"]["lab"]["fuse"]["comm"]
    lines = (STRACE_LINE.match(line) for line in log.read_text(errors="replace").splitlines())
    return summary, out, Counter(m["name"] for m in lines if m and m["comm"] == comm)


def daemon_calls_in_trace(out: Path, comm: str) -> Counter:
    events = pl.read_parquet(out / "events.parquet")
    rows = events.filter((pl.col("kind") == "syscall_enter") & (pl.col("comm").cast(pl.String) == comm))
    return Counter(rows["name"].cast(pl.String).to_list())


@pytest.mark.root
@pytest.mark.tracefs
@needs_daemon
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize(
    "layer,journal",
    [("passthrough", "delete"), ("passthrough-writeback", "wal"), ("passthrough-kernel", "delete")]
    + [pytest.param("bindfs", "delete", marks=needs_bindfs)],
)
def test_the_daemons_syncs_equal_strace_and_the_block_bytes_add_up(tmp_path: Path, layer: str, journal: str) -> None:
    summary, out, truth = fuse_run(tmp_path, layer, journal)
    layer_facts = summary["config"]["lab"]["fuse"]
    assert summary["config"]["fuse"] == layer and "syscall" in summary["levels"]
    traced = daemon_calls_in_trace(out, layer_facts["comm"])
    syncs = ("fsync", "fdatasync", "sync_file_range")
    assert {n: traced[n] for n in syncs} == {n: truth[n] for n in syncs}, (traced, truth)
    assert sum(truth.values()) > 0
    # sqlwa-fuse passes each sync on as the same call; bindfs makes every one an fsync
    if layer_facts["daemon"] == "bindfs":
        assert truth["fdatasync"] == 0 and summary["fuse"]["changes"][0].startswith("the FUSE layer turned fdatasync")
    else:
        assert truth["fsync"] == 0 and summary["per_commit"]["fuse_fdatasync_calls"] > 0
    # SQLite's side is what SQLite documents, layer or not
    assert summary["per_commit"]["vfs_sync_calls"] == VFS_SYNCS[(journal, "full")]
    # the block bytes of the run, the daemon's included, are the device's total
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    commits = pl.read_parquet(out / "commits.parquet").filter(~pl.col("warmup"))
    since_first = write_bytes_since_commit(out / "trace.txt", dev, commits["index"].min())
    assert summary["amortized"]["write_bytes"] == since_first > 0
    # the lower files' extents give the database's bytes their cause, as without the layer
    # (on ext4 no byte is left unattributed), counted again from the raw trace
    layout = json.loads((out / "layout.json").read_text())
    categories = summary["bytes_by_category"]
    assert categories["amortized_total"]["unattributed"] == unattributed_write_bytes(out / "trace.txt", dev, layout)
    assert categories["unattributed_share"] == 0.0
    files = ("db", "journal") if journal == "delete" else ("wal",)
    assert all(categories["per_commit"][file] > 0 for file in files), categories["per_commit"]
    # the daemon's CPU time over the run, spread over every transaction it served
    cpu = summary["fuse"]["daemon_cpu"]
    assert cpu["transactions"] == 30 + 2 and cpu["resolution_ms"] == 1000 / os.sysconf("SC_CLK_TCK")
    assert cpu["per_transaction_ms"] == pytest.approx((cpu["user_ms"] + cpu["sys_ms"]) / 32)
    assert not [x for x in sqlwa_leftovers() if layer_facts["comm"] in x]


# ----------------------------------------------------------------- attribution through the layer

BIO_QUEUE = re.compile(r"^(?P<dev>\d+,\d+) (?P<rwbs>\S+) (?P<sector>\d+) \+ (?P<sectors>\d+) \[(?P<comm>.*)\]$")
WARMUP = 2


def fuse_truth_run(out: Path, layer: str) -> dict:
    """12 PERSIST + FULL commits (2 warm-up) through ``layer`` on ext4 inside a capture, the
    engine mapping through the lower directory as ``sqlwa run --fuse`` does. Returns the
    trace, the device, the daemon's comm, the layout and, by filefrag before the lab goes,
    the sectors of the lower database and journal (PERSIST keeps the journal's file)."""
    with LabFilesystem("ext4", LabOptions(image_size="256M"), [FuseDaemonLayer(layer)]) as lab:
        assert lab.fuse is not None and lab.fuse.lower is not None
        cap = tracing.TraceCapture(out, dev=lab.dev, pid=threading.get_native_id(), comms=[lab.fuse.comm])
        settings = engine.RunSettings(
            journal="persist",
            sync="full",
            length=engine.Length(txns=10, warmup=WARMUP),
            instruments=engine.Instruments(map_extents=True, extents_from=lab.fuse.lower),
        )
        with cap:
            result = engine.run_workload(
                engine.load_scenario("mobibench-insert"),
                settings,
                Path(lab.data_dir),
                marker_path=Path(cap.marker_path),
            )
            lab.sync()
        lower_db = Path(lab.fuse.lower) / Path(result.info["db_path"]).name
        truth = {"db": filefrag_sectors(lower_db), "journal": filefrag_sectors(Path(f"{lower_db}-journal"))}
        return {
            "trace": cap.trace_path,
            "dev": lab.dev,
            "daemon": lab.fuse.comm,
            "layout": fslayout.probe(lab.spec.kernel_type, lab.loop_device),
            "truth": truth,
        }


def measured_window_records(trace: Path):
    """(event, body) of every trace line inside a measured commit's window."""
    records = (m.group("event", "body") for m in trace_records(trace))
    marker_in = lambda event, body: MARKER.match(body) if event == "tracing_mark_write" else None  # noqa: E731
    for index, event, body in in_commit_windows(records, marker_in):
        if index >= WARMUP:
            yield event, body


def truth_tally(run: dict) -> Counter:
    """From the raw trace, inside measured windows: write bytes issued to the device in all,
    and in the lower files' filefrag extents by file; write bytes queued by the daemon and
    by every submitter (block_bio_queue, whose comm is who queued the bio)."""
    dev = "{},{}".format(*run["dev"])
    tally: Counter = Counter()
    for event, body in measured_window_records(Path(run["trace"])):
        issue = ISSUE_BODY.match(body) if event == "block_rq_issue" else None
        queued = BIO_QUEUE.match(body) if event == "block_bio_queue" else None
        if issue and issue["dev"] == dev and "W" in issue["rwbs"]:
            sector, size = int(ISSUE_SECTOR.search(body)["sector"]), int(issue["bytes"])  # type: ignore[index]
            tally["device"] += size
            for file, ranges in run["truth"].items():
                tally[file] += size * any(a <= sector < b for a, b in ranges)
        if queued and queued["dev"] == dev and "W" in queued["rwbs"]:
            size = int(queued["sectors"]) * 512
            tally["queued"] += size
            tally["daemon"] += size * (queued["comm"] == run["daemon"])
    return tally


@pytest.mark.root
@pytest.mark.tracefs
@needs_daemon
@pytest.mark.parametrize("layer", ["passthrough", "passthrough-writeback", "passthrough-kernel"])
def test_file_bytes_through_the_layer_are_those_in_the_lower_files_extents(tmp_path: Path, layer: str) -> None:
    run = fuse_truth_run(tmp_path, layer)
    events, _ = traceparse.parse(run["trace"], format="ftrace")
    wins = windows.commit_windows(events)
    tid = windows.run_tid(events)
    attributed = attribution.attribute(events, wins, run["dev"], tid, "persist", "ext4", run["layout"], run["daemon"])
    per_commit = attribution.bytes_per_commit(attributed, wins).filter(pl.col("index") >= WARMUP)
    truth = truth_tally(run)
    assert truth["db"] > 0 and truth["journal"] > 0, truth
    assert per_commit["bytes_db"].sum() == truth["db"] and per_commit["bytes_journal"].sum() == truth["journal"]
    # the daemon wrote every byte of the files and nothing else; with jbd2's journal
    # blocks, the bytes queued by every submitter are the device's total
    assert truth["daemon"] == truth["db"] + truth["journal"], truth
    assert truth["queued"] == truth["device"], truth
    assert per_commit["bytes_unattributed"].sum() == 0
    first = wins.filter(~pl.col("warmup"))["win_start_ns"].min()
    assert attribution.totals(attributed.filter(pl.col("time_ns") >= first))["unattributed"] == 0


def threads_runtime_ns(pid: int) -> dict[int, int]:
    """Each thread's time on a CPU, ns (schedstat's first field: the scheduler's own sum)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        found[int(task.name)] = int((task / "schedstat").read_text().split()[0])
    return found


def _ran_since(before: dict[int, int], pid: int) -> int:
    """Nanoseconds the daemon's threads have run since ``before`` (schedstat sums)."""
    now = threads_runtime_ns(pid)
    return sum(now[t] - before.get(t, 0) for t in now)


@pytest.mark.root
@needs_daemon
def test_the_daemons_cpu_time_is_what_its_threads_ran() -> None:
    """sqlwa reads the daemon's CPU time from /proc/PID/stat (every thread, 10 ms ticks);
    the scheduler's nanosecond sums of its threads (schedstat) must agree within the ticks."""
    with LabFilesystem("tmpfs", LabOptions(image_size="16M"), [FuseDaemonLayer("passthrough")]) as lab:
        assert lab.fuse is not None and lab.fuse.process is not None
        pid = lab.fuse.process.pid
        before, ran_before = lab.fuse.cpu_time(), threads_runtime_ns(pid)
        tick = 1e9 / os.sysconf("SC_CLK_TCK")
        # Work until the daemon has run 10 ticks, not for a fixed second: on a loaded host
        # the writer is starved and a second of wall time may hold only a tick or two of
        # the daemon's CPU, too few for the tick-granular figure to be compared at all.
        fd = os.open(Path(lab.data_dir) / "busy", os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + 120.0
        while _ran_since(ran_before, pid) < 10 * tick and time.monotonic() < deadline:
            for _ in range(50):  # every call a request the daemon serves
                os.pwrite(fd, b"x" * 512, 0)
                os.fdatasync(fd)
        os.close(fd)
        after, ran_after = lab.fuse.cpu_time(), threads_runtime_ns(pid)
    # a thread that ended would take its schedstat with it; one that began ran from 0
    assert ran_before.keys() <= ran_after.keys(), "a thread ended: schedstat cannot sum it"
    ran = sum(ran_after[t] - ran_before.get(t, 0) for t in ran_after)
    counted = after.user_ns - before.user_ns + after.sys_ns - before.sys_ns
    assert ran >= 10 * tick, f"the daemon ran {ran / 1e6:.1f} ms in 120 s of requests"
    assert abs(counted - ran) <= 2 * tick + 5e6 * len(ran_after), (counted, ran)


# ----------------------------------------------------------------------------- every exit path


def start_run(tmp_path: Path, layer: str = "passthrough") -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "--fuse", layer]
    cmd += ["-n", "1000000", "-o", str(tmp_path / "out")]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_daemon(run: subprocess.Popen, timeout: float = 120) -> list[str]:
    """Wait until the run's daemon serves and the workload writes through it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = sqlwa_leftovers(run.pid)
        if any(x.startswith("daemon:") for x in left) and any("trace.txt" in p.name for p in _out_files(run)):
            return left
        if run.poll() is not None:
            raise AssertionError(f"the run ended first: {run.communicate()[1]}")
        time.sleep(0.1)
    raise AssertionError(f"no daemon serving after {timeout} s: {sqlwa_leftovers(run.pid)}")


def _out_files(run: subprocess.Popen) -> list[Path]:
    out = Path(run.args[-1])  # type: ignore[index]
    return list(out.iterdir()) if out.is_dir() else []


@pytest.mark.root
@pytest.mark.tracefs
@needs_daemon
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("layer", ["passthrough", pytest.param("bindfs", marks=needs_bindfs)])
def test_a_signalled_run_leaves_no_daemon_and_no_mount(tmp_path: Path, signum: int, layer: str) -> None:
    run = start_run(tmp_path, layer)
    try:
        left = wait_for_daemon(run)
        assert any(x.startswith("mount:") and "/fuse " in x for x in left), left
        run.send_signal(signum)
        assert run.wait(timeout=120) == 130, run.communicate()[1]
        assert leftovers_after_release(run.pid) == []
    finally:
        _kill_and_clean(run)


@pytest.mark.root
@pytest.mark.tracefs
@needs_daemon
def test_a_killed_runs_daemon_dies_with_it_and_cleanup_removes_the_mounts(tmp_path: Path) -> None:
    run = start_run(tmp_path)
    try:
        wait_for_daemon(run)
        run.kill()
        run.wait()
        # The kernel sends the daemon its PR_SET_PDEATHSIG at once; it is gone once it is
        # scheduled to die (seconds on a loaded machine), while its mounts stay for cleanup.
        daemons = lambda: [x for x in sqlwa_leftovers(run.pid) if x.startswith("daemon:")]  # noqa: E731
        assert _system.settle.settled(lambda: not daemons()), daemons()
        left = sqlwa_leftovers(run.pid)
        assert [x for x in left if x.startswith("mount:") and "/fuse " in x], left
        proc = sqlwa("lab", "cleanup")
        assert f"sqlwa-lab-{run.pid}-" in proc.stdout
        assert leftovers_after_release(run.pid) == []
    finally:
        _kill_and_clean(run)


@pytest.mark.root
@needs_daemon
def test_cleanup_stops_a_daemon_whose_run_is_gone_and_nothing_else(tmp_path: Path) -> None:
    """A daemon that outlived its run (here: started by hand for a lab directory whose
    owner, a finished process, is gone) is found by its name and stopped, its mount
    removed; a daemon of the same binary under another name is left alone."""
    owner = subprocess.Popen(["true"])
    owner.wait()
    token = "00c0ffee"
    lab_dir = Path(tempfile.gettempdir()) / f"sqlwa-lab-{owner.pid}-{token}"
    (lab_dir / "mnt").mkdir(parents=True)
    (lab_dir / "fuse").mkdir()
    (lab_dir / LAB_MARK).write_text(LAB_MARK_TEXT)  # what a lab writes into its directory
    binary = fuse.daemon_binary(fuse.SQLWA_DAEMON)
    (lab_dir / f"fuse-{token}").symlink_to(binary)  # type: ignore[arg-type]
    orphan = subprocess.Popen(
        [str(lab_dir / f"fuse-{token}"), str(lab_dir / "mnt"), str(lab_dir / "fuse")], stdout=subprocess.PIPE
    )
    (tmp_path / "lower").mkdir()
    (tmp_path / "mnt").mkdir()
    bystander = subprocess.Popen([binary, str(tmp_path / "lower"), str(tmp_path / "mnt")], stdout=subprocess.PIPE)  # type: ignore[list-item]
    try:
        assert orphan.stdout.readline() and bystander.stdout.readline()  # type: ignore[union-attr]
        report = cleanup_leftovers()
        assert f"stopped FUSE daemon {orphan.pid} (fuse-{token}) of {lab_dir}" in report, report
        assert orphan.wait(10) is not None and not lab_dir.exists()
        assert bystander.poll() is None and _system.mounts.mount_at(str(tmp_path / "mnt")) is not None
    finally:
        for proc in (orphan, bystander):
            proc.kill()
            proc.wait()
        for mnt in (lab_dir / "fuse", tmp_path / "mnt"):
            if _system.mounts.mount_at(str(mnt)):
                _system.mounts.unmount(str(mnt))
        shutil.rmtree(lab_dir, ignore_errors=True)


def _kill_and_clean(run: subprocess.Popen) -> None:
    if run.poll() is None:
        run.kill()
        run.wait()
    if sqlwa_leftovers(run.pid):
        cleanup_leftovers()


SETUP_CHILD = """
import sys, time
from sqlwa.lab.filesystem import LabFilesystem, LabOptions
from sqlwa.lab.layers import FuseDaemonLayer

def progress(stage):
    print("STAGE", stage, flush=True)
    if stage == sys.argv[1]:
        time.sleep(300)

with LabFilesystem("tmpfs", LabOptions(image_size="16M"), [FuseDaemonLayer("passthrough")], progress=progress):
    progress("inside")
"""


@pytest.mark.root
@needs_daemon
@pytest.mark.parametrize("stage", ["fuse", "ready"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_layer_is_set_up_leaves_nothing(tmp_path: Path, stage: str, signum: int) -> None:
    """At "fuse" the daemon is about to start; at "ready" it serves."""
    script = tmp_path / "child.py"
    script.write_text(SETUP_CHILD)
    child = subprocess.Popen([sys.executable, str(script), stage], stdout=subprocess.PIPE, text=True)
    try:
        while (line := child.stdout.readline()) and line.strip() != f"STAGE {stage}":  # type: ignore[union-attr]
            pass
        assert line, "the child ended before the stage"
        if stage == "ready":
            assert any(x.startswith("daemon:") for x in sqlwa_leftovers(child.pid))
        child.send_signal(signum)
        assert child.wait(timeout=60) != 0
        assert leftovers_after_release(child.pid) == []
    finally:
        _kill_and_clean(child)
