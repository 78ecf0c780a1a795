"""A run as a Perfetto trace (``sqlwa export``), for ui.perfetto.dev and trace processor.

The trace holds two things, on one timeline (the run's trace clock, ``mono``, kept as is):

- **the run's raw events** as Perfetto's ftrace data source records them — per-CPU
  ``FtraceEventBundle``s with ``block_rq_issue``/``block_rq_complete``/``block_bio_queue``
  …, ``sys_enter``/``sys_exit`` (numbered for the run's machine) and the engine's markers
  as ``print`` events — plus the process tree and ``system_info``: what ``sqlwa parse``
  reads back (the round trip the tests check);
- **sqlwa's reading of them** as track events: a ``commits`` track (one slice per
  transaction: index, latency, bytes, fsyncs … as args), ``SQLite VFS`` (xSync,
  xTruncate, xDelete from the markers), ``syscalls`` of the SQL thread (slices where
  the exit was traced — the sync family and openat by default, see
  :data:`sqlwa.capture.tracing.DEFAULT_EXITS` — instants at the entry otherwise: pwrite64,
  ftruncate, unlink), per device the block requests from issue to completion (lanes, since
  requests overlap) with category, sector, bytes and flags as args and every cache flush
  marked on a ``cache flushes`` track, and one counter per category of bytes written.

Messages are built with Perfetto's own protos (``perfetto_trace_pb2``) and written
packet by packet (``StreamingTraceProtoBuilder``), never hand-encoded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import polars as pl

from sqlwa.analysis import syscalls
from sqlwa.catalogue import is_flush
from sqlwa.errors import UsageError
from sqlwa.results import rundir
from sqlwa.views.figures import request_categories

SEQUENCE = 1  # trusted_packet_sequence_id of every track event packet
BUNDLE_EVENTS = 500  # ftrace events per bundle, about what traced writes per page read
VFS_CALLS = {"sync": "xSync", "trunc": "xTruncate", "delete": "xDelete"}
COUNTED = {"count", "nbytes", "len", "length"}  # the arguments the parser keeps as aux


def pb2() -> Any:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


@dataclass
class BlockCounts:
    """The block level's part of the trace: its requests and cache flushes, summed over
    the devices they went to, and those devices ("major:minor"). They are counted
    together, one device at a time, and reported together."""

    requests: int = 0
    flushes: int = 0
    devices: list[str] = field(default_factory=list)

    def add(self, device: tuple[int, int], requests: int, flushes: int) -> None:
        """One device's requests and flushes."""
        self.devices.append(f"{device[0]}:{device[1]}")
        self.requests += requests
        self.flushes += flushes


@dataclass
class ExportCounts:
    """What went into the trace (the CLI's report)."""

    ftrace_events: int = 0
    skipped_events: int = 0  # rows with no ftrace form (messages, syscalls the table lacks)
    commits: int = 0
    vfs_calls: int = 0
    syscalls: int = 0
    block: BlockCounts = field(default_factory=BlockCounts)
    counters: int = 0


def export(run_dir: Path, out: IO[bytes]) -> ExportCounts:
    """Write the run in ``run_dir`` as a Perfetto trace to ``out``."""
    summary = rundir.summary(run_dir)
    if not rundir.has_trace(run_dir):
        raise UsageError(
            f"{run_dir} has no trace: it measured the VFS level only, and a Perfetto trace is a timeline of events",
            "export a lab run (sqlwa run --fs ext4 …), which keeps its trace",
        )
    config = summary["config"]
    events = rundir.events(run_dir)
    commits = rundir.commits(run_dir)
    attributed = rundir.attributed_writes(run_dir)
    writer = Writer(out)
    counts = ExportCounts()
    machine = config.get("machine") or "x86_64"
    writer.system_info(machine, config.get("kernel") or "")
    writer.process_tree(events, config)
    counts.ftrace_events, counts.skipped_events = writer.ftrace(events, machine)
    tracks = Tracks(writer, config)
    counts.commits = tracks.commits(commits)
    counts.vfs_calls = tracks.vfs_calls(events)
    counts.syscalls = tracks.syscalls(events)
    categories = request_categories(attributed) if attributed is not None else None
    for dev in devices(events):
        counts.block.add(dev, *tracks.block_requests(events, dev, categories))
    if attributed is not None:
        counts.counters = tracks.category_counters(attributed)
    return counts


def devices(events: pl.DataFrame) -> list[tuple[int, int]]:
    block = events.filter(pl.col("kind") == "block").select("dev_major", "dev_minor").unique().sort(pl.all())
    return [(int(a), int(b)) for a, b in block.iter_rows()]


