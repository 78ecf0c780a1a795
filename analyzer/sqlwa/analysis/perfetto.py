"""Perfetto traces (``adb shell perfetto`` on a phone) → the event table of
:mod:`sqlwa.analysis.traceparse`, with the same columns as every other format.

A Perfetto trace is a protobuf stream of ``TracePacket``s, decoded here with Perfetto's
own published protos (the ``perfetto`` package's ``perfetto_trace_pb2``). Its ftrace data
source records the same kernel tracepoints sqlwa captures through tracefs, as typed
fields instead of text. Each ftrace event is rendered as the line the kernel's text
output would have printed for it and the lines go through the one ftrace reader
(``blktrace-parse``), so RWBS dialects, flags, bytes and syscall arguments mean exactly
what they mean for a tracefs capture; nothing about block semantics is decoded twice.

What the trace adds around the events:

- per-CPU ``FtraceEventBundle``s, several per CPU: merged into one time order;
- the compact scheduling encoding (``compact_sched``): its switches and wakings become
  ``sched_switch``/``sched_waking`` rows, and their task names name the pids;
- process and thread names from ``process_tree`` packets, ``task_newtask`` and
  ``task_rename`` events: the ``comm`` column (Perfetto's events carry only a pid);
- losses: the kernel ring buffer's overrun and dropped events per CPU (``ftrace_stats``,
  end of trace minus start), or the bundles flagged ``lost_events`` where that is more;
- ``sys_enter``/``sys_exit`` carry a syscall number: named through the trace's machine
  (``system_info``; arm64 when absent, as on every phone), see :mod:`.syscalls`.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa._native import TraceParseError, parse_trace
from sqlwa.analysis import syscalls
from sqlwa.analysis.traceformat import PACKET_TAG, first_packet_problem, pb2, read_varint

#: The placeholder the rendered lines carry for a task's name; the real names (from the
#: trace's process tree) replace it afterwards, so a name with blanks or brackets never
#: has to survive the text form.
UNNAMED = "<...>"
# Perfetto's ftrace clock may be any; sqlwa keeps its timestamps as they are.
NS = 1_000_000_000


# ---------------------------------------------------------------- framing


@dataclass
class Packet:
    offset: int  # byte offset of the packet's tag in the file
    message: Any  # perfetto_trace_pb2.TracePacket


@dataclass
class Framing:
    """Bad records met while reading the packets (``lenient``), as the parser reports them."""

    bad: list[str] = field(default_factory=list)


def packets(path: Path, data: bytes, lenient: bool, framing: Framing) -> Iterator[Packet]:
    """Every TracePacket of ``data``. A packet that does not decode is a bad record; a
    broken frame (a wrong tag, a length past the end: a truncated trace) ends the read,
    since nothing after it can be trusted."""
    problem = first_packet_problem(data)
    if problem is not None:  # not a trace at all: no record of it could be read
        raise bad_trace(path, f"not a Perfetto trace: {problem}", 0)
    message_type = pb2().TracePacket
    pos = 0
    while pos < len(data):
        offset = pos
        reason = None
        found = read_varint(data, pos + 1) if data[pos] == PACKET_TAG else None
        if data[pos] != PACKET_TAG:
            reason = f"byte 0x{data[pos]:02x} where a packet's tag (0x0a) belongs"
        elif found is None:
            reason = "a packet's length is cut off (the trace is truncated)"
        elif found[1] + found[0] > len(data):
            reason = (
                f"a packet of {found[0]} bytes with {len(data) - found[1]} left in the file (the trace is truncated)"
            )
        if reason is not None or found is None:
            note_bad(path, offset, reason or "", lenient, framing)
            return
        length, start = found
        pos = start + length
        try:
            yield Packet(offset, message_type.FromString(data[start:pos]))
        except Exception as exc:  # DecodeError: the frame was fine, the packet is not
            note_bad(path, offset, f"a packet that does not decode ({exc})", lenient, framing)


def bad_trace(path: Path, reason: str, offset: int) -> TraceParseError:
    err = TraceParseError(f"{path}: {reason} (byte {offset})")
    err.path, err.line, err.byte_offset = str(path), None, offset
    return err


def note_bad(path: Path, offset: int, reason: str, lenient: bool, framing: Framing) -> None:
    if not lenient:
        raise bad_trace(path, reason, offset)
    framing.bad.append(f"{path} byte {offset}: {reason}")


# ---------------------------------------------------------------- rendering


def dev_of(kernel_dev: int) -> str:
    """The kernel's internal dev_t (``MKDEV``: major << 20 | minor) as ``major,minor``."""
    return f"{kernel_dev >> 20},{kernel_dev & 0xFFFFF}"


def clean(text: str) -> str:
    """A string field as one line of text (a name never spans lines in tracefs either)."""
    return text.replace("\n", " ").replace("\r", " ")


