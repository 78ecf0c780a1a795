"""Moving tracefs's ``trace_pipe`` into the run's ``trace.txt`` while the workload runs,
as late and as cheaply as is safe (see :class:`Drain`)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlwa import _system
from sqlwa.analysis import traceformat
from sqlwa.errors import CaptureError, OutputStuck

DEFAULT_BUFFER_KB = 16384  # per CPU; drained from a quarter full on, so far more than a run needs
POLL_MS = 100  # how often the drain looks at the ring buffer (default buffer size)
MIN_POLL_MS = 2  # ... and at most this often, for small buffers
READ_SIZE = 1 << 16
WRITE_BUFFER = 1 << 20  # trace.txt is written in 1 MiB chunks, not one write per page read
COUNT_CHUNK = 8 << 20  # trace.txt is counted in chunks of this size after the run
DISCARD_WAIT_S = 1  # how long an interrupted run waits for the drain to stop
STOP_STEP_S = 0.1  # how often a stop looks at a second signal and at the output
DRAIN_AT = 0.25  # drain once a CPU's ring buffer is this full (see Drain)
BYTES_RE = re.compile(rb"^bytes: (\d+)$", re.M)
LOST_RE = re.compile(rb"\[LOST (\d+) EVENTS\]")
#: A run whose text passes this many bytes is kept in parts as it is drained (see Drain);
#: SQLWA_TRACE_SEGMENT_BYTES changes it (tests make it small).
SEGMENT_BYTES = int(os.environ.get("SQLWA_TRACE_SEGMENT_BYTES", 64 << 20))


#: The names of a capture's parts and their reports (a new run into the directory removes
#: those of an earlier run, see :func:`sqlwa.results.rundir.begin`).
PART_RE = re.compile(r"trace\.\d{5}\.(parquet|report\.json)")


def part_path(trace_path: Path, number: int) -> Path:
    """The ``number``-th part of a long run's capture, beside its ``trace.txt``."""
    return trace_path.with_name(f"trace.{number:05d}.parquet")


def part_number(part: Path) -> int:
    """The number in a part's name (``trace.00003.parquet`` → 3)."""
    return int(part.name.split(".")[1])


def parts_of(trace_path: Path) -> list[Path]:
    """The parts a long run's drain made of its capture, in order (none for a short run)."""
    return sorted(trace_path.parent.glob("trace.[0-9][0-9][0-9][0-9][0-9].parquet"))


def report_path(part: Path) -> Path:
    """Where a part's parse report lies: ``trace.NNNNN.report.json``."""
    return part.with_name(part.name.removesuffix(".parquet") + ".report.json")


def convert_segment(text: Path, part: Path) -> dict:
    """Parse a finished segment of ftrace text into the Parquet file ``part`` (row group by
    row group, the run's event table's columns) and its report beside it; returns the report."""
    report = traceformat.parse_to_parquet(text, part, format="ftrace", lenient=True)
    report_path(part).write_text(json.dumps(report) + "\n")
    return report