# ---------------------------------------------------------------- packets


class Writer:
    """Packets to the output, one ``Trace`` message each (concatenated they are one)."""

    def __init__(self, out: IO[bytes]) -> None:
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

        self.builder = StreamingTraceProtoBuilder(out)
        self.pb = pb2()
        self.first_track_packet = True

    def packet(self) -> Any:
        return self.builder.create_packet()

    def write(self, packet: Any) -> None:
        self.builder.write_packet(packet)

    def system_info(self, machine: str, kernel: str) -> None:
        packet = self.packet()
        packet.system_info.utsname.sysname = "Linux"
        packet.system_info.utsname.machine = machine
        packet.system_info.utsname.release = kernel
        self.write(packet)

    def process_tree(self, events: pl.DataFrame, config: Mapping[str, Any]) -> None:
        """Every pid of the events with the name it had most often (a task's name can
        change: a kworker's, a renamed thread's)."""
        names = (
            events.filter(pl.col("comm").cast(pl.String) != "")
            .group_by("pid", pl.col("comm").cast(pl.String))
            .len()
            .sort("len", "pid", "comm", descending=[True, False, False])
            .unique("pid", keep="first")
            .sort("pid")
        )
        packet = self.packet()
        tree = packet.process_tree
        pid = config.get("pid")
        if pid:
            process = tree.processes.add()
            process.pid = int(pid)
            process.cmdline.append("sqlwa")
        for tid, comm, _ in names.iter_rows():
            thread = tree.threads.add()
            thread.tid = int(tid)
            thread.name = comm
            if pid and int(tid) == int(config.get("tid") or -1):
                thread.tgid = int(pid)
        self.write(packet)

    def ftrace(self, events: pl.DataFrame, machine: str) -> tuple[int, int]:
        """The raw events as per-CPU bundles; returns (events written, rows skipped)."""
        numbers = syscalls.numbers_by_name(machine) if machine in syscalls.NUMBERS else {}
        written = skipped = 0
        for cpu in sorted(events["cpu"].unique().to_list()):
            rows = events.filter(pl.col("cpu") == cpu).sort("time_ns", maintain_order=True)
            for chunk in rows.iter_slices(BUNDLE_EVENTS):
                packet = self.packet()
                bundle = packet.ftrace_events
                bundle.cpu = int(cpu)
                for row in chunk.iter_rows(named=True):
                    if fill_event(bundle, row, numbers):
                        written += 1
                    else:
                        skipped += 1
                self.write(packet)
        return written, skipped

    def track_packet(self, ts: int | None = None) -> Any:
        packet = self.packet()
        packet.trusted_packet_sequence_id = SEQUENCE
        if self.first_track_packet:
            packet.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first_track_packet = False
        else:
            packet.sequence_flags = self.pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if ts is not None:
            packet.timestamp = int(ts)
        return packet


def kernel_dev(major: int, minor: int) -> int:
    """The kernel's internal dev_t (``MKDEV``), what Perfetto's block events carry."""
    return (major << 20) | minor


HEX_ARG = re.compile(r"(\w+): (?:0x)?([0-9a-fA-F]+)")


def syscall_args(text: str | None) -> list[int]:
    """A syscall entry's arguments in order, from tracefs's ``name: value`` text (hex)."""
    return [int(value, 16) for _, value in HEX_ARG.findall(text or "")]


def fill_event(bundle: Any, row: dict, numbers: dict[str, int]) -> bool:
    """One event row as a FtraceEvent of ``bundle``; False for rows without an ftrace form
    (messages, other events, syscalls the machine's table lacks, blk tracer lines)."""
    kind, name = str(row["kind"]), row["name"] or ""
    if kind in ("syscall_enter", "syscall_exit"):
        if name not in numbers:
            return False
    elif kind == "block":
        if name not in BLOCK_FIELDS:
            return False
    elif kind != "marker":
        return False
    event = bundle.event.add()
    event.timestamp = row["time_ns"]
    event.pid = row["pid"]
    if kind == "marker":
        event.print.buf = (row["text"] or "") + "\n"
    elif kind == "syscall_enter":
        event.sys_enter.id = numbers[name]
        event.sys_enter.args.extend(syscall_args(row["text"]))
    elif kind == "syscall_exit":
        event.sys_exit.id = numbers[name]
        event.sys_exit.ret = row["ret"] if row["ret"] is not None else 0
    else:
        fill_block(getattr(event, name), row, BLOCK_FIELDS[name])
    return True