def bracket(comm: str) -> str:
    return f" [{clean(comm).replace(']', ')')}]" if comm else ""


def rq_line(e: Any) -> str:
    """block_rq_issue / block_rq_insert: ``dev rwbs bytes (cmd) sector + n [comm]``."""
    return f"{dev_of(e.dev)} {clean(e.rwbs)} {e.bytes} ({clean(e.cmd)}) {e.sector} + {e.nr_sector}{bracket(e.comm)}"


def rq_complete_line(e: Any) -> str:
    # Kernels before 4.19 named the field `errors`; Perfetto keeps both.
    error = e.error if e.HasField("error") else e.errors
    return f"{dev_of(e.dev)} {clean(e.rwbs)} ({clean(e.cmd)}) {e.sector} + {e.nr_sector} [{error}]"


def rq_plain_line(e: Any) -> str:
    """block_rq_requeue: no bytes field, the error bracket of a completion."""
    return f"{dev_of(e.dev)} {clean(e.rwbs)} ({clean(e.cmd)}) {e.sector} + {e.nr_sector} [{getattr(e, 'errors', 0)}]"


def bio_line(e: Any) -> str:
    """block_bio_queue/backmerge/frontmerge/bounce, block_getrq: ``dev rwbs sector + n [comm]``."""
    return f"{dev_of(e.dev)} {clean(e.rwbs)} {e.sector} + {e.nr_sector}{bracket(getattr(e, 'comm', ''))}"


def bio_complete_line(e: Any) -> str:
    return f"{dev_of(e.dev)} {clean(e.rwbs)} {e.sector} + {e.nr_sector} [{e.error}]"


def remap_line(e: Any) -> str:
    return f"{dev_of(e.dev)} {clean(e.rwbs)} {e.sector} + {e.nr_sector} <- ({dev_of(e.old_dev)}) {e.old_sector}"


def split_line(e: Any) -> str:
    return f"{dev_of(e.dev)} {clean(e.rwbs)} {e.sector} / {e.new_sector}{bracket(e.comm)}"


def fields_line(e: Any) -> str:
    """Any other event as ``name=value`` pairs (kept as an ``other`` row's text)."""
    return " ".join(f"{f.name}={clean(str(v))}" for f, v in e.ListFields())


#: ftrace event field → the body renderer of its tracefs line.
BLOCK_RENDERERS: dict[str, Callable[[Any], str]] = {
    "block_rq_issue": rq_line,
    "block_rq_insert": rq_line,
    "block_rq_complete": rq_complete_line,
    "block_rq_requeue": rq_plain_line,
    "block_bio_queue": bio_line,
    "block_bio_backmerge": bio_line,
    "block_bio_frontmerge": bio_line,
    "block_bio_bounce": bio_line,
    "block_getrq": bio_line,
    "block_bio_complete": bio_complete_line,
    "block_bio_remap": remap_line,
    "block_rq_remap": remap_line,
    "block_split": split_line,
}


@dataclass
class Reading:
    """What one pass over the packets collects."""

    machine: str | None = None
    names: dict[int, str] = field(default_factory=dict)  # pid → name (process tree, task events)
    sched_names: dict[int, str] = field(default_factory=dict)  # pid → name seen in scheduling events
    overrun_start: dict[int, int] = field(default_factory=dict)  # cpu → overrun + dropped at the start
    overrun_end: dict[int, int] = field(default_factory=dict)
    lost_bundles: int = 0
    bundles: int = 0
    cpus: set[int] = field(default_factory=set)
    ftrace_events: int = 0
    packet_count: int = 0
    # (timestamp, cpu, pid, event name, body, packet offset) of every ftrace event
    rows: list[tuple[int, int, int, str, str, int]] = field(default_factory=list)
    syscall_events: list[tuple[int, int, int, bool, int, Any, int]] = field(default_factory=list)


def read_packets(path: Path, data: bytes, lenient: bool, framing: Framing) -> Reading:
    reading = Reading()
    for packet in packets(path, data, lenient, framing):
        reading.packet_count += 1
        message = packet.message
        kind = message.WhichOneof("data")
        if kind == "ftrace_events":
            read_bundle(message.ftrace_events, packet.offset, reading)
        elif kind == "process_tree":
            read_process_tree(message.process_tree, reading)
        elif kind == "ftrace_stats":
            read_ftrace_stats(message.ftrace_stats, reading)
        elif kind == "system_info" and message.system_info.utsname.machine:
            reading.machine = message.system_info.utsname.machine
    return reading


def read_process_tree(tree: Any, reading: Reading) -> None:
    for process in tree.processes:
        if process.cmdline:
            # cmdline[0] is a path for native daemons, the package name for apps.
            reading.names.setdefault(process.pid, os.path.basename(process.cmdline[0]) or process.cmdline[0])
    for thread in tree.threads:
        if thread.name:
            reading.names[thread.tid] = thread.name


