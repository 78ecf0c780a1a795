"""Crash states as disk images: the log replayed onto a zeroed image of the device's
size (dm-log-writes logs from the device's creation, mkfs included), as xfstests'
``replay-log`` does. The durable prefix is kept in one base image that only grows along
the log; each state is a sparse copy of it plus the state's own writes.

A discard is replayed as zeros (a hole): what a device returns for a discarded range is
unspecified, and zeros are what the filesystem cannot have relied on.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlwa import _system
from sqlwa.durability.states import BLOCK, CrashState
from sqlwa.durability.writelog import WriteLog

COPY_CHUNK = 1 << 20


class Replayer:
    """The base image (durable prefix) of one log, advanced state by state."""

    def __init__(self, log: WriteLog, device_bytes: int, workdir: Path) -> None:
        self.log = log
        self.base = workdir / "base.img"
        self.applied = 0  # entries [0, applied) are in the base image
        with open(self.base, "xb") as f:
            f.truncate(device_bytes)
        self._log_file = open(log.path, "rb")

    def close(self) -> None:
        self._log_file.close()
        self.base.unlink(missing_ok=True)

    def image(self, state: CrashState, target: Path) -> None:
        """Make ``target`` (a file of the device's size, perhaps behind a loop device)
        ``state``'s disk image, in place."""
        self._advance(state.durable)
        fd = os.open(target, os.O_RDWR)
        try:
            _copy_sparse_into(self.base, fd)
            for index in state.extra:
                self._apply(fd, index)
            if state.torn is not None:
                self._apply_torn(fd, *state.torn)
        finally:
            os.close(fd)

    def _advance(self, until: int) -> None:
        if until < self.applied:
            raise ValueError(f"crash states out of log order: {until} after {self.applied}")
        fd = os.open(self.base, os.O_WRONLY)
        try:
            for index in range(self.applied, until):
                self._apply(fd, index)
        finally:
            os.close(fd)
        self.applied = until

    def _apply(self, fd: int, index: int) -> None:
        entry = self.log.entries[index]
        offset = entry.sector * self.log.sectorsize
        length = entry.sectors * self.log.sectorsize
        if entry.is_discard:
            _system.files.punch_hole(fd, offset, length)
        elif entry.is_write:
            data = self._data(entry.offset, length)
            if data.count(0) == len(data):  # zeros (a journal being initialised): a hole reads the same
                _system.files.punch_hole(fd, offset, length)
            else:
                os.pwrite(fd, data, offset)

    def _apply_torn(self, fd: int, index: int, kept_blocks: tuple[int, ...]) -> None:
        """Only ``kept_blocks`` (4 KiB blocks of the write) reach the disk."""
        entry = self.log.entries[index]
        for block in kept_blocks:
            data = self._data(entry.offset + block * BLOCK, BLOCK)
            os.pwrite(fd, data, entry.sector * self.log.sectorsize + block * BLOCK)

    def _data(self, offset: int, length: int) -> bytes:
        return os.pread(self._log_file.fileno(), length, offset)


def _copy_sparse_into(source: Path, dst: int) -> None:
    """``dst`` becomes a copy of ``source`` (same size), holes for holes."""
    src = os.open(source, os.O_RDONLY)
    try:
        size = os.fstat(src).st_size
        os.ftruncate(dst, size)
        _system.files.punch_hole(dst, 0, size)
        for offset, length in _system.files.data_extents(src):
            done = 0
            while done < length:
                chunk = os.pread(src, min(COPY_CHUNK, length - done), offset + done)
                os.pwrite(dst, chunk, offset + done)
                done += len(chunk)
    finally:
        os.close(src)
