"""``sqlwa --help`` as click last rendered it, kept in the user's cache directory.

Importing click alone takes about four times as long as the interpreter takes to start
(bench/startup.py), so the top-level help, the command a new user types first, is
printed from a copy of click's own rendering when nothing that shapes it has changed:
the group's and the command table's source files, the width click would wrap to (from
COLUMNS or the terminal) and the output's encoding. Anything else renders it with click
again and refreshes the copy. A cache that cannot be read or written costs only time."""

from __future__ import annotations

import os
import sys

HELP_ARGS = (["--help"], ["-h"])
CACHE_FILE = "help.txt"


def cache_path() -> str:
    """``$XDG_CACHE_HOME/sqlwa/help.txt`` or ``~/.cache/sqlwa/help.txt``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sqlwa", CACHE_FILE)


def cache_key() -> str:
    """Everything the rendered help depends on, in one line."""
    here = os.path.dirname(__file__)
    sources = [os.stat(os.path.join(here, name)) for name in ("__init__.py", "_app.py", "_lazy.py")]
    try:
        columns: int | None = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        columns = None
    parts = [f"{st.st_mtime_ns}:{st.st_size}" for st in sources]
    parts += [repr(os.environ.get("COLUMNS")), repr(columns), repr(getattr(sys.stdout, "encoding", None))]
    return " ".join(parts)


def cached_help() -> str | None:
    """The cached help if its key is this invocation's, else None."""
    try:
        with open(cache_path(), encoding="utf-8") as f:
            key, _, text = f.read().partition("\n")
    except (OSError, ValueError):
        return None
    return text if key == cache_key() else None


def save_help(text: str) -> None:
    """Keep ``text`` for the next ``sqlwa --help`` (atomically: a reader sees the old copy or this one)."""
    path = cache_path()
    partial = f"{path}.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(partial, "w", encoding="utf-8") as f:
            f.write(f"{cache_key()}\n{text}")
        os.replace(partial, path)
    except OSError:
        try:
            os.unlink(partial)
        except OSError:
            pass
