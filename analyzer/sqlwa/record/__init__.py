"""Recording an app's own SQL workload (issue #34): ``sqlwa record -- COMMAND`` traces a
Linux program's statements through a preloaded library (:mod:`sqlwa.record.program`), and
Android's statement log (:mod:`sqlwa.record.logcat`) and plain .sql files
(:mod:`sqlwa.record.sqlfile`) are read into the same SQL log, format 1
(:mod:`sqlwa.record.log`, docs/sql-log-format.md), which the replay reads.

:func:`to_sql_log` is the one entry the replay side needs: any of these files in, a
format-1 log out."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sqlwa.record import logcat, sqlfile
from sqlwa.record.log import Event, Header, LogWriter, SqlLogError, open_regular, parse_header, read_log, validate
from sqlwa.record.redact import Redactor

__all__ = ["Converted", "SqlLogError", "convert", "detect", "read_log", "to_sql_log", "validate"]

HEAD_BYTES = 64 * 1024


def detect(path: Path) -> str:
    """What a file is, from its content: "sql-log" (format 1), "android-logcat" or
    "sql-file"; a :class:`SqlLogError` (file and line) when it is none of them."""
    with open_regular(path) as f:
        head = f.read(HEAD_BYTES)
    if not head.strip():
        raise SqlLogError(path, 1, "empty: no SQL log, logcat or .sql file")
    first = head.lstrip().split(b"\n", 1)[0]
    if first.startswith(b"{") and b"sqlwa_sql_log" in first:
        parse_header(path, first.decode("utf-8", "replace"))  # its version and keys, or an error
        return "sql-log"
    if b"\0" in head:
        raise SqlLogError(path, 1, "binary data: not a SQL log, logcat or .sql file")
    lines = head.decode("utf-8", "replace").splitlines()
    if logcat.is_logcat(lines[:-1] if len(head) == HEAD_BYTES else lines):
        return "android-logcat"
    return "sql-file"


@dataclass
class Converted:
    """What a conversion wrote."""

    source: str
    counts: dict[str, int]
    databases: set[str]
    left_out: int  # statements the source did not hold whole (logcat's cut messages)
    other_tags: int = 0  # logcat's lines of other tags, skipped
    other_lines: int = 0  # lines of no logcat form, nor part of a message: skipped


def convert(path: Path, out: IO[bytes], redact: bool = False, keep_argv: bool = False) -> Converted:
    """Write ``path`` (any format :func:`detect` knows) to ``out`` as a format-1 log; a log
    already in format 1 is validated and copied (redacted if asked: again if it says it
    was, as an older sqlwa redacted less; its header's command line kept only with
    ``keep_argv``, keys format 1 does not know dropped)."""
    kind = detect(path)
    redactor = Redactor() if redact else None
    left_out = other_tags = other_lines = 0
    if kind == "sql-log":
        header, events = read_log(path)
        if redact:
            header.redacted, header.extra = True, {}
            header.program = header.program if keep_argv else None
        source = header.source
    elif kind == "android-logcat":
        with open_regular(path, "r", encoding="utf-8", errors="replace") as f:
            head = [f.readline() for _ in range(200)]
        reader = logcat.Reader(path, timed=logcat.is_timed(head))
        header = Header("android-logcat", timed=reader.timed, redacted=redact)
        events = logcat.events(path, reader)
        source = kind
    else:
        header = Header("sql-file", timed=False, redacted=redact)
        events = sqlfile.events(path)
        source = kind
    writer = LogWriter(out, header)
    for event in _redacted(events, redactor):
        writer.write(event)
    if kind == "android-logcat":
        tally = reader.tally
        left_out, other_tags, other_lines = tally.truncated, tally.other_tags, tally.other_lines
        if tally.statements == 0:
            raise SqlLogError(path, 1, "a logcat without SQLiteStatements lines (see README: Your app's own workload)")
    if writer.counts["sql"] + writer.counts["trigger"] == 0:
        raise SqlLogError(path, 1, "no SQL statement in it")
    return Converted(source, writer.counts, writer.databases, left_out, other_tags, other_lines)


#: the keys of an event sqlwa writes (docs/sql-log-format.md); a redacted log has no other
EVENT_KEYS = frozenset({"ev", "conn", "t", "db", "sql", "dur", "trigger", "unexpanded"})


def _redacted(events: Iterator[Event], redactor: Redactor | None) -> Iterator[Event]:
    for event in events:
        if redactor is not None:
            event = {key: value for key, value in event.items() if key in EVENT_KEYS}
            if event["ev"] == "sql":
                event["sql"] = redactor.redact(event["sql"], trigger=event.get("trigger") is True)
        yield event


def to_sql_log(path: Path, out_dir: Path | None = None) -> Path:
    """A format-1 SQL log of ``path``: ``path`` itself when it already is one (its header
    checked here; its lines as :func:`read_log` streams them), else a new file converted
    from it, in ``out_dir`` (default: the system's temporary directory), which the caller
    owns and removes. Errors: :class:`SqlLogError`, "FILE:LINE: what"."""
    path = Path(path)
    if detect(path) == "sql-log":
        return path
    with tempfile.NamedTemporaryFile(
        "wb", dir=out_dir, prefix=f"{path.name}.", suffix=".sql-log.jsonl", delete=False
    ) as f:
        target = Path(f.name)
        try:
            convert(path, f)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
    return target
