"""Whether a run measured alone on its host: other sqlwa runs measuring at the same time,
and the load average.

Shards of one sweep run side by side on one machine had 2 to 4 times the latency of the
same cells run alone (#44, item 7): their timings are not the cells'. So every measuring
run leaves a marker in a directory all users share (:data:`MARKER_DIR`): a file named by
its pid and the start of its measuring, held with ``flock`` while it measures, renamed
with its end when it is done, and kept a while (:data:`KEEP_S`) so that a run that ends
later still sees it. A run then counts the markers whose span overlaps its own: live ones
(their lock still held), finished ones by their recorded span, and a killed run's (no
lock, no end) when it started inside this run's span. Markers name no files and hold
nothing; a directory that cannot be used leaves the run unmarked (None: not known).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MARKER_DIR = Path("/tmp/sqlwa-measuring")
KEEP_S = 24 * 3600  # finished markers older than this are removed
_NAME = re.compile(r"^(\d+)-(\d+)(?:-(\d+))?$")  # pid-start_ns[-end_ns]


@dataclass(frozen=True)
class Marker:
    pid: int
    start_ns: int
    end_ns: int | None  # None: still measuring, or killed


def _markers(directory: Path) -> Iterator[tuple[Path, Marker]]:
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            found = _NAME.match(entry.name)
            if found and entry.is_file(follow_symlinks=False):
                end = int(found.group(3)) if found.group(3) else None
                yield Path(entry.path), Marker(int(found.group(1)), int(found.group(2)), end)


def _is_live(path: Path) -> bool:
    """Its run still holds its lock (it is measuring)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO put there: no wait
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def overlapping(directory: Path, own: Path, start_ns: int, end_ns: int) -> list[int]:
    """The pids of the other runs whose measuring overlapped ``start_ns`` … ``end_ns``."""
    pids = []
    for path, marker in _markers(directory):
        if path == own or marker.start_ns >= end_ns:
            continue
        if marker.end_ns is not None:
            overlaps = marker.end_ns > start_ns
        else:
            overlaps = _is_live(path) or marker.start_ns >= start_ns
        if overlaps:
            pids.append(marker.pid)
    return sorted(pids)


def _prune(directory: Path, now_ns: int) -> None:
    for path, marker in _markers(directory):
        last = marker.end_ns if marker.end_ns is not None else marker.start_ns  # a killed run's: its start
        if now_ns - last > KEEP_S * 1_000_000_000 and not _is_live(path):
            with contextlib.suppress(OSError):
                path.unlink()


def _marker_dir(directory: Path) -> Path | None:
    """The shared directory, made sticky and writable by all (as /tmp itself) if new;
    None when it cannot be made or is not a directory (a link, a file)."""
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(directory, 0o1777)
        os.chmod(directory, 0o1777)  # the umask took bits away
    try:
        return directory if os.path.isdir(directory) and not os.path.islink(directory) else None
    except OSError:
        return None


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


@contextmanager
def measuring(directory: Path = MARKER_DIR) -> Iterator[Callable[[], dict | None]]:
    """Mark this process as measuring for the ``with`` block; what it yields tells, when
    called, who shared the host so far: ``other_runs`` (their pids), the 1-minute load
    average at the start and now, and the CPUs; None when the marker could not be made."""
    place = _marker_dir(directory)
    start_ns, load_start = time.time_ns(), load_average()
    own: Path | None = None
    fd = -1
    if place is not None:
        _prune(place, start_ns)
        own = place / f"{os.getpid()}-{start_ns}"
        try:
            fd = os.open(own, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            own = None

    def shared() -> dict | None:
        if place is None or own is None:
            return None
        return {
            "other_runs": overlapping(place, own, start_ns, time.time_ns()),
            "load_average_1m": [load_start, load_average()],
            "cpus": os.cpu_count() or 0,
        }

    try:
        yield shared
    finally:
        if own is not None:
            with contextlib.suppress(OSError):
                os.rename(own, own.with_name(f"{own.name}-{time.time_ns()}"))
            os.close(fd)
