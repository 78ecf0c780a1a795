"""The capture: one tracefs instance per run, recording block requests on the lab's loop
device, the workload thread's syscalls and the engine's commit markers on one timeline.

:class:`TraceCapture` makes an instance named ``sqlwa-<pid>-<token>``, sets its clock to
``mono`` (CLOCK_MONOTONIC, the clock the engine stamps its markers with), enables

* ``block/block_rq_issue`` and ``block/block_rq_complete`` (required: writes, flushes,
  FUA, discards, latency) and ``block/block_bio_queue`` (who submitted the I/O: the
  workload thread, jbd2, a writeback worker ...), filtered to the device. Filters compare
  ``dev`` with the kernel's internal device number ``(major << 20) | minor``;
* ``syscalls/sys_enter_*`` of fsync, fdatasync, sync_file_range, pwrite64, ftruncate,
  unlink, unlinkat and openat, and ``sys_exit_*`` of the sync family (durations) and
  openat (the fd), filtered to the workload thread(s) (``common_pid`` is the kernel's
  thread id) and to threads of the given names (``comm``: a FUSE daemon's, so that a
  thread it starts mid-run, which inherits the name, is traced too);
* and whatever the engine writes to :attr:`TraceCapture.marker_path` (the instance's
  ``trace_marker``), which appears as ``tracing_mark_write: <text>`` lines.

With a device-mapper device between the filesystem and the lab's disk (``mapped_dev``:
dm-crypt), the disk stays the device whose requests are counted, and the block events
are also recorded for the dm device, with ``block_bio_remap``: the dm device has no
requests of its own (it is bio-based), but its ``block_bio_queue`` events say who
submitted each bio, and each remap event says which dm sector a bio on the disk came
from, so attribution can follow a write back to the filesystem's sectors and thread.

A background thread drains ``trace_pipe`` into ``out_dir/trace.txt`` (kept for
re-analysis) while the run goes (see :class:`Drain` for when). At the end the per-CPU
``stats`` files say how many events the ring buffer lost; a lossy capture raises
:class:`TraceLossError` unless ``allow_loss``. The instance is removed on exit, on an
exception and on SIGINT/SIGTERM.

What is left out, and why (the capture's cost is judged in commits/s, capture on vs off,
by ``bench/capture_overhead.py``; every event costs CPU twice, when recorded and when
formatted as text by the drain):

* ``write(2)``: every write() of the SQL thread is one of the engine's marker writes
  (SQLite's unix VFS writes with pwrite64), so its enter/exit pair only duplicated each
  marker line, two extra events per marker. Nothing in the analyzer counts it (its
  ``pwrite_*`` figures are pwrite64 only). ``syscalls=`` can still add it.
* ``sys_exit`` of pwrite64, ftruncate, unlink and unlinkat: nothing uses their return
  values (pwrite64's byte count is its ``count`` argument). ``exits=`` can add them.
* ``set_event_pid`` instead of the ``common_pid`` filters: it applies to every event of
  the instance, so it would also drop the block events of jbd2, the XFS log worker,
  writeback kworkers and the loop device, which the block level must see.
* ``block_bio_queue`` stays: attribution needs who queued a request's first bio. It is
  one event per bio, a little more than one per request (4.5 per WAL+FULL commit on
  ext4 vs 3.5 ``block_rq_issue``), so ``block_getrq`` (one per request) would save at
  most one event per commit, and the analyzer matches ``Q`` rows.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlwa import _system
from sqlwa.capture.drain import DEFAULT_BUFFER_KB, Drain
from sqlwa.errors import CaptureError, Interrupted, NeedsRoot, OutputStuck, TraceLossError, hint_of

MOUNT_HINT = "mount tracefs: mount -t tracefs nodev /sys/kernel/tracing"
INSTANCE_PREFIX = "sqlwa"
EVENTS_RE = re.compile(r"^(?:entries|read events): (\d+)$", re.M)  # per_cpu/cpu*/stats
INSTANCE_RE = re.compile(rf"^{INSTANCE_PREFIX}-(\d+)-([0-9a-f]+)$")
TRACE_FILE = "trace.txt"
TRACE_CLOCK = "mono"

REQUIRED_BLOCK_EVENTS = ("block_rq_issue", "block_rq_complete")
DEFAULT_BLOCK_EVENTS = REQUIRED_BLOCK_EVENTS + ("block_bio_queue",)
REMAP_EVENT = "block_bio_remap"  # with a mapped (dm) device: from which dm sector a disk bio came
# sys_enter of each; not write(2): see the module docstring
DEFAULT_SYSCALLS = (
    "fsync",
    "fdatasync",
    "sync_file_range",
    "pwrite64",
    "ftruncate",
    "unlink",
    "unlinkat",
    "openat",
)
# sys_exit only where the return or the duration is used: the sync family (how long each
# sync took) and openat (the fd it returned)
DEFAULT_EXITS = ("fsync", "fdatasync", "sync_file_range", "openat")


def kernel_dev(major: int, minor: int) -> int:
    """The device number as tracefs filters see it (the kernel's internal dev_t)."""
    return (major << 20) | minor


# --------------------------------------------------------------------------- availability


@dataclass(frozen=True)
class Availability:
    """Whether tracefs can be used, and if not why and how to fix it."""

    available: bool
    reason: str
    hint: str | None = None
    syscalls: bool = False  # syscall tracepoints (CONFIG_FTRACE_SYSCALLS) present
    syscall_reason: str = ""


def tracefs_available() -> Availability:
    """Root, tracefs mounted, the block tracepoints present; and separately whether the
    syscall tracepoints exist (their absence only makes the syscall level absent)."""
    if not _system.processes.is_root():
        return Availability(False, "tracefs needs root", "run with sudo, or use --dir PATH for a VFS-only run")
    root = _system.tracefs.tracefs_root()
    if root is None:
        return Availability(
            False, f"tracefs is not mounted (no {_system.tracefs.TRACEFS_MOUNTS[0]}/instances)", MOUNT_HINT
        )
    missing = [e for e in REQUIRED_BLOCK_EVENTS if not (root / "events" / "block" / e).is_dir()]
    if missing:
        return Availability(
            False,
            f"the kernel has no block tracepoints {', '.join(missing)}",
            "use a kernel with CONFIG_BLK_DEV_IO_TRACE",
        )
    has_syscalls = (root / "events" / "syscalls").is_dir()
    syscall_reason = (
        f"syscall tracepoints present ({root}/events/syscalls)"
        if has_syscalls
        else "the kernel has no syscall tracepoints (CONFIG_FTRACE_SYSCALLS); the syscall level will be absent"
    )
    return Availability(True, f"tracefs at {root}", None, has_syscalls, syscall_reason)


def mount_if_absent() -> None:
    """As root, mount tracefs where it is not mounted (a fresh machine's first run), saying
    so in one line on stderr; without root nothing: :func:`tracefs_available` says what
    the block level needs."""
    mounted = _system.tracefs.mount_tracefs()
    if mounted is not None:
        print(f"sqlwa: mounted tracefs on {mounted} (the block and syscall levels read it)", file=sys.stderr)


def require_tracefs() -> Path:
    mount_if_absent()
    availability = tracefs_available()
    if not availability.available:
        error = NeedsRoot if not _system.processes.is_root() else CaptureError
        raise error(f"the block/syscall capture is not possible: {availability.reason}", availability.hint)
    root = _system.tracefs.tracefs_root()
    if root is None:  # unmounted since it was looked at
        raise CaptureError("the block/syscall capture is not possible: tracefs is not mounted")
    return root


# --------------------------------------------------------------------------- capture


@dataclass
class _Level:
    captured: bool
    reason: str
    events: list[str] = field(default_factory=list)


class TraceCapture:
    """One trace of a run; use as a context manager around the workload.

    >>> with TraceCapture(out_dir, dev=lab.dev, pid=threading.get_native_id()) as cap:
    ...     engine.run(marker_path=cap.marker_path)   # close the marker file before leaving
    ...     _system.mounts.syncfs(lab.mountpoint)
    >>> cap.trace_summary   # {"events": n, "lost_events": n}

    ``dev``: (major, minor) of the block device to record, or None (tmpfs: the block level
    is then absent, not zero). ``mapped_dev``: a device-mapper device on ``dev`` whose
    bios and remaps are recorded too (the filesystem's device under dm-crypt), or None. ``pid``: the thread id (or ids) running SQL, or None (the
    syscall level is then absent). ``comms``: names (comm) of further threads whose
    syscalls are traced, e.g. a FUSE daemon's. ``buffer_kb``: ring buffer per CPU.
    Attributes: ``instance_name``, ``instance_dir``, ``marker_path``, ``trace_path``,
    ``levels`` ({"block": {...}, "syscall": {...}, "marker": {...}}); after exit
    ``trace_summary`` and :meth:`describe`.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        dev: tuple[int, int] | None = None,
        pid: int | Iterable[int] | None = None,
        mapped_dev: tuple[int, int] | None = None,
        buffer_kb: int = DEFAULT_BUFFER_KB,
        comms: Sequence[str] = (),
        allow_loss: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.dev = dev
        self.mapped_dev = mapped_dev if dev is not None else None
        self.tids = [pid] if isinstance(pid, int) else sorted(set(pid)) if pid is not None else []
        self.comms = tuple(checked_comm(c) for c in comms)
        self.buffer_kb = int(buffer_kb)
        self.allow_loss = allow_loss
        # what is traced: the analysis reads these events and no others
        self.block_events = DEFAULT_BLOCK_EVENTS
        self.syscalls = DEFAULT_SYSCALLS
        self.exits = DEFAULT_EXITS
        self._progress = progress or (lambda stage: None)
        self._guard = _system.signals.SignalGuard()
        self.instance_name = f"{INSTANCE_PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        self.instance_dir: Path | None = None
        self.trace_path = self.out_dir / TRACE_FILE
        self.levels: dict[str, _Level] = {}
        self.trace_summary: dict | None = None
        self._drain: Drain | None = None
        self._lost_stats = 0
        self._enabled: list[str] = []
        self._ownership: int | None = None
        self._discard = True  # until __exit__ decides: a set-up that failed has no trace to read
        self._signals_before = _system.signals.received_count()  # see _stop_drain

    @property
    def marker_path(self) -> str:
        """The file the engine writes its marker lines to (the instance's trace_marker)."""
        return str(self._instance / "trace_marker")

    def events_so_far(self) -> int:
        """The events the capture holds so far, as the kernel counts them in each CPU's
        ``stats``: those the drain has read plus those still in the ring buffer (a
        progress display's figure; 0 before the capture starts or after it ends)."""
        if self.instance_dir is None:
            return 0
        total = 0
        for stats in (self.instance_dir / "per_cpu").glob("cpu*/stats"):
            try:
                text = stats.read_text()
            except OSError:
                return 0  # the instance is being removed
            total += sum(int(n) for n in EVENTS_RE.findall(text))
        return total

    @property
    def _instance(self) -> Path:
        """The tracefs instance, once ``__enter__`` has chosen it."""
        if self.instance_dir is None:
            raise CaptureError("the capture is not running")
        return self.instance_dir

    # -- context manager

    def __enter__(self) -> TraceCapture:
        root = require_tracefs()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._refuse_out_dir_on_traced_device()
        self.instance_dir = root / "instances" / self.instance_name
        self._guard.set_up(self._start, self._teardown)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # A stopped run wants no more trace (and must not wait on a stuck output); a failed
        # one keeps its raw capture for diagnosis.
        self._discard = exc_type is not None and issubclass(exc_type, (KeyboardInterrupt, Interrupted))
        errors = self._teardown()
        if exc_type is not None:
            return
        hinted = [e for e in errors if hint_of(e)]
        if hinted:  # an error that knows its fix (a full output disk) says it alone
            raise hinted[0]
        self._guard.finish(
            errors,
            lambda message: CaptureError(
                f"ending the capture {self.instance_name} failed: {message}",
                "close the marker file before the capture ends; `sqlwa lab cleanup` removes a stale instance",
            ),
        )
        lost = (self.trace_summary or {}).get("lost_events")
        if lost and not self.allow_loss:
            raise TraceLossError(
                f"the trace lost {lost} events (ring buffer overrun); its counts would be wrong "
                f"(raw capture kept in {self.trace_path})",
                f"re-run with a larger --buffer-kb (now {self.buffer_kb} KiB per CPU) or pass --allow-loss",
            )

    # -- setup

    def _refuse_out_dir_on_traced_device(self) -> None:
        """Writing trace.txt onto the device being traced would record itself."""
        if self.dev is not None and os.stat(self.out_dir).st_dev == os.makedev(*self.dev):
            raise CaptureError(
                f"the output directory {self.out_dir} is on the traced device {self.dev[0]}:{self.dev[1]}",
                "write the run's output outside the lab filesystem",
            )

    def _start(self) -> None:
        self._progress("instance")
        os.mkdir(self._instance)
        self._ownership = _system.ownership.hold_ownership(self._instance)
        self._progress("configure")
        self._write("tracing_on", "0")  # a new instance records at once; start only when all is set
        self._write("buffer_size_kb", str(self.buffer_kb))
        self._write("trace_clock", TRACE_CLOCK)
        if f"[{TRACE_CLOCK}]" not in self._read("trace_clock"):
            raise CaptureError(f"could not set trace_clock to {TRACE_CLOCK}")
        self._enable_block_events()
        self._enable_syscall_events()
        self.levels["marker"] = _Level(True, "engine markers via trace_marker", ["tracing_mark_write"])
        self._progress("drain")
        self._drain = Drain(self._instance, self.trace_path, self._needles(), self.buffer_kb)
        self._drain.start()
        if not self._drain.recording.wait(10) or self._drain.error:
            raise CaptureError(f"starting the trace failed: {self._drain.error or 'the drain thread did not start'}")

    def _needles(self) -> dict[str, bytes]:
        """What identifies each enabled event in trace_pipe's text, for the per-event
        counts: syscalls print as "sys_fsync(fd: 3)" and "sys_fsync -> 0x0"."""
        needles = {}
        for name in [*self._enabled, "tracing_mark_write"]:
            if name.startswith("sys_enter_"):
                needles[name] = f": sys_{name[len('sys_enter_') :]}(".encode()
            elif name.startswith("sys_exit_"):
                needles[name] = f": sys_{name[len('sys_exit_') :]} -> ".encode()
            else:
                needles[name] = f": {name}: ".encode()
        return needles

    def _enable_block_events(self) -> None:
        if self.dev is None:
            self.levels["block"] = _Level(False, "no block device (e.g. tmpfs): the block level is absent")
            return
        dev_filter = f"dev == {kernel_dev(*self.dev)}"
        events, reason = list(self.block_events), f"block device {self.dev[0]}:{self.dev[1]}"
        if self.mapped_dev is not None:
            # remap events carry the disk as dev, so the one filter serves them too
            dev_filter += f" || dev == {kernel_dev(*self.mapped_dev)}"
            events.append(REMAP_EVENT)
            reason += f" and the bios of device-mapper device {self.mapped_dev[0]}:{self.mapped_dev[1]} on it"
        for event in events:
            self._enable(f"block/{event}", dev_filter)
        self.levels["block"] = _Level(True, reason, events)

    def _enable_syscall_events(self) -> None:
        syscall_dir = self._instance / "events" / "syscalls"
        if not self.tids:
            self.levels["syscall"] = _Level(False, "no workload thread id given: the syscall level is absent")
            return
        if not syscall_dir.is_dir():
            self.levels["syscall"] = _Level(False, "the kernel has no syscall tracepoints (CONFIG_FTRACE_SYSCALLS)")
            return
        tid_filter = " || ".join(
            [*(f"common_pid == {tid}" for tid in self.tids), *(f'comm == "{c}"' for c in self.comms)]
        )
        names = [f"sys_enter_{call}" for call in self.syscalls]
        names += [f"sys_exit_{call}" for call in self.syscalls if call in self.exits]
        present = [n for n in names if (syscall_dir / n).is_dir()]
        for name in present:
            self._enable(f"syscalls/{name}", tid_filter)
        missing = sorted(set(names) - set(present))
        named = f" and threads named {', '.join(self.comms)}" if self.comms else ""
        reason = f"threads {', '.join(map(str, self.tids))}{named}" + (
            f"; not on this kernel: {missing}" if missing else ""
        )
        self.levels["syscall"] = _Level(True, reason, present)

    def _enable(self, event: str, event_filter: str) -> None:
        self._write(f"events/{event}/filter", event_filter)
        self._write(f"events/{event}/enable", "1")
        self._enabled.append(event.split("/", 1)[1])

    def _write(self, rel: str, value: str) -> None:
        path = self._instance / rel
        try:
            _system.tracefs.tracefs_write(path, value)
        except OSError as exc:
            raise CaptureError(f"writing {value!r} to {path} failed: {exc.strerror}") from exc

    def _read(self, rel: str) -> str:
        return (self._instance / rel).read_text()

    # -- teardown

    def _teardown(self) -> list[Exception]:
        """Stop recording, drain what is left, count losses, remove the instance; each step
        runs even if an earlier one failed."""
        self._guard.tearing_down = True
        errors: list[Exception] = []
        for step in (self._stop_drain, self._stop_recording, self._read_losses, self._remove_instance):
            try:
                step()
            except Exception as exc:  # keep going: the instance must still be removed
                errors.append(exc)
        self._summarise()
        self._guard.restore()
        return errors

    def _instance_exists(self) -> bool:
        return self.instance_dir is not None and self.instance_dir.is_dir()

    def _stop_recording(self) -> None:
        if not self._instance_exists():
            return
        self._write("tracing_on", "0")
        self._write("events/enable", "0")

    def _stop_drain(self) -> None:
        """The drain ended: one that still reads gives up on a second signal (held back by
        the teardown) and, once a signal has ended the run (it is keeping what was
        measured), on an output that takes no writes (OutputStuck). A run no signal ended
        waits for its drain as long as it must: a probe slow on a busy output (a TCG
        guest's share, a slow disk under the drain's own writes) is no frozen one."""
        if self._drain is not None:
            signalled = _system.signals.received_since(self._signals_before) is not None
            stuck = _system.writable.WriteProbe(self.out_dir).stuck if signalled else None
            try:
                self._drain.stop(discard=self._discard, stuck=stuck, abort=lambda: self._guard.pending)
            except (CaptureError, OutputStuck):
                if not self._guard.pending:
                    raise
                # a signal came meanwhile: the run ends interrupted (raised after the
                # teardown), and a drain stuck on the output is then no failure of its own

    def _read_losses(self) -> None:
        if not self._instance_exists():
            return
        total = 0
        for stats in sorted((self._instance / "per_cpu").glob("cpu*/stats")):
            total += lost_in_stats(stats.read_text())
        self._lost_stats = total

    def _remove_instance(self) -> None:
        try:
            if self.instance_dir is not None:
                remove_instance(self.instance_dir)
        finally:
            _system.ownership.release_ownership(self._ownership)  # held to here: cleanup leaves us alone
            self._ownership = None

    def _summarise(self) -> None:
        drain = self._drain
        lost = max(self._lost_stats, drain.lost_lines if drain else 0)
        self.trace_summary = {"events": drain.lines if drain else 0, "lost_events": lost}

    # -- reporting

    def describe(self) -> dict:
        """What summary.json records about the capture (``trace`` plus how it was made)."""
        return {
            **(self.trace_summary or {"events": 0, "lost_events": 0}),
            "file": TRACE_FILE,
            "instance": self.instance_name,
            "clock": TRACE_CLOCK,
            "buffer_kb_per_cpu": self.buffer_kb,
            "levels": {
                k: {"captured": v.captured, "reason": v.reason, "events": v.events} for k, v in self.levels.items()
            },
            "event_counts": dict(self._drain.counts) if self._drain else {},
            # a long run's capture is kept in parts as drained, joined into events.parquet
            # by the analysis (sqlwa.capture.drain); 0: the whole trace.txt
            "parts": len(self._drain.parts) if self._drain else 0,
        }


def checked_comm(comm: str) -> str:
    """A thread name as a filter may quote it: what the kernel keeps (15 bytes) and no
    quote or backslash (the filter's string syntax has no escapes)."""
    if not re.fullmatch(r"[\w.+-]{1,15}", comm):
        raise CaptureError(f"{comm!r} cannot be traced by name: a comm is 1-15 letters, digits, '.', '_', '+' or '-'")
    return comm


def lost_in_stats(text: str) -> int:
    """Events a per-CPU ring buffer lost: overwritten (overrun), lost while committing
    (commit overrun) and dropped when full (dropped events)."""
    values = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    keys = ("overrun", "commit overrun", "dropped events")
    return sum(int(values[k].strip()) for k in keys if k in values)


def remove_instance(instance_dir: Path) -> None:
    """rmdir a tracefs instance, retrying briefly: it is busy while any of its files (the
    engine's trace_marker, a reader of trace_pipe) is still open."""
    try:
        _system.tracefs.remove_tracefs_instance(instance_dir)
    except OSError as exc:
        raise CaptureError(
            f"could not remove tracefs instance {instance_dir}: {exc.strerror} (a file of it is still open)"
        ) from exc


def remove_dead_instances() -> list[str]:
    """rmdir every ``sqlwa-<pid>-<token>`` tracefs instance whose owner is gone (its pid
    dead here and its ownership lock free: :func:`sqlwa._system.ownership.owner_is_gone`)."""
    root = _system.tracefs.tracefs_root()
    if root is None:
        return []
    removed = []
    for instance in sorted((root / "instances").iterdir()):
        match = INSTANCE_RE.match(instance.name)
        if not match or not _system.ownership.owner_is_gone(instance, int(match.group(1))):
            continue
        try:
            _system.tracefs.tracefs_write(instance / "tracing_on", "0")
            _system.tracefs.tracefs_write(instance / "events" / "enable", "0")
            remove_instance(instance)
            removed.append(f"removed tracefs instance {instance.name}")
        except (OSError, CaptureError) as exc:
            if instance.exists():  # else another cleanup removed it first
                removed.append(f"failed to clean up tracefs instance {instance.name}: {exc}")
    return removed
