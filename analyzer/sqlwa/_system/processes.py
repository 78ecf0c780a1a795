"""Processes: root, whether a pid lives, the lab's daemons (children that die with
sqlwa), other processes' CPU time, and an action run in a forked child with a deadline.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlwa._system import tools
from sqlwa.errors import ToolError

# A daemon the lab runs (a FUSE daemon) is its child for as long as it lives: it is
# started in a session of its own (a terminal's Ctrl-C reaches only sqlwa, which decides)
# and with PR_SET_PDEATHSIG, so the kernel kills it when sqlwa dies, however it dies.


def is_root() -> bool:
    return os.geteuid() == 0


def pid_is_dead(pid: int) -> bool:
    """True if no live process has this pid (a zombie counts as dead: it will never
    clean up after itself)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def start_daemon(argv: Sequence[str], log_path: str | os.PathLike[str]) -> subprocess.Popen[str]:
    """Start ``argv`` with its stdout a pipe (for a ready line) and stderr into
    ``log_path``; raises :class:`ToolError` if it cannot be started."""
    argv = [str(a) for a in argv]
    with open(log_path, "w") as log:
        try:
            return subprocess.Popen(
                argv,
                executable=tools._executable(argv[0]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
                preexec_fn=tools._dying_with(os.getpid()),
            )
        except OSError as exc:
            raise ToolError(f"starting {argv[0]} failed: {exc.strerror}", argv=argv) from None


def read_line_within(proc: subprocess.Popen[str], wait_s: float) -> str | None:
    """The first line ``proc`` prints on stdout, or None if it prints none within
    ``wait_s`` seconds or exits without one."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(wait_s):
            return None
    return proc.stdout.readline() or None


def exit_code_within(proc: subprocess.Popen[str], wait_s: float) -> int | None:
    """``proc``'s exit code once it ends within ``wait_s`` seconds, else None (its stdout
    reaches EOF a moment before it can be reaped)."""
    try:
        return proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        return None


def stop_process(proc: subprocess.Popen[str], wait_s: float) -> None:
    """Wait up to ``wait_s`` for ``proc`` to end by itself, then SIGKILL it and reap it."""
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@dataclass(frozen=True)
class Process:
    pid: int
    comm: str
    argv: list[str]


def processes() -> list[Process]:
    """Every process visible here with its comm and command line (kernel threads, which
    have no command line, and processes gone meanwhile are left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().rstrip("\n")
        except OSError:
            continue
        if argv and argv[0]:
            found.append(Process(int(entry.name), comm, [a.decode(errors="replace") for a in argv if a]))
    return found


@dataclass(frozen=True)
class CpuTime:
    """CPU time of a process, all its threads (those that ended included), ns."""

    user_ns: int
    sys_ns: int


def process_cpu(pid: int) -> CpuTime:
    """``pid``'s user and system time from /proc/PID/stat (utime, stime: fields 14 and 15,
    in clock ticks of sysconf(SC_CLK_TCK), 10 ms here); ProcessLookupError once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    # after the comm in parentheses, which may hold spaces and parentheses itself
    fields = text.rsplit(")", 1)[1].split()
    tick_ns = process_cpu_tick_ns()
    return CpuTime(user_ns=int(fields[11]) * tick_ns, sys_ns=int(fields[12]) * tick_ns)


def process_cpu_tick_ns() -> int:
    """The unit of :func:`process_cpu`'s figures, ns."""
    return 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def kill_process(pid: int, wait_s: float = 5) -> None:
    """SIGKILL ``pid`` and wait until it is gone (or a zombie: its parent reaps it)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while not pid_is_dead(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if not pid_is_dead(pid):
        raise ToolError(f"process {pid} is still alive after SIGKILL (stuck in the kernel?)")


T = TypeVar("T")


def call_in_child(wait_s: float, action: Callable[..., T], *args: object) -> T | None:
    """``action(*args)`` in a forked child, its result (pickled back) or its exception
    re-raised here; None if it has not finished within ``wait_s`` seconds, when the child
    is killed (a child stuck in the kernel stays until the kernel lets go: it holds
    nothing of this process's)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here, whatever happens
        os.close(read_end)
        try:
            try:
                payload = pickle.dumps((True, action(*args)))
            except BaseException as exc:
                payload = pickle.dumps((False, exc))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as result:
        ready, _, _ = select.select([result], [], [], wait_s)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            _reap_within(pid, 1.0)
            return None
        data = result.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise OSError(f"the child running {getattr(action, '__name__', action)} died (wait status {status})")
    ok, value = pickle.loads(data)
    if not ok:
        raise value
    return value


def _reap_within(pid: int, wait_s: float) -> None:
    """Reap a killed child if it dies within ``wait_s`` (one stuck in the kernel may not)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return
        time.sleep(0.02)