# The fields each block event of Perfetto's protos has beyond dev/sector/nr_sector/rwbs.
BLOCK_FIELDS: dict[str, tuple[str, ...]] = {
    "block_rq_issue": ("bytes", "comm", "cmd"),
    "block_rq_insert": ("bytes", "comm", "cmd"),
    "block_rq_complete": ("error", "cmd"),
    "block_rq_requeue": ("cmd",),
    "block_bio_queue": ("comm",),
    "block_bio_backmerge": ("comm",),
    "block_bio_frontmerge": ("comm",),
    "block_bio_bounce": ("comm",),
    "block_getrq": ("comm",),
    "block_bio_complete": ("error",),
}


def fill_block(message: Any, row: dict, extra: tuple[str, ...]) -> None:
    message.dev = kernel_dev(row["dev_major"], row["dev_minor"])
    message.sector = row["sector"]
    message.nr_sector = row["sectors"]
    message.rwbs = row["rwbs"] or ""
    values = {"bytes": row["bytes"], "comm": row["comm"] or "", "cmd": "", "error": row["error"]}
    for name in extra:
        setattr(message, name, values[name])


# ---------------------------------------------------------------- sqlwa's tracks


class Tracks:
    """Track descriptors and the track events on them."""

    def __init__(self, writer: Writer, config: Mapping[str, Any]) -> None:
        self.writer = writer
        self.pb = writer.pb
        self.next_uuid = 1
        self.pid = int(config.get("pid") or 0)
        self.tid = int(config.get("tid") or self.pid)
        self.process = self.track("sqlwa", process=True)
        self.thread = self.track("SQL thread", parent=None, thread=True)

    def track(
        self, name: str, parent: int | None = None, process: bool = False, thread: bool = False, counter: bool = False
    ) -> int:
        uuid = self.next_uuid
        self.next_uuid += 1
        packet = self.writer.track_packet()
        descriptor = packet.track_descriptor
        descriptor.uuid = uuid
        descriptor.name = name
        if parent is not None:
            descriptor.parent_uuid = parent
        if process:
            descriptor.process.pid = self.pid
            descriptor.process.process_name = "sqlwa"
        if thread:
            descriptor.thread.pid = self.pid
            descriptor.thread.tid = self.tid
            descriptor.thread.thread_name = "sqlwa SQL thread"
        if counter:
            descriptor.counter.unit = self.pb.CounterDescriptor.UNIT_SIZE_BYTES
        self.writer.write(packet)
        return uuid

    def slice(self, track: int, name: str, start: int, end: int, args: dict[str, Any]) -> None:
        begin = self.writer.track_packet(start)
        begin.track_event.type = self.pb.TrackEvent.TYPE_SLICE_BEGIN
        begin.track_event.track_uuid = track
        begin.track_event.name = name
        for key, value in args.items():
            annotate(begin.track_event.debug_annotations.add(), key, value)
        self.writer.write(begin)
        finish = self.writer.track_packet(end)
        finish.track_event.type = self.pb.TrackEvent.TYPE_SLICE_END
        finish.track_event.track_uuid = track
        self.writer.write(finish)

    def instant(self, track: int, name: str, ts: int, args: dict[str, Any]) -> None:
        packet = self.writer.track_packet(ts)
        packet.track_event.type = self.pb.TrackEvent.TYPE_INSTANT
        packet.track_event.track_uuid = track
        packet.track_event.name = name
        for key, value in args.items():
            annotate(packet.track_event.debug_annotations.add(), key, value)
        self.writer.write(packet)

    def commits(self, commits: pl.DataFrame) -> int:
        """One slice per transaction with a window, its figures as args."""
        if "win_start_ns" not in commits.columns:
            return 0
        track = self.track("commits", parent=self.process)
        rows = commits.filter(pl.col("win_start_ns").is_not_null()).sort("win_start_ns")
        for row in rows.iter_rows(named=True):
            label = f"{'warm-up ' if row['warmup'] else ''}commit {row['index']}"
            self.slice(track, label, row["win_start_ns"], row["win_end_ns"], commit_args(row))
        return rows.height

    def vfs_calls(self, events: pl.DataFrame) -> int:
        """xSync, xTruncate, xDelete slices from the begin/end marker pairs (never nested,
        always begin then end on the one SQL thread: MARKERS.md)."""
        pairs = marker_pairs(events)
        for row in pairs.iter_rows(named=True):
            args = {"i": row["i"], "kind": row["file_kind"], "rc": row["rc"]}
            if row["flags"]:
                args["flags"] = row["flags"]
            self.slice(self.thread, f"{VFS_CALLS[row['call']]} {row['file_kind']}", row["start"], row["end"], args)
        return pairs.height

    def syscalls(self, events: pl.DataFrame) -> int:
        """The SQL thread's syscalls, entry to exit; an entry without its exit is an instant."""
        calls = syscall_spans(events, self.tid)
        if calls.height == 0:
            return 0
        track = self.track(f"syscalls (tid {self.tid})", parent=self.process)
        for row in calls.iter_rows(named=True):
            args = {"fd": row["fd"], "ret": row["ret"]}
            if COUNTED.intersection(syscalls.ARGUMENTS.get(row["name"], ())):
                args["count"] = row["aux"]  # the parser's aux: the count (length) argument
            args = {k: v for k, v in args.items() if v is not None}
            if row["exit_ns"] is None:
                self.instant(track, row["name"], row["time_ns"], args)
            else:
                self.slice(track, row["name"], row["time_ns"], row["exit_ns"], args)
        return calls.height

    def block_requests(
        self, events: pl.DataFrame, dev: tuple[int, int], categories: pl.DataFrame | None
    ) -> tuple[int, int]:
        """Issued requests (action D) of ``dev`` from issue to completion, on lanes."""
        requests = request_spans(events, dev)
        if categories is not None:
            requests = requests.join(categories, on=["time_ns", "sector"], how="left", maintain_order="left")
        parent = self.track(f"block {dev[0]}:{dev[1]} requests")
        flush_track = self.track(f"block {dev[0]}:{dev[1]} cache flushes", parent=parent)
        lanes: list[int] = []  # the end of each lane's last request
        lane_tracks: list[int] = []
        flushes = 0
        for row in requests.iter_rows(named=True):
            lane = next((i for i, end in enumerate(lanes) if end <= row["time_ns"]), None)
            if lane is None:
                lanes.append(0)
                lane_tracks.append(self.track(f"lane {len(lanes)}", parent=parent))
                lane = len(lanes) - 1
            lanes[lane] = row["end_ns"]
            args = request_args(row)
            self.slice(lane_tracks[lane], request_name(row), row["time_ns"], row["end_ns"], args)
            if row["is_flush"]:
                flushes += 1
                self.instant(flush_track, "cache flush", row["time_ns"], args)
        return requests.height, flushes

    def category_counters(self, attributed: pl.DataFrame) -> int:
        """Bytes written so far per category, a counter track each, stepping at every issued write."""
        writes = attributed.sort("time_ns").select("time_ns", pl.col("category").cast(pl.String), "bytes")
        points = 0
        for (category,), rows in writes.group_by("category", maintain_order=True):
            track = self.track(f"bytes written: {category}", counter=True)
            for ts, total in rows.select("time_ns", pl.col("bytes").cum_sum()).iter_rows():
                packet = self.writer.track_packet(ts)
                packet.track_event.type = self.pb.TrackEvent.TYPE_COUNTER
                packet.track_event.track_uuid = track
                packet.track_event.counter_value = int(total)
                self.writer.write(packet)
                points += 1
        return points


