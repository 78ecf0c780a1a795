"""mkdocs hooks: the repository's own Markdown files that live outside docs/ (the README,
CONTRIBUTING, CHANGELOG, tests/README) become pages of the site, and every relative link
is written for the site as it was written for the repository (a link that works on a
checkout works on the site, and one that does not fails ``mkdocs build --strict``)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parent.parent

#: Files of the repository outside docs/ that the site shows, and where.
REPO_PAGES = {
    "README.md": "index.md",
    "CONTRIBUTING.md": "contributing.md",
    "CHANGELOG.md": "changelog.md",
    "tests/README.md": "tests.md",
}
SITE_TO_REPO = {site: repo for repo, site in REPO_PAGES.items()}

LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def on_files(files: Files, config) -> Files:
    for repo_path, site_path in REPO_PAGES.items():
        files.append(File.generated(config, site_path, content=(REPO / repo_path).read_text()))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    here = SITE_TO_REPO.get(page.file.src_uri, f"docs/{page.file.src_uri}")
    markdown = fill_generated(markdown)
    return LINK.sub(lambda m: m[1] + site_link(here, page.file.src_uri, m[2]) + m[3], markdown)


def site_link(repo_page: str, site_page: str, target: str) -> str:
    """``target`` as written in the repository file ``repo_page``, for the site page ``site_page``."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return target  # a URL, an anchor of the same page, or an absolute path: as it is
    path, hash_, anchor = target.partition("#")
    in_repo = posixpath.normpath(posixpath.join(posixpath.dirname(repo_page), path))
    if in_repo in REPO_PAGES:
        in_site = REPO_PAGES[in_repo]
    elif in_repo.startswith("docs/"):
        in_site = in_repo.removeprefix("docs/")
    else:
        return target  # a file the site does not have: strict mode names it
    return posixpath.relpath(in_site, posixpath.dirname(site_page) or ".") + hash_ + anchor


# ------------------------------------------------------------------ tables from the code
# A line ``<!-- generated: NAME -->`` in a page is replaced by the table NAME, made from
# the code that is its source, so the reference cannot drift from what sqlwa writes.


def generated_tables() -> dict[str, str]:
    import sqlite3
    import sys

    sys.path.insert(0, str(REPO / "analyzer"))
    from sqlwa import catalogue
    from sqlwa.results import store

    conn = sqlite3.connect(":memory:")
    store.migrate(conn)
    schema = [sql for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid")]
    conn.close()
    metrics = ["| metric | level | unit | what | better | timing |", "|---|---|---|---|---|---|"]
    for m in catalogue.METRICS.values():
        metrics.append(
            f"| `{m.name}` | {m.level} | {m.unit} | {m.description} | {m.direction} | {'yes' if m.timing else ''} |"
        )
    columns = ["| level | columns |", "|---|---|"]
    for level, names in (
        ("the commit", catalogue.COMMIT_TIMING_COLUMNS),
        ("CPU of the SQL thread", catalogue.CPU_COMMIT_COLUMNS),
        ("vfs", catalogue.VFS_COMMIT_COLUMNS),
        ("syscall", catalogue.SYSCALL_COMMIT_COLUMNS),
        ("syscall, the FUSE daemon's (`--fuse`)", catalogue.FUSE_SYSCALL_COMMIT_COLUMNS),
        ("block", catalogue.BLOCK_COMMIT_COLUMNS),
    ):
        columns.append(f"| {level} | " + ", ".join(f"`{name}`" for name in names) + " |")
    return {
        "summary-schema": summary_reference(),
        "metrics": "\n".join(metrics),
        "commit-columns": "\n".join(columns),
        "store-schema": "```sql\n" + ";\n\n".join(schema) + ";\n```",
    }


def summary_reference() -> str:
    """summary.json key by key, one table per section, from the classes of
    ``sqlwa/analysis/schema.py`` (each key's line is its docstring there)."""
    from sqlwa.analysis import schema

    def link(cls: type) -> str:
        return f"[{cls.__name__}](#{summary_anchor(cls)})"

    out = []
    for cls, path in schema.sections().items():
        title = f"`{path}`" if path else "The document"
        out += [f"### {title}: {cls.__name__} {{#{summary_anchor(cls)}}}", "", "| key | type | always | what |"]
        out.append("|---|---|---|---|")
        for field in schema.fields(cls):
            kind = schema.type_name(field.type, link)
            out.append(f"| `{field.name}` | {kind} | {'yes' if field.required else ''} | {markdown_of(field.doc)} |")
        out.append("")
    return "\n".join(out)


def summary_anchor(cls: type) -> str:
    """The reference page's anchor of a section's table: ``summary-lab-description``."""
    return "summary-" + re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()


def markdown_of(doc: str) -> str:
    """A docstring's line for a table cell: reST literals and roles as Markdown code."""
    doc = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", doc).replace("``", "`")
    return doc.replace("|", "\\|")


GENERATED = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def fill_generated(markdown: str) -> str:
    if not GENERATED.search(markdown):
        return markdown
    tables = generated_tables()
    return GENERATED.sub(lambda m: tables[m[1]], markdown)
