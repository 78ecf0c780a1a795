"""The recorded program, run as it would run without sqlwa and stopped as the user stops
``sqlwa record``.

It starts with the signal dispositions and mask it would have had if the user had run it
directly: sqlwa's own handlers are reset by exec, signals ignored when sqlwa started
(``nohup``, ``cmd &`` in a script) stay ignored, SIGPIPE and SIGXFSZ (which Python itself
ignores) are set back to their defaults (``restore_signals``), and the mask is the one
sqlwa had on entry.

While it runs, SIGINT, SIGTERM, SIGQUIT and SIGHUP do not stop sqlwa: they are taken
with ``sigtimedwait`` (blocked meanwhile) and the program is left to end by them, after
which its recording is written. One the terminal sent (Ctrl-C, Ctrl-\\, a hang-up: the
kernel sends it to the whole foreground job, so the program has it too; siginfo's
``si_code`` is ``SI_KERNEL``) is not sent again; one sent to sqlwa alone (``kill``, a
service manager) is passed on to the program. (``kill -INT -PGID`` from a user reaches
both, and the program then gets it twice.)

The program dies with its recorder: ``PR_SET_PDEATHSIG`` (SIGKILL) is set in the child
before exec, so a ``kill -9`` of ``sqlwa record`` does not leave it running, writing into
a spool nobody will read; ``sqlwa lab cleanup`` removes that spool."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from sqlwa.errors import UsageError

#: Signals that end a recording with the program, which is kept.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)
#: siginfo's si_code of a signal the kernel itself sent (a terminal's to its foreground job).
SI_KERNEL = 0x80
#: How long a wait for a signal lasts before the program's state is looked at again.
WAKE_S = 0.1
PR_SET_PDEATHSIG = 1


@dataclass
class Ended:
    """How the program ended: its status as subprocess gives it (negative: killed by that
    signal), and the first signal that stopped the recording, if one did."""

    returncode: int
    interrupted: int | None = None


def run(command: list[str], env: dict[str, str], on_stop: Callable[[int], None]) -> Ended:
    """Run ``command`` to its end; ``on_stop(signum)`` is called at the first stopping
    signal (the program is let to end by it, and its recording is kept)."""
    watched = [s for s in STOPPING if signal.getsignal(s) is not signal.SIG_IGN]
    taken = {signal.SIGCHLD, *watched}
    noted: list[int] = []
    before = signal.pthread_sigmask(signal.SIG_BLOCK, taken)
    # A signal that reaches another thread (one that does not block it) runs Python's
    # handler, in this thread: noted here instead of raised.
    handlers = {s: signal.signal(s, lambda signum, _frame: noted.append(signum)) for s in watched}
    try:
        try:
            proc = subprocess.Popen(command, env=env, preexec_fn=_as_if_run_directly(before, os.getpid()))
        except OSError as exc:
            raise UsageError(f"{command[0]}: {exc.strerror}", "give the command as you would run it") from None
        ended = _wait(proc, taken, noted, on_stop)
        while watched and signal.sigtimedwait(watched, 0) is not None:
            pass  # came as the program ended: part of the same stop, not a new one
        return ended
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _wait(
    proc: subprocess.Popen, taken: set[signal.Signals], noted: list[int], on_stop: Callable[[int], None]
) -> Ended:
    ended = Ended(0)
    while (returncode := proc.poll()) is None:
        info = signal.sigtimedwait(taken, WAKE_S)
        arrived = []
        if info is not None and info.si_signo != signal.SIGCHLD:
            arrived.append((info.si_signo, info.si_code != SI_KERNEL))
        arrived += [(signum, True) for signum in noted]  # whence unknown: passed on
        noted.clear()
        for signum, pass_on in arrived:
            if ended.interrupted is None:
                ended.interrupted = signum
                _say(on_stop, signum)
            if pass_on:
                _send(proc.pid, signum)
    ended.returncode = returncode
    return ended


def _say(on_stop: Callable[[int], None], signum: int) -> None:
    try:
        on_stop(signum)
    except OSError:
        pass  # a terminal gone with the hang-up: what cannot be said must not end the recording


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # ended meanwhile: the next poll reaps it


def _as_if_run_directly(mask: set[signal.Signals | int], parent: int) -> Callable[[], None]:
    """What the child does before exec: die with its recorder, then take sqlwa's mask
    back (its handlers are reset by the exec itself)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the recorder died before the prctl: nobody would stop us
            os._exit(1)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    return in_child