class Drain(threading.Thread):
    """Moves trace_pipe to the output file while the run goes, then what is left.

    Reading trace_pipe is where most of the capture's CPU goes: the kernel formats every
    event as text in the reader's thread (1.3-2.5 µs per event measured here), and on a
    2-core machine that thread competes with the workload. So the drain does it as late
    as is safe: every ``POLL_MS`` (more often for a smaller buffer) it reads the per-CPU
    ``stats`` (``bytes:`` still unread in the ring buffer) and drains only once a CPU's
    buffer is ``DRAIN_AT`` full; at the end of the capture it drains the rest. A run that
    fits in a quarter of the buffer is formatted after its last commit; a longer one is
    drained in bursts while it goes, with three quarters of the buffer as headroom
    (formatting moves ~40 MB/s of ring buffer here, several times what a run produces).
    Kernels without ``bytes:`` in ``stats`` are drained every ``POLL_MS``.

    A long run is kept in parts: once the text drained since the last part passes
    ``SEGMENT_BYTES`` (checked after each read, which ends at a line's end), that segment is counted, parsed
    into ``trace.NNNNN.parquet`` (the event table's columns, ~7 B an event against ~111 B of
    text) and removed, and ``trace.txt`` starts again. The disk then holds at most one
    segment of text; the analysis parses the last one and joins the parts
    (:func:`sqlwa.measure.analyse.analyse_trace`). A run shorter than a segment keeps its
    whole ``trace.txt``, as always.

    It sleeps between checks instead of poll(2)ing trace_pipe: for the all-CPU trace_pipe
    the kernel reports readable as soon as one event is there, so a poll loop woke the
    drain (through an irq_work on the traced CPU) for nearly every event, reading a few
    lines per wake-up (1368 wake-ups in a 2000-commit run, 10 now). A read(2) of
    trace_pipe returns at most one page. Lines, per-event counts and ``[LOST n EVENTS]``
    notices are counted from the file after recording stops (:meth:`count`), not while
    the workload runs. (splice(2) from trace_pipe was tried and rejected: it dropped
    events without any loss notice.)

    This thread also switches recording on at its start and off at its end: the caller's
    thread is usually the workload thread the syscall events are filtered to, and its own
    write(2) to ``tracing_on`` would otherwise appear in the trace as a workload syscall.
    """

    def __init__(self, instance_dir: Path, out_path: Path, needles: dict[str, bytes], buffer_kb: int) -> None:
        super().__init__(name="sqlwa-trace-drain", daemon=True)
        self._tracing_on = instance_dir / "tracing_on"
        self._stats = sorted((instance_dir / "per_cpu").glob("cpu*/stats"))
        self._drain_at = int(buffer_kb * 1024 * DRAIN_AT)
        # a smaller buffer fills sooner: look at it more often (the default every POLL_MS)
        self._interval = max(MIN_POLL_MS, POLL_MS * min(1.0, buffer_kb / DEFAULT_BUFFER_KB)) / 1000
        self.drains = 0  # drains while recording (bursts of formatting during the run)
        self._out_path = out_path
        try:  # the output first: a trace_pipe left open would keep the instance busy
            self._out = open(out_path, "wb", buffering=WRITE_BUFFER)
        except OSError as exc:
            raise CaptureError(
                f"cannot write the trace to {out_path}: {exc.strerror}", "choose a writable --out"
            ) from None
        self._fd = os.open(instance_dir / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
        self._stop_requested = threading.Event()
        self._discard = False  # an interrupted run: what is still unread is not wanted
        self.recording = threading.Event()
        self._needles = needles
        self.lines = 0
        self.lost_lines = 0  # "[LOST n EVENTS]" notices trace_pipe printed
        self.counts = {name: 0 for name in needles}
        self.parts: list[Path] = []  # the parts made of a long run's capture (see above)
        self._written = 0  # bytes of text in the current segment
        self.error: BaseException | None = None
        self.write_error: OSError | None = None  # writing trace.txt failed (a full disk)

    def run(self) -> None:
        try:
            _system.tracefs.tracefs_write(self._tracing_on, "1")
            self.recording.set()
            while not self._stop_requested.wait(self._interval):
                if self._filling():
                    self.drains += 1
                    self._read_available()
            _system.tracefs.tracefs_write(self._tracing_on, "0")
            if not self._discard:
                self._read_available()
        except BaseException as exc:  # reported by stop(); the thread must not die silently
            self.error = exc
            self.recording.set()  # wake the starter, which then reports the error
        finally:
            self._close()

    def _filling(self) -> bool:
        """Whether a CPU's ring buffer holds ``DRAIN_AT`` of its size unread (or the
        kernel does not say)."""
        for stats in self._stats:
            match = BYTES_RE.search(stats.read_bytes())
            if match is None or int(match.group(1)) >= self._drain_at:
                return True
        return not self._stats

    def _read_available(self) -> None:
        read = os.read
        while not self._discard:  # a stop that turned into a discard wants no more
            try:
                data = read(self._fd, READ_SIZE)  # whole lines, at most one page per read
            except BlockingIOError:
                return
            if not data:
                return
            try:
                self._out.write(data)  # not bound once: a new segment is a new file
            except OSError as exc:  # the output's disk, not tracefs: say which
                self.write_error = exc
                raise
            self._written += len(data)
            if self._written >= SEGMENT_BYTES:  # reads end at a line's end
                self._next_segment()

    def _next_segment(self) -> None:
        """The segment drained so far becomes the next part; trace.txt starts again."""
        try:
            self._out.close()
        except OSError as exc:
            self.write_error = exc
            raise
        self._count_file(self._out_path)
        part = part_path(self._out_path, len(self.parts))
        try:
            convert_segment(self._out_path, part)
            self._out = open(self._out_path, "wb", buffering=WRITE_BUFFER)
        except OSError as exc:  # the output's disk (a full one: the part did not fit)
            self.write_error = exc
            raise
        self.parts.append(part)
        self._written = 0

    def _close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
        try:
            self._out.close()  # flushes the last buffered chunk: a full disk shows here too
        except OSError as exc:
            self.write_error = self.write_error or exc

    def _let_go_of_trace_pipe(self) -> None:
        """Point our trace_pipe descriptor at /dev/null while the stuck thread still owns
        the number: trace_pipe is closed, so the instance can be removed, and the thread
        reads EOF whenever it wakes. (A plain close would let a new file reuse the number
        under the thread's feet.)"""
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, self._fd)
        finally:
            os.close(null)

    def count(self) -> None:
        """Lines, per-event counts and lost-event notices of the finished file (added to
        those of the parts made before it)."""
        self._count_file(self._out_path)

    def _count_file(self, path: Path) -> None:
        with open(path, "rb") as f:
            tail = b""
            while chunk := f.read(COUNT_CHUNK):
                data = tail + chunk
                cut = data.rfind(b"\n") + 1  # count whole lines only: a needle never spans a cut
                whole, tail = data[:cut], data[cut:]
                self._count(whole)
            self._count(tail)

    def _count(self, data: bytes) -> None:
        self.lines += data.count(b"\n")
        for name, needle in self._needles.items():
            self.counts[name] += data.count(needle)
        if b"[LOST " in data:
            lost = LOST_RE.findall(data)
            self.lost_lines += sum(int(n) for n in lost)
            self.lines -= len(lost)

    def stop(
        self,
        timeout: float = 30,
        discard: bool = False,
        stuck: Callable[[], str | None] | None = None,
        abort: Callable[[], bool] | None = None,
    ) -> None:
        """End the drain: with ``discard`` (an interrupted run) without reading the rest,
        and waiting a second at most. While it reads the rest, ``abort()`` turning true (a
        second Ctrl-C, held back by the capture's teardown) makes it a discard, and
        ``stuck()`` saying why the output cannot go on (it takes no writes:
        :class:`~sqlwa._system.writable.WriteProbe`) ends the wait at once with
        :class:`~sqlwa.errors.OutputStuck`: the thread, stuck in a write, is left behind."""
        if self.ident is None:  # never started (interrupted right after creation)
            self._close()
            return
        self._discard = discard
        self._stop_requested.set()
        self.recording.set()
        deadline = time.monotonic() + (DISCARD_WAIT_S if discard else timeout)
        reason = None
        while reason is None and (left := deadline - time.monotonic()) > 0:
            self.join(min(STOP_STEP_S, left))
            if not self.is_alive():
                break
            if abort is not None and not self._discard and abort():
                self._discard = True  # what is still unread is not wanted now
                deadline = min(deadline, time.monotonic() + DISCARD_WAIT_S)
            reason = stuck() if stuck is not None else None
        if self.is_alive():
            self._let_go_of_trace_pipe()
            if reason is not None:
                raise OutputStuck(reason, _system.writable.STUCK_HINT)
            raise CaptureError(
                f"the trace drain did not finish: writing {self._out_path} is stuck (a frozen or hung filesystem?)"
            )
        if self.write_error is not None:
            raise CaptureError(
                f"writing the trace to {self._out_path} failed: {self.write_error.strerror}",
                "make room on that filesystem, or choose another --out, and re-run",
            ) from self.write_error
        if self.error is not None:
            raise CaptureError(f"draining trace_pipe failed: {self.error}") from self.error
        self.count()
