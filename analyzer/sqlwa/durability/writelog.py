"""The dm-log-writes log format (``drivers/md/dm-log-writes.c``; what xfstests' replay-log
reads): a super sector, then per entry one sector holding ``struct log_write_entry``
(sector, nr_sectors, flags, data_len, little-endian u64s) followed by the data written,
``nr_sectors`` sectors of it (none for flushes, discards and marks; a mark's text
follows the entry header in its own sector).

Sectors are the target's ``sectorsize`` (the data device's logical block size), which
the super records. The target logs a write only once a flush after it completed (or at
once with FUA), so the log is in the order the data became durable; a mark goes in when
it is sent, behind everything durable by then.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from sqlwa.errors import LabError

MAGIC = 0x6A736677736872
VERSION = 1
SUPER = struct.Struct("<QQQI")  # magic, version, nr_entries, sectorsize
ENTRY = struct.Struct("<QQQQ")  # sector, nr_sectors, flags, data_len

FLUSH = 1 << 0
FUA = 1 << 1
DISCARD = 1 << 2
MARK = 1 << 3
METADATA = 1 << 4

END_MARK = "dm-log-writes-end"  # the target's own mark when it is removed


@dataclass(frozen=True)
class Entry:
    """One logged event; ``offset`` is where its data starts in the log file."""

    index: int
    sector: int  # in the log's sectorsize units
    sectors: int
    flags: int
    offset: int
    mark: str | None = None

    @property
    def is_write(self) -> bool:
        return self.sectors > 0 and not self.flags & (DISCARD | MARK)

    @property
    def is_discard(self) -> bool:
        return bool(self.flags & DISCARD)

    @property
    def is_flush(self) -> bool:
        return bool(self.flags & FLUSH)

    @property
    def is_fua(self) -> bool:
        return bool(self.flags & FUA)


@dataclass
class WriteLog:
    path: Path
    sectorsize: int
    entries: list[Entry]

    def data(self, entry: Entry) -> bytes:
        """The bytes ``entry`` wrote."""
        with open(self.path, "rb") as f:
            f.seek(entry.offset)
            return f.read(entry.sectors * self.sectorsize)


def read(path: Path) -> WriteLog:
    """The log at ``path``; a log that is not one, or is cut short, is a LabError."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as log:
        if len(log) < SUPER.size:
            raise LabError(f"{path} is too short to be a dm-log-writes log")
        magic, version, count, sectorsize = SUPER.unpack_from(log, 0)
        if magic != MAGIC or version != VERSION or sectorsize not in (512, 1024, 2048, 4096):
            raise LabError(f"{path} is not a dm-log-writes log (magic {magic:#x}, version {version})")
        return WriteLog(path, sectorsize, list(_entries(log, count, sectorsize, path)))


def _entries(log: mmap.mmap, count: int, sectorsize: int, path: Path):
    position = sectorsize  # the super takes the first sector
    for index in range(count):
        if position + ENTRY.size > len(log):
            raise LabError(f"{path} ends inside entry {index} of {count}: the log was cut short")
        sector, sectors, flags, data_len = ENTRY.unpack_from(log, position)
        mark = None
        if flags & MARK:
            raw = log[position + ENTRY.size : position + ENTRY.size + data_len]
            mark = raw.decode("utf-8", "replace")
        data_at = position + sectorsize
        yield Entry(index, sector, sectors, flags, data_at, mark)
        carries_data = sectors and not flags & (DISCARD | MARK)
        position = data_at + (sectors * sectorsize if carries_data else 0)
