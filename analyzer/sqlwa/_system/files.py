"""Sparse files: holes punched, and the stretches that hold data."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator

FALLOC_FL_KEEP_SIZE = 0x01


FALLOC_FL_PUNCH_HOLE = 0x02


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Deallocate a range of a file (reads back as zeros), keeping its size: fallocate(2)
    with FALLOC_FL_PUNCH_HOLE, which os has no wrapper for."""
    libc = ctypes.CDLL(None, use_errno=True)
    mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    if libc.fallocate(fd, mode, ctypes.c_long(offset), ctypes.c_long(length)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fallocate(PUNCH_HOLE): {os.strerror(err)}")


def data_extents(fd: int) -> Iterator[tuple[int, int]]:
    """(offset, length) of each stretch of a sparse file that holds data (SEEK_DATA and
    SEEK_HOLE), so a copy can leave the holes out."""
    size = os.fstat(fd).st_size
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after offset
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end - start
        offset = end
