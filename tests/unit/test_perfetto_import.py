"""``sqlwa parse`` of Perfetto traces: traces built here with Perfetto's own builder and
protos (tests/perfetto_traces.py), every field of the event table checked against what
the kernel's tracepoints mean; Android's SQLite slices as commit windows; bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import polars as pl
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

import sqlwa
from helpers import sqlwa_in_process
from perfetto_traces import Bundle
from sqlwa.analysis import android, perfetto, syscalls, traceparse, windows
from sqlwa.errors import TraceParseError

S = 1_000_000_000
T0 = 5 * S + 123  # every timestamp below is T0 + n ns: nanoseconds must survive
APP, DB_THREAD, WORKER, CKPT, NEWBORN = 1000, 1001, 300, 400, 500
U64_MAX = 2**64 - 1


def t(n: int) -> int:
    return T0 + n


def android_trace() -> bytes:
    """A phone's capture: a notes app's transaction (BEGIN … INSERT … COMMIT, with its
    pwrite, fsync, f2fs sync and the write and cache flush it caused), an autocommit
    UPDATE, a rolled back transaction, bundles of two CPUs interleaved in time, the
    compact scheduling encoding, names from the process tree and task events, losses."""
    b = TraceProtoBuilder()
    info = b.add_packet().system_info
    info.utsname.sysname, info.utsname.machine = "Linux", "aarch64"
    tree = b.add_packet().process_tree
    process = tree.processes.add()
    process.pid, process.cmdline[:] = APP, ["com.example.notes"]
    for tid, tgid, name in ((APP, APP, "example.notes"), (DB_THREAD, APP, "notes db"), (WORKER, 2, "kworker/u16:2")):
        thread = tree.threads.add()
        thread.tid, thread.tgid, thread.name = tid, tgid, name
    stats = b.add_packet().ftrace_stats
    stats.phase = pb.FtraceStats.START_OF_TRACE
    for cpu, overrun in ((0, 5), (1, 0)):
        s = stats.cpu_stats.add()
        s.cpu, s.overrun = cpu, overrun

    first = Bundle(b, cpu=1)
    first.event(t(10), DB_THREAD, "print", buf=f"S|{APP}|execute BEGIN EXCLUSIVE;|1\n")
    first.event(t(20), DB_THREAD, "print", buf=f"F|{APP}|execute BEGIN EXCLUSIVE;|1\n")
    first.event(t(25), DB_THREAD, "print", buf=f"S|{APP}|executeForLastInsertedRowId INSERT INTO notes VALUES (?)|2\n")
    first.event(t(30), DB_THREAD, "sys_enter", id=68, args=[5, 0xDEAD, 4096, 8192, 0, 0])
    first.event(t(40), DB_THREAD, "sys_exit", id=68, ret=4096)
    first.event(t(45), DB_THREAD, "print", buf=f"F|{APP}|executeForLastInsertedRowId INSERT INTO notes VALUES (?)|2\n")
    first.event(t(50), DB_THREAD, "print", buf=f"S|{APP}|execute COMMIT;|3\n")
    first.event(t(60), DB_THREAD, "sys_enter", id=82, args=[5, 0, 0, 0, 0, 0])
    first.event(
        t(61), DB_THREAD, "f2fs_sync_file_enter", dev=(254 << 20) | 40, ino=77, pino=2, mode=0o100660, size=8192
    )
    first.block(t(70), DB_THREAD, "block_bio_queue", sector=2048, nr_sector=8, rwbs="WS", comm="notes db")
    first.block(t(72), DB_THREAD, "block_rq_insert", sector=2048, nr_sector=8, bytes=4096, rwbs="WS", comm="notes db")
    first.block(t(75), DB_THREAD, "block_rq_issue", sector=2048, nr_sector=8, bytes=4096, rwbs="WS", comm="notes db")

    second = Bundle(b, cpu=0)  # CPU 0's bundle, read after CPU 1's but interleaved in time
    second.bundle.lost_events = True
    second.block(t(65), NEWBORN, "block_bio_backmerge", sector=2056, nr_sector=8, rwbs="W", comm="sqlite-worker")
    second.event(t(66), NEWBORN, "sys_enter", id=82, args=[9, 0, 0, 0, 0, 0])  # another thread's fsync
    second.block(t(80), 0, "block_rq_complete", sector=2048, nr_sector=8, rwbs="WS", error=0)
    second.block(t(85), WORKER, "block_rq_issue", sector=0, nr_sector=0, bytes=0, rwbs="FF", comm="kworker/u16:2")
    second.block(t(90), 0, "block_rq_complete", sector=U64_MAX, nr_sector=0, rwbs="FF", error=0)
    compact = second.bundle.compact_sched
    compact.intern_table[:] = ["swapper/0", "f2fs_ckpt-254:4"]
    compact.switch_timestamp[:] = [t(62), 3]  # delta-encoded: t(62), t(65)
    compact.switch_next_pid[:] = [CKPT, 0]
    compact.switch_prev_state[:] = [0, 1]
    compact.switch_next_prio[:] = [120, 120]
    compact.switch_next_comm_index[:] = [1, 0]
    newtask = second.event(t(63), APP, "task_newtask", pid=NEWBORN, comm="sqlite-worker", clone_flags=0)
    assert newtask.task_newtask.pid == NEWBORN

    third = Bundle(b, cpu=1)
    third.event(t(95), DB_THREAD, "f2fs_sync_file_exit", dev=(254 << 20) | 40, ino=77, need_cp=0, datasync=0, ret=0)
    third.event(t(96), DB_THREAD, "sys_exit", id=82, ret=0)
    third.event(t(100), DB_THREAD, "print", buf=f"F|{APP}|execute COMMIT;|3\n")
    third.block(t(101), CKPT, "block_bio_frontmerge", sector=4096, nr_sector=8, rwbs="WM", comm="f2fs_ckpt-254:4")
    third.block(
        t(102), CKPT, "block_bio_remap", sector=4096, nr_sector=8, rwbs="WM", old_dev=(254 << 20) | 40, old_sector=96
    )
    third.block(t(103), 0, "block_bio_complete", sector=4096, nr_sector=8, rwbs="WM", error=-5)
    third.event(t(104), DB_THREAD, "ext4_sync_file_enter", dev=(8 << 20) | 1, ino=12, parent=2, datasync=1)
    third.event(t(105), DB_THREAD, "ext4_sync_file_exit", dev=(8 << 20) | 1, ino=12, ret=0)
    # An autocommit UPDATE: its own commit window.
    third.event(t(200), DB_THREAD, "print", buf=f"S|{APP}|executeForChangedRowCount UPDATE notes SET t=?|4\n")
    third.event(t(210), DB_THREAD, "sys_enter", id=83, args=[5, 0, 0, 0, 0, 0])
    third.block(t(220), DB_THREAD, "block_rq_issue", sector=3000, nr_sector=16, bytes=8192, rwbs="FWS", comm="notes db")
    third.event(t(230), DB_THREAD, "sys_exit", id=83, ret=0)
    third.event(t(260), DB_THREAD, "print", buf=f"F|{APP}|executeForChangedRowCount UPDATE notes SET t=?|4\n")
    # A rolled back transaction is no commit, and its writes are not autocommits.
    third.event(t(300), DB_THREAD, "print", buf=f"S|{APP}|execute BEGIN;|5\n")
    third.event(t(301), DB_THREAD, "print", buf=f"F|{APP}|execute BEGIN;|5\n")
    third.event(t(305), DB_THREAD, "print", buf=f"S|{APP}|executeForChangedRowCount DELETE FROM notes|6\n")
    third.event(t(306), DB_THREAD, "print", buf=f"F|{APP}|executeForChangedRowCount DELETE FROM notes|6\n")
    third.event(t(310), DB_THREAD, "print", buf=f"S|{APP}|execute ROLLBACK;|7\n")
    third.event(t(320), DB_THREAD, "print", buf=f"F|{APP}|execute ROLLBACK;|7\n")
    third.event(t(330), DB_THREAD, "print", buf="a marker of no known form\n")

    stats = b.add_packet().ftrace_stats
    stats.phase = pb.FtraceStats.END_OF_TRACE
    for cpu, overrun, dropped in ((0, 9, 1), (1, 2, 0)):
        s = stats.cpu_stats.add()
        s.cpu, s.overrun, s.dropped_events = cpu, overrun, dropped
    return b.serialize()


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    path = tmp_path_factory.mktemp("perfetto") / "phone.perfetto-trace"
    path.write_bytes(android_trace())
    events, report = traceparse.parse(path)
    return path, events, report


# Every column of a row that is not the event's own: what the reader sets for text rows.
DEFAULTS = {
    "dev_major": 0,
    "dev_minor": 0,
    "sequence": 0,
    "action": "",
    "operation": "none",
    "rwbs": "",
    "flags": 0,
    "preflush": False,
    "fua": False,
    "sync": False,
    "meta": False,
    "readahead": False,
    "sector": 0,
    "sectors": 0,
    "bytes": 0,
    "error": 0,
    "remap_dev_major": None,
    "remap_dev_minor": None,
    "remap_sector": None,
    "aux": 0,
    "cgroup_id": 0,
    "fd": None,
    "ret": None,
}


def block(action, operation, rwbs, flags, sector, sectors, nbytes, **more):
    bits = {"preflush": 1, "fua": 2, "sync": 4, "meta": 8, "readahead": 16}
    row = {"dev_major": 179, "dev_minor": 0, "action": action, "operation": operation, "rwbs": rwbs, "flags": flags}
    row |= {name: bool(flags & bit) for name, bit in bits.items()}
    return row | {"sector": sector, "sectors": sectors, "bytes": nbytes, **more}


WS_2048 = block("?", "write", "WS", 4, 2048, 8, 4096)
# (time, cpu, pid, comm, kind, name, the event's own columns) in time order.
EXPECTED = [
    (10, 1, DB_THREAD, "notes db", "marker", "", {}),
    (20, 1, DB_THREAD, "notes db", "marker", "", {}),
    (25, 1, DB_THREAD, "notes db", "marker", "", {}),
    (30, 1, DB_THREAD, "notes db", "syscall_enter", "pwrite64", {"fd": 5, "aux": 4096}),
    (40, 1, DB_THREAD, "notes db", "syscall_exit", "pwrite64", {"ret": 4096}),
    (45, 1, DB_THREAD, "notes db", "marker", "", {}),
    (50, 1, DB_THREAD, "notes db", "marker", "", {}),
    (60, 1, DB_THREAD, "notes db", "syscall_enter", "fsync", {"fd": 5}),
    (61, 1, DB_THREAD, "notes db", "other", "f2fs_sync_file_enter", {}),
    (62, 0, 0, "swapper/0", "other", "sched_switch", {}),
    (63, 0, APP, "example.notes", "other", "task_newtask", {}),
    # equal times: a bundle's own events, then its compact scheduling events
    (65, 0, NEWBORN, "sqlite-worker", "block", "block_bio_backmerge", block("M", "write", "W", 0, 2056, 8, 4096)),
    (65, 0, CKPT, "f2fs_ckpt-254:4", "other", "sched_switch", {}),
    (66, 0, NEWBORN, "sqlite-worker", "syscall_enter", "fsync", {"fd": 9}),
    (70, 1, DB_THREAD, "notes db", "block", "block_bio_queue", WS_2048 | {"action": "Q"}),
    (72, 1, DB_THREAD, "notes db", "block", "block_rq_insert", WS_2048 | {"action": "I"}),
    (75, 1, DB_THREAD, "notes db", "block", "block_rq_issue", WS_2048 | {"action": "D"}),
    (80, 0, 0, "swapper/0", "block", "block_rq_complete", WS_2048 | {"action": "C"}),
    (85, 0, WORKER, "kworker/u16:2", "block", "block_rq_issue", block("D", "flush", "FF", 1, 0, 0, 0)),
    (90, 0, 0, "swapper/0", "block", "block_rq_complete", block("C", "flush", "FF", 1, U64_MAX, 0, 0)),
    (95, 1, DB_THREAD, "notes db", "other", "f2fs_sync_file_exit", {}),
    (96, 1, DB_THREAD, "notes db", "syscall_exit", "fsync", {"ret": 0}),
    (100, 1, DB_THREAD, "notes db", "marker", "", {}),
    (101, 1, CKPT, "f2fs_ckpt-254:4", "block", "block_bio_frontmerge", block("F", "write", "WM", 8, 4096, 8, 4096)),
    (
        102,
        1,
        CKPT,
        "f2fs_ckpt-254:4",
        "block",
        "block_bio_remap",
        block("A", "write", "WM", 8, 4096, 8, 4096, remap_dev_major=254, remap_dev_minor=40, remap_sector=96),
    ),
    (103, 1, 0, "swapper/0", "block", "block_bio_complete", block("C", "write", "WM", 8, 4096, 8, 4096, error=-5)),
    (104, 1, DB_THREAD, "notes db", "other", "ext4_sync_file_enter", {}),
    (105, 1, DB_THREAD, "notes db", "other", "ext4_sync_file_exit", {}),
    (200, 1, DB_THREAD, "notes db", "marker", "", {}),
    (210, 1, DB_THREAD, "notes db", "syscall_enter", "fdatasync", {"fd": 5}),
    (220, 1, DB_THREAD, "notes db", "block", "block_rq_issue", block("D", "write", "FWS", 1 | 4, 3000, 16, 8192)),
    (230, 1, DB_THREAD, "notes db", "syscall_exit", "fdatasync", {"ret": 0}),
    (260, 1, DB_THREAD, "notes db", "marker", "", {}),
    *[(n, 1, DB_THREAD, "notes db", "marker", "", {}) for n in (300, 301, 305, 306, 310, 320, 330)],
]


def test_every_event_arrives_with_every_field(parsed):
    _, events, report = parsed
    assert list(events.columns) == list(traceparse.COLUMNS)
    assert events.height == len(EXPECTED) == report["events"]
    rows = events.with_columns(pl.col(pl.Categorical).cast(pl.String)).to_dicts()
    for row, (n, cpu, pid, comm, kind, name, own) in zip(rows, EXPECTED):
        expected = DEFAULTS | {"time_ns": t(n), "cpu": cpu, "pid": pid, "comm": comm, "kind": kind, "name": name}
        expected |= own
        got = {key: row[key] for key in expected}
        assert got == expected, f"event at T0+{n}"


def test_text_of_markers_syscalls_and_other_events(parsed):
    _, events, _ = parsed
    text = dict(zip(events["time_ns"].to_list(), events["text"].to_list()))
    assert text[t(10)] == f"S|{APP}|execute BEGIN EXCLUSIVE;|1"  # the trailing newline dropped
    assert text[t(330)] == "a marker of no known form"
    assert text[t(30)] == "fd: 0x5, buf: 0xdead, count: 0x1000, pos: 0x2000"
    assert "ino=77" in text[t(61)] and "ino=12" in text[t(104)] and "datasync=1" in text[t(104)]
    assert "next_comm=f2fs_ckpt-254:4" in text[t(62)] and f"next_pid={CKPT}" in text[t(62)]


def test_report_counts_losses_cpus_and_the_syscall_table(parsed):
    path, _, report = parsed
    assert report["files"] == [(str(path), "perfetto")]
    # (9 + 1 dropped - 5) on CPU 0 and 2 - 0 on CPU 1; more than the one flagged bundle
    assert report["lost_events"] == 7
    assert report["bad_records"] == 0
    assert report["perfetto"]["cpus"] == [0, 1]
    assert report["perfetto"]["ftrace_bundles"] == 3
    assert report["perfetto"]["syscall_table"] == "aarch64"
    # The trace's shape, counted here by protobuf's own parse of the same bytes.
    packets = pb.Trace.FromString(path.read_bytes()).packet
    bundles = [p.ftrace_events for p in packets if p.HasField("ftrace_events")]
    events = [e for b in bundles for e in b.event]
    assert report["perfetto"]["packets"] == len(packets)
    assert report["perfetto"]["ftrace_events"] == len(events)
    calls = [getattr(e, e.WhichOneof("event")).id for e in events if e.WhichOneof("event") in ("sys_enter", "sys_exit")]
    assert report["perfetto"]["unknown_syscalls"] == sum(c not in syscalls.NUMBERS["aarch64"] for c in calls) == 0
    named = {t.tid for p in packets for t in p.process_tree.threads if t.name}
    named |= {p.pid for q in packets for p in q.process_tree.processes if p.cmdline}
    named |= {e.task_newtask.pid for e in events if e.HasField("task_newtask")}
    named |= {pid for b in bundles for pid in b.compact_sched.switch_next_pid}
    assert report["perfetto"]["named_tasks"] == len(named)
    assert report["per_action"] == {"Q": 1, "I": 1, "D": 3, "C": 3, "M": 1, "F": 1, "A": 1}


def test_android_sqlite_slices_give_the_commit_windows(parsed):
    _, events, _ = parsed
    wins = android.commit_windows(events)
    assert wins.select("index", "win_start_ns", "win_end_ns", "tid", "statement").rows() == [
        (0, t(10), t(100), DB_THREAD, "transaction"),
        (1, t(200), t(260), DB_THREAD, "executeForChangedRowCount UPDATE notes SET t=?"),
    ]


def test_per_commit_figures_count_the_committing_thread_only(parsed):
    _, events, _ = parsed
    table, source, _ = windows.trace_commits(events)
    assert source.startswith("Android SQLite slices")
    cols = [
        "fsync_calls",
        "fdatasync_calls",
        "pwrite_calls",
        "pwrite_bytes",
        "write_requests",
        "write_bytes",
        "flush_requests",
    ]
    assert table.select(cols).rows() == [(1, 0, 1, 4096, 1, 4096, 1), (1, 1, 0, 0, 1, 8192, 1)]


def test_syscall_numbers_match_the_kernel_headers():
    """The x86_64 and generic (arm64) tables against the system's own headers, where
    installed (linux-libc-dev)."""
    from pathlib import Path

    headers = {
        "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        "aarch64": Path("/usr/include/asm-generic/unistd.h"),
    }
    if not all(p.is_file() for p in headers.values()):
        pytest.skip("needs the kernel's uapi headers (linux-libc-dev)")
    import re

    for machine, header in headers.items():
        defined = dict(re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b", header.read_text()))
        for number, name in syscalls.NUMBERS[machine].items():
            assert int(defined[name]) == number, (machine, name)


# ---------------------------------------------------------------- bad input


def write(tmp_path, data: bytes, name="x.perfetto-trace"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_truncated_trace_names_the_byte_and_lenient_keeps_the_rest(tmp_path):
    data = android_trace()
    path = write(tmp_path, data[:-20])
    with pytest.raises(TraceParseError, match=r"at byte offset \d+: .*truncated"):
        traceparse.parse(path)
    proc = sqlwa_in_process("parse", str(path))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "truncated" in proc.stderr
    events, report = traceparse.parse(path, lenient=True)
    assert report["bad_records"] == 1 and "truncated" in report["bad_messages"][0]
    assert events.height == len(EXPECTED)  # the cut packet was the end-of-trace stats


def test_a_non_perfetto_protobuf_is_refused_in_one_line(tmp_path):
    config = pb.TraceConfig()  # a Perfetto *config*, the file a user may pull by mistake
    config.buffers.add().size_kb = 4096
    config.data_sources.add().config.name = "linux.ftrace"
    for data in (config.SerializeToString(), b"\x0a\x05hello"):
        path = write(tmp_path, data, "config.pb")
        proc = sqlwa_in_process("parse", "--format", "perfetto", str(path))
        assert proc.returncode == 2, proc.stderr
        assert "not a Perfetto trace" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert sqlwa_in_process("parse", "--lenient", "--format", "perfetto", str(path)).returncode == 2


def test_a_trace_without_block_events_says_what_to_record(tmp_path):
    b = TraceProtoBuilder()
    Bundle(b, cpu=0).event(t(1), 1, "print", buf="hello\n")
    proc = sqlwa_in_process("parse", str(write(tmp_path, b.serialize())))
    assert proc.returncode == 2 and "no block events" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_auto_detection_and_json_report(parsed):
    path, _, _ = parsed
    proc = sqlwa_in_process("parse", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["files"] == [{"path": str(path), "format": "perfetto"}]
    assert doc["lost_events"] == 7 and doc["perfetto"]["syscall_table"] == "aarch64"
    assert doc["commits"]["count"] == 2 and doc["commits"]["source"].startswith("Android")


def test_text_formats_are_not_taken_for_perfetto(tmp_path):
    path = write(tmp_path, b"\n\n# tracer: nop\n", "trace.txt")
    from sqlwa.analysis import traceformat

    assert not traceformat.looks_like_perfetto(path)


def test_the_documented_config_is_a_valid_perfetto_config():
    """examples/perfetto-sqlwa.pbtx parses as Perfetto's TraceConfig and records what the
    reader needs: the block events, the fsync family's syscalls, print, 'database'."""
    from google.protobuf import text_format

    from helpers import REPO

    text = (REPO / "examples" / "perfetto-sqlwa.pbtx").read_text()
    config = text_format.Parse(text, pb.TraceConfig())
    ftrace = next(ds.config.ftrace_config for ds in config.data_sources if ds.config.name == "linux.ftrace")
    events = set(ftrace.ftrace_events)
    assert {"block/block_rq_issue", "block/block_rq_complete", "ftrace/print", "raw_syscalls/sys_enter"} <= events
    assert {"sys_fsync", "sys_fdatasync", "sys_pwrite64"} <= set(ftrace.syscall_events)
    assert "database" in ftrace.atrace_categories and ftrace.compact_sched.enabled


