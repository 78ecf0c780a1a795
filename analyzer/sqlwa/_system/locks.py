"""The output-directory lock: one writer per run or matrix directory."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlwa.errors import UsageError

LOCK_FILE = ".sqlwa.lock"


@contextmanager
def directory_lock(directory: Path, owner: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``DIRECTORY/.sqlwa.lock`` for the ``with`` block, or
    raise :class:`UsageError` naming the process that holds it. ``owner`` says what
    writes there ("sqlwa run", "sqlwa matrix") for that message.

    flock locks belong to the open file, so the kernel frees the lock when its holder
    exits however it ends (a kill -9 included): a stale lock file never blocks anyone.
    The holder writes its pid and command line into the file for the refusal message and
    removes the file when it is done. A waiter may have opened the old file just before it
    was removed; it notices (the path no longer names the inode it locked) and retries.
    """
    path = Path(directory) / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise UsageError(
                f"{directory} cannot hold sqlwa's lock file: {exc.strerror}", "choose a writable directory"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another sqlwa process"
            os.close(fd)
            raise UsageError(
                f"{directory} is in use: {holder} is writing into it",
                "wait for it to finish, or choose another --out",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file between our open and our lock
    try:
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{owner} (pid {os.getpid()}, since {started})\n".encode(), 0)
        except OSError:
            pass  # who holds the lock is a courtesy for the refusal message; the lock holds
        yield
    finally:
        # On a frozen filesystem the unlink waits for the thaw; the run's end need not.
        within(LOCK_RELEASE_WAIT_S, _release_lock, path, fd)


LOCK_RELEASE_WAIT_S = 1


def _release_lock(path: Path, fd: int) -> None:
    try:
        path.unlink(missing_ok=True)  # while still holding the lock: no one else owns the file
    except OSError:
        pass  # a stale lock file blocks no one: flock locks die with their descriptor
    finally:
        os.close(fd)


def within(wait_s: float, action: Callable[..., None], *args: object) -> None:
    """Run ``action(*args)``, waiting at most ``wait_s`` for it; an action stuck in the
    kernel (a write to a frozen filesystem) finishes in a daemon thread when it can."""
    worker = threading.Thread(target=action, args=args, daemon=True)
    worker.start()
    worker.join(wait_s)
