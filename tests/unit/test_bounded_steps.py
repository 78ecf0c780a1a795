"""``_system.signals.call_within``: a step that does not finish in time is abandoned with an error
(the lab's teardown bounds each of its steps with it); one that finishes is waited for,
and its own error reaches the caller."""

from __future__ import annotations

import threading
import time

import pytest

from sqlwa import _system
from sqlwa.errors import LabError
from sqlwa.lab import filesystem


def test_a_step_that_hangs_is_abandoned_after_its_bound():
    started = time.monotonic()
    with pytest.raises(LabError, match=r"^lab: unmount did not finish in 0\.5 s and was abandoned$"):
        _system.signals.call_within(threading.Event().wait, 0.5, "lab: unmount")
    assert 0.5 <= time.monotonic() - started < 5


def test_a_step_that_finishes_is_waited_for_and_its_error_is_the_callers():
    done = []
    _system.signals.call_within(lambda: done.append(threading.current_thread().name), 5, "lab: copy")
    assert done == ["sqlwa: lab: copy"]  # it ran, in a thread of its own
    with pytest.raises(OSError, match="busy"):
        _system.signals.call_within(lambda: (_ for _ in ()).throw(OSError("busy")), 5, "lab: detach")


def test_the_hang_hook_takes_only_the_step_it_names(monkeypatch):
    def step() -> None:
        pass

    monkeypatch.delenv(filesystem.HANG_STEP_ENV, raising=False)
    assert filesystem.with_injected_hang("unmount", step) is step
    monkeypatch.setenv(filesystem.HANG_STEP_ENV, "unmount")
    assert filesystem.with_injected_hang("detach_loops", step) is step
    with pytest.raises(LabError, match="did not finish"):
        _system.signals.call_within(filesystem.with_injected_hang("unmount", step), 0.2, "lab: unmount")
