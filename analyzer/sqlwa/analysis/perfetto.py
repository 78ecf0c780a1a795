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

- per-CPU ``FtraceEventBundle``s, several per CPU: merged into one time order (events
  of one nanosecond in reading order, syscalls after the rest) by an external sort, so a
  trace of any length is ordered in the memory of ``SPILL_ROWS`` rows: sorted runs go
  to a temporary file and are merged as the lines are written;
- the compact scheduling encoding (``compact_sched``): its switches and wakings become
  ``sched_switch``/``sched_waking`` rows, and their task names name the pids;
- process and thread names from ``process_tree`` packets, ``task_newtask`` and
  ``task_rename`` events: the ``comm`` column (Perfetto's events carry only a pid);
- losses: the kernel ring buffer's overrun and dropped events per CPU (``ftrace_stats``,
  end of trace minus start), or the bundles flagged ``lost_events`` where that is more;
- ``sys_enter``/``sys_exit`` carry a syscall number: named through the trace's machine
  (``system_info``; arm64 when absent, as on every phone, and it may come last), see
  :mod:`.syscalls`.

:func:`parse_to_parquet` streams the rendered text through the Rust reader into Parquet
(the task names put in as each table is written), so ``sqlwa parse TRACE -o FILE`` of a
phone's trace takes bounded memory; its time is this module's Python, ~5 µs an event.
"""

from __future__ import annotations

import mmap
import os
import re
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import polars as pl

from sqlwa._native import TraceParseError, parse_trace, parse_trace_to_parquet
from sqlwa.analysis import syscalls
from sqlwa.analysis.spillsort import SpillSort
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


def packets(path: Path, data: bytes | mmap.mmap, lenient: bool, framing: Framing) -> Iterator[Packet]:
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


#: Rows held before they are sorted and spilled to disk as one sorted run; the runs are
#: merged at the end (an external sort), so a trace of any length is put in time order in
#: the memory of about this many rows (~80 MB).
SPILL_ROWS = 1 << 18
#: Rows per pickled batch of a run: the merge holds one batch of each run.
RUN_BATCH_ROWS = 1024
#: Lines rendered before they are written out together.
WRITE_BATCH_LINES = 1 << 16
#: The reading order of syscall rows starts here, after every other row's: the rows were
#: once sorted (stably) with the syscalls appended last, and ties keep that order.
SYSCALL_SEQ = 1 << 62


class TimeOrder:
    """The rows of every CPU in order of ``(time, seq)``, ``seq`` being the reading order,
    by an external sort (:class:`~sqlwa.analysis.spillsort.SpillSort`). A row is ``(time,
    seq, line, packet offset)``, ``line`` the event's ftrace line, or for a syscall
    ``(cpu, pid, enter, number, args or ret)``, named once the trace's machine is known."""

    def __init__(self, spill: IO[bytes]) -> None:
        self.rows = SpillSort(spill, SPILL_ROWS, RUN_BATCH_ROWS)
        self.events = 0
        self.syscalls = 0

    def add(self, ts: int, cpu: int, pid: int, name: str, body: str, offset: int) -> None:
        self.rows.append((ts, self.events, ftrace_line(ts, cpu, pid, name, body), offset))
        self.events += 1

    def add_syscall(self, ts: int, cpu: int, pid: int, call: tuple, offset: int) -> None:
        self.rows.append((ts, SYSCALL_SEQ + self.syscalls, (cpu, pid, *call), offset))
        self.syscalls += 1

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.rows)


@dataclass
class Reading:
    """What one pass over the packets collects."""

    order: TimeOrder  # every ftrace event as a row
    machine: str | None = None
    names: dict[int, str] = field(default_factory=dict)  # pid → name (process tree, task events)
    sched_names: dict[int, str] = field(default_factory=dict)  # pid → name seen in scheduling events
    overrun_start: dict[int, int] = field(default_factory=dict)  # cpu → overrun + dropped at the start
    overrun_end: dict[int, int] = field(default_factory=dict)
    lost_bundles: int = 0
    bundles: int = 0
    cpus: set[int] = field(default_factory=set)
    ftrace_events: int = 0
    block_events: int = 0
    packet_count: int = 0


