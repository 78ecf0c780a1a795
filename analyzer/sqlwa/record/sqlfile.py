"""A plain .sql file read as a SQL log: statements ending in ``;`` (the ``sqlite3`` shell's
``.trace`` output, a ``set_trace_callback`` that prints each statement with a ``;``, a
dump). No timing, one connection. Statement boundaries are SQLite's own
(``sqlite3_complete``'s rules, :class:`sqlwa.record.sqltokens.Splitter`: a ``;`` inside a
string, a comment or a trigger body ends nothing).

The shell's ``.trace`` writes the start of a trigger program as a comment line,
``-- TRIGGER name;`` (and ``-- closing database connection`` when it closes): such a line
becomes a trigger event (recorded, never replayed); other comments are left out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlwa.record.log import Event, SqlLogError, open_regular
from sqlwa.record.sqltokens import Splitter, first_word

#: The words an SQL statement can begin with (lang.html), for telling SQL from other text
STATEMENT_WORDS = frozenset(
    "ALTER ANALYZE ATTACH BEGIN COMMIT CREATE DELETE DETACH DROP END EXPLAIN INSERT PRAGMA REINDEX RELEASE "
    "REPLACE ROLLBACK SAVEPOINT SELECT UPDATE UPSERT VACUUM VALUES WITH".split()
)
CLOSING = "-- closing database connection"


def looks_like_sql(statement: str) -> bool:
    return first_word(statement) in STATEMENT_WORDS


def statements(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line where it starts, text without its final ``;``, is a trace's trigger line).
    One pass: each line is looked at once (:class:`Splitter`), whatever the statements'
    length, or a quote never closed."""
    splitter = Splitter()
    start = 1
    with open_regular(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as f:
        for number, line in enumerate(f, start=1):
            if "\0" in line:
                raise SqlLogError(path, number, "binary data: not a SQL log, logcat or .sql file")
            if splitter.blank:
                splitter.reset()
                start = number
                comment = line.strip()
                if comment.startswith("--"):
                    if comment.endswith(";") and comment != CLOSING + ";":
                        yield number, comment[:-1], True
                    continue
            for text in splitter.feed(line):
                piece = text[:-1]
                stripped = piece.strip()
                if stripped:
                    lead = len(piece) - len(piece.lstrip())
                    yield _checked(path, start + piece.count("\n", 0, lead), stripped)
                start += text.count("\n")
    rest = splitter.rest()
    if rest.strip():
        # the last statement may lack its ';' (a file cut there is caught as no SQL)
        yield _checked(path, start, rest.strip().removesuffix(";"))


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