def annotate(annotation: Any, key: str, value: Any) -> None:
    annotation.name = key
    if isinstance(value, bool):
        annotation.bool_value = value
    elif isinstance(value, int):
        annotation.int_value = value
    elif isinstance(value, float):
        annotation.double_value = value
    else:
        annotation.string_value = str(value)


#: commits.parquet columns a commit slice carries as args, when the run has them.
COMMIT_ARGS = (
    "index",
    "warmup",
    "latency_ns",
    "logical_bytes",
    "vfs_write_bytes",
    "vfs_sync_calls",
    "fsync_calls",
    "fdatasync_calls",
    "pwrite_bytes",
    "write_requests",
    "write_bytes",
    "flush_requests",
    "fua_writes",
)


def commit_args(row: dict) -> dict[str, Any]:
    args = {key: row[key] for key in COMMIT_ARGS if row.get(key) is not None}
    if row.get("latency_ns") is not None:
        args["latency_ms"] = row["latency_ns"] / 1e6
    args.update({key: row[key] for key in row if key.startswith("bytes_") and row[key] is not None})
    return args


def marker_pairs(events: pl.DataFrame) -> pl.DataFrame:
    """``call``, ``file_kind``, ``i``, ``flags``, ``rc``, ``start``, ``end`` of every VFS call."""
    marks = events.filter(pl.col("kind") == "marker").select("time_ns", pl.col("name").cast(pl.String), pl.col("text"))
    marks = marks.filter(pl.col("name").str.contains(r"^(sync|trunc|delete)_(begin|end)$")).with_columns(
        pl.col("name").str.extract(r"^(\w+?)_").alias("call"),
        pl.col("name").str.ends_with("_begin").alias("begin"),
    )
    # Each begin is followed by its end on the one SQL thread: pair by position.
    begins = marks.filter(pl.col("begin")).with_row_index("n")
    ends = marks.filter(~pl.col("begin")).with_row_index("n")
    pairs = begins.join(ends.select("n", pl.col("time_ns").alias("end"), pl.col("text").alias("end_text")), on="n")
    return pairs.select(
        "call",
        pl.col("text").str.extract(r"\bkind=(\S+)").alias("file_kind"),
        pl.col("text").str.extract(r"\bi=(-?\d+)").cast(pl.Int64).alias("i"),
        pl.col("text").str.extract(r"\bflags=(\S+)").alias("flags"),
        pl.col("end_text").str.extract(r"\brc=(-?\d+)").cast(pl.Int64).alias("rc"),
        pl.col("time_ns").alias("start"),
        "end",
    )


