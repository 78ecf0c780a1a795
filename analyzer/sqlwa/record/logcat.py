"""Android's statement log, as ``adb logcat`` and Android Studio print it, read as a SQL log.

With ``adb shell setprop log.tag.SQLiteStatements VERBOSE`` (and ``log.tag.SQLiteTime``)
an app's ``android.database.sqlite`` connections log each statement (SQLiteDebug.java:
``DEBUG_SQL_STATEMENTS``/``DEBUG_SQL_TIME`` turn on the connection's trace and profile
hooks). The messages come from frameworks/base core/jni/android_database_SQLiteConnection.cpp:

- ``sqliteTraceCallback``: tag ``SQLiteStatements``, ``"%s: \\"%s\\"\\n"`` — the connection's
  label (its database path, or ``:memory:``) and the statement as it starts, bound values
  expanded (``sqlite3_trace``'s callback gets the expanded text), quoted but not escaped:
  a ``"`` in the SQL is printed as it is, so the statement ends at the message's last ``"``;
- ``sqliteProfileCallback``: tag ``SQLiteTime``, ``"%s: \\"%s\\" took %0.3f ms\\n"``;
- before Android 4.1 (core/jni/android_database_SQLiteDatabase.cpp, ``LOG_TAG "Database"``):
  ``sqlTrace``, ``LOGI("sql_statement|%s|%s\\n", databaseName, sql)`` and ``sqlProfile``,
  ``LOGI("elapsedTime4Sql|%s|%.3f ms|%s\\n", ...)``; Android 3's pooled connections append
  ``"|%03d"`` (the connection's number) to the database name.

A trigger's program is traced too: ``-- TRIGGER name`` as it starts, then ``-- `` and the
text of each step (SQLite's trigger.c); those become trigger steps (``"trigger": true``).

The line around a message is one of liblog's logprint.cpp (``android_log_formatLogLine``,
one line per line of the message, each with the same prefix): ``brief``
``"%c/%-8.*s(%s%5d): "``, ``process`` ``"%c(%s%5d) "`` then ``"  (%.*s)"`` after the
message, ``tag`` ``"%c/%-8.*s: "``, ``thread`` ``"%c(%s%5d:%5d) "`` (no tag), ``raw``
(nothing), ``time`` ``"%s %c/%-8.*s(%s%5d): "``, ``threadtime`` ``"%s %s%5d %5d %c %-8.*s: "``,
``long`` ``"[ %s %s%5d:%5d %c/%-8.*s ]\\n"`` with the message on the lines below it and a
blank line after; ``-v color`` puts ``"\\x1B[38;5;%dm"`` before each line and
``"\\x1B[0m"`` after it. Or Android Studio's: before 2022 ``DATE TIME PID-TID/PACKAGE
L/TAG: `` (``﹕``, U+FE55, for the colon in Studio 1; a message's later lines indented 4
and without a header: AndroidLogcatFormatter.java), since then columns (logcat/messages/
MessageFormatter.kt: ``DATE TIME  PID-TID  TAG  PACKAGE  L  ``, the tag padded to 24, the
package to 36, a message's later lines indented to the level's column and without a
header). Lines may have lost their padding, or gained leading spaces (pasted into a post).

The lines of one message are adjacent (logcat and Studio print a message at once): a
message goes on while the next line has the same header, or none, and does not start a
message (``LABEL: "`` with a path, ``:memory:`` or a label already seen, or
``sql_statement|``). A statement is whole at the last of its lines that ends in ``"``;
lines after it are not the message's (counted). A message longer than liblog's limit
(about 4 KB) arrives cut short, without its closing quote: such statements are counted
and left out. Lines of other tags are counted and skipped. Each (process, label) is one
connection: Android names its pool's connections to one file alike. Times come from the
lines' timestamps (milliseconds); a log printed without them is untimed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from sqlwa.record.log import Event, InOrder, SqlLogError, open_regular

STATEMENTS_TAG, TIME_TAG, OLD_TAG = "SQLiteStatements", "SQLiteTime", "Database"
OUR_TAGS = (STATEMENTS_TAG, TIME_TAG, OLD_TAG)
OLD_STATEMENT, OLD_TIME = "sql_statement|", "elapsedTime4Sql|"
_L = r"(?P<level>[VDIWEFA])"
#: a timestamp: logcat's (-v year, -v epoch, -v usec/nsec, -v zone), Studio's
_WHEN = r"(?:(?:(?P<year>\d{4})-)?(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)|(?P<epoch>\d++))\.(?P<frac>\d{3,9})"
# The patterns never try a run of characters two ways (possessive ++ and *+, a tag and its
# message split in Python): a line of any length, of spaces or colons, is read in time
# linear in its length.
#: threadtime (logcat's default), with -v year, -v uid, -v epoch or -v zone; the tag and
#: message follow in "rest" ("TAG   : MESSAGE", split by split_tag)
THREADTIME = re.compile(
    _WHEN + r"\s++(?:\S++\s++)??(?P<pid>\d++)\s++(?P<tid>\d++)\s++" + _L + r"\s(?P<rest>.*)", re.ASCII
)
#: -v long's header line: "[ TIME  PID: TID L/TAG     ]", the message on the lines below
LONG = re.compile(
    r"\[ ++" + _WHEN + r"\s++(?:\S++\s++)??(?P<pid>\d++):\s*+(?P<tid>\d++)\s++" + _L + r"/(?P<rest>.*)", re.ASCII
)
#: Android Studio before 2022 (AndroidLogcatFormatter.java): "DATE TIME PID-TID/PACKAGE L/TAG:
#: MESSAGE", the PID-TID or the package left out if asked
STUDIO_OLD = re.compile(
    _WHEN + r"\s++(?:(?P<pid>\d++)-(?P<tid>\d++)(?:/\S*+)?\s++)?(?:\S++\s++)??" + _L + r"/(?P<rest>.*)", re.ASCII
)
STUDIO_OLD_INDENT = "    "  # AndroidLogcatFormatter.CONTINUATION_LINE, after its "\n"
#: -v time and -v brief
TIME_BRIEF = re.compile(
    r"(?:"
    + _WHEN
    + r"\s++)?"
    + _L
    + r"/(?P<tag>[^(]*+)\((?:[^)\s:]*+:)*+\s*+(?P<pid>\d++)\)[:\ufe55](?: (?P<msg>.*))?",
    re.ASCII,
)
#: -v tag: "L/TAG: MESSAGE" (and what is left of a line whose columns were cut away)
TAG_ONLY = re.compile(_L + r"/(?P<rest>.*)")
#: -v process: "L(  PID) MESSAGE  (TAG)"
PROCESS = re.compile(_L + r"\((?:[^)\s:]*+:)?\s*+(?P<pid>\d++)\) (?P<rest>.*)", re.ASCII)
#: -v thread: "L(  PID:  TID) MESSAGE", without the tag
THREAD = re.compile(_L + r"\((?:[^)\s:]*+:\s*+)?\s*+(?P<pid>\d++):\s*+(?P<tid>\d++)\) (?P<msg>.*)", re.ASCII)
#: Android Studio since 2022, its columns: "[DATE ]TIME  [PID[-TID]  ]" then STUDIO_COLUMNS
STUDIO = re.compile(
    r"(?:(?P<year>\d{4})-(?P<md>\d\d-\d\d) )?(?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d{3})"
    r" ++(?:(?P<pid>\d++)(?:-(?P<tid>\d++))? ++)?(?P<rest>.*)",
    re.ASCII,
)
STUDIO_TAG_WIDTH = 23 + 1  # TagFormat: DEFAULT_LENGTH, and the space after it
#: "[TAG  [PACKAGE  ]]L  MESSAGE" (the level's letter stands alone)
STUDIO_COLUMNS = re.compile(r"(?:(?P<tag>\S++) ++(?:\S++ ++)?)?" + _L + r" ++(?P<msg>.*)", re.ASCII)
#: -v color's escapes around each line: "\x1B[38;5;%dm" before, "\x1B[0m" after
COLOR_START, COLOR_END = re.compile(r"\x1b\[38;5;\d{1,3}m", re.ASCII), "\x1b[0m"
#: logcat's own lines ("--------- beginning of main") and Studio's ("---- PROCESS STARTED
#: (PID) for package P ----"); not a .sql file's "-------- Schema --------"
BANNER = re.compile(r"-++ (?:beginning of|switch to) \S++$|-++ PROCESS (?:STARTED|ENDED) .*-$")
#: where a tag ends: the first colon followed by a space or the end of the line, or the
#: full-width colon Studio 1 printed
TAG_END = re.compile(r":(?= |$)|\ufe55")
MESSAGE_START = ': "'  # a message's label ends here: "LABEL: \"SQL\"…"
TOOK = '" took '
MILLISECONDS = re.compile(r"\d+(?:\.\d+)?", re.ASCII)
CONNECTION_NUMBER = re.compile(r"\d{3}\|", re.ASCII)
#: a message longer than this is none logcat printed (liblog's limit is about 4 KB)
MESSAGE_LIMIT = 64 * 1024


@dataclass
class Line:
    """A line's header (what is known of it) and its message; ``msg`` None for -v long's
    header line, ``tag`` None for the layouts that print none (-v thread, -v raw, Studio's
    compact view)."""

    t_ns: int | None
    pid: int | None
    tid: int | None
    tag: str | None
    msg: str | None
    #: leading characters to take off the message's later lines that have no header
    indent: int = 0
    #: Studio's tag column left blank: the tag is the line before's ("hide duplicates")
    same_tag: bool = False


def parse_line(text: str) -> Line | None:
    """One line with a logcat or Studio header, or None when it has none."""
    stripped = text.lstrip()
    lead = len(text) - len(stripped)
    for parse in (_long, _threadtime, _time_brief, _studio_old, _tag_only, _process, _thread, _studio):
        try:
            line = parse(stripped)
        except ValueError:  # a date no calendar has (month 13), an int past Python's digits
            continue
        if line is not None:
            line.indent += lead
            return line
    return None


def _line(parts: dict[str, str | None], tag: str | None, msg: str | None, indent: int = 0) -> Line:
    pid, tid = parts.get("pid"), parts.get("tid")
    return Line(timestamp_ns(parts), int(pid) if pid else None, int(tid) if tid else None, tag, msg, indent)


def _long(text: str) -> Line | None:
    match = LONG.fullmatch(text)
    if match is None or not match["rest"].endswith("]"):
        return None
    return _line(match.groupdict(), match["rest"][:-1].rstrip(), None)


def _threadtime(text: str) -> Line | None:
    return _with_tag(THREADTIME.fullmatch(text))


def _studio_old(text: str) -> Line | None:
    line = _with_tag(STUDIO_OLD.fullmatch(text))
    if line is not None:
        line.indent = len(STUDIO_OLD_INDENT)  # a message's later lines: "\n    " and the line
    return line


def _tag_only(text: str) -> Line | None:
    return _with_tag(TAG_ONLY.fullmatch(text))


def _with_tag(match: re.Match[str] | None) -> Line | None:
    if match is None:
        return None
    tag_msg = split_tag(match["rest"])
    return None if tag_msg is None else _line(match.groupdict(), *tag_msg)


def _time_brief(text: str) -> Line | None:
    match = TIME_BRIEF.fullmatch(text)
    return None if match is None else _line(match.groupdict(), match["tag"].rstrip(), match["msg"] or "")


def _process(text: str) -> Line | None:
    match = PROCESS.fullmatch(text)
    if match is None:
        return None
    rest = match["rest"]
    at = rest.rfind("  (")
    if at < 0 or not rest.endswith(")"):
        return None
    return _line(match.groupdict(), rest[at + 3 : -1], rest[:at])


def _thread(text: str) -> Line | None:
    match = THREAD.fullmatch(text)
    return None if match is None else _line(match.groupdict(), None, match["msg"])


def _studio(text: str) -> Line | None:
    match = STUDIO.fullmatch(text)
    if match is None:
        return None
    columns = STUDIO_COLUMNS.fullmatch(match["rest"])
    if columns is None:
        return None
    # a message's later lines are indented to the level's column (MessageFormatter.kt)
    indent = match.start("rest") + columns.start("level") - 1
    line = _line(match.groupdict(), columns["tag"], columns["msg"], max(0, indent))
    # TagFormat prints a tag the line before had as padEnd(23 + 1) spaces: the column
    # after the time or the pid-tid is then blank (else at most "%-5d "'s padding)
    before = match.end("tid") if match["tid"] else match.end("pid") if match["pid"] else match.end("frac")
    if match.start("rest") - before > STUDIO_TAG_WIDTH - 4:
        line.same_tag = True
    return line


def uncolored(text: str) -> str:
    """The line without -v color's escapes (logprint.cpp: colorFromPri's prefix, the
    reset after the line)."""
    start = COLOR_START.match(text)
    # -v long colours its header's line and resets after the message's last line
    return text[start.end() if start else 0 :].removesuffix(COLOR_END)


def split_tag(rest: str) -> tuple[str, str] | None:
    """threadtime's "TAG   : MESSAGE" (logprint.cpp pads the tag to 8): the tag without
    its padding and the message, or None without the colon."""
    end = TAG_END.search(rest)
    if end is None:
        return None
    return rest[: end.start()].rstrip(), rest[end.end() + 1 :]


def timestamp_ns(parts: dict[str, str | None]) -> int | None:
    """Nanoseconds on logcat's clock (a year-less date is taken in a leap year, 2000)."""
    frac = parts.get("frac")
    if frac is None:
        return None
    sub_ns = int(frac.ljust(9, "0"))
    if parts.get("epoch"):
        return int(parts["epoch"] or 0) * 1_000_000_000 + sub_ns
    month, day = (int(x) for x in (parts.get("md") or "01-01").split("-"))
    hours, minutes, seconds = (int(x) for x in (parts.get("hms") or "0:0:0").split(":"))
    days = date(int(parts.get("year") or 2000), month, day).toordinal()
    return ((days * 24 + hours) * 60 + minutes) * 60_000_000_000 + seconds * 1_000_000_000 + sub_ns


