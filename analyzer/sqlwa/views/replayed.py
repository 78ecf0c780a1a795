"""What a replayed SQL log's summary (summary.json's ``config.replay``) says in words, for
the terminal and the report alike: which SQLite recorded the log and which replayed it,
the statements that failed by kind, and those calling a function the replay's SQLite
lacks (the program's own, or one this build left out).

Summaries written before a key existed lack it: each reads as "not known"."""

from __future__ import annotations

from typing import Any

#: how a summary names a recording SQLite it does not know (a .sql file, a logcat)
UNKNOWN = "unknown"


def recorded_sqlite(replay: dict[str, Any]) -> str:
    return replay.get("recorded_sqlite_version") or UNKNOWN


def sqlite_versions(replay: dict[str, Any], replayed: str) -> str:
    """'SQLite 3.54.1 replayed a log recorded with 3.40.1' (or with an unknown one)."""
    return f"SQLite {replayed} replayed a log recorded with SQLite {recorded_sqlite(replay)}"


def failed_text(replay: dict[str, Any]) -> str | None:
    """'3 of 120 statements failed: app-defined function 2, no such table 1'."""
    failed: dict[str, int] = replay.get("failed") or {}
    if not failed:
        return None
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(failed.items(), key=lambda item: (-item[1], item[0])))
    return f"{sum(failed.values()):,} of {replay['statements']:,} statements failed on replay: {kinds}"


def missing_functions_text(replay: dict[str, Any]) -> str | None:
    """The functions the replay's SQLite lacks that statements of the log called (the
    program's own, or SQLite's left out of this build), and what their not running means
    for the transactions they were in."""
    missing = replay.get("missing_functions") or {}
    functions = missing.get("functions") or []
    if not functions:
        return None
    parts = []
    own = [f for f in functions if not f.get("sqlite_option")]
    if own:
        parts.append(
            f"app-defined functions {called(own)}: the program defines them (sqlite3_create_function or an "
            "extension it loaded), so the replay cannot run them"
        )
    for option in sorted({f["sqlite_option"] for f in functions if f.get("sqlite_option")}):
        built = [f for f in functions if f.get("sqlite_option") == option]
        parts.append(f"SQLite's own {called(built)}, which this SQLite was built without ({option})")
    total = sum(f["statements"] for f in functions)
    inside, commits = missing.get("in_transaction", 0), missing.get("commits_without_them", 0)
    fate = [f"{total:,} statement(s) calling them never ran"]
    if inside:
        fate.append(
            f"{inside:,} inside a transaction, replayed without them ({commits:,} commit(s) lack their changes)"
        )
    if total > inside:
        fate.append(f"{total - inside:,} in autocommit, their own transaction missing if they wrote")
    return "; ".join(parts) + ". " + "; ".join(fate) + "."


def called(functions: list[dict[str, Any]]) -> str:
    """'now() ×2, fn() ×1'."""
    return ", ".join(f"{f['name']}() ×{f['statements']:,}" for f in functions)
