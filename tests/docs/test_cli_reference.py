"""The command-line reference (docs/reference/cli.md, rendered by mkdocs-click) lists every
command and every option of each, as click itself knows them: the truth is the click
group walked command by command, not the page's own idea of what there is."""

from __future__ import annotations

import re

import click
import markdown

from helpers import REPO
from sqlwa.cli import _group

CLI_PAGE = REPO / "docs" / "reference" / "cli.md"
HEADING = re.compile(r'<h[1-6] id="([^"]+)"')


def command_paths(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and sub-command (hidden ones aside, as --help leaves them out)."""
    context = click.Context(group)
    found = []
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is None or command.hidden:
            continue
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found.extend(command_paths(command, (*path, name)))
    return found


def visible_options(command: click.Command) -> list[str]:
    """Every spelling of every option ``COMMAND --help`` shows."""
    return [
        opt
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
        for opt in (*param.opts, *param.secondary_opts)
    ]


def rendered(page_markdown: str) -> str:
    """The page as mkdocs renders it (the extensions of mkdocs.yml that shape headings)."""
    return markdown.markdown(page_markdown, extensions=["attr_list", "toc", "tables", "mkdocs-click"])


def missing_from(html: str) -> list[str]:
    """What click has and the rendered page does not show: ``sqlwa CMD`` or ``sqlwa CMD --opt``."""
    cuts = [(m.start(), m[1]) for m in HEADING.finditer(html)]
    shown = {
        ident: html[start : (cuts[i + 1][0] if i + 1 < len(cuts) else len(html))]
        for i, (start, ident) in enumerate(cuts)
    }
    missing = []
    for words, command in command_paths(_group):
        name = " ".join(("sqlwa", *words))
        section = shown.get("-".join(("sqlwa", *words)))
        if section is None:
            missing.append(name)
            continue
        missing += [f"{name} {opt}" for opt in visible_options(command) if f"<code>{opt}</code>" not in section]
    return missing


def test_the_reference_lists_every_option_of_every_command():
    walked = command_paths(_group)
    assert len(walked) >= 15 and sum(len(visible_options(c)) for _, c in walked) > 100  # the walk found them
    assert missing_from(rendered(CLI_PAGE.read_text())) == []


def test_the_check_sees_a_page_that_documents_one_command_only():
    page = (
        CLI_PAGE.read_text()
        .replace(":module: sqlwa.cli._app", ":module: sqlwa.cli.run")
        .replace(":command: main", ":command: run")
    )
    missing = missing_from(rendered(page))
    assert "sqlwa run" in missing and "sqlwa device probe" in missing


def test_the_check_sees_an_option_the_page_lost():
    """A page written out once (not generated) that lacks one row of ``sqlwa run``'s table."""
    html = rendered(CLI_PAGE.read_text())
    run_at = html.index('id="sqlwa-run"')
    row = html.index("<code>--fs</code>", run_at)
    snapshot = html[:row] + html[row:].replace("<code>--fs</code>", "<code>--filesystem</code>", 1)
    assert missing_from(snapshot) == ["sqlwa run --fs"]