def read_ftrace_stats(stats: Any, reading: Reading) -> None:
    # phase 1 = START_OF_TRACE, 2 = END_OF_TRACE (FtraceStats.Phase)
    target = reading.overrun_start if stats.phase == 1 else reading.overrun_end
    for cpu in stats.cpu_stats:
        target[cpu.cpu] = cpu.overrun + cpu.dropped_events


def read_bundle(bundle: Any, offset: int, reading: Reading) -> None:
    reading.bundles += 1
    reading.cpus.add(bundle.cpu)
    reading.lost_bundles += bool(bundle.lost_events)
    cpu = bundle.cpu
    rows = reading.rows
    for event in bundle.event:
        reading.ftrace_events += 1
        name = event.WhichOneof("event")
        if name is None:
            continue
        body = getattr(event, name)
        ts, pid = event.timestamp, event.pid
        if name in BLOCK_RENDERERS:
            rows.append((ts, cpu, pid, name, BLOCK_RENDERERS[name](body), offset))
        elif name == "print":
            text = clean(body.buf[:-1] if body.buf.endswith("\n") else body.buf)
            rows.append((ts, cpu, pid, "tracing_mark_write", text, offset))
        elif name in ("sys_enter", "sys_exit"):
            reading.syscall_events.append((ts, cpu, pid, name == "sys_enter", body.id, body, offset))
        else:
            if name in ("task_newtask", "task_rename"):
                reading.names[body.pid] = body.comm if name == "task_newtask" else body.newcomm
            rows.append((ts, cpu, pid, name, fields_line(body), offset))
    if bundle.HasField("compact_sched"):
        read_compact_sched(bundle.compact_sched, cpu, offset, reading)


def read_compact_sched(compact: Any, cpu: int, offset: int, reading: Reading) -> None:
    """The compact encoding: timestamps delta-encoded within the bundle, task names as
    indices into its intern table. A switch does not repeat the previous task; it is the
    one the CPU switched to before (unknown, 0, for the bundle's first switch)."""
    names = list(compact.intern_table)
    ts, prev = 0, 0
    for i, delta in enumerate(compact.switch_timestamp):
        ts += delta
        next_pid = compact.switch_next_pid[i]
        comm = names[compact.switch_next_comm_index[i]] if i < len(compact.switch_next_comm_index) else ""
        reading.sched_names.setdefault(next_pid, comm)
        body = (
            f"prev_pid={prev} prev_state={compact.switch_prev_state[i]} ==> next_comm={clean(comm)} "
            f"next_pid={next_pid} next_prio={compact.switch_next_prio[i]}"
        )
        reading.rows.append((ts, cpu, prev, "sched_switch", body, offset))
        prev = next_pid
    ts = 0
    for i, delta in enumerate(compact.waking_timestamp):
        ts += delta
        pid = compact.waking_pid[i]
        comm = names[compact.waking_comm_index[i]] if i < len(compact.waking_comm_index) else ""
        reading.sched_names.setdefault(pid, comm)
        body = (
            f"comm={clean(comm)} pid={pid} prio={compact.waking_prio[i]} target_cpu={compact.waking_target_cpu[i]:03d}"
        )
        reading.rows.append((ts, cpu, 0, "sched_waking", body, offset))


def syscall_rows(reading: Reading) -> tuple[str, int]:
    """Name the syscall events through the trace's machine; returns the machine used and
    how many events had a number the table does not list (kept as ``sys_N``)."""
    machine = reading.machine if reading.machine in syscalls.NUMBERS else syscalls.DEFAULT_MACHINE
    table = syscalls.NUMBERS[machine]
    unknown = 0
    for ts, cpu, pid, enter, number, body, offset in reading.syscall_events:
        name = table.get(number)
        if name is None:
            unknown += 1
            name = f"{number}"
        if enter:
            names = syscalls.ARGUMENTS.get(name, ())
            args = ", ".join(f"{arg}: 0x{value:x}" for arg, value in zip(names, body.args))
            reading.rows.append((ts, cpu, pid, f"sys_{name}", f"({args})", offset))
        else:
            reading.rows.append((ts, cpu, pid, f"sys_{name}", f" -> 0x{body.ret & 0xFFFFFFFFFFFFFFFF:x}", offset))
    return machine, unknown


def ftrace_line(row: tuple[int, int, int, str, str, int]) -> str:
    ts, cpu, pid, name, body, _ = row
    time = f"{ts // NS}.{ts % NS:09d}"
    if name.startswith("sys_"):  # the syscall events' print format: `sys_fsync(fd: 0x3)`
        return f" {UNNAMED}-{pid} [{cpu:03d}] ..... {time}: {name}{body}\n"
    return f" {UNNAMED}-{pid} [{cpu:03d}] ..... {time}: {name}: {body}\n"