# ---------------------------------------------------------------- any length: the external sort


@pytest.fixture(params=["held", "spilled"])
def spill(request, monkeypatch):
    """Whether the rows are sorted in memory (a trace shorter than a run) or in sorted
    runs of two rows on disk, merged: a long trace's path, on these small traces."""
    if request.param == "spilled":
        monkeypatch.setattr(perfetto, "RUN_ROWS", 2)
    return request.param


def tied_trace() -> bytes:
    """Events of two CPUs at the same nanosecond, a syscall among them; CPU 1's bundle is
    read first."""
    b = TraceProtoBuilder()
    one = Bundle(b, cpu=1)
    one.block(t(5), DB_THREAD, "block_rq_issue", sector=8, nr_sector=8, bytes=4096, rwbs="WS", comm="db")
    one.event(t(7), DB_THREAD, "print", buf="late\n")
    zero = Bundle(b, cpu=0)
    zero.event(t(5), DB_THREAD, "sys_enter", id=82, args=[5, 0, 0, 0, 0, 0])
    zero.event(t(5), WORKER, "print", buf="tie\n")
    zero.block(t(6), WORKER, "block_rq_complete", sector=8, nr_sector=8, rwbs="WS", error=0)
    return b.serialize()


def test_events_of_one_nanosecond_keep_reading_order_syscalls_last(tmp_path, spill):
    events, _ = traceparse.parse(write(tmp_path, tied_trace()))
    rows = events.select("time_ns", "cpu", pl.col("kind").cast(pl.String), "text").rows()
    assert rows == [
        (t(5), 1, "block", ""),
        (t(5), 0, "marker", "tie"),
        (t(5), 0, "syscall_enter", "fd: 0x5"),
        (t(6), 0, "block", ""),
        (t(7), 1, "marker", "late"),
    ]


