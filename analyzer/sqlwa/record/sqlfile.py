"""A plain .sql file read as a SQL log: statements ending in ``;`` (the ``sqlite3`` shell's
``.trace`` output, a ``set_trace_callback`` that prints each statement with a ``;``, a
dump). No timing, one connection. Statement boundaries are SQLite's own
(``sqlite3.complete_statement``: a ``;`` inside a string, a comment or a trigger body ends
nothing).

The shell's ``.trace`` writes the start of a trigger program as a comment line,
``-- TRIGGER name;`` (and ``-- closing database connection`` when it closes): such a line
becomes a trigger event (recorded, never replayed); other comments are left out."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from sqlwa.record.log import Event, SqlLogError

#: The words an SQL statement can begin with (lang.html), for telling SQL from other text
STATEMENT_WORDS = frozenset(
    "ALTER ANALYZE ATTACH BEGIN COMMIT CREATE DELETE DETACH DROP END EXPLAIN INSERT PRAGMA REINDEX RELEASE "
    "REPLACE ROLLBACK SAVEPOINT SELECT UPDATE UPSERT VACUUM VALUES WITH".split()
)
FIRST_WORD = re.compile(r"\s*(?:(?:--[^\n]*\n|/\*.*?\*/)\s*)*([A-Za-z]+)", re.DOTALL)
CLOSING = "-- closing database connection"


def looks_like_sql(statement: str) -> bool:
    first = FIRST_WORD.match(statement)
    return first is not None and first.group(1).upper() in STATEMENT_WORDS


def statements(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line where it starts, text without its final ``;``, is a trace's trigger line)."""
    buffer, start = "", 0
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        for number, line in enumerate(f, start=1):
            if "\0" in line:
                raise SqlLogError(path, number, "binary data: not a SQL log, logcat or .sql file")
            if not buffer.strip():
                buffer, start = "", number
                comment = line.strip()
                if comment.startswith("--"):
                    if comment.endswith(";") and comment != CLOSING + ";":
                        yield number, comment[:-1], True
                    continue
            buffer += line
            done, buffer, start = split_complete(path, start, buffer)
            yield from done
    if buffer.strip():
        # the last statement may lack its ';' (a file cut there is caught as no SQL)
        yield _checked(path, start, buffer.strip().removesuffix(";"))


def split_complete(path: Path, start: int, buffer: str) -> tuple[list[tuple[int, str, bool]], str, int]:
    """The complete statements at the head of ``buffer`` (which starts on line ``start``),
    the rest of it, and the line the rest starts on. Only a ``;`` can end a statement."""
    done = []
    cut = 0
    at = buffer.find(";")
    while at >= 0:
        if sqlite3.complete_statement(buffer[cut : at + 1]):
            piece = buffer[cut:at]
            text = piece.strip()
            if text:
                lead = len(piece) - len(piece.lstrip())
                done.append(_checked(path, start + buffer.count("\n", 0, cut + lead), text))
            cut = at + 1
        at = buffer.find(";", at + 1)
    return done, buffer[cut:], start + buffer.count("\n", 0, cut)


def _checked(path: Path, line: int, text: str) -> tuple[int, str, bool]:
    if not looks_like_sql(text):
        raise SqlLogError(path, line, f"not an SQL statement: {text[:60]!r}")
    return line, text, False


def events(path: Path) -> Iterator[Event]:
    """The file's statements as format-1 events on one connection (no ``t``: untimed).
    The database is named after the file (``trace.sql`` → ``trace.db``): a .sql file
    names none."""
    yield {"ev": "open", "conn": 1, "db": path.with_suffix(".db").name}
    for _, text, trigger in statements(path):
        yield {"ev": "sql", "conn": 1, "sql": text, "trigger": trigger}
    yield {"ev": "close", "conn": 1}
