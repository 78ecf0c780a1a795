"""``_system.processes.call_in_child``: an action in a forked child, given a time limit (a crash
state whose mount hangs in the kernel must cost that state, not the run)."""

from __future__ import annotations

import os
import time

import pytest

from sqlwa import _system


def test_the_result_comes_back_from_the_child() -> None:
    assert _system.processes.call_in_child(10, divmod, 17, 5) == (3, 2)
    assert _system.processes.call_in_child(10, os.getpid) != os.getpid()  # it ran elsewhere


def test_an_exception_is_raised_here() -> None:
    with pytest.raises(ZeroDivisionError):
        _system.processes.call_in_child(10, divmod, 1, 0)


def test_a_stuck_action_is_given_up_and_killed() -> None:
    started = time.monotonic()
    assert _system.processes.call_in_child(0.5, time.sleep, 30) is None
    assert time.monotonic() - started < 5


def test_a_child_that_dies_is_an_error() -> None:
    with pytest.raises(OSError, match="died"):
        _system.processes.call_in_child(10, os._exit, 3)
