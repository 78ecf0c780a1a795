"""``sqlwa crash``: a lab run whose device writes are recorded, and what a power cut at
any moment of it would have left (``sqlwa.durability``)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import click

from sqlwa.cli import run as run_cli
from sqlwa.cli._stack import with_stack
from sqlwa.durability import explore
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine

if TYPE_CHECKING:
    from sqlwa.measure import runner

CRASH_TXNS = 30  # a crash run's transactions unless -n says otherwise: every one multiplies the states
CRASH_IMAGE_SIZE = "320M"  # small (every crash state is a copy of its data), yet enough for mkfs.xfs
DEFAULT_FS = "ext4"


def _with_default(param: click.Parameter, default: Any) -> click.Parameter:
    changed = copy.copy(param)
    changed.default = default
    return changed


def _crash_params() -> list[click.Parameter]:
    """``sqlwa run``'s options, with smaller defaults for the run's size."""
    defaults = {"txns": CRASH_TXNS, "image_size": CRASH_IMAGE_SIZE}
    # not --duration: a crash run's untraced reference run repeats its transactions, one
    # for one, which a time bound would not
    params = [p for p in run_cli.run.params if p.name != "duration_s"]
    return [_with_default(p, defaults[p.name]) if p.name in defaults else p for p in params]


def crash(
    samples: int,
    crash_seed: int,
    torn: bool,
    keep_write_log: bool,
    as_json: bool,
    **run_options: Any,
) -> None:
    """Record a run's device writes and judge what a power cut at any moment would leave.

    For each crash state: how many acknowledged commits it loses, whether SQLite finds
    the database corrupt, whether the filesystem even mounts.

    \b
    Examples:
      sqlwa crash --vm -j wal --sync full                # ext4 in the VM lab: loses nothing
      sqlwa crash --vm -j delete --sync extra            # DELETE needs EXTRA for that
      sqlwa crash --vm -j wal --sync normal              # may lose the commits since the last WAL sync
      sqlwa crash --vm --fs f2fs --mount-opts nobarrier  # the Moto Z's f2fs without cache flushes
      sqlwa crash --vm -j delete --torn --samples 16     # more subsets per flush, torn 4 KiB writes

    The writes are logged by device-mapper's log-writes target under the filesystem
    (on this host as root when its kernel has device-mapper, else add --vm), and the
    engine marks the log after every commit SQLite acknowledged. Crash states follow CrashMonkey's
    model of a volatile write cache: at each flush, the image with none, all, or a
    sampled subset of the writes issued since the previous flush (--samples per flush;
    all subsets when fewer), and with --torn writes of several 4 KiB blocks cut short.
    Each state is mounted (the filesystem recovers), the database opened (SQLite
    recovers), `PRAGMA integrity_check` run and its rows compared with the database as
    of each commit. Everything `sqlwa run` writes, plus summary.json's `durability`.

    In WAL mode the default 30 commits reach no checkpoint (SQLite runs the first at
    1,000 WAL pages, about 300 commits of mobibench-insert), and under --sync normal the
    WAL is synced only at one: the output says so, with the -n that would reach one.
    """
    from sqlwa.views import json_output, terminal

    outcome = run_cli.execute_with_bar(crash_request(samples, crash_seed, torn, keep_write_log, **run_options))
    if as_json:
        click.echo(json_output.dumps(outcome.summary))
        return
    terminal.print_summary(outcome.summary)
    terminal.print_durability(outcome.summary["durability"])
    click.echo(f"wrote {outcome.out_dir}/summary.json and commits.parquet")


def crash_request(
    samples: int,
    crash_seed: int,
    torn: bool,
    keep_write_log: bool,
    *,
    scenario: str,
    settings: engine.RunSettings,
    stack: StackSpec,
    frame_budget_ms: float,
    frame_rate: str | None,
    **run_options: Any,
) -> runner.RunRequest:
    """The run a ``sqlwa crash`` command line asks for (its options as click parsed them,
    settings and stack made one value each, inside their click context): also how the VM
    lab's tests take several configurations in one guest (tests/vm_guest.py)."""
    request = run_cli.run_request(
        scenario,
        settings,
        stack.replace(fs=stack.volume.fs or DEFAULT_FS),
        frame_budget_ms=run_cli.frame_budget_of(frame_budget_ms, frame_rate),
        **run_options,
    )
    request.crash = explore.CrashOptions(samples=samples, seed=crash_seed, torn=torn, keep_log=keep_write_log)
    return request


crash_command = click.Command(
    "crash",
    callback=with_stack(run_cli.with_settings(crash)),
    help=crash.__doc__,
    params=[
        *_crash_params(),
        click.Option(
            ["--samples"],
            type=click.IntRange(0, 10_000),
            default=explore.CrashOptions.samples,
            show_default=True,
            help="Subsets of the writes between two flushes to try per flush (every subset when there are fewer).",
        ),
        click.Option(
            ["--crash-seed"],
            type=click.IntRange(0),
            default=explore.CrashOptions.seed,
            show_default=True,
            help="Seed of the sampled subsets and torn writes: the same seed draws the same states.",
        ),
        click.Option(["--torn"], is_flag=True, help="Also tear writes of several 4 KiB blocks (some blocks only)."),
        click.Option(
            ["--keep-write-log"],
            is_flag=True,
            hidden=True,
            help="Copy the device's write log (dm-log-writes format) into OUT/writes.log: for tests and replays.",
        ),
    ],
)
