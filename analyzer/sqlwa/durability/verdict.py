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
from sqlwa.durability.states import Acked, CrashState

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
    """A state in the user's terms: of the commits SQLite had acknowledged (the schema's
    counted as one), how many the database held and how many it lost; ``held`` is None
    where the database could not be read (all of them count as lost then).
    ``0 <= lost <= acknowledged`` and ``held + lost == acknowledged`` always."""

    outcome: str
    acknowledged: int
    held: int | None
    lost: int
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
    with _system.tools.kernel_log_since() as new_messages:
        try:
            _system.mounts.mount_device(device, str(mountpoint), target.fstype, target.mount_opts)
        except OSError as exc:
            said = [m for m in new_messages() if os.path.basename(device) in m or m.lower().startswith(target.fstype)]
            return Inspection(UNMOUNTABLE, None, "; ".join(said[-2:]) or str(exc))
    try:
        return inspect_database(mountpoint / target.db_relpath, ref)
    finally:
        _system.mounts.unmount_device(str(mountpoint))


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
    acked = acknowledged(state.acked)
    if inspection.problem is not None or inspection.present is None:
        return Verdict(inspection.problem or CORRUPT, acked, None, acked, inspection.detail)
    # the database may hold commits not yet acknowledged (their writes got there first):
    # those are no loss, and none of them is "held" of the acknowledged ones
    held = min(acked, commits_in(inspection.present))
    return Verdict(LOST if held < acked else DURABLE, acked, held, acked - held, inspection.detail)


def acknowledged(acked: Acked) -> int:
    """The commits SQLite had acknowledged, the schema's counted as one."""
    return acked.commits + (1 if acked.setup else 0)


def commits_in(present: int) -> int:
    """How many commits a database whose rows are those of commit ``present`` holds, the
    schema's included: reference.BEFORE_SETUP none, SETUP one, transaction i i + 2. The
    reference's markers are positions, not counts: never let one into a count."""
    return max(0, present - reference.BEFORE_SETUP)
