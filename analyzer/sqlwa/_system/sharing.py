"""Whether a run measured alone on its host: other sqlwa runs measuring at the same time,
and the load average.

Shards of one sweep run side by side on one machine had 2 to 4 times the latency of the
same cells run alone (#44, item 7): their timings are not the cells'. So every measuring
run holds a marker in a directory all users share (:func:`marker_dir`): a file named by
its pid and the start of its measuring, locked with ``flock`` while it measures. It is
made under a temporary name, locked, then renamed, so no run ever sees a live marker
unlocked. A run that starts counts the live markers (the runs that began before it) and
appends a line naming itself to each; at its end it reads the lines in its own (the runs
that began during it, ended or not), then deletes its marker and the directory once
empty: nothing stays on the machine. A marker nobody holds locked is a killed run's:
the next run that looks, or ``sqlwa lab cleanup`` (:func:`remove_dead_markers`),
removes it (in the sticky directory, a user's runs remove their own user's; root's all).
Markers are writable by all, for other users' runs' lines: they name no files and hold
nothing but those lines, read only as far as :data:`VISITS_READ`; nothing there is
followed (a symlink) or waited on (a FIFO); a directory that cannot be used leaves the
run unmarked (None: not known).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER_DIR = Path("/tmp/sqlwa-measuring")
DIR_ENV = "SQLWA_MEASURING_DIR"  # another directory (tests: one of their own)
VISITS_READ = 64 * 1024  # what of its marker a run reads: thousands of visitors' lines
_LIVE_NAME = re.compile(r"^(\d+)-(\d+)$")  # pid-start_ns
_NEW_NAME = re.compile(r"^\.(\d+)-(\d+)\.new$")  # being made: not yet locked
_OLD_NAME = re.compile(r"^(\d+)-(\d+)-(\d+)$")  # an earlier sqlwa's finished marker, kept a day
_VISIT = re.compile(rb"^(\d+) (\d+)$")  # a visitor's line: pid start_ns
_NO_WAIT = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # no link followed, no FIFO waited on
_ATTEMPTS = 3  # the directory can be removed by a run ending as this one makes its marker


def marker_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or MARKER_DIR)


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _open_dir(directory: Path, create: bool) -> int | None:
    """A descriptor of ``directory``, made sticky and writable by all (as /tmp) if new;
    None when it is absent (and not to be made), a link, not a directory or unusable."""
    made = False
    if create:
        try:
            os.mkdir(directory, 0o1777)
            made = True
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if made:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o1777)  # the umask took bits away
    elif not _is_shared_dir(fd):  # somebody's own directory of that name: not written in
        os.close(fd)
        return None
    return fd


def _is_shared_dir(fd: int) -> bool:
    """A directory made to be shared as sqlwa makes this one (sticky, writable by all,
    as /tmp): a user's own directory that happens to have the name is not sqlwa's."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_IMODE(mode) & 0o1777 == 0o1777


def _open_entry(dir_fd: int, name: str, flags: int) -> int | None:
    """``name`` opened without following a link or waiting; None unless a regular file."""
    try:
        fd = os.open(name, flags | _NO_WAIT, dir_fd=dir_fd)
    except OSError:  # a link (ELOOP), a FIFO nobody reads (ENXIO), another user's
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def _is_locked(fd: int) -> bool:
    """Another open file holds its lock: its run is measuring."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return True  # not known: leave it


def _is_same(dir_fd: int, name: str, fd: int) -> bool:
    """``name`` is (still) the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    except OSError:
        return False


def _remove_if_same(dir_fd: int, name: str, fd: int) -> bool:
    """Delete ``name`` if it is still the file open as ``fd``."""
    if not _is_same(dir_fd, name, fd):
        return False
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def _names(dir_fd: int) -> list[str]:
    try:
        return sorted(os.listdir(dir_fd))
    except OSError:
        return []


def _is_marker_name(name: str) -> bool:
    return any(pattern.match(name) for pattern in (_LIVE_NAME, _NEW_NAME, _OLD_NAME))


def _visit(dir_fd: int, own: str, line: bytes) -> list[int]:
    """Append ``line`` to every live marker but ``own`` and return their runs' pids;
    remove the markers of killed runs. The line is written before the lock is looked at:
    a run this one counts reads it at its end (it unlocks before it reads)."""
    live = []
    for name in _names(dir_fd):
        found = _LIVE_NAME.match(name)
        if name == own or not _is_marker_name(name):
            continue
        fd = _open_entry(dir_fd, name, os.O_WRONLY | os.O_APPEND if found else os.O_RDONLY)
        if fd is None:
            continue
        try:
            if found:
                with contextlib.suppress(OSError):
                    os.write(fd, line)
            if _is_locked(fd):
                if found:
                    live.append(int(found.group(1)))
            else:
                _remove_if_same(dir_fd, name, fd)
        finally:
            os.close(fd)
    return live


