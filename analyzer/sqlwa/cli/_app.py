"""The ``sqlwa`` click group; :mod:`sqlwa.cli` tells it where its commands are.

The group imports a command's module only when that command is looked up, so ``sqlwa
parse`` imports what parsing needs and nothing of ``sqlwa run``'s, and ``sqlwa --help``
lists the commands from their one-line summaries without importing any of them (Polars
and pyarrow alone take longer to import than the interpreter takes to start)."""

from __future__ import annotations

import click

from sqlwa.cli._lazy import LazyCommand

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use (click's documented
    pattern for lazily loaded sub-commands)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, LazyCommand] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            self.add_command(self.lazy_commands[cmd_name].load(), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and self.get_command(ctx, args[0]) is None:
            # A name that is no command: click's "Did you mean" picks from the loaded ones.
            for name in self.lazy_commands:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with their summaries as click lists them, from the summaries
        where a command is not imported yet."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = [(name, self.summary_of(name, limit)) for name in names]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def summary_of(self, name: str, limit: int) -> str:
        # An unloaded command's summary, shortened by click's rule (a stand-in command).
        command = self.commands.get(name) or click.Command(name, help=self.lazy_commands[name].summary)
        return command.get_short_help_str(limit)


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="sqlwa")
def main() -> None:
    """sqlwa — what does one SQLite commit really cost the storage device?

    It runs app-like SQLite workloads under chosen journal and sync settings and reports,
    per commit, what each layer of the I/O stack did: SQLite's own VFS calls, the
    syscalls (fsync, fdatasync, pwrite ...) and the block requests and cache flushes the
    device saw.

    \b
    Start with:
      sqlwa run                                   mobibench-insert, DELETE journal, FULL sync
      sqlwa run --journal wal --sync normal       the same in WAL mode
      sqlwa run --scenario messenger --txns 500   another built-in scenario
      sqlwa scenarios                             list the built-in scenarios
    """
