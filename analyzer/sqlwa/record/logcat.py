"""Android's statement log, as ``adb logcat`` prints it, read as a SQL log.

With ``adb shell setprop log.tag.SQLiteStatements VERBOSE`` (and ``log.tag.SQLiteTime``)
an app's ``android.database.sqlite`` connections log each statement (SQLiteDebug.java:
``DEBUG_SQL_STATEMENTS``/``DEBUG_SQL_TIME`` turn on the connection's trace and profile
hooks). The lines come from frameworks/base core/jni/android_database_SQLiteConnection.cpp:

- ``sqliteTraceCallback``: tag ``SQLiteStatements``, ``"%s: \\"%s\\"\\n"`` — the connection's
  label (its database path) and the statement as it starts, bound values expanded
  (``sqlite3_trace``'s callback gets the expanded text);
- ``sqliteProfileCallback``: tag ``SQLiteTime``, ``"%s: \\"%s\\" took %0.3f ms\\n"`` — the
  same label, the statement, and how long it ran.

logcat (liblog's logprint.cpp, ``android_log_formatLogLine``: threadtime
``"%s %s%5d %5d %c %-8.*s: "``, time ``"%s %c/%-8.*s(%s%5d): "``, brief without the time)
drops a message's trailing newlines and prints a message of several lines (a statement
written on several lines) as several lines with the same header; they are joined again
here. A message longer than
liblog's limit (about 4 KB) arrives cut short, without its closing quote: such statements
are counted and left out. Each (process, label) is one connection: Android names its
pool's connections to one file alike. Times come from logcat's timestamps (milliseconds);
a log printed without them (``-v brief``) is untimed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from sqlwa.record.log import Event, InOrder, SqlLogError, open_regular

STATEMENTS_TAG, TIME_TAG = "SQLiteStatements", "SQLiteTime"
_LEVEL = r"[VDIWEFA]"
# The patterns never try a run of characters two ways (possessive ++ and *+, and the tag
# and message split in Python): a line of any length, of spaces or colons, is read in
# time linear in its length.
#: threadtime (logcat's default), with -v year, -v uid or -v epoch; the tag and message
#: follow in "rest" ("TAG   : MESSAGE", split by split_tag)
THREADTIME = re.compile(
    r"(?:(?:(?P<year>\d{4})-)?(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)|(?P<epoch>\d++))\.(?P<frac>\d{3,9})"
    r"\s++(?:\S++\s++)??(?P<pid>\d++)\s++(?P<tid>\d++)\s++" + _LEVEL + r" (?P<rest>.*)"
)
#: -v time and -v brief
TIME_BRIEF = re.compile(
    r"(?:(?:(?P<year>\d{4})-)?(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d{3,9})\s++)?"
    + _LEVEL
    + r"/(?P<tag>[^(]*+)\((?:[^)\s:]*+:)*+\s*+(?P<pid>\d++)\):(?: (?P<msg>.*))?"
)
BANNER = re.compile(r"^-+ beginning of \w+$")
#: where a tag ends: the first colon followed by a space or the end of the line
TAG_END = re.compile(r":(?= |$)")
MESSAGE_START = ': "'  # a message's label ends here: "LABEL: \"SQL\"…"
TOOK = '" took '
MILLISECONDS = re.compile(r"\d+(?:\.\d+)?")


@dataclass
class Line:
    t_ns: int | None
    pid: int
    tid: int | None
    tag: str
    msg: str


def parse_line(text: str) -> Line | None:
    """One logcat line, or None when it is not one (or a banner)."""
    match = THREADTIME.fullmatch(text)
    if match is not None:
        tag_msg = split_tag(match["rest"])
        if tag_msg is None:
            return None
        tag, msg = tag_msg
    else:
        match = TIME_BRIEF.fullmatch(text)
        if match is None:
            return None
        tag, msg = match["tag"], match["msg"] or ""
    parts = match.groupdict()
    tid = parts.get("tid")
    return Line(timestamp_ns(parts), int(parts["pid"]), int(tid) if tid else None, tag, msg)


def split_tag(rest: str) -> tuple[str, str] | None:
    """threadtime's "TAG   : MESSAGE" (logprint.cpp pads the tag to 8): the tag without
    its padding and the message, or None without the colon."""
    end = TAG_END.search(rest)
    if end is None:
        return None
    return rest[: end.start()].rstrip(), rest[end.start() + 2 :]


def message_parts(msg: str, tag: str) -> tuple[str, str, str | None] | None:
    """A whole message's (label, sql, milliseconds or None), or None while it is not whole
    (its closing quote, or ``" took N ms``, still to come): ``LABEL: "SQL"`` for
    SQLiteStatements, ``LABEL: "SQL" took N ms`` for SQLiteTime; the label ends at the
    first ``: "``."""
    start = msg.find(MESSAGE_START)
    if start < 0:
        return None
    sql_from = start + len(MESSAGE_START)
    if tag != TIME_TAG:
        if len(msg) > sql_from and msg.endswith('"'):
            return msg[:start], msg[sql_from:-1], None
        return None
    took = msg.rfind(TOOK)
    if took >= sql_from and msg.endswith(" ms") and MILLISECONDS.fullmatch(msg, took + len(TOOK), len(msg) - 3):
        return msg[:start], msg[sql_from:took], msg[took + len(TOOK) : -3]
    return None


def timestamp_ns(parts: dict[str, str | None]) -> int | None:
    """Nanoseconds on logcat's clock (a year-less date is taken in a leap year, 2000)."""
    frac = parts.get("frac")
    if frac is None:
        return None
    sub_ns = int(frac.ljust(9, "0"))
    if parts.get("epoch"):
        return int(parts["epoch"] or 0) * 1_000_000_000 + sub_ns
    month, day = (int(x) for x in (parts["md"] or "01-01").split("-"))
    hours, minutes, seconds = (int(x) for x in (parts["hms"] or "0:0:0").split(":"))
    days = date(int(parts["year"] or 2000), month, day).toordinal()
    return ((days * 24 + hours) * 60 + minutes) * 60_000_000_000 + seconds * 1_000_000_000 + sub_ns


def is_logcat(head: list[str]) -> bool:
    """Whether the first lines of a file are logcat's."""
    lines = [line for line in head if line.strip()]
    return bool(lines) and any(BANNER.match(line) or parse_line(line) for line in lines[:50])


def is_timed(head: list[str]) -> bool:
    """Whether the log's lines carry timestamps (its first line that parses does)."""
    for text in head:
        line = parse_line(text.rstrip("\r\n"))
        if line is not None:
            return line.t_ns is not None
    return False


@dataclass
class Reader:
    """The state of one pass over a logcat file."""

    path: Path
    conns: dict[tuple[int, str], int] = field(default_factory=dict)
    #: per (pid, tid, tag): a message still arriving, as (its first line's number, that
    #: line, the message's lines so far); joined once, when its last line has come
    partial: dict[tuple[int, int | None, str], tuple[int, Line, list[str]]] = field(default_factory=dict)
    running: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    order: InOrder = field(default_factory=InOrder)
    first_t: int | None = None
    next_id: int = 0
    truncated: int = 0
    statements: int = 0
    #: whether the lines have timestamps, from the first ones (is_timed)
    timed: bool = True

    def feed(self, number: int, text: str) -> list[Event]:
        line = parse_line(text)
        if line is None or line.tag not in (STATEMENTS_TAG, TIME_TAG):
            return []
        if self.timed and line.t_ns is None:
            raise SqlLogError(self.path, number, "a line without a timestamp in a log whose first lines have them")
        key = (line.pid, line.tid, line.tag)
        held = self.partial.pop(key, None)
        if held is not None and MESSAGE_START not in line.msg:
            start, first, lines = held
            lines.append(line.msg)
            if not self._may_end(line.tag, line.msg):
                self.partial[key] = held
                return []
            first.msg = "\n".join(lines)
            return self._message(start, first, lines)
        if held is not None:
            self.truncated += 1  # its end never came: cut at liblog's limit
        if not line.msg:
            return []  # the empty line after a message's own trailing newline
        return self._message(number, line)

    @staticmethod
    def _may_end(tag: str, last: str) -> bool:
        """Whether a message's newest line may be its last (looked at alone: joining the
        lines to look again at each one would cost the square of their number)."""
        if tag != TIME_TAG:
            return last.endswith('"')
        took = last.rfind(TOOK)
        return (
            took >= 0 and last.endswith(" ms") and bool(MILLISECONDS.fullmatch(last, took + len(TOOK), len(last) - 3))
        )

    def _message(self, number: int, line: Line, lines: list[str] | None = None) -> list[Event]:
        parts = message_parts(line.msg, line.tag)
        if parts is None:
            if MESSAGE_START not in line.msg:
                raise SqlLogError(self.path, number, f"a {line.tag} line that is not Android's: {line.msg[:60]!r}")
            self.partial[(line.pid, line.tid, line.tag)] = (number, line, lines or [line.msg])  # more to come
            return []
        label, sql, ms = parts
        conn_key = (line.pid, label)
        if ms is not None:
            queue = self.running.get(conn_key)
            if not queue:
                return []  # a statement whose start was not logged (SQLiteStatements off)
            return self.order.complete(queue.pop(0), round(float(ms) * 1_000_000))
        return self._statement(line, conn_key, sql)

    def _statement(self, line: Line, conn_key: tuple[int, str], sql: str) -> list[Event]:
        ready: list[Event] = []
        t = None
        if self.timed and line.t_ns is not None:
            self.first_t = line.t_ns if self.first_t is None else self.first_t
            t = max(0, line.t_ns - self.first_t)
        if conn_key not in self.conns:
            self.conns[conn_key] = len(self.conns) + 1
            ready += self.order.put(_timed({"ev": "open", "conn": self.conns[conn_key], "db": conn_key[1]}, t))
        self.statements += 1
        self.next_id += 1
        self.running.setdefault(conn_key, []).append(self.next_id)
        if len(self.running[conn_key]) > 64:
            self.running[conn_key].pop(0)  # a start whose time never came
        event = _timed({"ev": "sql", "conn": self.conns[conn_key], "sql": sql, "trigger": sql.startswith("--")}, t)
        return ready + self.order.put(event, self.next_id)

    def finish(self) -> list[Event]:
        self.truncated += len(self.partial)
        self.partial.clear()
        return self.order.drain()


def _timed(event: Event, t: int | None) -> Event:
    if t is not None:
        event["t"] = t
    return event


def events(path: Path, reader: Reader) -> Iterator[Event]:
    """The log's statements as format-1 events (``reader`` keeps the counts)."""
    with open_regular(path, "r", encoding="utf-8", errors="replace") as f:
        for number, text in enumerate(f, start=1):
            yield from reader.feed(number, text.rstrip("\r\n"))
    yield from reader.finish()
