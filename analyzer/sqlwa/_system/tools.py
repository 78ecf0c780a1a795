"""Running tools: one way to run a subprocess (:func:`run_tool`, raising
:class:`~sqlwa.errors.ToolError` with the command, exit code and stderr), mount(8), the kernel log.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqlwa.errors import ToolError

SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin")
# The programs the wheel carries inside the package (scripts/release): the FUSE daemon and
# sqlwa record's preload library.
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "_bin"


def find_tool(name: str) -> str | None:
    """``name`` on PATH or in the system sbin directories (non-root PATHs often lack them)."""
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(SYSTEM_BIN_DIRS)
    return shutil.which(name, path=path)


def _executable(program: str) -> str:
    """The file to run for ``program``: a bare name as :func:`find_tool` finds it, so every
    tool sqlwa runs (depmod, losetup, dmsetup ...) is found under a PATH without sbin."""
    if os.sep in program:
        return program
    return find_tool(program) or program


def run_tool(
    argv: Sequence[str | os.PathLike[str]],
    what: str,
    hint: str | None = None,
    timeout: float | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    die_with_caller: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a system tool and return its output, or raise :class:`ToolError`.

    The tool runs in its own session, so a terminal Ctrl-C reaches only sqlwa, whose
    signal handler decides; subprocess.run kills the child if an exception unwinds the wait.
    ``what`` says what the tool was for ("mkfs for xfs"), ``hint`` the fix to show;
    ``input`` is the tool's stdin (else none: /dev/null). With ``die_with_caller`` the
    kernel kills the tool if sqlwa dies, however it dies (a long measurement must not
    go on writing after a kill -9).
    """
    args = [str(a) for a in argv]
    try:
        return subprocess.run(
            args,
            executable=_executable(args[0]),
            check=True,
            capture_output=True,
            text=True,
            errors="surrogateescape",  # a byte that is not UTF-8 (a path, a phone's prop) kept, not a traceback
            timeout=timeout,
            start_new_session=True,
            cwd=cwd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            preexec_fn=_dying_with(os.getpid()) if die_with_caller else None,
        )
    except FileNotFoundError as exc:
        raise ToolError(
            f"{what}: {args[0]} not found", hint or f"install the package providing {args[0]}", argv=args
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{what}: {' '.join(args)} did not finish in {timeout:g} s", hint, argv=args) from exc
    except subprocess.CalledProcessError as exc:
        detail = " ".join(line.strip() for line in (exc.stderr or exc.stdout or "").splitlines() if line.strip())
        raise ToolError(
            f"{what} failed: {' '.join(args)}: {detail or f'exit code {exc.returncode}'}",
            hint,
            argv=args,
            returncode=exc.returncode,
            stderr=exc.stderr or "",
        ) from exc


def mount(argv: Sequence[str], what: str, hint: str, fstype: str) -> None:
    """``mount ARGV`` via :func:`run_tool`; when it fails, the kernel's own reason (a line
    of its log such as "xfs: Unknown parameter 'nobarrier'", which mount(8) before
    util-linux 2.39 only calls "wrong fs type, bad option ...") leads the error."""
    with kernel_log_since() as new_messages:
        try:
            run_tool(argv, what, hint)
        except ToolError as exc:
            device = os.path.basename(argv[-2]) if len(argv) > 1 else fstype
            reasons = [m for m in new_messages() if m.lower().startswith(fstype) or f"({device})" in m]
            if not reasons:
                raise
            raise ToolError(
                f"{what} failed, the kernel says: {'; '.join(reasons)} ({' '.join(exc.argv)})",
                hint,
                argv=exc.argv,
                returncode=exc.returncode,
                stderr=exc.stderr,
            ) from exc


@contextmanager
def kernel_log_since() -> Iterator[Callable[[], list[str]]]:
    """Yields a function returning the kernel log messages (/dev/kmsg, root only) written
    since the ``with`` began; without access to the log it returns none."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield list
        return
    try:
        os.lseek(fd, 0, os.SEEK_END)
        yield lambda: _read_kmsg(fd)
    finally:
        os.close(fd)


def _read_kmsg(fd: int) -> list[str]:
    """Each read of /dev/kmsg is one record, "prio,seq,usec,flags;message"."""
    messages: list[str] = []
    while True:
        try:
            record = os.read(fd, 8192).decode(errors="replace")
        except BlockingIOError:
            return messages
        except OSError:  # EPIPE: records were overwritten while we read; keep what we have
            continue
        if not record:
            return messages
        messages.append(record.split(";", 1)[-1].split("\n", 1)[0].strip())


def try_tool(argv: Sequence[str], timeout: float | None = None) -> subprocess.CompletedProcess[str] | None:
    """Run a tool whose failure the caller handles itself (a retry, a fallback): the
    finished process whatever its exit code, or None if it could not run or timed out."""
    args = [str(a) for a in argv]
    try:
        return subprocess.run(
            args,
            executable=_executable(args[0]),
            capture_output=True,
            text=True,
            errors="surrogateescape",  # a byte that is not UTF-8 (a path, a phone's prop) kept, not a traceback
            timeout=timeout,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def tool_version(tool: str) -> str | None:
    """The first line a tool prints for ``-V`` or ``--version``."""
    for flag in ("-V", "--version"):
        proc = try_tool([tool, flag], timeout=10)
        if proc is None:
            return None
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 0 and text:
            return text.splitlines()[0]
    return None


PR_SET_PDEATHSIG = 1


def _dying_with(parent: int) -> Callable[[], None]:
    def die_with_parent() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: nobody would stop us
            os._exit(1)

    return die_with_parent
