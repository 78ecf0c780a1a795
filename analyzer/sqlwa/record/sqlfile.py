"""A plain .sql file read as a SQL log: statements ending in ``;`` (the ``sqlite3`` shell's
``.trace`` output, a ``set_trace_callback`` that prints each statement with a ``;``, a
dump). No timing, one connection. Statement boundaries are SQLite's own
(``sqlite3_complete``'s rules, :class:`sqlwa.record.sqltokens.Splitter`: a ``;`` inside a
string, a comment or a trigger body ends nothing).

The shell's ``.trace`` writes the start of a trigger program as a comment line,
``-- TRIGGER name;`` (and ``-- closing database connection`` when it closes): such a line
becomes a trigger event (recorded, never replayed). Other comments (``--`` to the end of
the line, ``/* … */``, as SQLite's tokenizer reads them) before a statement's first token
or after its last are left out of its text, and a piece holding nothing else is no
statement; those between its tokens stay, as SQLite keeps them (a CREATE's stored text)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlwa.record.log import Event, SqlLogError, open_regular
from sqlwa.record.sqltokens import Splitter, first_word, significant_span

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
                yield from _statement(path, start, text[:-1])
                start += text.count("\n")
    # the last statement may lack its ';' (a file cut there is caught as no SQL), or be an
    # unfinished trigger whose last ';' ends no statement
    yield from _statement(path, start, splitter.rest(), last=True)


def _statement(path: Path, start: int, piece: str, last: bool = False) -> Iterator[tuple[int, str, bool]]:
    """The statement in ``piece`` (the text between two ends, ``start`` its first line),
    without the white space and comments around it; none when that is all it holds
    (SQLite's prepare makes no statement of it either)."""
    lead, text = significant_span(piece)
    text = text.removesuffix(";") if last else text
    if text:
        yield _checked(path, start + piece.count("\n", 0, lead), text)


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
