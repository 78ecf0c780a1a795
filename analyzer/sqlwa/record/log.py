"""The SQL log, format 1 (docs/sql-log-format.md): JSON Lines, a header then events. Its
reader validates as it streams (one line in memory at a time, plus the set of open
connections), and every error names the file and line."""

from __future__ import annotations

import json
import os
import re
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlwa.errors import UsageError

FORMAT = 1
SOURCES = ("record", "android-logcat", "sql-file")
HEADER_KEYS = ("sqlwa_sql_log", "source", "program", "sqlite_version", "started_unix_ns", "timed", "redacted")
EVENT_KINDS = ("open", "sql", "close")

Event = dict[str, Any]


class SqlLogError(UsageError):
    """A log (or a file given as one) that cannot be read: message "FILE:LINE: what"."""

    def __init__(self, path: Path | str, line: int, what: str) -> None:
        super().__init__(f"{path}:{line}: {what}", "pass a SQL log written by `sqlwa record` (docs/sql-log-format.md)")


@dataclass
class Header:
    """The log's first line."""

    source: str
    program: list[str] | None = None
    sqlite_version: str | None = None
    started_unix_ns: int | None = None
    timed: bool = True
    redacted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "sqlwa_sql_log": FORMAT,
                "source": self.source,
                "program": self.program,
                "sqlite_version": self.sqlite_version,
                "started_unix_ns": self.started_unix_ns,
                "timed": self.timed,
                "redacted": self.redacted,
                **self.extra,
            },
            ensure_ascii=False,
        )


