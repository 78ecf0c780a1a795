"""Signals: the guard that turns SIGTERM into an unwinding exception, and deadlines."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar, cast

from sqlwa._system.writable import STUCK_HINT
from sqlwa.errors import LabError, OutputStuck, interruption

T = TypeVar("T")

#: Every signal a :class:`SignalGuard`'s handler has seen in this process, in order: a run
#: whose engine took a Ctrl-C as the end of its workload (``keep_measured``) swallowed the
#: exception, and this says that it came (:func:`received_since`).
_received: list[int] = []


def received_count() -> int:
    """How many signals the guards have seen so far (a mark for :func:`received_since`)."""
    return len(_received)


def received_since(mark: int) -> int | None:
    """The first signal a guard has seen since ``mark`` (:func:`received_count`), or None."""
    return _received[mark] if len(_received) > mark else None


#: Where else a signal may have been taken (the command line's own handlers register
#: theirs, :func:`also_ask`): asked by :func:`interruption_received`, from the bottom up.
_also_received: list[Callable[[], int | None]] = []


def also_ask(first_received: Callable[[], int | None]) -> None:
    """Have :func:`interruption_received` also ask ``first_received`` (the CLI's handlers),
    once however often it is registered: ``sqlwa.cli.main`` does so on every call."""
    if first_received not in _also_received:
        _also_received.append(first_received)


def interruption_received(mark: int) -> BaseException:
    """The exception of the signal that stopped a callback whose exception the library
    calling it dropped (sqlite3's progress handler): the first a guard has seen since
    ``mark`` (:func:`received_count`), else the first the command line's own handlers
    have, else a plain interruption."""
    signum = received_since(mark)
    if signum is None:
        signum = next((s for s in (ask() for ask in _also_received) if s is not None), None)
    return interruption(signum) if signum is not None else KeyboardInterrupt()


class SignalGuard:
    """Turns SIGINT and SIGTERM into exceptions while a lab or capture is active, so the
    ``with`` block unwinds and cleans up, and restores the previous handlers afterwards.

    Inside :meth:`critical` a signal is remembered and raised when the section ends; during
    teardown it is only remembered (a second Ctrl-C must not abort the cleanup) and
    :meth:`take_pending` hands it back once everything is removed. Handlers can only be
    installed from the main thread; elsewhere the guard does nothing and the caller's
    ``finally`` still cleans up.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}
        self._defer = 0
        self._pending: int | None = None
        self.tearing_down = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        with self.critical():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    @property
    def pending(self) -> bool:
        """Whether a signal came while the guard held signals back (and is not yet raised)."""
        return self._pending is not None

    def take_pending(self) -> int | None:
        signum, self._pending = self._pending, None
        return signum

    def set_up(self, setup: Callable[[], None], teardown: Callable[[], object]) -> None:
        """Installs the handlers and runs ``setup``; if anything fails part-way (a signal
        included) ``teardown`` removes what was made before the exception propagates."""
        try:
            self.install()
            setup()
        except BaseException:
            teardown()
            raise

    def finish(self, teardown_errors: list[Exception], failure: Callable[[str], BaseException]) -> None:
        """After a clean teardown: raises ``failure(message)`` if parts of it failed, then
        the signal that arrived during it, if any."""
        if teardown_errors:
            raise failure("; ".join(str(e) for e in teardown_errors))
        pending = self.take_pending()
        if pending is not None:
            raise interruption(pending)

    @contextmanager
    def critical(self) -> Iterator[None]:
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
        pending = self._pending
        if not self._defer and not self.tearing_down and pending is not None:
            self._pending = None
            raise interruption(pending)

    def _handle(self, signum: int, _frame: object) -> None:
        _received.append(signum)
        if self._defer or self.tearing_down:
            self._pending = self._pending or signum
            return
        raise interruption(signum)


@contextmanager
def held_back() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs, so it runs whole; one that came
    meanwhile is raised as its exception once the block is done (the previous handlers
    back): a caller that keeps what was done up to a signal keeps all of the block's."""
    guard = SignalGuard()
    guard.install()
    try:
        with guard.critical():
            yield
    finally:
        guard.restore()


@contextmanager
def too_late_to_stop() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs and then dropped: for a command's
    last step (putting its finished outputs in place), after which it has done what it
    was asked, so a signal then is too late to stop it (and no output is left half-said)."""
    guard = SignalGuard()
    guard.install()
    try:
        guard.tearing_down = True  # remembered, never raised
        yield
    finally:
        guard.restore()


@contextmanager
def signals_unwind() -> Iterator[None]:
    """SIGINT and SIGTERM as exceptions inside the block (a :class:`SignalGuard`), so the
    temporary files made in it are removed by their own ``with`` on the way out; the
    previous handlers afterwards."""
    guard = SignalGuard()
    guard.install()
    try:
        yield
    finally:
        guard.restore()


def call_within(action: Callable[[], object], timeout_s: float, what: str) -> None:
    """Run ``action`` in a thread of its own and wait for it ``timeout_s`` seconds at most.
    If it is not done by then, raise :class:`LabError` and leave it behind: a step stuck in
    the kernel (an unmount, a loop device's detach) can be abandoned, never cancelled.
    Signals still reach the caller's handlers, which run in the main thread."""
    worker, outcome = _started(action, what)
    worker.join(timeout_s)
    if worker.is_alive():
        raise LabError(f"{what} did not finish in {timeout_s:g} s and was abandoned")
    _result(outcome)


def _started(action: Callable[[], T], what: str) -> tuple[threading.Thread, list[tuple[bool, object]]]:
    """``action`` running in a daemon thread named for ``what``, and where its outcome
    will be: (True, its result) or (False, the exception it raised, for the caller's
    thread to raise)."""
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, action()))
        except BaseException as exc:  # handed to the caller, in its thread
            outcome.append((False, exc))

    worker = threading.Thread(target=run, name=f"sqlwa: {what}", daemon=True)
    worker.start()
    return worker, outcome


def _result(outcome: list[tuple[bool, object]]) -> object:
    """What the finished action returned, or its exception raised here."""
    done, result = outcome[0]
    if not done:
        raise cast(BaseException, result)
    return result


#: How often :func:`call_watched` asks whether its action is stuck.
WATCH_STEP_S = 0.2


def call_watched(action: Callable[[], T], stuck: Callable[[], str | None], what: str) -> T:
    """Run ``action`` in a daemon thread of its own and wait for it, asking ``stuck()``
    every :data:`WATCH_STEP_S`: once that says why the action cannot go on (an output
    that takes no writes), raise :class:`OutputStuck` with that and leave the thread
    behind, as :func:`call_within` does. Unlike :func:`call_within` there is no deadline
    for an action that goes on (a long analysis). A signal's exception (a second Ctrl-C)
    is raised in the caller's thread at once, the thread left behind too: a caller that
    must not have it finish its work after that tells it so itself."""
    worker, outcome = _started(action, what)
    while True:
        worker.join(WATCH_STEP_S)  # a signal's handler raises here, in the main thread
        if not worker.is_alive():
            break
        reason = stuck()
        if reason is not None:
            raise OutputStuck(reason, STUCK_HINT)
    return cast(T, _result(outcome))
