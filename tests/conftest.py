"""Session guard: a test run leaves no loop device, mount, tracefs instance or lab
directory of sqlwa's behind, even when tests fail.

Each test cleans up after itself; this is the independent check of that promise. The
controller (not an xdist worker) notes what of ours exists when the session starts — a
user's own run may be going on — and at the very end, after the workers have exited,
fails the session if anything new with sqlwa's naming is still there, then removes it
with `sqlwa lab cleanup`'s logic (which only touches things whose owner process is dead).
"""

from __future__ import annotations

import pytest

from helpers import sqlwa_leftovers
from sqlwa import lab

BEFORE = pytest.StashKey[set]()  # what of ours existed when the session started


def is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if is_controller(session.config):
        session.config.stash[BEFORE] = set(sqlwa_leftovers())


@pytest.hookimpl(trylast=True)  # after xdist has shut its workers down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not is_controller(session.config) or BEFORE not in session.config.stash:
        return
    left = sorted(set(sqlwa_leftovers()) - session.config.stash[BEFORE])
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["the tests left these behind (a test does not clean up after itself):", *left]
    removed = lab.cleanup_leftovers() if lab.is_root() else []
    lines += ["removed by `sqlwa lab cleanup`'s logic:", *removed] if removed else [
        "run `sudo .venv/bin/sqlwa lab cleanup` once this pytest process has exited (it owns them)"]
    if reporter is None:
        print("\n".join(lines))
    else:
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

