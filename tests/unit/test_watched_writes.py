"""``_system.signals.call_watched`` and ``_system.writable.WriteProbe``: the keeping of an
interrupted lab run writes in a thread the main thread only waits on, and gives up once a
probe of OUT does not come back (a frozen OUT: tests/lab/test_frozen_out.py); a signal
reaches the waiting thread at once. Here with a probe that is made to hang."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from sqlwa import _system
from sqlwa.errors import OutputStuck


def test_an_action_is_waited_for_and_its_result_or_error_is_the_callers():
    never = lambda: None  # noqa: E731
    assert _system.signals.call_watched(lambda: threading.current_thread().name, never, "keeping") == "sqlwa: keeping"
    with pytest.raises(OSError, match="full"):
        _system.signals.call_watched(lambda: (_ for _ in ()).throw(OSError("full")), never, "keeping")


def test_an_action_that_goes_on_is_not_given_up_while_nothing_is_stuck():
    started = time.monotonic()
    assert _system.signals.call_watched(lambda: time.sleep(1.0) or 7, lambda: None, "analysis") == 7
    assert time.monotonic() - started >= 1.0


def test_an_action_whose_output_is_stuck_is_left_behind_with_the_reason():
    release = threading.Event()
    asked = []

    def stuck() -> str | None:
        asked.append(time.monotonic())
        return "OUT does not take writes" if len(asked) >= 3 else None

    started = time.monotonic()
    with pytest.raises(OutputStuck, match="^OUT does not take writes$") as raised:
        _system.signals.call_watched(lambda: release.wait(10), stuck, "keeping")
    assert time.monotonic() - started < 2
    assert "fsfreeze -u" in str(raised.value.args[1])  # its fix
    assert any(t.name == "sqlwa: keeping" for t in threading.enumerate())  # left behind, not waited for
    release.set()


def test_a_signal_reaches_the_waiting_thread_at_once():
    def on_alarm(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, on_alarm)
    release = threading.Event()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            _system.signals.call_watched(lambda: release.wait(10), lambda: None, "keeping")
        assert time.monotonic() - started < 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        release.set()


def test_a_guard_remembers_the_signals_it_handled():
    guard = _system.signals.SignalGuard()
    mark = _system.signals.received_count()
    guard.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
    finally:
        guard.restore()
    assert _system.signals.received_since(mark) == signal.SIGINT
    assert _system.signals.received_since(_system.signals.received_count()) is None


def test_a_probe_writes_to_the_directory_and_is_not_stuck_where_it_takes_writes(tmp_path: Path):
    os.utime(tmp_path, (0, 0))
    probe = _system.writable.WriteProbe(tmp_path, within_s=0.5)
    deadline = time.monotonic() + 2
    while os.stat(tmp_path).st_mtime == 0 and time.monotonic() < deadline:
        assert probe.stuck() is None
        time.sleep(0.05)
    assert os.stat(tmp_path).st_mtime > 0  # the probe's write reached the directory
    for _ in range(20):
        assert probe.stuck() is None
        time.sleep(0.05)


def test_a_probe_that_does_not_come_back_says_the_directory_takes_no_writes(tmp_path: Path, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(_system.writable, "touch", lambda _directory: release.wait())
    probe = _system.writable.WriteProbe(tmp_path, within_s=0.3)
    try:
        assert probe.stuck() is None  # the probe starts
        time.sleep(0.4)
        assert probe.stuck() == f"{tmp_path} does not take writes (a frozen or hung filesystem?)"
    finally:
        release.set()


def test_a_probe_that_fails_is_not_stuck(tmp_path: Path):
    probe = _system.writable.WriteProbe(tmp_path / "gone", within_s=0.3)
    for _ in range(10):
        assert probe.stuck() is None
        time.sleep(0.05)
