"""Where each command is, without importing click: ``sqlwa --help`` answered from its
cache (:mod:`sqlwa.cli._help_cache`) never imports it."""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING without importing typing (as in sqlwa/__init__.py): the cached
# help's whole path stays within a few milliseconds of the interpreter's start-up
TYPE_CHECKING = False
if TYPE_CHECKING:
    import click


class LazyCommand:
    """Where a command is (``"module:attribute"``) and the first sentence of its help,
    which ``sqlwa --help`` lists it with (tests/unit/test_startup.py holds it to the
    command's own help)."""

    __slots__ = ("summary", "target")

    def __init__(self, target: str, summary: str) -> None:
        self.target = target
        self.summary = summary

    def load(self) -> click.Command:
        import click

        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        from sqlwa.cli import _signals

        _signals.raise_if_signalled()  # one an import's ignored callback swallowed
        assert isinstance(command, click.Command), self.target
        return command