def _visitors(fd: int, own: tuple[int, int]) -> list[int]:
    """The pids in the visitors' lines of one's own marker (its first :data:`VISITS_READ`
    bytes); a line of any other form is no visitor."""
    try:
        text = os.pread(fd, VISITS_READ, 0)
    except OSError:
        return []
    found = (_VISIT.match(line) for line in text.split(b"\n"))
    return [int(m.group(1)) for m in found if m and (int(m.group(1)), int(m.group(2))) != own]


def _make_marker(directory: Path, pid: int, start_ns: int) -> tuple[int, int] | None:
    """(directory fd, marker fd): the marker made under a temporary name, locked, then
    renamed; None when it cannot be made."""
    final, new = f"{pid}-{start_ns}", f".{pid}-{start_ns}.new"
    for _ in range(_ATTEMPTS):
        dir_fd = _open_dir(directory, create=True)
        if dir_fd is None:
            return None
        try:
            fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NO_WAIT, 0o600, dir_fd=dir_fd)
        except FileNotFoundError:  # the directory was removed since it was opened
            os.close(dir_fd)
            continue
        except OSError:
            os.close(dir_fd)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.fchmod(fd, 0o666)  # later runs of other users append their lines
            os.rename(new, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            if not _is_same(dir_fd, final, fd):  # removed and replaced by another's meanwhile
                raise OSError(errno.EEXIST, "not this run's marker")
            return dir_fd, fd
        except FileNotFoundError:  # removed unlocked, a moment after it was made: again
            os.close(fd)
            os.close(dir_fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(new, dir_fd=dir_fd)
            os.close(fd)
            os.close(dir_fd)
            return None
    return None


def _remove_marker(directory: Path, dir_fd: int, fd: int, name: str) -> None:
    _remove_if_same(dir_fd, name, fd)
    os.close(fd)
    os.close(dir_fd)
    with contextlib.suppress(OSError):
        os.rmdir(directory)  # not empty (other runs measure), or made again: left to them


def remove_dead_markers(directory: Path | None = None) -> list[str]:
    """Remove the markers of killed runs (nobody holds their lock), and the directory if
    that leaves it empty; what was removed, one line each."""
    directory = marker_dir() if directory is None else directory
    dir_fd = _open_dir(directory, create=False)
    if dir_fd is None:
        return []
    removed = []
    try:
        for name in _names(dir_fd):
            fd = _open_entry(dir_fd, name, os.O_RDONLY) if _is_marker_name(name) else None
            if fd is None:
                continue
            try:
                if not _is_locked(fd) and _remove_if_same(dir_fd, name, fd):
                    removed.append(f"removed {directory / name} (the host-sharing marker of a killed run)")
            finally:
                os.close(fd)
    finally:
        os.close(dir_fd)
    with contextlib.suppress(OSError):
        os.rmdir(directory)
        removed.append(f"removed {directory} (empty)")
    return removed


@contextmanager
def measuring(directory: Path | None = None) -> Iterator[Callable[[], dict | None]]:
    """Mark this process as measuring for the ``with`` block. What it yields, called as
    the measuring ends, tells who shared the host: ``other_runs`` (their pids), the
    1-minute load average at the start and now, and the CPUs; None when the marker could
    not be made. The first call ends the marking: later ones give the same answer."""
    directory = marker_dir() if directory is None else directory
    pid, start_ns, load_start = os.getpid(), time.time_ns(), load_average()
    made = _make_marker(directory, pid, start_ns)
    name = f"{pid}-{start_ns}"
    before = [] if made is None else _visit(made[0], name, f"{pid} {start_ns}\n".encode())
    answer: list[dict | None] = []

    def shared() -> dict | None:
        if made is None:
            return None
        if not answer:
            fcntl.flock(made[1], fcntl.LOCK_UN)  # first: a run that counts this one has written its line
            others = sorted({*before, *_visitors(made[1], (pid, start_ns))})
            cpus = os.cpu_count() or 0
            answer.append({"other_runs": others, "load_average_1m": [load_start, load_average()], "cpus": cpus})
        return answer[0]

    try:
        yield shared
    finally:
        if made is not None:
            _remove_marker(directory, *made, name)
