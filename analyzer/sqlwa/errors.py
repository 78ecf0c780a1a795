"""sqlwa's exception hierarchy.

Every error sqlwa raises for a user mistake or an unusable environment derives from
:class:`SqlwaError`. Errors raised in the Rust core arrive as the classes defined in the
native module; the ones defined here are raised by the Python layers (lab, capture,
analysis). An error may carry ``hint``: the one-line fix the CLI prints after the message.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from sqlwa._native import (
    ConfigError,
    Interrupted,
    ScenarioError,
    SqlwaError,
    TraceFileNotFoundError,
    TraceIsADirectoryError,
    TraceOSError,
    TraceParseError,
    TracePermissionError,
    WorkloadError,
)


def _message(self: BaseException) -> str:
    """An error's text is its message, not the (message, hint) tuple it was made with."""
    return str(self.args[0]) if self.args else ""


# pyo3's create_exception cannot define methods, and the classes it makes are heap types:
# the root's __str__ is set here, for the native classes and the ones below alike.
SqlwaError.__str__ = _message  # type: ignore[method-assign]


class UsageError(SqlwaError):
    """The command line or an input file asks for something that cannot be done."""


class LabError(SqlwaError):
    """Making, mounting or removing a lab filesystem failed."""


class GuestHung(LabError):
    """The VM lab's guest stopped answering within a phase's limit and was killed: the
    run's measurement is lost, the guest's console kept. A re-run in a fresh guest may
    well succeed (the error's hint says so)."""


class ToolError(LabError):
    """A system tool the lab runs (mkfs, mount, losetup, dumpe2fs ...) failed.

    ``argv`` is the command, ``returncode`` its exit code (None if it never ran or did
    not finish) and ``stderr`` what it printed there.
    """

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        argv: list[str] | None = None,
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message, hint)
        self.argv = argv or []
        self.returncode = returncode
        self.stderr = stderr


class UnsupportedFilesystem(LabError):
    """This machine cannot provide the requested filesystem (kernel module or mkfs missing)."""


class NeedsRoot(SqlwaError):
    """The operation needs root (loop devices, mounts, tracefs)."""


class DeviceError(SqlwaError):
    """The Android device a run goes to over adb is not ready (unauthorised, offline),
    went away mid-run, or a step there failed."""


class CaptureError(SqlwaError):
    """Setting up or reading the tracefs capture failed."""


class TraceLossError(CaptureError):
    """The trace lost events (ring-buffer overrun) and loss was not allowed."""


class OutputStuck(SqlwaError):
    """A directory sqlwa writes to takes no writes (a frozen filesystem, a dead hard
    mount): the write was left behind in a thread of its own, not waited for, since nothing
    can cancel it (:func:`sqlwa._system.files.WriteProbe`)."""


@contextmanager
def writing(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Turns an OSError while writing ``path`` (a missing or read-only directory, /proc, a
    full disk) into one :class:`UsageError` naming the file, instead of a traceback."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(f"cannot write {what} {path}: {reason}", os_error_fix(exc, "choose a writable path")) from None


def os_error_fix(exc: OSError, otherwise: str) -> str:
    """The fix for a failed file operation: room, when the filesystem was full (or the
    user's quota spent), else ``otherwise``."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "make room on that filesystem, or choose another path"
    return otherwise


def interruption(signum: int) -> BaseException:
    """The exception a signal becomes: Ctrl-C stays KeyboardInterrupt (click turns it into
    "interrupted"), SIGTERM becomes :class:`Interrupted`."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return Interrupted(f"terminated by {signal.Signals(signum).name}")


def hint_of(err: BaseException) -> str | None:
    """The fix to show for ``err``, if it carries one."""
    hint = getattr(err, "hint", None)
    if hint is None and len(getattr(err, "args", ())) > 1:
        hint = err.args[1]
    return str(hint) if hint else None


__all__ = [
    "SqlwaError",
    "ScenarioError",
    "ConfigError",
    "WorkloadError",
    "TraceParseError",
    "TraceFileNotFoundError",
    "TracePermissionError",
    "TraceIsADirectoryError",
    "TraceOSError",
    "Interrupted",
    "UsageError",
    "LabError",
    "GuestHung",
    "ToolError",
    "UnsupportedFilesystem",
    "NeedsRoot",
    "DeviceError",
    "CaptureError",
    "TraceLossError",
    "OutputStuck",
    "hint_of",
    "interruption",
    "writing",
    "os_error_fix",
]
