"""The ``sqlwa`` click group and where its commands are.

The group imports a command's module only when that command is looked up (click's
documented pattern for lazily loaded sub-commands), so ``sqlwa parse`` imports what parsing
needs and nothing of ``sqlwa run``'s, and ``sqlwa --help`` lists the commands from their
one-line summaries below without importing any of them (Polars and pyarrow alone take
longer to import than the interpreter takes to start)."""

from __future__ import annotations

import importlib

import click

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class LazyCommand:
    """Where a command is (``"module:attribute"``) and the first sentence of its help,
    which ``sqlwa --help`` lists it with (tests/unit/test_startup.py holds it to the
    command's own help)."""

    __slots__ = ("summary", "target")

    def __init__(self, target: str, summary: str) -> None:
        self.target = target
        self.summary = summary

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        from sqlwa.cli import _signals

        _signals.raise_if_signalled()  # one an import's ignored callback swallowed
        assert isinstance(command, click.Command), self.target
        return command


#: Each command: where it is and the first sentence of its help.
COMMANDS = {
    "run": LazyCommand("sqlwa.cli.run:run", "Run one SQLite workload and report what each commit cost."),
    "scenarios": LazyCommand("sqlwa.cli.run:scenarios", "List the built-in scenarios."),
    "crash": LazyCommand(
        "sqlwa.cli.crash:crash_command",
        "Record a run's device writes and judge what a power cut at any moment would leave.",
    ),
    "matrix": LazyCommand(
        "sqlwa.cli.matrix:matrix_command",
        "Run every combination of scenario × fs × encrypt × fuse × profile × crypt × journal × sync, each on a fresh "
        "filesystem.",
    ),
    "demo": LazyCommand(
        "sqlwa.cli.matrix:demo_command",
        "The default sweep: mobibench-insert on ext4, journal delete/truncate/persist/wal × sync normal/full, then "
        "the table and report.html.",
    ),
    "merge": LazyCommand(
        "sqlwa.cli.merge:merge_command",
        "Bring the shards of one sweep (`sqlwa matrix --shard K/N`) into one new matrix directory.",
    ),
    "parse": LazyCommand(
        "sqlwa.cli.parse:parse", "Read block traces captured anywhere (phones, servers) into one event table."
    ),
    "export": LazyCommand(
        "sqlwa.cli.export:export_command", "Write a lab run (sqlwa run --fs …) as a Perfetto trace, or a table as CSV."
    ),
    "report": LazyCommand(
        "sqlwa.cli.report:report_command",
        "Write one HTML page with charts and every number for a matrix (or one run).",
    ),
    "check": LazyCommand(
        "sqlwa.cli.check:check_command",
        "Check a matrix (or one run) against a policy of limits: a regression gate for CI.",
    ),
    "compare": LazyCommand(
        "sqlwa.cli.compare:compare_command",
        "Show two results side by side with deltas (B − A): matrices or single runs.",
    ),
    "lab": LazyCommand("sqlwa.cli.lab:lab", "The lab: fresh filesystems on loop devices, and the tracefs capture."),
    "device": LazyCommand(
        "sqlwa.cli.device:device",
        "Device profiles: how long a storage device takes per request, for `sqlwa predict`.",
    ),
    "record": LazyCommand("sqlwa.cli.record:record_command", "Record the SQL a program runs, as a SQL log to replay."),
    "doctor": LazyCommand(
        "sqlwa.cli.doctor:doctor_command",
        "What this machine can measure (levels, filesystems, layers, the VM lab), and the command that adds each "
        "missing piece.",
    ),
    "predict": LazyCommand(
        "sqlwa.cli.predict:predict_command", "Predict the commit latency of measured runs on another device."
    ),
}


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use (click's documented
    pattern for lazily loaded sub-commands)."""

    def __init__(self, *args, lazy_commands: dict[str, LazyCommand], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

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


def version_line() -> str:
    """sqlwa's version, the git commit it was built from and the SQLite it bundles, all
    three from the native module (embedded at build time: a wheel has no .git)."""
    from sqlwa import _native

    return f"sqlwa {_native.__version__} (commit {_native.__git_commit__}, SQLite {_native.__sqlite_version__})"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_line())
        ctx.exit()


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show sqlwa's version, the commit it was built from and the bundled SQLite's version, and exit.",
)
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
