"""A run recorded with the phone's own ``perfetto``: the block requests, the SQL thread's
syscalls and the engine's markers, in one Perfetto trace pulled to the host afterwards.

On a phone only ``traced_probes`` may turn ftrace events on; the shell user asks it through
the ``perfetto`` command line client with a TraceConfig (AOSP's perfetto.rc gives the
client the directory it may write traces to: /data/misc/perfetto-traces). The engine
writes its markers to the kernel's ``trace_marker``, which every process may write (AOSP's
atrace.rc makes it 0222), so they arrive as ``print`` events in the same trace, on the
same clock as the block events: the commit windows are cut from them exactly as from a
tracefs capture on the host.

``--background-wait`` (Perfetto v19, Android 12) returns once the data sources have
started, so the run's first marker is in the trace; an older client gets
``--background`` and a pause.
"""

from __future__ import annotations

import contextlib
import posixpath
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlwa.errors import DeviceError
from sqlwa.phone.adb import Device

TRACE_DIR = "/data/misc/perfetto-traces"
MARKER_FILES = ("/sys/kernel/tracing/trace_marker", "/sys/kernel/debug/tracing/trace_marker")
#: The events a run needs: the device level, the filesystems' fsync, the syscalls sqlwa
#: counts per commit, and ``print`` (the engine's markers).
FTRACE_EVENTS = (
    "block/block_rq_issue",
    "block/block_rq_complete",
    "block/block_rq_insert",
    "block/block_bio_queue",
    "block/block_bio_backmerge",
    "block/block_bio_frontmerge",
    "block/block_bio_remap",
    "f2fs/f2fs_sync_file_enter",
    "f2fs/f2fs_sync_file_exit",
    "ext4/ext4_sync_file_enter",
    "ext4/ext4_sync_file_exit",
    "raw_syscalls/sys_enter",
    "raw_syscalls/sys_exit",
    "ftrace/print",
    "task/task_newtask",
    "task/task_rename",
)
SYSCALL_EVENTS = (
    "sys_fsync",
    "sys_fdatasync",
    "sys_sync_file_range",
    "sys_pwrite64",
    "sys_write",
    "sys_ftruncate",
    "sys_unlinkat",
    "sys_openat",
)
BUFFER_KB = 65536  # the ring for the whole run (block and syscall events come fast)
PER_CPU_KB = 16384
STOP_WAIT_S = 60.0  # perfetto writes the trace out after SIGTERM: a long run's takes a while
OLD_CLIENT_PAUSE_S = 2.0  # --background on a client without --background-wait


def trace_config(duration_ms: int) -> str:
    """The TraceConfig (text form) of a run: one ftrace data source, its ring dropping
    new events when full (losses are counted in ftrace_stats and refused by the analysis)."""
    events = "".join(f'      ftrace_events: "{e}"\n' for e in FTRACE_EVENTS)
    syscalls = "".join(f'      syscall_events: "{s}"\n' for s in SYSCALL_EVENTS)
    return (
        f"buffers {{\n  size_kb: {BUFFER_KB}\n  fill_policy: DISCARD\n}}\n"
        'data_sources {\n  config {\n    name: "linux.ftrace"\n    target_buffer: 0\n    ftrace_config {\n'
        f"{events}{syscalls}      buffer_size_kb: {PER_CPU_KB}\n      drain_period_ms: 250\n"
        "    }\n  }\n}\n"
        f"duration_ms: {duration_ms}\n"
    )


def marker_file(device: Device) -> str:
    """The ``trace_marker`` the engine writes to: tracefs's own mount (Android 11 on), or
    the one under debugfs."""
    for path in MARKER_FILES:
        if device.shell(["test", "-w", path], check=False).returncode == 0:
            return path
    raise DeviceError(
        "the phone's trace_marker is not writable for the shell user (neither of " + ", ".join(MARKER_FILES) + ")",
        "a phone's atrace.rc makes it writable for everyone: is this an Android build?",
    )


@dataclass(frozen=True)
class Recording:
    """A perfetto session going on on the phone: its client's pid and its trace file."""

    pid: int
    trace: str


def trace_path(name: str) -> str:
    """Where the session of the run whose directory is ``name`` writes its trace."""
    return posixpath.join(TRACE_DIR, f"{name}.perfetto-trace")


def start(device: Device, name: str, duration_ms: int) -> Recording:
    """Start recording into :func:`trace_path`; returns once the trace has begun."""
    trace = trace_path(name)
    config = trace_config(duration_ms)

    def command(background: str) -> str:
        return f"perfetto --txt -c - -o {trace} {background} <<'SQLWA_CONFIG'\n{config}SQLWA_CONFIG"

    done = device.shell_text(command("--background-wait"), check=False)
    # a client older than v19 refuses the option by name (getopt's "unrecognized option");
    # any other failure is perfetto's own, said as it is
    waited = "background-wait" not in done.stderr + done.stdout
    if not waited:
        done = device.shell_text(command("--background"), check=False)
    pid = done.stdout.split()[-1] if done.stdout.split() else ""
    if done.returncode != 0 or not pid.isdigit():
        raise DeviceError(f"the phone's perfetto did not start: {(done.stderr or done.stdout).strip()[:300]}")
    if not waited:
        time.sleep(OLD_CLIENT_PAUSE_S)
    return Recording(int(pid), trace)


def stop(device: Device, recording: Recording, local: Path) -> None:
    """End the session (SIGTERM, as ``perfetto``'s own help says), wait for the client to
    have written the trace, pull it to ``local`` and remove it from the phone."""
    device.shell(["kill", "-TERM", str(recording.pid)], check=False)
    deadline = time.monotonic() + STOP_WAIT_S
    while device.shell(["kill", "-0", str(recording.pid)], check=False).returncode == 0:
        if time.monotonic() > deadline:
            raise DeviceError(
                f"the phone's perfetto (pid {recording.pid}) did not finish its trace in {STOP_WAIT_S:g} s"
            )
        time.sleep(0.2)
    try:
        device.pull(recording.trace, local)
    finally:
        device.shell(["rm", "-f", recording.trace], check=False)


@contextmanager
def recorded(device: Device, name: str, duration_ms: int, local: Path) -> Iterator[Recording]:
    """A perfetto session around the ``with`` body, its trace pulled to ``local`` at the
    end; stopped and removed from the phone also when the body fails."""
    recording = start(device, name, duration_ms)
    try:
        yield recording
    except BaseException:
        # the session ended and its trace removed, if the phone is still there to do it
        # (else the next cleanup removes it with the run's directory)
        with contextlib.suppress(DeviceError), tempfile.TemporaryDirectory(prefix="sqlwa-trace-") as scratch:
            stop(device, recording, Path(scratch) / "discarded.perfetto-trace")
        raise
    stop(device, recording, local)