#: what a file that is not a regular one is, for the one line that refuses it
FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def open_regular(path: Path | str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """``path`` opened for reading if it is a regular file, else a :class:`SqlLogError`
    saying what it is. Opened without blocking first: a FIFO with no writer would
    otherwise hang the open (and its reads) for ever; fstat of what was opened, so the
    file checked is the file read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode_bits = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode_bits):
            what = next((name for test, name in FILE_KINDS if test(mode_bits)), "not a regular file")
            raise SqlLogError(path, 0, f"{what}, not a SQL log: sqlwa reads logs from regular files only")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, mode, **kwargs)


def loads(path: Path | str, number: int, text: str, what: str) -> Any:
    """One line's JSON; a :class:`SqlLogError` naming the line when it is not JSON, or
    nested deeper than Python's parser recurses (a RecursionError otherwise)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise SqlLogError(path, number, "JSON nested too deeply to read (the logs sqlwa writes are flat)") from None
    except ValueError:
        raise SqlLogError(path, number, what) from None


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_header(path: Path | str, text: str) -> Header:
    """The header from the first line's text, or a :class:`SqlLogError` for line 1."""
    obj = loads(path, 1, text, "not a sqlwa SQL log: the first line is not JSON")
    if not isinstance(obj, dict) or "sqlwa_sql_log" not in obj:
        raise SqlLogError(path, 1, 'not a sqlwa SQL log: no "sqlwa_sql_log" header')
    if obj["sqlwa_sql_log"] != FORMAT:
        raise SqlLogError(path, 1, f"SQL log format {obj['sqlwa_sql_log']!r}; this sqlwa reads format {FORMAT}")
    missing = [key for key in HEADER_KEYS if key not in obj]
    if missing:
        raise SqlLogError(path, 1, f"the header lacks {', '.join(missing)}")
    if obj["source"] not in SOURCES or not isinstance(obj["timed"], bool) or not isinstance(obj["redacted"], bool):
        raise SqlLogError(path, 1, "the header's source, timed or redacted is not a value format 1 allows")
    known = {key: obj[key] for key in HEADER_KEYS[1:]}
    return Header(**known, extra={k: v for k, v in obj.items() if k not in HEADER_KEYS})


def check_event(path: Path | str, number: int, event: object, timed: bool, open_conns: set[int]) -> Event:
    """One event line, checked against format 1; ``open_conns`` is updated."""
    if not isinstance(event, dict):
        raise SqlLogError(path, number, "an event is a JSON object")
    kind = event.get("ev")
    if kind not in EVENT_KINDS:
        raise SqlLogError(path, number, f"unknown event {kind!r} (format 1 has {', '.join(EVENT_KINDS)})")
    conn = event.get("conn")
    if not isinstance(conn, int) or isinstance(conn, bool):
        raise SqlLogError(path, number, f'{kind} event without an integer "conn"')
    if timed and not is_int(event.get("t")):
        raise SqlLogError(path, number, f'{kind} event without an integer "t" in a timed log')
    if kind == "open":
        if not isinstance(event.get("db"), str):
            raise SqlLogError(path, number, 'open event without a "db" string')
        if conn in open_conns:
            raise SqlLogError(path, number, f"connection {conn} opened twice")
        open_conns.add(conn)
    elif conn not in open_conns:
        raise SqlLogError(path, number, f"{kind} event on connection {conn}, which is not open")
    elif kind == "sql":
        if not isinstance(event.get("sql"), str):
            raise SqlLogError(path, number, 'sql event without a "sql" string')
        if "dur" in event and not is_int(event["dur"]):
            raise SqlLogError(path, number, '"dur" is not an integer')
        if not isinstance(event.get("trigger", False), bool):
            raise SqlLogError(path, number, '"trigger" is not true or false')
    else:
        open_conns.discard(conn)
    return event


def read_log(path: Path) -> tuple[Header, Iterator[Event]]:
    """The header, and the events streamed (validated as they are read; a truncated or
    garbled line raises :class:`SqlLogError` when the iteration reaches it)."""
    f = open_regular(path)  # closed by the events generator, or here on a bad header
    try:
        first = _decoded(path, 1, f.readline())
        header = parse_header(path, first)
    except BaseException:
        f.close()
        raise
    return header, _events(path, f, header.timed)


def _decoded(path: Path | str, number: int, raw: bytes) -> str:
    if raw and not raw.endswith(b"\n"):
        raise SqlLogError(path, number, "the line is cut short (no newline at its end): a truncated log")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SqlLogError(path, number, "the line is not UTF-8") from None


def _events(path: Path, f: IO[bytes], timed: bool) -> Iterator[Event]:
    open_conns: set[int] = set()
    with f:
        for number, raw in enumerate(f, start=2):
            text = _decoded(path, number, raw)
            if not text.strip():
                continue
            event = loads(path, number, text, "not a JSON object: a garbled line")
            yield check_event(path, number, event, timed, open_conns)


def validate(path: Path) -> tuple[Header, int]:
    """Read the whole log; its header and number of events (a :class:`SqlLogError` else)."""
    header, events = read_log(path)
    return header, sum(1 for _ in events)


class LogWriter:
    """Writes a log to an open binary file: the header, then events as they come."""

    def __init__(self, f: IO[bytes], header: Header) -> None:
        self.f = f
        self.counts = {"open": 0, "sql": 0, "trigger": 0, "close": 0}
        self.databases: set[str] = set()
        f.write(header.to_json().encode() + b"\n")

    def write(self, event: Event) -> None:
        kind = event["ev"]
        self.counts["trigger" if kind == "sql" and event.get("trigger") else kind] += 1
        if kind == "open":
            self.databases.add(event["db"])
        self.f.write(utf8(json.dumps(event, ensure_ascii=False)) + b"\n")


#: what Python's str holds but UTF-8 cannot: a byte a reader kept as a surrogate
#: (surrogateescape), a lone surrogate of a JSON ``\\u`` escape
SURROGATE = re.compile("[\ud800-\udfff]")


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, each character that is none U+FFFD (docs/sql-log-format.md: text
    that is not UTF-8 becomes U+FFFD, as the preload writes it)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return SURROGATE.sub("\ufffd", text).encode()


class InOrder:
    """Events leave in the order they were put, each once it is complete: an SQL event
    waits for its duration (which comes later: when the statement ends), and the events
    behind it wait with it. Memory is bounded: beyond ``limit`` queued events the oldest
    leaves without its duration."""

    def __init__(self, limit: int = 100_000) -> None:
        self.queue: deque[tuple[Event, Any]] = deque()
        self.waiting: dict[Any, Event] = {}
        self.limit = limit

    def put(self, event: Event, waits_for: Any = None) -> list[Event]:
        """Queue an event (``waits_for``: the key its duration will come with); the events
        now free to leave, in order."""
        self.queue.append((event, waits_for))
        if waits_for is not None:
            self.waiting[waits_for] = event
        return self._ready()

    def complete(self, key: Any, dur: int) -> list[Event]:
        """The duration of the event waiting for ``key`` (ignored if it already left)."""
        event = self.waiting.pop(key, None)
        if event is not None:
            event["dur"] = dur
        return self._ready()

    def _ready(self) -> list[Event]:
        out = []
        while self.queue:
            event, key = self.queue[0]
            if key is not None and key in self.waiting and len(self.queue) <= self.limit:
                break
            self.queue.popleft()
            if key is not None:
                self.waiting.pop(key, None)
            out.append(event)
        return out

    def drain(self) -> list[Event]:
        """Everything still queued (statements that never reported their end among them)."""
        self.waiting.clear()
        out = [event for event, _ in self.queue]
        self.queue.clear()
        return out
