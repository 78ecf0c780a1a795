"""What the database holds after each commit, to tell which commits a crash state kept.

The engine is deterministic for a seed (same statements, same values), so an untraced
run of the same scenario and settings, copying the database (``VACUUM INTO``) after the
schema and after every commit (:func:`sqlwa.measure.lab_capture.reference_snapshots`),
gives the content as of each commit. A state's database
is then compared by content (every table's schema and rows), not by bytes: SQLite may
lay the same rows out differently, and what matters to the app is the rows.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

BEFORE_SETUP = -2  # no schema yet: the database as created, empty or absent
SETUP = -1  # the schema (and the scenario's setup rows), no transaction yet


@dataclass
class Reference:
    """Content digest -> the last commit it reflects (:data:`SETUP`, or a transaction's
    index; :data:`BEFORE_SETUP` for an empty database)."""

    by_digest: dict[str, int]
    transactions: int
    warmup: int = 0  # the first this many transactions were warm-up (run, not measured)

    def commit_of(self, digest: str) -> int | None:
        return self.by_digest.get(digest)


def from_snapshots(snapshots: Path, transactions: int, warmup: int) -> Reference:
    """The reference from a run's snapshots (``Instruments.snapshot_dir``: ``setup.db``
    and ``txn-<index>.db`` for each of ``transactions``, the first ``warmup`` of them
    warm-up)."""
    by_digest = {EMPTY_DIGEST: BEFORE_SETUP}
    for index, name in [(SETUP, "setup"), *((i, f"txn-{i}") for i in range(transactions))]:
        # a transaction that changed nothing keeps the earlier commit's digest: the first wins
        by_digest.setdefault(digest_of_file(snapshots / f"{name}.db"), index)
    return Reference(by_digest, transactions, warmup)


def digest_of_file(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return content_digest(conn)
    finally:
        conn.close()


def content_digest(conn: sqlite3.Connection) -> str:
    """A hash of every table's schema and rows (in a canonical order), sqlite_* excepted."""
    digest = hashlib.sha256()
    tables = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()
    for name, sql in tables:
        digest.update(repr((name, sql)).encode())
        quoted = '"' + name.replace('"', '""') + '"'
        rows = conn.execute(f"SELECT * FROM {quoted}").fetchall()
        for row in sorted(rows, key=repr):
            digest.update(repr(row).encode())
    return digest.hexdigest()


EMPTY_DIGEST = hashlib.sha256().hexdigest()
