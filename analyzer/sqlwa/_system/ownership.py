"""Ownership of what a run makes: a lock held on it for the run's lifetime."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
from pathlib import Path

from sqlwa._system import processes

# What a run makes (lab directories, scratch directories, tracefs instances) carries the
# owner's pid in its name, and the owner holds an flock on the directory itself for as
# long as it lives. A pid means nothing in another PID namespace (inside
# `unshare --pid` a live host process looks dead, and the other way round); the lock is
# the kernel's, on the same inode for every namespace, and is freed however its holder
# ends. Cleanup removes a thing only where both say its owner is gone.


def hold_ownership(directory: str | os.PathLike) -> int:
    """Lock ``directory`` as its owner's for as long as the returned descriptor is open."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release_ownership(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def owner_is_gone(directory: str | os.PathLike, pid: int) -> bool:
    """True only if no process in this PID namespace has ``pid`` and nobody holds the
    ownership lock of ``directory``. A directory this process cannot open (another mount
    namespace's, say) has an owner it cannot judge: False."""
    if not processes.pid_is_dead(pid):
        return False
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also drops our probe's own lock
    return True


# What cleanup removes must also say it is sqlwa's: a mark file written into the directory
# as it is made. A name alone proves nothing (a user's own directory may be named like
# one), and a lock says only whether an owner lives.


def make_owned_dir(prefix: str, parent: str | os.PathLike | None, mark: str, text: str) -> tuple[Path, int]:
    """A fresh ``PREFIX-<pid>-<token>`` directory (mode 0700) in ``parent`` (the temp dir
    if None), locked as this process's and carrying the mark ``mark`` with ``text``;
    returns it and the lock to release. Nothing is left if marking fails. Call it where a
    signal cannot cut it short (a SignalGuard's critical section, signals.held_back)."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-", dir=parent))
    ownership = hold_ownership(path)
    try:
        write_mark(path, mark, text)
    except BaseException:
        release_ownership(ownership)
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path, ownership


def write_mark(directory: str | os.PathLike, name: str, text: str) -> None:
    """Mark ``directory`` (just made, and locked by :func:`hold_ownership`) as sqlwa's."""
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as mark:
        mark.write(text)


def has_mark(directory: str | os.PathLike, name: str, text: str) -> bool:
    """Whether ``directory`` holds the mark ``name`` with exactly ``text`` (a regular file,
    not a symlink to one)."""
    path = os.path.join(directory, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as mark:
        if not stat.S_ISREG(os.fstat(mark.fileno()).st_mode):
            return False
        return mark.read(len(text) + 1) == text.encode()


def is_marked(directory: str | os.PathLike, name: str, text: str) -> bool:
    """Whether ``directory`` is sqlwa's by its mark: it carries it whole
    (:func:`has_mark`), or holds nothing but a mark cut short (:func:`killed_while_marking`)."""
    return has_mark(directory, name, text) or killed_while_marking(directory, name, text)


def killed_while_marking(directory: str | os.PathLike, name: str, text: str) -> bool:
    """Whether ``directory`` holds nothing but a mark cut short: its owner killed between
    making it and writing the mark's text (nothing at all, or the mark empty or a prefix
    of its text). Such a directory holds nothing of anyone's."""
    try:
        entries = os.listdir(directory)
        if entries != [name]:
            return not entries
        fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as mark:
        if not stat.S_ISREG(os.fstat(mark.fileno()).st_mode):
            return False
        return text.encode().startswith(mark.read(len(text) + 1))
