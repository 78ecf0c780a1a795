"""The one gate for tests that need root or tracefs, the closing list of what was skipped
and why, and the session guard: a test run leaves no loop device, mount, tracefs instance
or lab directory of sqlwa's behind, even when tests fail.

Markers (pyproject.toml): ``root`` — loop devices, mkfs, mount, tracefs, dropping to
nobody; ``tracefs`` — the kernel's tracing filesystem with the block tracepoints.

Each test cleans up after itself; this is the independent check of that promise. The
controller (not an xdist worker) notes what of ours exists when the session starts — a
user's own run may be going on — and at the very end, after the workers have exited,
fails the session if anything new with sqlwa's naming is still there, then removes it
with `sqlwa lab cleanup`'s logic (which only touches things whose owner process is dead).
"""

from __future__ import annotations

import os
import re
import signal
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import settings

from helpers import sqlwa_leftovers
from sqlwa import _system
from sqlwa.lab.cleanup import cleanup_leftovers

# Tests read sqlwa's tables row by row, as a wide terminal shows them: piped, a table is
# drawn 100 columns wide and its cells wrap (views.terminal.piped_width). The piped width
# itself is tested with COLUMNS unset (tests/unit/test_terminal.py).
os.environ.setdefault("COLUMNS", "300")

# One hypothesis profile for CI and for local runs: every run draws the same examples, so
# CI can only draw what the last local run drew (hypothesis loads its own "ci" profile only
# where a CI variable is set, so a local run used to draw fresh examples and CI others).
# No example database: a local run replays nothing CI cannot. No deadline: a drawn case's
# time on a loaded 2-core machine is no verdict. "explore" draws fresh examples each run,
# by hand (tests/README.md, Tests that hold under load); what it finds is kept as an @example.
# Test modules make their settings when imported, after this, so they inherit it; the
# option --hypothesis-profile (hypothesis' pytest plugin) replaces it before that too.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile("ci")

# A shell starts a background job (`./scripts/test &` in a script, `nohup`) with SIGINT
# ignored, and an ignored disposition survives exec: the tests of Ctrl-C (sqlwa's own
# handlers, record passing SIGINT on to its program) would then see none. sqlwa rightly
# keeps an inherited SIG_IGN (tests/unit/test_cli_signals.py); the suite is no such caller.
# A Python handler, unlike SIG_IGN, is reset to the default by exec, so the programs the
# tests start get SIGINT back too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

BEFORE = pytest.StashKey[set]()  # what of ours existed when the session started

NEEDS_ROOT = "needs root (loop devices, mkfs, mount, tracefs): run as root, e.g. sudo ./scripts/test"


def tracefs_unavailable() -> str | None:
    """Why the capture cannot run here, or None if it can."""
    from sqlwa.capture.tracing import tracefs_available

    availability = tracefs_available()
    return None if availability.available else f"needs tracefs: {availability.reason}"


def vm_lab_unavailable() -> str | None:
    """Why ``sqlwa run --vm`` cannot run here, or None if it can."""
    from sqlwa.errors import UsageError, hint_of
    from sqlwa.vm import initramfs, machine

    try:
        machine.qemu_binary()
        initramfs.static_busybox()
    except UsageError as exc:
        return f"needs the VM lab's tools: {exc} ({hint_of(exc)})"
    return None


# The modules that take longest, longest first (CI's --durations: their fixtures boot TCG
# guests, explore crash states, wait out real delays). ./scripts/test runs pytest-xdist
# with --dist loadscope --no-loadscope-reorder, which hands whole modules to the two
# workers in collection order: these start first, one on each worker, and the many short
# modules fill in beside them, instead of a long module starting last while the other
# worker idles (xdist's own order is by the number of tests, which puts these last). The
# order moves modules whole and is the same on every worker; it changes no test.
LONGEST_FIRST = (
    "tests/vm/test_vm_lab.py",
    "tests/vm/test_crash.py",
    "tests/vm/test_vm_layers.py",
    "tests/vm/test_crash_first_loss.py",
    "tests/vm/test_vm_phases.py",
    "tests/vm/test_vm_teardown.py",
    "tests/vm/test_vm_signals.py",
    "tests/lab/test_device_validation.py",
    "tests/e2e/test_hostile_inputs.py",
    "tests/vm/test_vm_delay.py",
    "tests/vm/test_vm_emulated.py",
)


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the modules of :data:`LONGEST_FIRST` in its order, then
    the rest as collected (a module's tests stay together and in their order)."""
    rank = {module: i for i, module in enumerate(LONGEST_FIRST)}
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.nodeid.split("::")[0], len(rank)), order[id(item)]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip what this machine cannot run, with one reason per cause; the longest modules first."""
    longest_first(items)
    vm_reason = vm_lab_unavailable() if any(i.get_closest_marker("vm") for i in items) else None
    for item in items:
        if vm_reason and item.get_closest_marker("vm"):
            item.add_marker(pytest.mark.skip(reason=vm_reason))
    root = _system.processes.is_root()
    tracefs_reason = tracefs_unavailable() if root and any(i.get_closest_marker("tracefs") for i in items) else None
    for item in items:
        if not root and (item.get_closest_marker("root") or item.get_closest_marker("tracefs")):
            item.add_marker(pytest.mark.skip(reason=NEEDS_ROOT))
        elif tracefs_reason and item.get_closest_marker("tracefs"):
            item.add_marker(pytest.mark.skip(reason=tracefs_reason))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """A short list at the end: how many tests were skipped for each reason."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if not reasons:
        return
    terminalreporter.section("skipped, and why")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:4d}  {reason}")


def is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if is_controller(session.config):
        session.config.stash[BEFORE] = set(sqlwa_leftovers())


OWNER = re.compile(r"sqlwa-(?:lab-|run-|measuring/\.?)?(\d+)-")  # the owner's pid in every name sqlwa gives


def of_a_live_stranger(leftover: str) -> bool:
    """Whether ``leftover`` belongs to a process still running that is not this one: a
    run someone else started on this machine meanwhile (the workers and every sqlwa the
    tests started have exited by now, so what they left has a dead owner)."""
    match = OWNER.search(leftover)
    if match is None:
        return False
    pid = int(match.group(1))
    return pid != os.getpid() and Path(f"/proc/{pid}").exists()


@pytest.hookimpl(trylast=True)  # after xdist has shut its workers down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not is_controller(session.config) or BEFORE not in session.config.stash:
        return
    before = session.config.stash[BEFORE]
    new = lambda: sorted(x for x in set(sqlwa_leftovers()) - before if not of_a_live_stranger(x))  # noqa: E731
    # the workers have just exited: the kernel may still be releasing what they used
    left = _system.settle.polled(new, lambda found: not found)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["the tests left these behind (a test does not clean up after itself):", *left]
    removed = cleanup_leftovers() if _system.processes.is_root() else []
    lines += (
        ["removed by `sqlwa lab cleanup`'s logic:", *removed]
        if removed
        else ["run `sudo .venv/bin/sqlwa lab cleanup` once this pytest process has exited (it owns them)"]
    )
    if reporter is None:
        print("\n".join(lines))
    else:
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
