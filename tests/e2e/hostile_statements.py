"""Hostile SQL statements for a replayed log (#43, item 1), drawn by hypothesis: every way
SQLite lets a statement name another file or change the run's settings. Shared by
test_hostile_sqllog (each spelling's own checks) and test_hostile (the bounded fuzz).

- ATTACH of a literal, an identifier, a URI (``file:…?mode=``, ``?vfs=``, ``//localhost``),
  a computed name (``||``, a sub-select, printf, char()), then a write to it (a DELETE, an
  INSERT … SELECT, a CREATE, one wrapped in a CTE);
- VACUUM INTO any of those names;
- ``load_extension`` of a library outside the run;
- PRAGMA journal_mode, synchronous, temp_store_directory and data_store_directory by
  every name spelling (bare, upper case, double-quoted, bracketed, backticked,
  single-quoted), with a schema or not, every value form (``=``, ``(…)``, quoted);
- comments and line breaks between the tokens, after a harmless PRAGMA in one event (the
  text checks of old read only the first keyword) and before one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from hypothesis import strategies as st


class Targets(Protocol):
    """The files and directories a hostile statement aims at."""

    @property
    def beside(self) -> Path: ...  # a victim database next to the run's directory

    @property
    def outside(self) -> Path: ...  # a victim database in a directory of its own

    @property
    def runs(self) -> Path: ...  # the directory the run's own directory is made in

    @property
    def temp_target(self) -> Path: ...  # a directory a PRAGMA points temporary files at


GAP = st.sampled_from([" ", "  ", "\n", "\t", " /* x */ ", " -- x\n", "/**/"])


def quoted(name: str) -> st.SearchStrategy[str]:
    """Every way SQLite's grammar lets an identifier be written (and its case folded)."""
    upper = name.upper()
    return st.sampled_from(
        [name, upper, f'"{name}"', f'"{upper}"', f"[{name}]", f"[{upper}]", f"`{name}`", f"'{name}'", f"'{upper}'"]
    )


@st.composite
def spaced(draw: st.DrawFn, *parts: str | st.SearchStrategy[str]) -> str:
    """The tokens, each drawn when a strategy, with drawn whitespace or comments between."""
    tokens = [draw(p) if isinstance(p, st.SearchStrategy) else p for p in parts]
    text = tokens[0]
    for token in tokens[1:]:
        text += draw(GAP) + token
    return text


def escaped(targets: Targets) -> list[Path]:
    """Files no run may make: one beside the outside victim, one beside the run."""
    return [targets.outside.parent / "ESCAPED.db", targets.runs / "ESCAPED2.db"]


def file_names(targets: Targets) -> st.SearchStrategy[str]:
    """A file another than the run's, as an ATTACH or VACUUM INTO may name it."""
    plain = st.sampled_from([str(p) for p in (targets.beside, targets.outside, *escaped(targets))])
    return st.one_of(
        plain.map(lambda p: f"'{p}'"),
        plain.map(lambda p: f'"{p}"'),  # an identifier, which ATTACH takes as a name
        plain.map(lambda p: f"'file:{p}?mode=rwc'"),
        plain.map(lambda p: f"'file:{p}?mode=ro'"),
        plain.map(lambda p: f"'file:{p}?vfs=unix-none'"),
        plain.map(lambda p: f"'file://localhost{p}'"),
        plain.map(lambda p: f"'{p[:5]}' || '{p[5:]}'"),
        plain.map(lambda p: f"(SELECT '{p}')"),
        plain.map(lambda p: f"printf('%s', '{p}')"),
        plain.map(lambda p: "char(" + ",".join(str(ord(c)) for c in p) + ")"),
    )


def attacks(targets: Targets) -> st.SearchStrategy[str]:
    name = file_names(targets)
    attach = spaced(st.sampled_from(["ATTACH", "attach", "ATTACH DATABASE"]), name, "AS", quoted("e"))
    after_attach = st.sampled_from(
        [
            "",
            "; DELETE FROM e.secrets",
            "; INSERT INTO t SELECT * FROM e.secrets",
            "; CREATE TABLE e.z (a)",
            "; WITH w(s) AS (SELECT 'x') INSERT INTO e.secrets SELECT s FROM w",
            "; WITH gone AS (SELECT s FROM e.secrets) DELETE FROM e.secrets WHERE s IN gone",
        ]
    )
    vacuum = spaced("VACUUM", st.sampled_from(["", "main", '"main"', "temp"]), "INTO", name)
    library = str(targets.outside.parent / "evil.so")
    extension = st.sampled_from(
        [
            f"SELECT load_extension('{library}')",
            f"select LOAD_EXTENSION('{library}', 'sqlite3_evil_init')",
            f"WITH l(p) AS (SELECT '{library}') SELECT load_extension(p) FROM l",
        ]
    )
    schema = st.sampled_from(["", "main.", '"main".', "main /**/ . ", "temp.", "[main]."])
    value = st.sampled_from(["=OFF", "= 0", "='off'", '="OFF"', "(0)", "('off')", "= 'MEMORY'", "=-1"])
    setting = st.builds(
        lambda s, n, v: f"PRAGMA {s}{n}{v}", schema, st.one_of(quoted("journal_mode"), quoted("synchronous")), value
    )
    directory = st.builds(
        lambda s, n, v: f"PRAGMA {s}{n}{v}",
        schema,
        st.one_of(quoted("temp_store_directory"), quoted("data_store_directory")),
        st.sampled_from([f"='{targets.temp_target}'", f"('{targets.temp_target}')", f'="{targets.temp_target}"']),
    )
    return st.one_of(st.builds(str.__add__, attach, after_attach), vacuum, extension, setting, directory)


def batches(targets: Targets) -> st.SearchStrategy[str]:
    """An attack alone, or after a harmless PRAGMA in one event (the text checks read only
    the first keyword), or before one."""
    lead = st.sampled_from(
        ["", "PRAGMA user_version=1; ", "PRAGMA cache_size=10;", "pragma /* x */ user_version = 3 ;\n"]
    )
    tail = st.sampled_from(["", "; PRAGMA user_version=2", ";"])
    return st.builds(lambda a, b, c: a + b + c, lead, attacks(targets), tail)
