"""Perfetto traces (``adb shell perfetto`` on a phone) → the event table of
:mod:`sqlwa.analysis.traceparse`, with the same columns as every other format.

A Perfetto trace is a protobuf stream of ``TracePacket``s. Its ftrace data source records
the same kernel tracepoints sqlwa captures through tracefs, as typed fields instead of
text. ``blktrace-parse`` reads the packets with Perfetto's own published protos
(``traces/src/perfetto``: ``_native.render_perfetto``), prints each ftrace event as the
line the kernel's text output would have printed for it, and the lines go through the one
ftrace reader, so RWBS dialects, flags, bytes and syscall arguments mean exactly what they
mean for a tracefs capture; nothing about block semantics is decoded twice.

What the trace adds around the events, read there too:

- per-CPU ``FtraceEventBundle``s, several per CPU: merged into one time order (events
  of one nanosecond in reading order, syscalls after the rest) by an external sort, so a
  trace of any length is ordered in bounded memory;
- the compact scheduling encoding (``compact_sched``): its switches and wakings become
  ``sched_switch``/``sched_waking`` rows, and their task names name the pids;
- process and thread names from ``process_tree`` packets, ``task_newtask`` and
  ``task_rename`` events: the ``comm`` column (Perfetto's events carry only a pid);
- losses: the kernel ring buffer's overrun and dropped events per CPU (``ftrace_stats``,
  end of trace minus start), or the bundles flagged ``lost_events`` where that is more;
- ``sys_enter``/``sys_exit`` carry a syscall number: named through the trace's machine
  (``system_info``; arm64 when absent, as on every phone, and it may come last) with the
  tables of :mod:`.syscalls`.

:func:`parse_to_parquet` streams the rendered text through the Rust reader into Parquet
(the task names put in as each table is written), so ``sqlwa parse TRACE -o FILE`` of a
phone's trace takes bounded memory.
"""

from __future__ import annotations

import os
import re
import tempfile
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from sqlwa import inputs
from sqlwa._native import PERFETTO_UNNAMED, TraceParseError, parse_trace, parse_trace_to_parquet, render_perfetto
from sqlwa.analysis import syscalls
from sqlwa.analysis.traceformat import first_packet_problem, read_first_packet

if TYPE_CHECKING:  # the stub's dicts, which the module does not define
    from sqlwa._native import ParseReport, PerfettoReading

#: The placeholder the rendered lines carry for a task's name; the real names (from the
#: trace's process tree) replace it afterwards, so a name with blanks or brackets never
#: has to survive the text form.
UNNAMED = PERFETTO_UNNAMED

#: Rows per sorted run and lines between progress reports; None: the reader's defaults
#: (2^19 rows, 2^16 lines). Tests make them small to take a long trace's path.
RUN_ROWS: int | None = None
LINES_PER_REPORT: int | None = None

#: Says how far a long parse has got (``sqlwa parse``'s status line).
Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """No progress shown."""


def bad_trace(path: Path, reason: str, offset: int) -> TraceParseError:
    """The error the Rust reader raises for a bad record: path, byte offset, reason."""
    err = TraceParseError(f"{path} at byte offset {offset}: {reason}")
    err.path, err.line, err.byte_offset = str(path), None, offset
    return err


def refuse_what_is_no_trace(path: Path) -> None:
    """A TraceParseError for a directory or a file whose first record is no TracePacket
    (a truncated first packet is left to the reader, which names its byte)."""
    if path.is_dir():
        raise bad_trace(path, "is a directory, not a Perfetto trace file", 0)
    with inputs.open_input(path, "trace") as f:
        head, _ = read_first_packet(f)
    problem = first_packet_problem(head)
    if problem is not None:
        raise bad_trace(path, f"not a Perfetto trace: {problem}", 0)


def event_of_line(line: str) -> tuple[str, str]:
    """The ``name`` and ``body`` of a rendered line
    (`` <...>-pid [cpu] ..... s.ns: name: body`` or ``...: sys_fsync(fd: 0x3)``)."""
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
    reading: PerfettoReading  # what the packets said

    def packet_offset(self, line: int) -> int:
        """The trace byte offset of the packet line ``line`` (1-based) came from."""
        if line < 1:
            return 0
        with open(self.origins, "rb") as f:
            f.seek(8 * (line - 1))
            found = array("Q", f.read(8))
        return found[0] if found else 0


@contextmanager
def scratch_files(directory: Path | None) -> Iterator[tuple[Path, Path]]:
    """Two files for the rendered text and its origins, without names (O_TMPFILE): the
    system removes them when they are closed, even if sqlwa is killed. They are opened by
    this process's ``/proc/self/fd`` paths."""
    with tempfile.TemporaryFile(dir=directory) as text, tempfile.TemporaryFile(dir=directory) as origins:
        yield Path(f"/proc/self/fd/{text.fileno()}"), Path(f"/proc/self/fd/{origins.fileno()}")