# ---------------------------------------------------------------- the table


def parse(path: str | os.PathLike, lenient: bool = False) -> tuple[pl.DataFrame, dict]:
    """One Perfetto trace → ``(events, report)`` as :func:`sqlwa.analysis.traceparse.parse`
    returns them. Raises :class:`~sqlwa.errors.TraceParseError` naming the byte offset of a
    broken or truncated record (``lenient``: counted in ``bad_records`` instead), for a
    file that is no Perfetto trace, and for a trace without block events."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise bad_trace(path, "is a directory, not a Perfetto trace file", 0) from None
    framing = Framing()
    reading = read_packets(path, data, lenient, framing)
    machine, unknown_syscalls = syscall_rows(reading)
    if not any(name.startswith("block_") for _, _, _, name, _, _ in reading.rows):
        raise bad_trace(
            path,
            "holds no block events: record it with the ftrace block events "
            "(block/block_rq_issue, block/block_rq_complete ...; see the README's Perfetto config)",
            0,
        )
    # Bundles of one CPU follow each other; CPUs interleave: one stable sort by time.
    reading.rows.sort(key=lambda row: row[0])
    events, report = parse_rendered(path, reading.rows, lenient)
    report["bad_records"] += len(framing.bad)
    report["bad_messages"] = (framing.bad + report["bad_messages"])[:20]
    lost = lost_events(reading)
    report["lost_events"] += lost
    report["files"] = [(str(path), "perfetto")]
    report["perfetto"] = {
        "packets": reading.packet_count,
        "ftrace_bundles": reading.bundles,
        "ftrace_events": reading.ftrace_events,
        "cpus": sorted(reading.cpus),
        "syscall_table": machine if reading.machine else f"{machine} (assumed: the trace has no system_info)",
        "unknown_syscalls": unknown_syscalls,
        "named_tasks": len(reading.names.keys() | reading.sched_names.keys()),
    }
    return with_task_names(events, {**reading.sched_names, **reading.names}), report


def lost_events(reading: Reading) -> int:
    """Events the kernel's ring buffer lost: per CPU, overrun + dropped at the end of the
    trace minus at its start; or the bundles flagged lost, where those are more (a trace
    cut off before its last stats)."""
    counted = sum(end - reading.overrun_start.get(cpu, 0) for cpu, end in reading.overrun_end.items())
    return max(counted, reading.lost_bundles)


BAD_LINE = re.compile(r"^.*? line (\d+): not an ftrace line \((.*?)\):.*$", re.S)


def parse_rendered(path: Path, rows: list, lenient: bool) -> tuple[pl.DataFrame, dict]:
    """The rendered lines through the ftrace reader; its line numbers in errors become the
    packets they came from."""
    with tempfile.TemporaryDirectory(prefix="sqlwa-perfetto-") as tmp:
        text_path = Path(tmp) / "trace.txt"
        with open(text_path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.writelines(ftrace_line(row) for row in rows)
        try:
            table, report = parse_trace([str(text_path)], "ftrace", lenient)
        except TraceParseError as exc:
            raise bad_trace(path, packet_message(str(exc), rows), origin_offset(exc.line, rows)) from None
    report["bad_messages"] = [
        f"{path} byte {origin_offset(None, rows, m)}: {packet_message(m, rows)}" for m in report["bad_messages"]
    ]
    frame = pl.from_arrow(table, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame, report


def origin_offset(line: int | None, rows: list, message: str | None = None) -> int:
    if line is None and message is not None and (found := BAD_LINE.match(message)):
        line = int(found.group(1))
    return rows[line - 1][5] if line and 0 < line <= len(rows) else 0


def packet_message(message: str, rows: list) -> str:
    found = BAD_LINE.match(message)
    if not found:
        return message
    row = rows[int(found.group(1)) - 1]
    return f"a {row[3]} event that does not read ({found.group(2)}): {row[4]}"


def with_task_names(events: pl.DataFrame, names: dict[int, str]) -> pl.DataFrame:
    """Replace the placeholder ``comm`` by the task's name from the trace (empty where the
    trace never names the pid, as blkparse's ``(null)`` reads); block events keep the
    name they carry themselves."""
    if events.height == 0:
        return events
    known = pl.DataFrame(
        {"pid": list(names), "task_name": list(names.values())}, schema={"pid": pl.UInt32, "task_name": pl.String}
    )
    joined = events.join(known, on="pid", how="left", maintain_order="left")
    comm = (
        pl.when(pl.col("comm").cast(pl.String) == UNNAMED)
        .then(pl.col("task_name").fill_null(""))
        .otherwise(pl.col("comm").cast(pl.String))
        .cast(pl.Categorical)
        .alias("comm")
    )
    return joined.with_columns(comm).select(events.columns)
