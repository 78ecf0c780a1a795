"""Ctrl-C and SIGTERM from the first moment of the command line on.

CPython runs a signal's handler inside whatever Python code is running, and an exception
the handler raises inside a callback whose errors are ignored (an import's module-lock
weakref callback, for one) is printed as "Exception ignored" and dropped: the command then
ran on to its end as if the key had not been pressed. So the handler installed here both
raises (as Python's own Ctrl-C does) and remembers the signal, and a command that has been
loaded raises it again (:func:`raise_if_signalled`) before it starts its work.
"""

from __future__ import annotations

import signal

_received: list[int] = []


def interruption(signum: int) -> BaseException:
    """What ``signum`` becomes, as :func:`sqlwa.errors.interruption` makes it. Not imported
    from there: a signal that lands while ``sqlwa.errors`` itself is being imported would
    find it half-made and fail with an ImportError (a traceback) instead of interrupting."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    # The native module loads whole or not at all (no Python code runs while it initialises);
    # imported only when a SIGTERM needs it, so ``--help`` stays quick.
    from sqlwa._native import Interrupted

    return Interrupted(f"terminated by {signal.Signals(signum).name}")


def _on_signal(signum: int, _frame: object) -> None:
    _received.append(signum)
    raise interruption(signum)


def obey_signals() -> None:
    """SIGINT and SIGTERM raise and are remembered from now on (a lab's guard takes over
    inside the lab and gives these handlers back afterwards)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup and `cmd &` in a script ignore them
            signal.signal(signum, _on_signal)


def too_late() -> None:
    """SIGINT and SIGTERM ignored from now on: the command has ended and its exit status is
    decided. Without this a signal in the interpreter's last milliseconds (CPython sets
    the default handlers back as it finalises) would end the process by the signal, as
    if the command had not finished."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def first_received() -> int | None:
    """The first signal these handlers have received, if any."""
    return _received[0] if _received else None


def raise_if_signalled() -> None:
    """The first signal received so far, raised now: one an ignored callback swallowed."""
    if _received:
        raise interruption(_received[0])
