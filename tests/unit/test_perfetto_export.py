"""``sqlwa export``: the sample runs (real ``sqlwa run --fs`` captures) as Perfetto traces,
decoded with Perfetto's own ``perfetto_trace_pb2`` (tests/perfetto_traces.py) and checked
against the run's own files: commits.parquet, the trace's block requests and events.

Trace processor cannot run here (its Python package downloads its shell binary from a
host this machine does not reach), so the trace is checked as trace processor would
read it: packets of Perfetto's schema, slices properly begun and ended per track."""

from __future__ import annotations

import polars as pl
import pytest

from helpers import REPO, sqlwa_in_process
from perfetto_traces import ftrace_events, kdev, read_trace, track_slices
from sqlwa.analysis import traceparse, windows
from sqlwa.results import rundir

RUNS = [REPO / "traces" / "samples" / "sqlwa-runs" / name for name in ("ext4-delete", "ext4-wal")]


@pytest.fixture(scope="module", params=RUNS, ids=lambda p: p.name)
def exported(request, tmp_path_factory):
    run = request.param
    out = tmp_path_factory.mktemp("export") / f"{run.name}.perfetto-trace"
    proc = sqlwa_in_process("export", str(run), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    trace = read_trace(out.read_bytes())
    return run, out, trace, proc.stdout


def test_commit_slices_equal_commits_parquet(exported):
    run, _, trace, _ = exported
    _, slices, _ = track_slices(trace)
    got = sorted((s for s in slices if s.track == "commits"), key=lambda s: s.start)
    commits = rundir.commits(run).sort("win_start_ns")
    assert len(got) == commits.height == 32
    for record, row in zip(got, commits.iter_rows(named=True)):
        assert (record.start, record.end) == (row["win_start_ns"], row["win_end_ns"])
        assert record.name == f"{'warm-up ' if row['warmup'] else ''}commit {row['index']}"
        for key in ("index", "warmup", "fsync_calls", "write_bytes", "flush_requests", "logical_bytes", "bytes_wal"):
            assert record.args[key] == row[key], key
        assert record.args["latency_ms"] == pytest.approx(row["latency_ns"] / 1e6)


def test_block_slices_are_the_runs_requests_issue_to_completion(exported):
    run, _, trace, _ = exported
    _, slices, instants = track_slices(trace)
    dev = rundir.lab_device(rundir.summary(run)["config"])
    events = rundir.events(run)
    block = events.filter(pl.col("kind") == "block")
    issued = block.filter(pl.col("action") == "D").sort("time_ns")
    requests = sorted((s for s in slices if s.track.startswith("lane ")), key=lambda s: (s.start, s.args["sector"]))
    assert len(requests) == issued.height
    completions = block.filter(pl.col("action") == "C")
    completion_times = set(completions["time_ns"].to_list())
    writes = rundir.attributed_writes(run)
    category = dict(zip(zip(writes["time_ns"], writes["sector"]), writes["category"].cast(pl.String)))
    for record, row in zip(requests, issued.sort("time_ns", "sector").iter_rows(named=True)):
        assert record.start == row["time_ns"]
        assert (record.args["sector"], record.args["bytes"], record.args["rwbs"]) == (
            row["sector"],
            row["bytes"],
            row["rwbs"],
        )
        assert record.args["flags"] == row["flags"] and record.args["fua"] == row["fua"]
        assert record.args["completed"] and record.end in completion_times and record.end >= record.start
        if row["operation"] == "write":
            assert record.args["category"] == category[(row["time_ns"], row["sector"])]
    flushes = issued.filter((pl.col("operation") == "flush") | pl.col("preflush"))
    marks = [i for i in instants if i.track == f"block {dev[0]}:{dev[1]} cache flushes"]
    assert sorted(i.start for i in marks) == sorted(flushes["time_ns"].to_list()) and flushes.height > 0


def test_lanes_never_overlap(exported):
    _, _, trace, _ = exported
    _, slices, _ = track_slices(trace)
    by_lane: dict[str, list] = {}
    for record in slices:
        if record.track.startswith("lane "):
            by_lane.setdefault(record.track, []).append((record.start, record.end))
    for spans in by_lane.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_vfs_and_syscall_slices_match_the_markers_and_syscalls(exported):
    run, _, trace, _ = exported
    _, slices, _ = track_slices(trace)
    events = rundir.events(run)
    marks = events.filter(pl.col("kind") == "marker")
    begins = marks.filter(pl.col("name").cast(pl.String).is_in(["sync_begin", "trunc_begin", "delete_begin"]))
    ends = marks.filter(pl.col("name").cast(pl.String).is_in(["sync_end", "trunc_end", "delete_end"]))
    vfs = sorted((s for s in slices if s.track == "SQL thread"), key=lambda s: s.start)
    assert [s.start for s in vfs] == sorted(begins["time_ns"].to_list())
    assert [s.end for s in vfs] == sorted(ends["time_ns"].to_list())
    assert {s.name.split()[0] for s in vfs} <= {"xSync", "xTruncate", "xDelete"}
    tid = rundir.summary(run)["config"]["tid"]
    enters = events.filter((pl.col("kind") == "syscall_enter") & (pl.col("pid") == tid)).sort("time_ns")
    calls = sorted((s for s in slices if s.track == f"syscalls (tid {tid})"), key=lambda s: s.start)
    assert [(s.start, s.name) for s in calls] == list(zip(enters["time_ns"], enters["name"].cast(pl.String)))
    fsyncs = [s for s in calls if s.name == "fdatasync"]
    # ftrace's microseconds: a directory's fdatasync may begin and end in the same one
    assert fsyncs and all(s.end >= s.start and s.args["ret"] == 0 for s in fsyncs)
    assert sum(s.end - s.start for s in fsyncs) > 0 and all("count" not in s.args for s in fsyncs)
    assert all(s.args["count"] > 0 for s in calls if s.name == "pwrite64")


def test_raw_events_keep_every_timestamp_and_field(exported):
    run, _, trace, _ = exported
    raw = ftrace_events(trace)
    events = rundir.events(run)
    assert len(raw) == events.height
    assert sorted((ts, cpu, pid) for ts, cpu, pid, _, _ in raw) == sorted(
        zip(events["time_ns"], events["cpu"], events["pid"])
    )
    issues = sorted(
        (ts, body.sector, body.nr_sector, body.bytes, body.rwbs, body.dev)
        for ts, _, _, n, body in raw
        if n == "block_rq_issue"
    )
    d = events.filter(pl.col("action") == "D").sort("time_ns", "sector")
    assert issues == [
        (r["time_ns"], r["sector"], r["sectors"], r["bytes"], r["rwbs"], kdev(r["dev_major"], r["dev_minor"]))
        for r in d.iter_rows(named=True)
    ]
    prints = sorted((ts, body.buf) for ts, _, _, n, body in raw if n == "print")
    markers = events.filter(pl.col("kind") == "marker").sort("time_ns")
    assert prints == [(ts, text + "\n") for ts, text in zip(markers["time_ns"], markers["text"])]
    machine = next(p.system_info.utsname.machine for p in trace.packet if p.HasField("system_info"))
    assert machine == "x86_64"
    fdatasync = {ts for ts, _, _, n, body in raw if n == "sys_enter" and body.id == 75}  # x86_64 fdatasync
    entries = events.filter((pl.col("kind") == "syscall_enter") & (pl.col("name") == "fdatasync"))
    assert fdatasync == set(entries["time_ns"].to_list())


def test_round_trip_gives_the_runs_per_commit_figures(exported):
    run, out, _, _ = exported
    events, report = traceparse.parse(out)
    assert report["files"][0][1] == "perfetto" and report["bad_records"] == 0
    table, source, skipped = windows.trace_commits(events)
    assert (source, skipped) == ("sqlwa markers", 0)
    columns = [
        "index",
        "warmup",
        "win_start_ns",
        "win_end_ns",
        "fsync_calls",
        "fdatasync_calls",
        "pwrite_calls",
        "pwrite_bytes",
        "ftruncate_calls",
        "unlink_calls",
        "write_requests",
        "write_bytes",
        "flush_requests",
        "fua_writes",
        "read_requests",
        "read_bytes",
    ]
    ints = [pl.col(c).cast(pl.Int64) for c in columns if c != "warmup"]
    mine = table.select(columns).with_columns(ints)
    truth = rundir.commits(run).select(columns).with_columns(ints)
    assert mine.equals(truth)
    assert mine["write_bytes"].sum() > 0 and mine["fsync_calls"].sum() > 0


def test_export_of_a_vfs_only_run_leaves_no_file(tmp_path):
    run = tmp_path / "vfs-only"
    run.mkdir()
    for name in ("summary.json", "commits.parquet"):
        (run / name).write_bytes((RUNS[0] / name).read_bytes())
    out = tmp_path / "x.perfetto-trace"
    proc = sqlwa_in_process("export", str(run), "-o", str(out))
    assert proc.returncode == 2 and "has no trace" in proc.stderr
    assert list(tmp_path.iterdir()) == [run]


def test_export_of_a_non_run_is_one_line(tmp_path):
    proc = sqlwa_in_process("export", str(tmp_path), "-o", str(tmp_path / "x.perfetto-trace"))
    assert proc.returncode == 2 and "not a run directory" in proc.stderr
    proc = sqlwa_in_process("export", str(RUNS[0]), "-o", str(tmp_path / "missing" / "x.perfetto-trace"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


@pytest.mark.root
def test_a_fresh_runs_syscalls_are_slices_where_their_exit_was_traced_as_the_help_says(tmp_path):
    """#33 item 11: `export --help` promised syscalls with durations; a fresh run traces
    no pwrite64 exit (capture.tracing.DEFAULT_EXITS), so its pwrite64 calls are instants.
    Truth: the run's own events, which calls have a traced exit."""
    from helpers import sqlwa

    run, out = tmp_path / "run", tmp_path / "run.perfetto-trace"
    sqlwa("run", "--fs", "ext4", "--image-size", "64M", "-n", "5", "-j", "delete", "--out", str(run))
    sqlwa("export", str(run), "-o", str(out))
    _, slices, instants = track_slices(read_trace(out.read_bytes()))
    tid = rundir.summary(run)["config"]["tid"]
    own = rundir.events(run).filter(pl.col("pid") == tid)
    exited = set(own.filter(pl.col("kind") == "syscall_exit")["name"].cast(pl.String))
    entered = set(own.filter(pl.col("kind") == "syscall_enter")["name"].cast(pl.String))
    track = f"syscalls (tid {tid})"
    assert {s.name for s in slices if s.track == track} == entered & exited
    assert {i.name for i in instants if i.track == track} == entered - exited
    assert {"pwrite64", "ftruncate", "unlink"} & (entered - exited) and "fdatasync" in exited
    help_text = " ".join(sqlwa("export", "--help").stdout.split())
    said_slices, said_instants = help_text.split("an instant at the entry where it did not: ")
    assert all(name in said_slices.rsplit("traced the exit: ", 1)[1] for name in entered & exited)
    assert all(name in said_instants.split(")")[0] for name in entered - exited)
