"""The ``sqlwa`` click group; :mod:`sqlwa.cli` adds the commands to it."""

from __future__ import annotations

import click

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS)
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
