"""What the command line imports before it does any work (#21): ``sqlwa --help`` and every
``sqlwa COMMAND --help`` import neither Polars nor pyarrow, plotly or numpy (each alone
takes longer to import than the interpreter to start); the group imports a command when
it is looked up, and lists the commands it has not imported from their summaries, which
must say what the commands' own help says.

Each case runs the CLI in a fresh interpreter and reads ``sys.modules`` after it; how
long it took is bench/startup.py's business, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from helpers import REPO
from sqlwa.cli import _group
from sqlwa.cli._app import COMMANDS

HEAVY = ("polars", "pyarrow", "plotly", "numpy")

# Runs the CLI's entry point on argv[1:], then prints the heavy modules it imported.
PROBE = f"""
import json, sys
from sqlwa.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {HEAVY} if m in sys.modules)), file=sys.stderr)
"""


def heavy_imports(*args: str) -> list[str]:
    """The heavy modules ``sqlwa ARGS`` imported, in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stderr.strip().splitlines()[-1])


def command_paths(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and sub-command, as the words that name it."""
    context = click.Context(group)
    paths = []
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        paths.append((*path, name))
        if isinstance(command, click.Group):
            paths.extend(command_paths(command, (*path, name)))
    return paths


@pytest.mark.parametrize("words", [(), *command_paths(_group)], ids=lambda words: " ".join(words) or "sqlwa")
def test_help_imports_no_heavy_module(words):
    assert heavy_imports(*words, "--help") == []


def test_the_probe_sees_a_command_that_imports_polars():
    """The check can fail: parsing a trace does import Polars, and the probe says so."""
    keks = REPO / "traces" / "samples" / "blktrace-keks" / "keks"
    assert "polars" in heavy_imports("parse", str(keks))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_commands_first_sentence(name):
    """As click shortens it, at any width: the line `sqlwa --help` lists is the same
    whether the command is imported or not."""
    command = COMMANDS[name].load()
    assert command.name == name
    stand_in = click.Command(name, help=COMMANDS[name].summary)
    for width in (30, 45, 80, 200):
        assert stand_in.get_short_help_str(width) == command.get_short_help_str(width)


def test_the_help_listed_lazily_is_the_help_of_the_loaded_commands(monkeypatch):
    """``sqlwa --help`` in a fresh interpreter (nothing imported) against the same help
    with every command imported, both at the width click takes from COLUMNS."""
    monkeypatch.setenv("COLUMNS", "80")
    lazily = subprocess.run(
        [sys.executable, "-m", "sqlwa", "--help"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    context = click.Context(_group, info_name="sqlwa", **_group.context_settings)
    for name in COMMANDS:
        _group.get_command(context, name)
    assert set(_group.commands) == set(COMMANDS)
    assert lazily.rstrip("\n") == _group.get_help(context)


def test_a_mistyped_command_still_gets_a_suggestion():
    """click suggests from the commands it has loaded; the group loads them all first."""
    proc = subprocess.run([sys.executable, "-m", "sqlwa", "scenaros"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Did you mean 'scenarios'?" in proc.stderr