def render(path: Path, lenient: bool, files: tuple[Path, Path], sort_dir: Path, progress: Progress) -> Rendered:
    """Every event of the trace as an ftrace line in time order into ``files`` (the text,
    the origins), the sort's runs in ``sort_dir``."""
    refuse_what_is_no_trace(path)
    text, origins = files
    tables = (
        syscalls.NUMBERS,
        {name: list(args) for name, args in syscalls.ARGUMENTS.items()},
        syscalls.DEFAULT_MACHINE,
    )
    reading = render_perfetto(
        str(path), str(text), str(origins), str(sort_dir), tables, lenient, progress, RUN_ROWS, LINES_PER_REPORT
    )
    if reading["block_events"] == 0:
        raise bad_trace(
            path,
            "holds no block events: record it with the ftrace block events "
            "(block/block_rq_issue, block/block_rq_complete ...; see docs/guide/traces-and-perfetto.md, Recording on a phone)",
            0,
        )
    return Rendered(path, text, origins, reading)


# ---------------------------------------------------------------- the table


def parse(path: str | os.PathLike, lenient: bool = False, progress: Progress = quiet) -> tuple[pl.DataFrame, dict]:
    """One Perfetto trace → ``(events, report)`` as :func:`sqlwa.analysis.traceparse.parse`
    returns them. Raises :class:`~sqlwa.errors.TraceParseError` naming the byte offset of a
    broken or truncated record (``lenient``: counted in ``bad_records`` instead), for a
    file that is no Perfetto trace, and for a trace without block events."""
    path = Path(path)
    with scratch_files(None) as files:
        rendered = render(path, lenient, files, Path(tempfile.gettempdir()), progress)
        progress(f"reading {rendered.reading['rows']:,} events")
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
    named as it goes. Temporary files (the sort's runs and the trace's text, ~110 bytes
    an event each) go beside ``output``, unnamed: nothing of them is left behind, even
    when sqlwa is killed. ``output`` is replaced only once whole.
    Returns the report :func:`parse` gives; ``progress`` is told how far it has got."""
    path, output = Path(path), Path(output)
    try:
        with scratch_files(output.parent) as files:
            rendered = render(path, lenient, files, output.parent, progress)
            progress(f"writing {rendered.reading['rows']:,} events to {output.name}")
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


def task_names(reading: PerfettoReading) -> tuple[str, dict[int, str]]:
    """The names for the rendered rows' placeholder (``parse_trace``'s ``task_names``):
    the process tree's and task events' names, else those of scheduling events. The
    reader puts them in the rows named ``UNNAMED`` (empty where the trace never names the
    pid, as blkparse's ``(null)`` reads); block events keep the name they carry."""
    return UNNAMED, {**reading["sched_names"], **reading["names"]}


def full_report(rendered: Rendered, report: dict) -> dict:
    """The ftrace reader's report with what the packets said: framing errors, losses,
    the trace's shape."""
    reading = rendered.reading
    report["bad_records"] += reading["bad_records"]
    report["bad_messages"] = (reading["bad_messages"] + report["bad_messages"])[:20]
    report["lost_events"] += reading["lost_events"]
    report["files"] = [(str(rendered.path), "perfetto")]
    machine = reading["syscall_machine"]
    report["perfetto"] = {
        "packets": reading["packets"],
        "ftrace_bundles": reading["bundles"],
        "ftrace_events": reading["ftrace_events"],
        "cpus": reading["cpus"],
        "syscall_table": machine if reading["machine"] else f"{machine} (assumed: the trace has no system_info)",
        "unknown_syscalls": reading["unknown_syscalls"],
        "named_tasks": len(reading["names"].keys() | reading["sched_names"].keys()),
    }
    return report


#: The reader's message for a line it cannot read: its number, the reason and the line.
BAD_LINE = re.compile(r"^.*? line (\d+): not an ftrace line \((.*?)\): (.*)$", re.S)


def read_rendered(rendered: Rendered, read: Callable[[Path], tuple[Any, ParseReport]]) -> tuple[Any, dict]:
    """The rendered text through the ftrace reader (``read``); its line numbers in errors
    become the packets they came from."""
    path = rendered.path
    try:
        table, report = read(rendered.text)
    except TraceParseError as exc:
        raise bad_trace(path, packet_message(str(exc)), origin_offset(exc.line, rendered)) from None
    report["bad_messages"] = [
        f"{path} at byte offset {origin_offset(None, rendered, m)}: {packet_message(m)}" for m in report["bad_messages"]
    ]
    # A dict of its own: full_report adds what the packets said.
    return table, dict(report)


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
