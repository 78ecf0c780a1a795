"""``sqlwa record -- COMMAND``: run a program with the preload library
(record-preload/, built by scripts/setup) and merge what each of its processes wrote into
one SQL log.

Each process writes its own file (``PID.jsonl``) in a private directory; after the
program ends they are merged by time (``CLOCK_MONOTONIC``, one clock for all processes)
into the log, and the directory removed. Connection numbers are per process in those
files and made unique in the log."""

from __future__ import annotations

import heapq
import itertools
import os
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlwa import _system, outputs
from sqlwa.errors import UsageError, writing
from sqlwa.record import child, elf, spool
from sqlwa.record.log import Header, InOrder, LogWriter, SqlLogError, parse_header
from sqlwa.record.redact import Redactor

LIBRARY = "libsqlwa_record_preload.so"
#: Where a test or a packager points sqlwa at the library explicitly.
LIBRARY_ENV = "SQLWA_RECORD_PRELOAD"
ELSEWHERE = (
    "record it another way: the program's own SQL trace saved as a .sql file (statements ending in ';'), "
    "or Android's statement log (adb logcat), then `sqlwa record --from FILE`"
)


def preload_library() -> Path:
    """The preload library: $SQLWA_RECORD_PRELOAD, else where scripts/setup installs it
    (the virtualenv's lib/), else in the package (the wheel carries it in sqlwa/_bin/)."""
    named = os.environ.get(LIBRARY_ENV)
    candidates = [Path(named)] if named else [Path(sys.prefix) / "lib" / LIBRARY, _system.tools.BUNDLED_DIR / LIBRARY]
    for path in candidates:
        if path.is_file():
            return path.resolve()
    raise UsageError(
        f"the preload library {LIBRARY} is not installed ({' nor '.join(map(str, candidates))})",
        "run ./scripts/setup (it builds record-preload/)",
    )


def check_reachable(command: list[str]) -> Path:
    """The program's executable, if a preloaded library can reach it; else one UsageError
    saying why and what to do instead."""
    found = shutil.which(command[0])
    if found is None:
        raise UsageError(f"{command[0]}: no such program", "give the command as you would run it")
    program = Path(found)
    mode = regular_file(program).st_mode
    if mode & (stat.S_ISUID | stat.S_ISGID):
        raise UsageError(f"{program} is set-user/group-ID: the loader ignores LD_PRELOAD for it", ELSEWHERE)
    binary = elf.script_interpreter(program) or program
    regular_file(binary)
    info = elf.read(binary)
    if info is None:
        raise UsageError(f"{binary} is not an ELF program sqlwa can look into", ELSEWHERE)
    if not info.dynamic:
        raise UsageError(f"{binary} is statically linked: no preloaded library can reach it", ELSEWHERE)
    if not info.links_sqlite and elf.contains_sqlite(binary):
        raise UsageError(
            f"{binary} has SQLite compiled into it (no libsqlite3 among its libraries): "
            "the preload cannot reach its statements",
            ELSEWHERE,
        )
    return program


def regular_file(path: Path) -> os.stat_result:
    """``path``'s status if it is a regular file; a program that is a FIFO or a device
    would make the look into it wait or read forever."""
    try:
        info = path.stat()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}", "give the command as you would run it") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "not a regular file"
        raise UsageError(f"{path} is {kind}, not a program", "give the command as you would run it")
    return info


#: The most of a file's first line read to tell whether it is a SQL log (the header
#: holds the program's argv, which may be long).
HEADER_BYTES = 1 << 20


