"""The spool of a recording: the private directory each process of the recorded program
writes its ``PID.jsonl`` into (record-preload/), until ``sqlwa record`` merges them.

It holds the program's SQL, unredacted even with ``--redact``, so it is made as the run
directories are (sqlwa.lab.scratch): ``sqlwa-record-<pid>-<token>``, mode 0700, sqlwa's
mark inside, an flock held by the recorder while it lives (sqlwa._system.ownership), so
that ``sqlwa lab cleanup`` removes one whose recorder was killed (:func:`dead_spools`, and
the ``.part`` file it was writing, named in :data:`PART_NOTE`) and never a live one.

What is in it was written by the program's processes, which may write anything there (the
directory is named in their environment): every file is read as untrusted input. A file
that is no spool file, and a line that is no event of the preload's, is skipped and
counted (:class:`Skipped`), never a traceback; nothing there is opened in a way that can
block (a FIFO) or follow a link."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlwa import _system
from sqlwa.record.log import Event

PREFIX = "sqlwa-record"
NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-[A-Za-z0-9_]+$")
#: In every spool, written as it is made: what `lab cleanup` removes must carry it.
MARK = ".sqlwa-record-spool"
MARK_TEXT = "sqlwa record's spool (the recorded program's SQL), removed by it or `sqlwa lab cleanup`\n"
#: The name the preload gives each process's file.
SPOOL_FILE_RE = re.compile(r"^\d{1,10}\.jsonl$")
#: Names the log's ``.part`` file (outputs.Staged) while it is written, for cleanup.
PART_NOTE = ".sqlwa-part"
PART_NAME_RE = re.compile(r"^\..+\.[0-9a-f]{12}\.part$")
#: A merge reads this much of each file at a time, reopening it for the next: a program
#: of thousands of processes leaves thousands of files, more than may be open at once.
CHUNK_BYTES = 64 * 1024
#: Bytes for the chunks of all files together; with many files each gets less.
BUFFERS_BYTES = 32 * 1024 * 1024
EVENT_KEYS: dict[str, dict[str, type]] = {
    "open": {"pid": int, "conn": int, "t": int, "db": str},
    "sql": {"pid": int, "conn": int, "t": int, "seq": int, "sql": str, "trigger": bool},
    "dur": {"pid": int, "conn": int, "seq": int, "dur": int},
    "close": {"pid": int, "conn": int, "t": int},
}
#: Keys the preload adds to some events; kept when of their type, like the required ones.
OPTIONAL_KEYS: dict[str, dict[str, type]] = {"open": {"sqlite_version": str}, "sql": {"unexpanded": bool}}


@dataclass
class Skipped:
    """What of the spool was not the preload's and was left out of the log."""

    files: list[str] = field(default_factory=list)
    lines: int = 0

    def __bool__(self) -> bool:
        return bool(self.files or self.lines)

    def describe(self) -> str:
        parts = []
        if self.files:
            shown = ", ".join(self.files[:3]) + (" …" if len(self.files) > 3 else "")
            parts.append(f"{len(self.files)} files that are not the recording's ({shown})")
        if self.lines:
            parts.append(f"{self.lines} lines that are no event of the recording")
        return "skipped " + " and ".join(parts) + " in the spool"


@contextmanager
def spool_dir() -> Iterator[Path]:
    """A fresh spool, owned by this process while the block runs, removed after it."""
    with _system.signals.held_back():  # made, marked and locked as one step
        path, ownership = _system.ownership.make_owned_dir(PREFIX, None, MARK, MARK_TEXT)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        _system.ownership.release_ownership(ownership)


def dead_spools(bases: list[str]) -> list[Path]:
    """The spools in ``bases`` whose recorder is gone: named and marked as sqlwa makes
    them (or killed before the mark was whole), their pid dead and their lock free."""
    found = []
    for base in bases:
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            match = NAME_RE.match(entry.name)
            if not match or not entry.is_dir(follow_symlinks=False):
                continue
            if not _system.ownership.is_marked(entry.path, MARK, MARK_TEXT):
                continue
            if _system.ownership.owner_is_gone(entry.path, int(match.group(1))):
                found.append(Path(entry.path))
    return sorted(found)


