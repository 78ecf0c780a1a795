"""Waiting for the kernel to let go: a bounded poll for what it releases asynchronously.

A loop device detached while something still holds it is auto-cleared on its last close;
a mount in use unmounts once its last file closes; a tracefs instance cannot be removed
while a process that is exiting still holds one of its files. Each takes milliseconds on
an idle machine and can take seconds on a loaded one (the exiting process must be
scheduled to close its files). So a check that something is gone polls for up to
:data:`KERNEL_RELEASE_S` instead of trying a fixed number of times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: How long to wait for the kernel to release a device, mount or tracefs instance. Ten
#: seconds: far beyond a release on an idle machine (milliseconds) or on a 2-core one under
#: a full CPU and disk load (observed up to about 2 s); what is still held after that is
#: held by something that will not let go, and is reported.
KERNEL_RELEASE_S = 10.0


def polled(probe: Callable[[], T], done: Callable[[T], bool], within: float = KERNEL_RELEASE_S) -> T:
    """Call ``probe`` until ``done`` holds for what it returned or ``within`` seconds have
    passed (after one last call), and return its last answer: what is still held, so the
    caller can name it. The pause between calls grows from 10 ms to 250 ms: a quick
    release is seen at once, a slow one costs few calls."""
    deadline = time.monotonic() + within
    pause = 0.01
    while True:
        answer = probe()
        if done(answer) or time.monotonic() >= deadline:
            return answer
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.25)


def settled(done: Callable[[], bool], within: float = KERNEL_RELEASE_S) -> bool:
    """Whether ``done`` came true within ``within`` seconds (:func:`polled`)."""
    return polled(done, bool, within)
