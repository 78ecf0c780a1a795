"""``sqlwa record -- COMMAND``: run a program with the preload library
(record-preload/, built by scripts/setup) and merge what each of its processes wrote into
one SQL log.

Each process writes its own file (``PID.jsonl``) in a private directory; after the
program ends they are merged by time (``CLOCK_MONOTONIC``, one clock for all processes)
into the log, and the directory removed. Connection numbers are per process in those
files and made unique in the log."""

from __future__ import annotations

import heapq
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sqlwa import _system
from sqlwa.errors import UsageError
from sqlwa.record import elf
from sqlwa.record.log import Event, Header, InOrder, LogWriter
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
    mode = program.stat().st_mode
    if mode & (stat.S_ISUID | stat.S_ISGID):
        raise UsageError(f"{program} is set-user/group-ID: the loader ignores LD_PRELOAD for it", ELSEWHERE)
    binary = elf.script_interpreter(program) or program
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


@dataclass
class Recorded:
    """What a recording run made: the program's exit status and the log's counts."""

    returncode: int
    counts: dict[str, int]
    databases: set[str]
    unpaired: int


def record(command: list[str], out: IO[bytes], redact: bool) -> Recorded:
    """Run ``command`` under the preload library and write its SQL log to ``out``."""
    library = preload_library()
    check_reachable(command)
    with tempfile.TemporaryDirectory(prefix="sqlwa-record-") as spool:
        env = dict(os.environ, SQLWA_RECORD_DIR=spool)
        env["LD_PRELOAD"] = " ".join(filter(None, [str(library), os.environ.get("LD_PRELOAD", "")]))
        started_unix_ns, started = time.time_ns(), time.monotonic_ns()
        try:
            returncode = subprocess.call(command, env=env)
        except OSError as exc:
            raise UsageError(f"{command[0]}: {exc.strerror}", "give the command as you would run it") from None
        header = Header("record", program=command, started_unix_ns=started_unix_ns, timed=True, redacted=redact)
        files = sorted(Path(spool).glob("*.jsonl"))
        header.sqlite_version = first_version(files)
        writer = LogWriter(out, header)
        unpaired = merge(files, started, writer, Redactor() if redact else None)
    return Recorded(returncode, writer.counts, writer.databases, unpaired)


def first_version(files: list[Path]) -> str | None:
    """The SQLite version the first connection reported."""
    for path in files:
        with open(path, "rb") as f:
            for raw in f:
                event = json.loads(raw)
                if event.get("ev") == "open":
                    return event.get("sqlite_version")
    return None


def raw_events(path: Path) -> Iterator[tuple[int, int, Event]]:
    """A process file's events keyed for merging: (t, order, event); a duration line
    takes the time of the line before it so it stays behind its statement."""
    last_t = 0
    with open(path, "rb") as f:
        for order, raw in enumerate(f):
            if not raw.endswith(b"\n"):
                break  # the process was killed in the middle of a write: that line is lost
            event = json.loads(raw)
            last_t = event.get("t", last_t)
            yield last_t, order, event


def merge(files: list[Path], started: int, writer: LogWriter, redactor: Redactor | None) -> int:
    """Merge the process files into the log; the number of statements on connections
    whose opening was not seen (inherited over a fork), which are left out."""
    conns: dict[tuple[int, int], int] = {}
    pending = InOrder()
    unpaired = 0
    streams = [raw_events(path) for path in files]
    for _, _, event in heapq.merge(*streams, key=lambda item: (item[0], item[1])):
        key = (event.pop("pid"), event["conn"])
        if event["ev"] == "dur":
            ready = pending.complete((key[0], event["seq"]), event["dur"])
        else:
            if event["ev"] == "open":
                conns[key] = len(conns) + 1
                event.pop("sqlite_version", None)
            elif key not in conns:
                unpaired += 1
                continue
            event["conn"] = conns[key]
            event["t"] = max(0, event["t"] - started)
            waits = None
            if event["ev"] == "sql":
                waits = None if event["trigger"] else (key[0], event["seq"])
                del event["seq"]
                if redactor is not None:
                    event["sql"] = redactor.redact(event["sql"])
            ready = pending.put(event, waits)
        for done in ready:
            writer.write(done)
    for done in pending.drain():
        writer.write(done)
    return unpaired
