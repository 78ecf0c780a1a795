"""The scratch directory of a run without a lab filesystem (no ``--fs``): a fresh
``sqlwa-run-<pid>-<token>`` directory in the temp dir or in ``--dir``, holding the
database, removed afterwards. Its owner holds an flock on it while it lives, so
``sqlwa lab cleanup`` can remove what a killed run left and nothing of a live one."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlwa import _system
from sqlwa.errors import UsageError, interruption

SCRATCH_PREFIX = "sqlwa-run"
# `sqlwa device probe DIR` works in a directory of the same kind inside DIR (fio's data
# file and its filler files), so `sqlwa lab cleanup --workdir DIR` removes a killed one.
PROBE_PREFIX = "sqlwa-probe"
SCRATCH_NAME_RE = re.compile(rf"^(?:{SCRATCH_PREFIX}|{PROBE_PREFIX})-(\d+)-[A-Za-z0-9_]+$")
# The VM lab's qemu shares the run's scratch directory with its guest under this 9p tag
# (sqlwa.vm.machine; the guest's init.sh mounts it): how cleanup tells a guest's qemu.
GUEST_CONTROL_TAG = "ctl"
KEEP_MARK = ".sqlwa-keep"  # in a scratch directory kept on request (--keep-db): cleanup leaves it
# In every scratch and probe directory, written as it is made: what `lab cleanup` removes
# must carry it (a directory merely named like one, a user's own, is left alone).
SCRATCH_MARK = ".sqlwa-scratch"
SCRATCH_MARK_TEXT = "sqlwa scratch directory, removed by its run or `sqlwa lab cleanup`\n"


def make_owned_dir(prefix: str, parent: Path | None) -> tuple[Path, int]:
    """A fresh ``PREFIX-<pid>-<token>`` directory in ``parent`` (the temp dir if None),
    marked as sqlwa's and locked as this process's; returns it and the lock to release.
    Call it where a signal cannot cut it short (a SignalGuard's critical section)."""
    return _system.ownership.make_owned_dir(prefix, parent, SCRATCH_MARK, SCRATCH_MARK_TEXT)


def has_scratch_mark(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` carries the mark sqlwa writes into its scratch directories."""
    return _system.ownership.has_mark(directory, SCRATCH_MARK, SCRATCH_MARK_TEXT)


def check_scratch_parent(parent: Path | None, allow_system: bool = False) -> None:
    """``--dir`` must be an existing writable directory, not a system one: sqlwa makes its
    fresh run directory inside it, and creates nothing else (no parents left behind)."""
    if parent is None:
        return
    from sqlwa import outputs

    outputs.refuse_system_dir(os.path.realpath(parent), "--dir", allow_system)
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
    guard = _system.signals.SignalGuard()
    guard.install()
    with guard.critical():  # made and locked as one step: a signal waits for both
        path, ownership = make_owned_dir(SCRATCH_PREFIX, parent)
    if keep:
        (path / KEEP_MARK).touch()
    try:
        yield path
    finally:
        guard.tearing_down = True  # a second signal must not cut the removal short
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
        _system.ownership.release_ownership(ownership)
        guard.restore()
        pending = guard.take_pending()
        if pending is not None:
            raise interruption(pending)


def dead_scratch_dirs(bases: list[str]) -> list[Path]:
    """Scratch directories in ``bases`` whose owner is gone, except those kept on request:
    those with sqlwa's mark, and those of a run killed before its mark was whole."""
    found = []
    for base in bases:
        if not os.path.isdir(base):
            continue
        for entry in Path(base).iterdir():
            match = SCRATCH_NAME_RE.match(entry.name)
            if not match or not entry.is_dir() or entry.is_symlink() or (entry / KEEP_MARK).exists():
                continue
            if not _system.ownership.is_marked(entry, SCRATCH_MARK, SCRATCH_MARK_TEXT):
                continue
            if _system.ownership.owner_is_gone(entry, int(match.group(1))):
                found.append(entry)
    return sorted(found)
