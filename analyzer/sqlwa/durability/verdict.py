"""One crash state's verdict: mount its image (the filesystem's own recovery runs), open
the database as the app would next time (SQLite's recovery runs: a hot journal is rolled
back, a WAL replayed), ``PRAGMA integrity_check``, and which commit its content is.

SQLite here is Python's ``sqlite3`` (the system's library), not the engine's bundled
one: the reader that judges the state is not the writer that made it.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sqlwa import _system
from sqlwa.durability import reference
from sqlwa.durability.states import CrashState

# What a state can come to, worst first (summary.json's durability.outcomes)
UNMOUNTABLE = "unmountable"  # the filesystem did not mount
HUNG = "hung"  # mounting it or reading the database did not finish (the kernel's recovery hung)
CORRUPT = "corrupt"  # SQLite refused the database or integrity_check failed
NOT_A_COMMIT = "not_a_commit"  # a sound database whose rows are no commit's (a torn transaction)
LOST = "lost"  # sound, but without commits SQLite had acknowledged
DURABLE = "durable"  # every acknowledged commit is there
OUTCOMES = (HUNG, UNMOUNTABLE, CORRUPT, NOT_A_COMMIT, LOST, DURABLE)


@dataclass(frozen=True)
class Verdict:
    outcome: str
    present: int | None  # the last commit the database holds (reference.SETUP, BEFORE_SETUP)
    lost: int  # acknowledged commits missing (the schema counts as one)
    detail: str = ""


@dataclass(frozen=True)
class Target:
    """Where a state's database is: the filesystem, how to mount it, the path inside."""

    fstype: str
    mount_opts: tuple[str, ...]
    db_relpath: str  # relative to the filesystem's root


@dataclass(frozen=True)
class Inspection:
    """What a state's image holds, whatever had been acknowledged: the filesystem did
    not mount, the database is corrupt or no commit's, or it holds commits up to
    ``present``."""

    problem: str | None  # HUNG, UNMOUNTABLE, CORRUPT, NOT_A_COMMIT or None
    present: int | None
    detail: str = ""


def inspect(device: str, mountpoint: Path, target: Target, ref: reference.Reference) -> Inspection:
    """Mount ``device`` (a loop device over the state's image) and look at the database."""
    with _system.kernel_log_since() as new_messages:
        try:
            _system.mount_device(device, str(mountpoint), target.fstype, target.mount_opts)
        except OSError as exc:
            said = [m for m in new_messages() if os.path.basename(device) in m or m.lower().startswith(target.fstype)]
            return Inspection(UNMOUNTABLE, None, "; ".join(said[-2:]) or str(exc))
    try:
        return inspect_database(mountpoint / target.db_relpath, ref)
    finally:
        _system.unmount_device(str(mountpoint))


def inspect_database(db: Path, ref: reference.Reference) -> Inspection:
    """The database at ``db`` as SQLite finds it: corrupt, or the commit whose rows it holds."""
    try:
        return _read_database(db, ref)
    except OSError as exc:  # the filesystem refuses the file itself (EBADMSG: a bad checksum; EIO)
        return Inspection(CORRUPT, None, f"the filesystem could not read the database: {exc.strerror or exc}")


def _read_database(db: Path, ref: reference.Reference) -> Inspection:
    if not db.exists():
        return Inspection(None, reference.BEFORE_SETUP, "no database file")
    recovery = _recovery_ahead(db)
    try:
        conn = sqlite3.connect(str(db), isolation_level=None)
        try:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
            if problems != ["ok"]:
                return Inspection(CORRUPT, None, "; ".join(problems[:3]))
            digest = reference.content_digest(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return Inspection(CORRUPT, None, f"{type(exc).__name__}: {exc}")
    present = ref.commit_of(digest)
    if present is None:
        return Inspection(NOT_A_COMMIT, None, "its rows are those of no commit")
    return Inspection(None, present, recovery)


def _recovery_ahead(db: Path) -> str:
    """What SQLite will recover from when it opens ``db``: a journal left beside it (a
    hot journal is rolled back: the transaction it covers is undone) or a WAL."""
    for suffix, what in (
        ("-journal", "a rollback journal was left (SQLite rolls it back)"),
        ("-wal", "a WAL was left"),
    ):
        side = db.with_name(db.name + suffix)
        if side.exists() and side.stat().st_size > 0:
            return what
    return ""


def judge(state: CrashState, inspection: Inspection) -> Verdict:
    """The state's verdict: its image's problem, or how many acknowledged commits it lost."""
    acked = state.acked.commits + (1 if state.acked.setup else 0)  # the schema's commit counts as one
    if inspection.problem is not None or inspection.present is None:
        return Verdict(inspection.problem or CORRUPT, None, acked, inspection.detail)
    # a database at commit `present` holds present + 2 commits, the schema's included
    # (reference.SETUP = -1 holds one, BEFORE_SETUP = -2 none)
    lost = max(0, acked - (inspection.present + 2))
    return Verdict(LOST if lost else DURABLE, inspection.present, lost, inspection.detail)