def label_of(msg: str) -> str | None:
    """The label of a ``LABEL: "SQL"`` message, or None."""
    at = msg.find(MESSAGE_START)
    return msg[:at] if at > 0 else None


def starts_message(msg: str, labels: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether a message (or a line with no header) is the start of a statement message:
    a label that is a path, ``:memory:`` or one already seen, or the old format's."""
    if msg.startswith((OLD_STATEMENT, OLD_TIME)):
        return True
    label = label_of(msg)
    if label is None:
        return False
    return label == ":memory:" or label in labels or (label.startswith("/") and not label.startswith("/*"))


def is_logcat(head: list[str]) -> bool:
    """Whether the first lines of a file are logcat's."""
    lines = [uncolored(line) for line in head if line.strip()][:50]
    return any(BANNER.match(line) or parse_line(line) or starts_message(line.strip()) for line in lines)


def is_timed(head: list[str]) -> bool:
    """Whether the log's lines carry timestamps (its first line with a header does)."""
    for text in head:
        line = parse_line(uncolored(text.rstrip("\r\n")))
        if line is not None:
            return line.t_ns is not None
    return False


@dataclass
class Held:
    """A message still arriving: its first line's number and header, its lines so far."""

    number: int
    line: Line
    lines: list[str]
    ours: bool
    size: int = 0
    cut: bool = False  # longer than MESSAGE_LIMIT: the rest was dropped
    #: the lines it took, blank ones left out (counted when it is another tag's)
    count: int = 1

    def continues(self, line: Line) -> bool:
        """Whether a line with a header has this message's header (logcat repeats it)."""
        first = self.line
        return (line.t_ns, line.pid, line.tid, line.tag) == (first.t_ns, first.pid, first.tid, first.tag)

    def add(self, text: str) -> None:
        self.count += bool(text.strip())
        self.size += len(text)
        if self.size > MESSAGE_LIMIT:
            self.cut = True
        else:
            self.lines.append(text)


@dataclass
class Tally:
    """What a pass counted, for its report once it is done (:class:`sqlwa.record.Converted`):
    kept apart from the state that reads the messages, which nothing reads afterwards."""

    truncated: int = 0  # statements the log did not hold whole (cut short), left out
    statements: int = 0
    #: lines of other tags, and lines that are neither a header's nor a message's
    other_tags: int = 0
    other_lines: int = 0


@dataclass
class Pairing:
    """How statements become events: each connection's number, the statements still
    waiting for their durations (by id, per connection), the order events leave in, and
    the first statement's time (the events' ``t`` counts from it). These change together,
    one statement or duration at a time, apart from how the lines become messages."""

    conns: dict[tuple[int | None, str], int] = field(default_factory=dict)
    running: dict[tuple[int | None, str], list[int]] = field(default_factory=dict)
    order: InOrder = field(default_factory=InOrder)
    first_t: int | None = None
    next_id: int = 0


@dataclass
class Reader:
    """The state of one pass over a logcat file."""

    path: Path
    held: Held | None = None
    labels: set[str] = field(default_factory=set)
    pairing: Pairing = field(default_factory=Pairing)
    tally: Tally = field(default_factory=Tally)
    #: whether the lines have timestamps, from the first ones (is_timed)
    timed: bool = True
    last_tag: str | None = None

    def feed(self, number: int, text: str) -> list[Event]:
        text = uncolored(text)
        line = parse_line(text)
        if line is None:
            return self._bare(number, text)
        if line.same_tag:
            line.tag = self.last_tag
        self.last_tag = line.tag
        held = self.held
        if held is not None and line.msg is not None and held.continues(line) and not self._starts(line.msg):
            held.add(line.msg)
            return []
        out = self._finish()
        ours = line.tag in OUR_TAGS or (line.tag is None and line.msg is not None and self._starts(line.msg))
        self._hold(Held(number, line, [] if line.msg is None else [line.msg], ours))
        return out

    def _bare(self, number: int, text: str) -> list[Event]:
        """A line without a header: a message's later line (-v long, -v raw, Studio), a
        message of -v raw, or a line that is none of logcat's."""
        stripped = text.strip()
        held = self.held
        if BANNER.match(stripped):
            return self._finish()
        if held is not None and (not held.lines or not self._starts(stripped)):
            spaces = len(text) - len(text.lstrip(" "))
            held.add(text[min(spaces, held.line.indent) :])
            return []
        out = self._finish()
        if self._starts(stripped):
            msg = text.lstrip()
            self._hold(Held(number, Line(None, None, None, None, msg, len(text) - len(msg)), [msg], True))
        elif stripped:
            self.tally.other_lines += 1
        return out

    def _hold(self, held: Held) -> None:
        """A message begins; its label, once seen, starts a message wherever it stands
        (the next message of the same thread in the same millisecond, a relative path)."""
        self.held = held
        label = label_of(held.lines[0]) if held.ours and held.lines else None
        if label is not None:
            self.labels.add(label)

    def _starts(self, msg: str) -> bool:
        return starts_message(msg, self.labels)

    def _finish(self) -> list[Event]:
        """The held message, now that no more of it can come."""
        held, self.held = self.held, None
        if held is None:
            return []
        lines = held.lines
        while lines and not lines[-1].strip():
            lines.pop()
        old_format = bool(lines) and lines[0].startswith((OLD_STATEMENT, OLD_TIME))
        tag = held.line.tag or (OLD_TAG if old_format else None)
        if not held.ours or (tag == OLD_TAG and not old_format):
            self.tally.other_tags += held.count  # the old tag "Database" logs other messages too
            return []
        if not lines:
            return []
        if self.timed and held.line.t_ns is None:
            raise SqlLogError(self.path, held.number, "a line without a timestamp in a log whose first lines have them")
        if held.cut:
            self.tally.truncated += 1
            return []
        if tag == OLD_TAG:
            return self._old(held, lines)
        return self._framework(held, lines, tag)

    def _framework(self, held: Held, lines: list[str], tag: str | None) -> list[Event]:
        """A ``LABEL: "SQL"`` (or ``... took N ms``) message; ``tag`` None: either, by its end."""
        label = label_of(lines[0])
        if label is None:
            raise SqlLogError(self.path, held.number, f"a {tag} line that is not Android's: {lines[0][:60]!r}")
        sql_from = len(label) + len(MESSAGE_START)
        timed_end = self._last(lines, sql_from, took=True) if tag in (TIME_TAG, None) else None
        if timed_end is not None:
            end, took = timed_end
            self._count_after(lines, end)
            return self._duration(held.line.pid, label, lines[end][took + len(TOOK) : -3])
        if tag == TIME_TAG:
            return []  # a time cut short: its statement stays, without its duration
        statement_end = self._last(lines, sql_from, took=False)
        if statement_end is None:
            self.tally.truncated += 1  # its end never came: cut at liblog's limit
            return []
        end = statement_end[0]
        self._count_after(lines, end)
        sql = "\n".join(lines[: end + 1])[sql_from:-1]
        return self._statement(held.line, (held.line.pid, label), label, sql)

    def _count_after(self, lines: list[str], end: int) -> None:
        """Lines taken in after the message's end: of no logcat form (a post's "[...]")."""
        self.tally.other_lines += sum(1 for line in lines[end + 1 :] if line.strip())

    @staticmethod
    def _last(lines: list[str], sql_from: int, took: bool) -> tuple[int, int] | None:
        """The last line that may end the message, and where its ``" took`` is: each line
        looked at alone (joining them to look again at each would cost the square)."""
        for at in range(len(lines) - 1, -1, -1):
            last = lines[at]
            floor = sql_from if at == 0 else 0  # the first line's quote is the opening one
            if not took:
                if last.endswith('"') and len(last) > floor:
                    return at, -1
                continue
            mark = last.rfind(TOOK)
            if (
                mark >= floor
                and last.endswith(" ms")
                and MILLISECONDS.fullmatch(last, mark + len(TOOK), len(last) - 3) is not None
            ):
                return at, mark
        return None

    def _old(self, held: Held, lines: list[str]) -> list[Event]:
        """Android before 4.1: ``sql_statement|DB|SQL`` and ``elapsedTime4Sql|DB|T ms|SQL``
        (DB followed by ``|NNN``, the pooled connection's number, on Android 3)."""
        text = "\n".join(lines)
        is_time = text.startswith(OLD_TIME)
        body = text[len(OLD_TIME if is_time else OLD_STATEMENT) :]
        db, bar, rest = body.partition("|")
        if not bar:
            self.tally.truncated += 1
            return []
        label = db
        if CONNECTION_NUMBER.match(rest):
            label, rest = f"{db}|{rest[:3]}", rest[4:]
        if is_time:
            ms, mark, _ = rest.partition(" ms|")
            if not mark or MILLISECONDS.fullmatch(ms) is None:
                self.tally.truncated += 1
                return []
            return self._duration(held.line.pid, label, ms)
        return self._statement(held.line, (held.line.pid, label), db, rest)

    def _duration(self, pid: int | None, label: str, ms: str) -> list[Event]:
        pairing = self.pairing
        queue = pairing.running.get((pid, label))
        if not queue:
            return []  # a statement whose start was not logged (SQLiteStatements off)
        return pairing.order.complete(queue.pop(0), round(float(ms) * 1_000_000))

    def _statement(self, line: Line, conn_key: tuple[int | None, str], db: str, sql: str) -> list[Event]:
        pairing = self.pairing
        ready: list[Event] = []
        t = None
        if self.timed and line.t_ns is not None:
            pairing.first_t = line.t_ns if pairing.first_t is None else pairing.first_t
            t = max(0, line.t_ns - pairing.first_t)
        if conn_key not in pairing.conns:
            pairing.conns[conn_key] = len(pairing.conns) + 1
            ready += pairing.order.put(_timed({"ev": "open", "conn": pairing.conns[conn_key], "db": db}, t))
        self.tally.statements += 1
        trigger = sql.startswith("--")
        event = _timed({"ev": "sql", "conn": pairing.conns[conn_key], "sql": sql, "trigger": trigger}, t)
        if trigger:  # a trigger's step: SQLite's profile hook never reports one
            return ready + pairing.order.put(event)
        pairing.next_id += 1
        pairing.running.setdefault(conn_key, []).append(pairing.next_id)
        if len(pairing.running[conn_key]) > 64:
            pairing.running[conn_key].pop(0)  # a start whose time never came
        return ready + pairing.order.put(event, pairing.next_id)

    def finish(self) -> list[Event]:
        return self._finish() + self.pairing.order.drain()


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