def syscall_spans(events: pl.DataFrame, tid: int) -> pl.DataFrame:
    """The thread's syscall entries with ``exit_ns`` and ``ret`` of their exit: the next
    exit of the same name before the thread's next entry (null where none was traced)."""
    calls = events.filter(pl.col("pid") == tid)
    enters = (
        calls.filter(pl.col("kind") == "syscall_enter")
        .select("time_ns", pl.col("name").cast(pl.String), "fd", "aux")
        .sort("time_ns")
        .with_columns(pl.col("time_ns").shift(-1).alias("next_enter"))
    )
    exits = (
        calls.filter(pl.col("kind") == "syscall_exit")
        .select(pl.col("time_ns").alias("exit_ns"), pl.col("name").cast(pl.String), "ret")
        .sort("exit_ns")
    )
    joined = enters.join_asof(
        exits, left_on="time_ns", right_on="exit_ns", by="name", strategy="forward", check_sortedness=False
    )
    matched = pl.col("exit_ns").is_not_null() & (
        pl.col("next_enter").is_null() | (pl.col("exit_ns") <= pl.col("next_enter"))
    )
    return joined.with_columns(
        pl.when(matched).then(pl.col("exit_ns")).alias("exit_ns"), pl.when(matched).then(pl.col("ret")).alias("ret")
    )


def request_spans(events: pl.DataFrame, dev: tuple[int, int]) -> pl.DataFrame:
    """Issued requests of ``dev`` with ``end_ns``: the first completion after the issue of
    the same operation, sector and length (a flush's completion carries sector -1: flushes
    pair by operation alone). An issue never completed in the trace ends where it began."""
    block = events.filter(
        (pl.col("kind") == "block") & (pl.col("dev_major") == dev[0]) & (pl.col("dev_minor") == dev[1])
    )
    key = [
        pl.col("operation").cast(pl.String).alias("op"),
        pl.when(pl.col("operation") == "flush").then(0).otherwise(pl.col("sector")).alias("key_sector"),
        pl.when(pl.col("operation") == "flush").then(0).otherwise(pl.col("sectors")).alias("key_sectors"),
    ]
    issued = block.filter(pl.col("action") == "D").with_columns(*key, is_flush().alias("is_flush")).sort("time_ns")
    completed = (
        block.filter(pl.col("action") == "C")
        .select(pl.col("time_ns").alias("end_ns"), *key, pl.col("error").alias("completion_error"))
        .sort("end_ns")
    )
    joined = issued.join_asof(
        completed,
        left_on="time_ns",
        right_on="end_ns",
        by=["op", "key_sector", "key_sectors"],
        strategy="forward",
        check_sortedness=False,
    )
    return joined.with_columns(
        pl.col("end_ns").is_not_null().alias("completed"), pl.col("end_ns").fill_null(pl.col("time_ns"))
    )


def request_name(row: dict) -> str:
    if row["operation"] == "flush":
        return "flush"
    category = row.get("category")
    return f"{row['operation']} {row['bytes']} B" + (f" {category}" if category else "")


def request_args(row: dict) -> dict[str, Any]:
    args: dict[str, Any] = {
        "sector": int(row["sector"]),
        "sectors": int(row["sectors"]),
        "bytes": int(row["bytes"]),
        "rwbs": row["rwbs"] or "",
        "flags": int(row["flags"]),
        "preflush": bool(row["preflush"]),
        "fua": bool(row["fua"]),
        "completed": bool(row["completed"]),
        "issuer": row["comm"] or "",
    }
    if row.get("category"):
        args["category"] = row["category"]
    if row["completed"] and row["completion_error"]:
        args["error"] = int(row["completion_error"])
    return args