def note_part(spool: Path, part: Path) -> None:
    """Say in the spool which ``.part`` file the log is being written to (for cleanup).
    The program may have put something of its own under the note's name (a link to a
    file of the user's): that name is unlinked and the note made anew, never written
    through; if it cannot be (a process still running makes it again), there is no note
    and cleanup leaves the part."""
    note = spool / PART_NOTE
    try:
        note.unlink(missing_ok=True)
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    with open(fd, "w") as f:
        f.write(str(part))


def remove_noted_part(spool: Path) -> Path | None:
    """The ``.part`` file a dead recorder named in ``spool``, removed if it still is one:
    a regular file named as outputs.Staged names one, empty or beginning as a SQL log.
    The note was in a directory the program could write to, so nothing else is removed."""
    try:
        part = Path(_read_small(spool / PART_NOTE, 4096).decode())
        info = os.lstat(part)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not part.is_absolute() or not PART_NAME_RE.match(part.name) or not stat.S_ISREG(info.st_mode):
        return None
    try:
        head = _read_small(part, 32)
    except OSError:
        return None
    if head and not head.startswith(b'{"sqlwa_sql_log"'):
        return None
    part.unlink(missing_ok=True)
    return part


def _read_small(path: Path, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return os.read(fd, limit)
    finally:
        os.close(fd)


def process_files(spool: Path, skipped: Skipped) -> list[Path]:
    """The processes' files in the spool, in name order; anything else is skipped."""
    files = []
    for entry in sorted(os.scandir(spool), key=lambda e: e.name):
        if entry.name in (MARK, PART_NOTE):
            continue
        if SPOOL_FILE_RE.match(entry.name) and entry.is_file(follow_symlinks=False):
            files.append(Path(entry.path))
        else:
            skipped.files.append(entry.name)
    return files


def checked(raw: bytes) -> Event | None:
    """One line of a process file as the preload writes it, or None; only the preload's
    keys are kept (what else is there would go into a redacted log unredacted)."""
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError):  # ValueError: JSON's and UTF-8's errors
        return None
    kind = event.get("ev") if isinstance(event, dict) else None
    if not isinstance(kind, str) or kind not in EVENT_KEYS:
        return None
    keys = EVENT_KEYS[kind]
    out: Event = {"ev": kind}
    for key, of_type in keys.items():
        value = event.get(key)
        if not _is(value, of_type):
            return None
        out[key] = value
    for key, of_type in OPTIONAL_KEYS.get(kind, {}).items():
        if _is(event.get(key), of_type):
            out[key] = event[key]
    return None if "\0" in out.get("db", "") else out


def _is(value: object, of_type: type) -> bool:
    """``value`` is of the type, as the preload writes it: an int no bool, a str of UTF-8
    (no lone surrogate, which only a ``\\u`` escape of another writer makes)."""
    if of_type is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if of_type is str:
        return isinstance(value, str) and _encodable(value)
    return isinstance(value, of_type)


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def lines(path: Path, chunk: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The whole lines of ``path``, read ``chunk`` bytes at a time with the file open only
    while a chunk is read; a last line without its newline (the process was killed in
    the middle of a write) is left out."""
    offset, pending = 0, []  # the pieces of a line longer than a chunk, joined once
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            data = os.pread(fd, chunk, offset)
        finally:
            os.close(fd)
        if not data:
            return
        offset += len(data)
        parts = data.split(b"\n")
        if len(parts) == 1:
            pending.append(data)
            continue
        yield b"".join([*pending, parts[0]]) + b"\n"
        for line in parts[1:-1]:
            yield line + b"\n"
        pending = [parts[-1]] if parts[-1] else []


def events(path: Path, skipped: Skipped, chunk: int = CHUNK_BYTES) -> Iterator[tuple[int, int, Event]]:
    """A process file's events keyed for merging: (t, order, event); a duration line
    takes the time of the line before it so it stays behind its statement."""
    last_t = 0
    for order, raw in enumerate(lines(path, chunk)):
        event = checked(raw)
        if event is None:
            skipped.lines += 1
            continue
        last_t = event.get("t", last_t)
        yield last_t, order, event


def chunk_for(files: int) -> int:
    """How much of each file a merge of ``files`` files reads at a time."""
    return max(4096, min(CHUNK_BYTES, BUFFERS_BYTES // max(files, 1)))