def test_a_trace_sorted_in_runs_reads_as_the_whole_sort(tmp_path, monkeypatch):
    path = write(tmp_path, android_trace())
    held, held_report = traceparse.parse(path)
    monkeypatch.setattr(perfetto, "RUN_ROWS", 3)
    spilled, spilled_report = traceparse.parse(path)
    assert spilled.equals(held) and spilled.height == len(EXPECTED)
    assert spilled_report == held_report


def test_parse_to_parquet_writes_the_table_parse_gives(tmp_path, spill):
    """``sqlwa parse TRACE -o`` and the API: the file reads back as parse's frame (names
    from the process tree included), the report is parse's, and only the output is left."""
    path = write(tmp_path, android_trace())
    events, report = traceparse.parse(path)
    out = tmp_path / "events.parquet"
    assert sqlwa.parse_to_parquet(path, out) == report
    assert pl.read_parquet(out).equals(events)
    # The placeholder the rendered lines carried is no name of any row, nor a category.
    import pyarrow.parquet as pq

    for chunk in pq.read_table(out).column("comm").chunks:
        assert perfetto.UNNAMED not in chunk.dictionary.to_pylist()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet", path.name]
    out.unlink()
    proc = sqlwa_in_process("parse", "--json", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["commits"]["count"] == 2
    assert pl.read_parquet(out).equals(events)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet", path.name]


def test_an_event_that_does_not_read_names_its_packet(tmp_path, spill):
    """An RWBS with a blank (no kernel prints one) makes the rendered line unreadable: the
    error and the lenient count name the packet's byte offset in the trace."""
    b = TraceProtoBuilder()
    Bundle(b, cpu=0).block(t(1), DB_THREAD, "block_rq_issue", sector=8, nr_sector=8, bytes=4096, rwbs="WS")
    first = len(b.serialize())  # the second packet starts where the first ends
    Bundle(b, cpu=1).block(t(2), DB_THREAD, "block_rq_issue", sector=16, nr_sector=8, bytes=4096, rwbs="W S")
    path = write(tmp_path, b.serialize())
    with pytest.raises(
        TraceParseError, match=rf"at byte offset {first}: a block_rq_issue event that does not read .*W S"
    ):
        traceparse.parse(path)
    events, report = traceparse.parse(path, lenient=True)
    assert events.height == 1 and report["bad_records"] == 1
    assert report["bad_messages"][0].startswith(f"{path} at byte offset {first}: a block_rq_issue event")
    out = tmp_path / "events.parquet"
    with pytest.raises(TraceParseError, match=rf"at byte offset {first}: "):
        sqlwa.parse_to_parquet(path, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_long_parse_says_how_far_it_has_got(tmp_path, monkeypatch):
    monkeypatch.setattr(perfetto, "LINES_PER_REPORT", 16)
    said: list[str] = []
    perfetto.parse_to_parquet(write(tmp_path, android_trace()), tmp_path / "events.parquet", progress=said.append)
    read = [int(text.split("%")[0].removeprefix("read ")) for text in said if "% of the trace" in text]
    assert read and read == sorted(read) and 0 < read[0] and read[-1] < 100
    rows = len(EXPECTED)  # the bundles' events and the compact scheduling's
    assert said[len(read) :] == [
        f"read the trace, {rows} events",
        f"put 16 of {rows} events in time order",
        f"put 32 of {rows} events in time order",
        f"writing {rows} events to events.parquet",
    ]


def unnamed_files_in(pid: int, directory) -> list[str]:
    """The files process ``pid`` holds open in ``directory`` that have no name (O_TMPFILE
    or unlinked: /proc shows them as ``... (deleted)``)."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith(str(directory)) and target.endswith("(deleted)"):
            held.append(target)
    return held


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
def test_a_stopped_parse_leaves_nothing_beside_the_output(tmp_path, signum):
    """The temporary files of ``sqlwa parse TRACE -o`` (the sorted runs, the rendered text)
    have no names: nothing is left when the parse is stopped part-way, by Ctrl-C, SIGTERM
    or even SIGKILL (which no handler sees)."""
    b = TraceProtoBuilder()
    bundle = Bundle(b, cpu=0)
    for n in range(1000):
        bundle.block(t(n), DB_THREAD, "block_rq_issue", sector=n, nr_sector=8, bytes=4096, rwbs="WS")
    # A trace is its packets one after another: 2 M events (a few seconds' parse), cheaply.
    trace = write(tmp_path, b.serialize() * 2000)
    argv = [sys.executable, "-m", "sqlwa", "parse", str(trace), "-o", str(tmp_path / "events.parquet")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not unnamed_files_in(proc.pid, tmp_path) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    time.sleep(0.1)  # into the reading of the packets
    assert proc.poll() is None, "the parse should still be going"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    if signum == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert [p.name for p in tmp_path.iterdir()] == [trace.name]


def test_the_reader_s_protos_are_the_pinned_perfetto_package_s():
    """blktrace-parse reads Perfetto traces with traces/proto/perfetto_trace.desc, and
    the tests build them with the ``perfetto`` package: both must be the same protos
    (after a change of the pinned package: .venv/bin/python traces/proto/regenerate.py)."""
    import runpy

    from helpers import REPO

    regenerate = runpy.run_path(str(REPO / "traces" / "proto" / "regenerate.py"))
    assert (REPO / "traces" / "proto" / "perfetto_trace.desc").read_bytes() == regenerate["descriptor_set"]()


def test_compressed_packets_parse_as_the_packets_they_hold(tmp_path, parsed):
    """A trace recorded with ``compression_type: COMPRESSION_TYPE_DEFLATE`` holds its
    packets zlib-deflated in ``compressed_packets`` (as a Trace message); it parses to the
    same table as the plain trace."""
    import zlib

    _, events, report = parsed
    packet = pb.TracePacket()
    packet.compressed_packets = zlib.compress(android_trace())
    path = write(tmp_path, pb.Trace(packet=[packet]).SerializeToString())
    deflated, deflated_report = traceparse.parse(path)
    assert deflated.equals(events)
    assert deflated_report["lost_events"] == report["lost_events"] == 7
    assert deflated_report["perfetto"]["ftrace_bundles"] == report["perfetto"]["ftrace_bundles"]