#: Says how far a long parse has got (``sqlwa parse``'s status line).
Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """No progress shown."""


def read_packets(
    path: Path, data: bytes | mmap.mmap, lenient: bool, framing: Framing, order: TimeOrder, progress: Progress
) -> Reading:
    reading = Reading(order)
    step = max(len(data) // 100, 1)
    said = 0
    for packet in packets(path, data, lenient, framing):
        if packet.offset >= said + step:
            said = packet.offset
            progress(f"read {100 * said // len(data)}% of the trace, {len(order):,} events")
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
    progress(f"read the trace, {len(order):,} events")
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
    add = reading.order.add
    for event in bundle.event:
        reading.ftrace_events += 1
        name = event.WhichOneof("event")
        if name is None:
            continue
        body = getattr(event, name)
        ts, pid = event.timestamp, event.pid
        if name in BLOCK_RENDERERS:
            reading.block_events += 1
            add(ts, cpu, pid, name, BLOCK_RENDERERS[name](body), offset)
        elif name == "print":
            text = clean(body.buf[:-1] if body.buf.endswith("\n") else body.buf)
            add(ts, cpu, pid, "tracing_mark_write", text, offset)
        elif name in ("sys_enter", "sys_exit"):
            values = tuple(body.args) if name == "sys_enter" else body.ret
            reading.order.add_syscall(ts, cpu, pid, (name == "sys_enter", body.id, values), offset)
        else:
            if name in ("task_newtask", "task_rename"):
                reading.names[body.pid] = body.comm if name == "task_newtask" else body.newcomm
            add(ts, cpu, pid, name, fields_line(body), offset)
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
        reading.order.add(ts, cpu, prev, "sched_switch", body, offset)
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
        reading.order.add(ts, cpu, 0, "sched_waking", body, offset)


class SyscallNames:
    """Syscall numbers named through the trace's machine (arm64 when the trace has no
    system_info, as on every phone); numbers the table does not list stay numbers."""

    def __init__(self, machine: str | None) -> None:
        self.machine = machine if machine in syscalls.NUMBERS else syscalls.DEFAULT_MACHINE
        self.table = syscalls.NUMBERS[self.machine]
        self.unknown = 0

    def row(self, enter: bool, number: int, values: Any) -> tuple[str, str]:
        """The event's name and body: ``sys_fsync``, ``(fd: 0x3)`` or `` -> 0x0``."""
        name = self.table.get(number)
        if name is None:
            self.unknown += 1
            name = f"{number}"
        if enter:
            args = ", ".join(f"{arg}: 0x{value:x}" for arg, value in zip(syscalls.ARGUMENTS.get(name, ()), values))
            return f"sys_{name}", f"({args})"
        return f"sys_{name}", f" -> 0x{values & 0xFFFFFFFFFFFFFFFF:x}"


def ftrace_line(ts: int, cpu: int, pid: int, name: str, body: str) -> str:
    time = f"{ts // NS}.{ts % NS:09d}"
    if name.startswith("sys_"):  # the syscall events' print format: `sys_fsync(fd: 0x3)`
        return f" {UNNAMED}-{pid} [{cpu:03d}] ..... {time}: {name}{body}\n"
    return f" {UNNAMED}-{pid} [{cpu:03d}] ..... {time}: {name}: {body}\n"


def event_of_line(line: str) -> tuple[str, str]:
    """The ``name`` and ``body`` :func:`ftrace_line` printed into ``line``."""
    rest = line.rstrip("\n").split("..... ", 1)[-1].split(": ", 1)[-1]
    if rest.startswith("sys_"):
        cut = min((i for i in (rest.find("("), rest.find(" -> ")) if i >= 0), default=len(rest))
        return rest[:cut], rest[cut:]
    name, _, body = rest.partition(": ")
    return name, body


@dataclass
class Rendered:
    """The trace as ftrace text in time order, and where each line came from."""

    path: Path  # the Perfetto trace
    text: Path  # its events as the kernel's text output would print them
    origins: Path  # per line, the byte offset of its packet (8 bytes, little-endian)
    reading: Reading
    framing: Framing
    syscalls: SyscallNames

    def packet_offset(self, line: int) -> int:
        """The trace byte offset of the packet line ``line`` (1-based) came from."""
        if line < 1:
            return 0
        with open(self.origins, "rb") as f:
            f.seek(8 * (line - 1))
            found = array("Q", f.read(8))
        return found[0] if found else 0


def render(path: Path, lenient: bool, tmp: Path, progress: Progress) -> Rendered:
    """Every event of the trace as an ftrace line in time order, into ``tmp``."""
    framing = Framing()
    with open_trace(path) as data, tempfile.TemporaryFile(dir=tmp) as spill:
        reading = read_packets(path, data, lenient, framing, TimeOrder(spill), progress)
        if reading.block_events == 0:
            raise bad_trace(
                path,
                "holds no block events: record it with the ftrace block events "
                "(block/block_rq_issue, block/block_rq_complete ...; see the README's Perfetto config)",
                0,
            )
        rendered = Rendered(path, tmp / "trace.txt", tmp / "origins", reading, framing, SyscallNames(reading.machine))
        write_lines(rendered, reading.order, progress)
    return rendered


def write_lines(rendered: Rendered, rows: Iterable[tuple], progress: Progress) -> None:
    name_syscall = rendered.syscalls.row
    total, written = len(rendered.reading.order), 0
    offsets = array("Q")
    with (
        open(rendered.text, "w", encoding="utf-8", errors="surrogateescape") as text,
        open(rendered.origins, "wb") as origins,
    ):
        lines: list[str] = []
        for ts, _, line, offset in rows:
            if line.__class__ is tuple:  # a syscall, named now
                cpu, pid, *call = line
                line = ftrace_line(ts, cpu, pid, *name_syscall(*call))
            lines.append(line)
            offsets.append(offset)
            if len(lines) == WRITE_BATCH_LINES:
                text.writelines(lines)
                offsets.tofile(origins)
                written += len(lines)
                lines, offsets = [], array("Q")
                progress(f"put {written:,} of {total:,} events in time order")
        text.writelines(lines)
        offsets.tofile(origins)


@contextmanager
def open_trace(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The trace's bytes, mapped (its pages are the page cache's, not the process's)."""
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise bad_trace(path, "is a directory, not a Perfetto trace file", 0) from None
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data


# ---------------------------------------------------------------- the table


def parse(path: str | os.PathLike, lenient: bool = False, progress: Progress = quiet) -> tuple[pl.DataFrame, dict]:
    """One Perfetto trace → ``(events, report)`` as :func:`sqlwa.analysis.traceparse.parse`
    returns them. Raises :class:`~sqlwa.errors.TraceParseError` naming the byte offset of a
    broken or truncated record (``lenient``: counted in ``bad_records`` instead), for a
    file that is no Perfetto trace, and for a trace without block events."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="sqlwa-perfetto-") as tmp:
        rendered = render(path, lenient, Path(tmp), progress)
        progress(f"reading {len(rendered.reading.order):,} events")
        names = task_names(rendered.reading)
        table, report = read_rendered(
            rendered, lambda text: parse_trace([str(text)], "ftrace", lenient, task_names=names)
        )
    frame = pl.from_arrow(table, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame, full_report(rendered, report)


def parse_to_parquet(
    path: str | os.PathLike, output: str | os.PathLike, lenient: bool = False, progress: Progress = quiet
) -> dict:
    """One Perfetto trace → the Parquet file ``output`` (the columns and dtypes of
    :func:`parse`), in bounded memory: the events are put in time order by an external
    sort, rendered to ftrace text, and that streamed to Parquet row group by row group,
    named as it goes. Temporary files (the trace's text, ~100 bytes an event, and 8
    bytes an event more) go beside ``output``, which is replaced only once whole.
    Returns the report :func:`parse` gives; ``progress`` is told how far it has got."""
    path, output = Path(path), Path(output)
    try:
        with tempfile.TemporaryDirectory(prefix=".sqlwa-perfetto-", dir=output.parent) as tmp:
            rendered = render(path, lenient, Path(tmp), progress)
            progress(f"writing {len(rendered.reading.order):,} events to {output.name}")
            names = task_names(rendered.reading)
            _, report = read_rendered(
                rendered,
                lambda text: (None, parse_trace_to_parquet([str(text)], str(output), "ftrace", lenient, names)),
            )
    except OSError as exc:  # a missing directory, a full disk: said of the file asked for
        if exc.errno is None or exc.filename in (str(path), str(output)):
            raise
        raise OSError(exc.errno, exc.strerror, str(output)) from exc
    return full_report(rendered, report)


def task_names(reading: Reading) -> tuple[str, dict[int, str]]:
    """The names for the rendered rows' placeholder (``parse_trace``'s ``task_names``):
    the process tree's and task events' names, else those of scheduling events. The
    reader puts them in the rows named ``UNNAMED`` (empty where the trace never names the
    pid, as blkparse's ``(null)`` reads); block events keep the name they carry."""
    return UNNAMED, {**reading.sched_names, **reading.names}


def full_report(rendered: Rendered, report: dict) -> dict:
    """The ftrace reader's report with what the packets said: framing errors, losses,
    the trace's shape."""
    reading, framing = rendered.reading, rendered.framing
    report["bad_records"] += len(framing.bad)
    report["bad_messages"] = (framing.bad + report["bad_messages"])[:20]
    report["lost_events"] += lost_events(reading)
    report["files"] = [(str(rendered.path), "perfetto")]
    machine = rendered.syscalls.machine
    report["perfetto"] = {
        "packets": reading.packet_count,
        "ftrace_bundles": reading.bundles,
        "ftrace_events": reading.ftrace_events,
        "cpus": sorted(reading.cpus),
        "syscall_table": machine if reading.machine else f"{machine} (assumed: the trace has no system_info)",
        "unknown_syscalls": rendered.syscalls.unknown,
        "named_tasks": len(reading.names.keys() | reading.sched_names.keys()),
    }
    return report


def lost_events(reading: Reading) -> int:
    """Events the kernel's ring buffer lost: per CPU, overrun + dropped at the end of the
    trace minus at its start; or the bundles flagged lost, where those are more (a trace
    cut off before its last stats)."""
    counted = sum(end - reading.overrun_start.get(cpu, 0) for cpu, end in reading.overrun_end.items())
    return max(counted, reading.lost_bundles)


#: The reader's message for a line it cannot read: its number, the reason and the line.
BAD_LINE = re.compile(r"^.*? line (\d+): not an ftrace line \((.*?)\): (.*)$", re.S)


def read_rendered(rendered: Rendered, read: Callable[[Path], tuple[Any, dict]]) -> tuple[Any, dict]:
    """The rendered text through the ftrace reader (``read``); its line numbers in errors
    become the packets they came from."""
    path = rendered.path
    try:
        table, report = read(rendered.text)
    except TraceParseError as exc:
        raise bad_trace(path, packet_message(str(exc)), origin_offset(exc.line, rendered)) from None
    report["bad_messages"] = [
        f"{path} byte {origin_offset(None, rendered, m)}: {packet_message(m)}" for m in report["bad_messages"]
    ]
    return table, report


def origin_offset(line: int | None, rendered: Rendered, message: str | None = None) -> int:
    if line is None and message is not None and (found := BAD_LINE.match(message)):
        line = int(found.group(1))
    return rendered.packet_offset(line) if line else 0


def packet_message(message: str) -> str:
    """The reader's message about a rendered line, told of the event it was rendered from
    (the message quotes the line: the text need not be read again)."""
    found = BAD_LINE.match(message)
    if not found:
        return message
    name, body = event_of_line(found.group(3))
    return f"a {name} event that does not read ({found.group(2)}): {body}"
