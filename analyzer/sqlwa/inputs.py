"""Opening a user's input file: the one place that does it.

Every file sqlwa reads that a user may hand it (summary.json, layout.json, a Parquet
table, a policy or profile TOML, fio's JSON, a trace) is opened through :func:`open_input`
or checked by :func:`check_input` before a library opens it by name. A FIFO would block
the open (and Ctrl-C with it), ``/dev/zero`` would be read forever: anything that is not a
regular file is refused before it is opened, the open itself does not wait (O_NONBLOCK:
a FIFO swapped in after the check still cannot block it), and what was opened is checked
again (fstat). A kind of file may have a size limit; a larger file is refused with its size
and the limit, and is never read past the limit even if it grows meanwhile.

Parsing is here too: :func:`parse_json` and :func:`parse_toml` raise ValueError, nothing
else, also for text nested too deeply for the parser (its RecursionError) and integers no
table column can hold, so each reader's one message for a damaged file covers them.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tomllib
from typing import BinaryIO

from sqlwa.errors import UsageError

MiB = 1 << 20

# Limits per kind: what sqlwa writes is far smaller, and these are read whole into memory.
SUMMARY_LIMIT = 64 * MiB  # summary.json, layout.json
POLICY_LIMIT = MiB  # a policy is a page of rules
PROFILE_LIMIT = MiB  # a device profile: a few levels of figures
FIO_JSON_LIMIT = 64 * MiB  # fio's --output-format=json of a few jobs

#: The integers a table column can hold (Int64); a larger one in a JSON file is damage.
INT_RANGE = range(-(1 << 63), 1 << 63)

REGULAR_ONLY = "sqlwa reads its inputs from regular files (or symlinks to them) only"
TOO_LARGE = "pass the file sqlwa (or the tool it names) wrote"

# What stat() says a path is, for the refusal.
FILE_TYPES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}


def size_text(size: int) -> str:
    """``size`` bytes the way a person reads it (1.5 GiB, 64 MiB, 900 bytes)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size} bytes"


def refuse_unreadable(found: os.stat_result, path: str | os.PathLike[str], what: str, limit: int | None) -> None:
    """A UsageError unless ``found`` is a regular file of at most ``limit`` bytes."""
    if not stat.S_ISREG(found.st_mode):
        kind = FILE_TYPES.get(stat.S_IFMT(found.st_mode), "not a regular file")
        raise UsageError(f"{what} {os.fsdecode(path)} is {kind}, not a regular file", REGULAR_ONLY)
    if limit is not None and found.st_size > limit:
        raise UsageError(
            f"{what} {os.fsdecode(path)} is {size_text(found.st_size)}, larger than the {size_text(limit)} "
            f"a {what} may be",
            TOO_LARGE,
        )


def check_input(path: str | os.PathLike[str], what: str, limit: int | None = None) -> None:
    """Refuse ``path`` unless it is (or a symlink resolves to) a regular file of at most
    ``limit`` bytes: for a library that opens it by name. OSError (a missing file) passes."""
    refuse_unreadable(os.stat(path), path, what, limit)


def open_input(path: str | os.PathLike[str], what: str, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading, once it is known to be a regular file within ``limit``
    (checked before the open and again on what was opened); OSError as open() raises it."""
    check_input(path, what, limit)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        refuse_unreadable(os.fstat(fd), path, what, limit)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_input(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (a file that grew
    past the limit since it was opened is refused too)."""
    with open_input(path, what, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UsageError(
            f"{what} {os.fsdecode(path)} is larger than the {size_text(limit)} a {what} may be",
            TOO_LARGE,
        )
    return data


# Both parsers recurse once a level of nesting, and stop cleanly at Python's recursion limit.
TOO_DEEP = "nested too deeply (arrays or tables within each other, hundreds of levels)"


def bounded_int(digits: str) -> int:
    value = int(digits)
    if value not in INT_RANGE:
        raise ValueError(f"the integer {digits[:20]}... ({len(digits)} digits) is out of range")
    return value


def parse_json(data: bytes) -> object:
    """JSON ``data`` (UTF-8); ValueError for anything that is not JSON sqlwa can use."""
    try:
        return json.loads(data.decode(), parse_int=bounded_int)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


def parse_toml(data: bytes) -> dict:
    """TOML ``data`` (UTF-8); ValueError (TOMLDecodeError among them) for anything else."""
    try:
        return tomllib.loads(data.decode())
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
