"""Just enough of an ELF file to tell whether a preloaded library can reach a program's
SQLite: whether it is dynamically linked (a ``PT_INTERP`` loader and a ``PT_DYNAMIC``
section), which libraries its dynamic section names (``DT_NEEDED``), and whether SQLite is
compiled into it. Read from the program and segment headers (the ELF specification,
"Program Header" and "Dynamic Section"), without running the program or ``ldd``."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB = 0, 1, 5
#: Every SQLite library holds its file header's magic string (btree.c, zMagicHeader)
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class ElfInfo:
    """What the loader will do with the program."""

    dynamic: bool
    needed: list[str]

    @property
    def links_sqlite(self) -> bool:
        return any(name.startswith("libsqlite3") for name in self.needed)


def script_interpreter(path: Path) -> Path | None:
    """The interpreter a ``#!`` script runs under (``env NAME`` looked up on PATH)."""
    import shutil

    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        found = shutil.which(rest[0]) if rest else None
        return Path(found) if found else None
    return Path(words[0])


def read(path: Path) -> ElfInfo | None:
    """The program's linking, or None when it is no ELF file this can read."""
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024 * 1024)  # the headers are near the start
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    wide, endian = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        segments = program_headers(data, wide, endian)
        interp = any(kind == PT_INTERP for kind, *_ in segments)
        dynamic = [seg for seg in segments if seg[0] == PT_DYNAMIC]
        needed = needed_libraries(data, wide, endian, dynamic[0], segments) if dynamic else []
    except struct.error:
        return None
    return ElfInfo(dynamic=interp and bool(dynamic), needed=needed)


Segment = tuple[int, int, int, int]  # type, file offset, virtual address, file size


def program_headers(data: bytes, wide: bool, endian: str) -> list[Segment]:
    if wide:
        phoff, phentsize, phnum = (
            struct.unpack_from(endian + "Q", data, 32)[0],
            *struct.unpack_from(endian + "HH", data, 54),
        )
    else:
        phoff, phentsize, phnum = (
            struct.unpack_from(endian + "I", data, 28)[0],
            *struct.unpack_from(endian + "HH", data, 42),
        )
    segments = []
    for i in range(phnum):
        at = phoff + i * phentsize
        if wide:
            kind, _, offset, vaddr, _, filesz = struct.unpack_from(endian + "IIQQQQ", data, at)
        else:
            kind, offset, vaddr, _, filesz = struct.unpack_from(endian + "IIIII", data, at)
        segments.append((kind, offset, vaddr, filesz))
    return segments


def needed_libraries(data: bytes, wide: bool, endian: str, dynamic: Segment, segments: list[Segment]) -> list[str]:
    entry = struct.Struct(endian + ("qQ" if wide else "iI"))
    tags = []
    _, offset, _, size = dynamic
    for at in range(offset, offset + size, entry.size):
        tag, value = entry.unpack_from(data, at)
        if tag == DT_NULL:
            break
        tags.append((tag, value))
    strtab = next((value for tag, value in tags if tag == DT_STRTAB), None)
    base = file_offset(strtab, segments) if strtab is not None else None
    if base is None:
        return []
    names = []
    for tag, value in tags:
        if tag == DT_NEEDED:
            end = data.find(b"\0", base + value)
            names.append(data[base + value : end].decode(errors="replace"))
    return names


def file_offset(vaddr: int, segments: list[Segment]) -> int | None:
    """Where a virtual address of a loaded segment is in the file."""
    for kind, offset, start, size in segments:
        if kind == PT_LOAD and start <= vaddr < start + size:
            return offset + vaddr - start
    return None


def contains_sqlite(path: Path) -> bool:
    """Whether the file holds a SQLite library of its own (its magic header string)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return view.find(SQLITE_MAGIC) >= 0
    except (OSError, ValueError):
        return False