def is_sql_log(path: Path) -> bool:
    """Whether ``path`` is a regular file that begins with a SQL log's header."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        first = os.read(fd, HEADER_BYTES).split(b"\n", 1)[0]
    finally:
        os.close(fd)
    try:
        parse_header(path, first.decode("utf-8"))
    except (SqlLogError, UnicodeDecodeError, RecursionError):
        return False
    return True


def named_files(command: list[str]) -> list[Path]:
    """The files the command line names: the program, its script's interpreter, and each
    argument (``--opt=VALUE``'s value too) as a path from here."""
    found = shutil.which(command[0])
    paths = [Path(found)] if found else []
    for arg in command[1:]:
        paths += [Path(part) for part in {arg, arg.partition("=")[2]} if part]
    return paths


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_out(target: Path, shown: Path, command: list[str] | None) -> None:
    """``--out`` (``target``, as checked by outputs.check_file) may be replaced only if it
    does not exist or is a SQL log, and never when the command line names it."""
    for named in named_files(command) if command else []:
        if same_file(named, target):
            raise UsageError(
                f"--out {shown} is {named}, a file of the recorded program's own command line",
                "write the log to a file of its own, e.g. --out sql-log.jsonl",
            )
    if os.path.lexists(target) and not is_sql_log(target):
        raise UsageError(
            f"--out {shown} exists and is not a sqlwa SQL log: sqlwa replaces only a log it wrote",
            "choose a new file name for the log (or remove that file yourself if it is yours to lose)",
        )


def identity(path: Path) -> tuple[int, ...] | None:
    """What tells a file apart from the same name's later content: inode, size, mtime."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


#: The files SQLite keeps beside a database.
SIDE_FILES = ("", "-journal", "-wal", "-shm")


def taken_over(target: Path, before: tuple[int, ...] | None, databases: set[str]) -> str | None:
    """Why ``target`` is now the program's and must not be replaced, or None."""
    for db in databases:
        if db and db != ":memory:" and any(same_file(Path(db + side), target) for side in SIDE_FILES):
            return f"the program opened it as a database ({db})"
    if identity(target) != before:
        return "the program wrote to it while it ran"
    return None


def beside(target: Path, databases: set[str]) -> Path:
    """A new name beside ``target`` for the log: no file there, none the program opened."""
    opened = {os.path.realpath(db + side) for db in databases for side in SIDE_FILES}
    for n in range(1, 10_000):
        candidate = target.with_name(f"{target.name}.sql-log{'' if n == 1 else f'-{n}'}.jsonl")
        if not os.path.lexists(candidate) and str(candidate) not in opened:
            return candidate
    raise UsageError(f"no free name beside {target} for the log", "clear some of the .sql-log files there")


@dataclass
class Recorded:
    """What a recording run made: how the program ended, the log's counts, where the log
    went (``beside`` when --out could not be written: the program opened that file) and
    what of the spool was left out."""

    ended: child.Ended
    counts: dict[str, int]
    databases: set[str]
    unpaired: int
    skipped: spool.Skipped
    written: Path
    beside: str | None = None  # why the log is not at --out


def record(
    command: list[str], target: Path, redact: bool, on_stop: Callable[[int], None], keep_argv: bool = False
) -> Recorded:
    """Run ``command`` under the preload library and write its SQL log to ``target`` (a
    path :func:`check_out` allowed), or beside it if the program made ``target`` its own."""
    library = preload_library()
    check_reachable(command)
    before = identity(target)
    with spool.spool_dir() as spool_path:
        env = dict(os.environ, SQLWA_RECORD_DIR=str(spool_path))
        env["LD_PRELOAD"] = " ".join(filter(None, [str(library), os.environ.get("LD_PRELOAD", "")]))
        started_unix_ns, started = time.time_ns(), time.monotonic_ns()
        ended = child.run(command, env, on_stop)
        skipped = spool.Skipped()
        files = spool.process_files(spool_path, skipped)
        version, databases = opened(files)
        why = taken_over(target, before, databases)
        written = target if why is None else beside(target, databases)
        argv = None if redact and not keep_argv else command  # a redacted log names no command line unless asked
        header = Header("record", program=argv, started_unix_ns=started_unix_ns, timed=True, redacted=redact)
        header.sqlite_version = version
        if ended.interrupted is not None:
            header.extra["interrupted"] = signal.Signals(ended.interrupted).name
        with outputs.staged(written, "the SQL log") as output:
            spool.note_part(spool_path, output.part)
            with writing(written, "the SQL log"), open(output.part, "xb") as f:
                writer = LogWriter(f, header)
                unpaired = merge(files, started, writer, Redactor() if redact else None, skipped)
            if writer.counts["open"] == 0:
                raise UsageError(
                    f"{command[0]} opened no SQLite database through a shared libsqlite3 (its SQLite may be compiled in)",
                    ELSEWHERE,
                )
            output.sync()
            output.put_in_place()
    return Recorded(ended, writer.counts, writer.databases, unpaired, skipped, written, why)


def opened(files: list[Path]) -> tuple[str | None, set[str]]:
    """The SQLite version the first connection reported, and every database file opened
    (only the lines that begin as the preload begins an open event are parsed)."""
    version, databases = None, set()
    for path in files:
        for raw in spool.lines(path):
            event = spool.checked(raw) if raw.startswith(b'{"ev":"open"') else None
            if event is not None and event["ev"] == "open":
                databases.add(event["db"])
                if version is None and isinstance(event.get("sqlite_version"), str):
                    version = event["sqlite_version"]
    return version, databases


def merge(files: list[Path], started: int, writer: LogWriter, redactor: Redactor | None, skipped: spool.Skipped) -> int:
    """Merge the process files into the log; the number of statements on connections
    whose opening was not seen (inherited over a fork) or that were closed, which are
    left out. Each file is
    read a chunk at a time and closed in between (:func:`spool.events`)."""
    conns: dict[tuple[int, int], int] = {}  # (pid, its conn) -> the log's, while open
    numbers = itertools.count(1)  # the log's connection numbers, each used once
    pending = InOrder()
    unpaired = 0
    chunk = spool.chunk_for(len(files))
    streams = [spool.events(path, skipped, chunk) for path in files]
    for _, _, event in heapq.merge(*streams, key=lambda item: (item[0], item[1])):
        key = (event.pop("pid"), event["conn"])
        if event["ev"] == "dur":
            ready = pending.complete((key[0], event["seq"]), event["dur"])
        else:
            if event["ev"] == "open":
                conns[key] = next(numbers)
                event.pop("sqlite_version", None)
            elif key not in conns:
                unpaired += 1
                continue
            # a closed connection's number runs nothing more (format 1: not open)
            event["conn"] = conns.pop(key) if event["ev"] == "close" else conns[key]
            event["t"] = max(0, event["t"] - started)
            waits = None
            if event["ev"] == "sql":
                waits = None if event["trigger"] else (key[0], event["seq"])
                del event["seq"]
                if redactor is not None:
                    event["sql"] = redactor.redact(event["sql"], trigger=event["trigger"])
            ready = pending.put(event, waits)
        for done in ready:
            writer.write(done)
    for done in pending.drain():
        writer.write(done)
    return unpaired
