"""Independent truth for SQL logs: a replay with Python's sqlite3 module (not sqlwa's
engine) and whole-database comparisons, for the tests of `sqlwa record`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path


def log_events(path: Path) -> list[dict]:
    """The events of a format-1 log, read as plain JSON Lines (header dropped)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["sqlwa_sql_log"] == 1
    return [json.loads(line) for line in lines[1:]]


def replay(path: Path, into: Path) -> dict[str, Path]:
    """Run the log's statements (trigger steps left out: the triggers run again) on fresh
    databases in ``into``, one per database file of the log, each connection its own, in
    the log's order; returns the log's database names -> the replayed files."""
    into.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    conns: dict[int, sqlite3.Connection] = {}
    for event in log_events(path):
        if event["ev"] == "open" and event["db"] not in ("", ":memory:"):
            target = files.setdefault(event["db"], into / f"{len(files)}-{Path(event['db']).name}")
            conns[event["conn"]] = sqlite3.connect(target, isolation_level=None)
        elif event["ev"] == "sql" and event["conn"] in conns and not event.get("trigger"):
            conns[event["conn"]].execute(event["sql"]).fetchall()
        elif event["ev"] == "close" and event["conn"] in conns:
            conns.pop(event["conn"]).close()
    for conn in conns.values():
        conn.close()
    return files


def dump(db: Path) -> list[str]:
    """The database's content as SQL (sqlite3's iterdump), for equality."""
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def payload_by_table(db: Path) -> dict[str, tuple[int, int]]:
    """Per table and index: (bytes of record payload, pages), from SQLite's dbstat."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT name, sum(payload), count(*) FROM dbstat GROUP BY name").fetchall()
    finally:
        conn.close()
    return {name: (payload, pages) for name, payload, pages in rows}
