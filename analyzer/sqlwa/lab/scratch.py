"""The scratch directory of a run without a lab filesystem (no ``--fs``): a fresh
``sqlwa-run-<pid>-<token>`` directory in the temp dir or in ``--dir``, holding the
database, removed afterwards. Its owner holds an flock on it while it lives, so
``sqlwa lab cleanup`` can remove what a killed run left and nothing of a live one."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlwa import _system
from sqlwa.errors import UsageError

SCRATCH_PREFIX = "sqlwa-run"
# `sqlwa device probe DIR` works in a directory of the same kind inside DIR (fio's data
# file and its filler files), so `sqlwa lab cleanup --workdir DIR` removes a killed one.
PROBE_PREFIX = "sqlwa-probe"
SCRATCH_NAME_RE = re.compile(rf"^(?:{SCRATCH_PREFIX}|{PROBE_PREFIX})-(\d+)-[A-Za-z0-9_]+$")
# The VM lab's qemu shares the run's scratch directory with its guest under this 9p tag
# (sqlwa.vm.machine; the guest's init.sh mounts it): how cleanup tells a guest's qemu.
GUEST_CONTROL_TAG = "ctl"
KEEP_MARK = ".sqlwa-keep"  # in a scratch directory kept on request (--keep-db): cleanup leaves it


def check_scratch_parent(parent: Path | None) -> None:
    """``--dir`` must be an existing writable directory: sqlwa makes its fresh run
    directory inside it, and creates nothing else (no parents left behind)."""
    if parent is None:
        return
    if not parent.is_dir():
        raise UsageError(
            f"--dir {parent} is not an existing directory", "give an existing directory, or leave --dir out"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--dir {parent} is not writable", "choose a writable directory, or leave --dir out")


@contextmanager
def scratch_dir(parent: Path | None, keep: bool) -> Iterator[Path]:
    """A fresh directory for the database, removed afterwards unless ``keep`` — also when
    SIGTERM or Ctrl-C ends the run (the guard turns them into exceptions that unwind)."""
    guard = _system.SignalGuard()
    guard.install()
    with guard.critical():  # made and locked as one step: a signal waits for both
        path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}-{os.getpid()}-", dir=parent))
        ownership = _system.hold_ownership(path)
    if keep:
        (path / KEEP_MARK).touch()
    try:
        yield path
    finally:
        guard.tearing_down = True  # a second signal must not cut the removal short
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
        _system.release_ownership(ownership)
        guard.restore()
        pending = guard.take_pending()
        if pending is not None:
            raise _system.interruption(pending)


def dead_scratch_dirs(bases: list[str]) -> list[Path]:
    """Scratch directories in ``bases`` whose owner is gone, except those kept on request."""
    found = []
    for base in bases:
        if not os.path.isdir(base):
            continue
        for entry in Path(base).iterdir():
            match = SCRATCH_NAME_RE.match(entry.name)
            if not match or not entry.is_dir() or entry.is_symlink() or (entry / KEEP_MARK).exists():
                continue
            if _system.owner_is_gone(entry, int(match.group(1))):
                found.append(entry)
    return sorted(found)
