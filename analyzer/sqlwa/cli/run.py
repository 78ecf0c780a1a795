"""``sqlwa run``: one measurement of one scenario under one journal/sync setting."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sqlwa.capture import tracing
from sqlwa.catalogue import DEFAULT_FRAME_BUDGET_MS, FRAME_RATES
from sqlwa.cli._stack import FiniteFloat, stack_options, with_stack
from sqlwa.errors import Interrupted, UsageError
from sqlwa.lab.stack import PROFILE_OPTIONS, StackSpec
from sqlwa.measure import engine
from sqlwa.outputs import allow_system_option

if TYPE_CHECKING:  # imported where a run runs: `sqlwa run --help` needs none of them
    from rich.progress import TaskID

    from sqlwa.measure import runner

VM_DEFAULT_FS = "ext4"


def default_out_dir(scenario: str, journal: str, sync: str) -> Path:
    stem = Path(scenario).stem if engine.looks_like_path(scenario) else scenario
    return Path("sqlwa-out") / f"{stem}-{journal}-{sync}-{time.strftime('%Y%m%d-%H%M%S')}"


class ProgressLine:
    """The run's progress on stderr. On a terminal a transient live line: the commits (a
    bar when their number is known), the time, and what was measured so far: the trace
    events captured (a lab run), the disk the run's files use, the VFS syncs and bytes
    written per measured commit. Elsewhere (a log file, a pipe) a long run prints that
    line every ``LOG_EVERY_S`` seconds; a short one prints nothing.

    The engine fills :attr:`figures`; the runner tells :meth:`watch` where the run writes
    and which capture is running (:func:`sqlwa.measure.lab_capture.watch`)."""

    LOG_EVERY_S = 10.0
    DETAIL_EVERY_S = 1.0  # disk use and events are read at most this often
    RATE_AFTER_S = 5.0  # the disk's growth rate is projected once the run has gone this long

    def __init__(self, label: str, duration_s: float | None = None, long_run: bool = False) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.label = label
        self.duration_s = duration_s
        self.tty = sys.stderr.isatty()
        self.log = not self.tty and long_run
        self.figures: dict[str, int] = {}
        self.dirs: list[Path] = []
        self.capture: tracing.TraceCapture | None = None
        self.started = time.monotonic()
        self.last_log = self.started
        self.last_detail = 0.0
        self.detail = ""
        self.warned_of_room = False
        self.progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[detail]}"),
            console=Console(stderr=True),
            transient=True,
        )
        self.task: TaskID | None = None

    def __enter__(self) -> ProgressLine:
        if self.tty:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.tty:
            self.progress.stop()

    def watch(self, directory: Path, capture: tracing.TraceCapture | None = None) -> None:
        self.dirs.append(directory)
        self.capture = capture or self.capture

    def __call__(self, done: int, total: int | None) -> None:
        if not (self.tty or self.log):
            return
        now = time.monotonic()
        if now - self.last_detail >= self.DETAIL_EVERY_S:
            self.last_detail = now
            self.detail = self.measured_so_far()
        if self.tty:
            if self.task is None:
                self.task = self.progress.add_task("txns", total=total, detail=self.detail)
            self.progress.update(self.task, completed=done, total=total, detail=self.detail)
        elif now - self.last_log >= self.LOG_EVERY_S:
            self.last_log = now
            print(f"sqlwa: {self.line(done, total, now)}", file=sys.stderr, flush=True)

    def line(self, done: int, total: int | None, now: float) -> str:
        """The plain line: ``LABEL: 1,234/10,000 commits, 0:01:10 of 0:10:00 · …``."""
        elapsed = _clock(now - self.started)
        of = f" of {_clock(self.duration_s)}" if self.duration_s else ""
        count = f"{done:,}" + (f"/{total:,}" if total is not None else "")
        return f"{self.label}: {count} commits, {elapsed}{of}" + (f" · {self.detail}" if self.detail else "")

    def measured_so_far(self) -> str:
        """Events captured, disk used, syncs and bytes written per measured commit: each
        as the kernel or the engine's VFS counted it so far."""
        parts = []
        if self.capture is not None:
            parts.append(f"{self.capture.events_so_far():,} events")
        if self.dirs:
            used = sum(_disk_used(d) for d in self.dirs)
            parts.append(f"{_size(used)} on disk")
            self.warn_if_room_runs_out(used)
        measured = self.figures.get("measured", 0)
        if measured:
            parts.append(f"{self.figures['syncs'] / measured:.2f} syncs/commit")
            parts.append(f"{_size(self.figures['write_bytes'] / measured)} written/commit")
        return " · ".join(parts)

    def warn_if_room_runs_out(self, used: int) -> None:
        """Once, when a ``--duration`` run's files, growing at the rate so far, would
        outgrow the free space where they are before the run's end."""
        elapsed = time.monotonic() - self.started
        if self.warned_of_room or not self.duration_s or elapsed < self.RATE_AFTER_S:
            return
        from sqlwa import _system

        try:
            free = min(_system.mounts.free_space(str(d))[0] for d in self.dirs)
        except OSError:  # a directory gone meanwhile: the run's own writes say what is wrong
            return
        more = used / elapsed * max(self.duration_s - elapsed, 0)
        if more > free:
            self.warned_of_room = True
            self.progress.console.print(
                f"sqlwa: warning: at this rate the run's files grow by ~{_size(more)} more before its end, "
                f"and {_size(free)} are free where they are: it will stop when the disk fills "
                "(a shorter --duration, or an --out with room, avoids that)",
                markup=False,
                highlight=False,
            )


def _disk_used(directory: Path) -> int:
    """Bytes of disk the files under ``directory`` take (allocated blocks, as du counts)."""
    used = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):  # a part being renamed or removed meanwhile
                used += os.lstat(os.path.join(root, name)).st_blocks * 512
    return used


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d)?", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """``30s``, ``10m``, ``24h``, ``2d``, ``1h30m``, ``1.5h`` or plain seconds, in seconds;
    a :class:`UsageError` for anything else, zero, or more than the engine takes."""
    compact = text.strip()
    parts = list(_DURATION_PART.finditer(compact))
    if not compact or "".join(p.group(0) for p in parts).replace(" ", "") != compact.replace(" ", ""):
        seconds = None
    else:
        seconds = sum(float(p.group(1)) * _DURATION_UNITS[(p.group(2) or "s").lower()] for p in parts)
    if seconds is None or not 0 < seconds <= engine.MAX_DURATION_S:
        raise UsageError(
            f"--duration {text!r} is not a duration sqlwa runs for",
            f"give a number with a unit, more than 0 and at most {engine.MAX_DURATION_S / 86400:g}d: 30s, 10m, 24h, 2d",
        )
    return seconds


class Duration(click.ParamType):
    """A human duration (:func:`parse_duration`): a bad one is sqlwa's one-line error."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value if isinstance(value, float) else parse_duration(str(value))


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One option per :class:`~sqlwa.measure.engine.RunSettings` setting that has an
    :class:`~sqlwa.measure.engine.Option`, in the settings' order: name, type, bounds,
    choices, default and help all come from the setting's field."""
    for _, setting in reversed(list(engine.setting_fields())):
        option = engine.option_of(setting)
        if option is None:
            continue
        long = option.flag or f"--{setting.name.replace('_', '-')}"
        flags = [long, *([option.short] if option.short else [])]
        if isinstance(setting.default, bool):
            command = click.option(*flags, setting.name, is_flag=True, help=option.help)(command)
            continue
        command = click.option(
            *flags,
            setting.name,
            type=_click_type(setting, option),
            default=setting.default,
            show_default=setting.default is not None,
            help=option.help,
        )(command)
    return command


def setting_names() -> tuple[str, ...]:
    """The options that are RunSettings settings."""
    return tuple(name for name, f in engine.setting_fields() if engine.option_of(f) is not None)


def with_settings(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` called with the setting options' values, ``--pragma`` and
    ``--no-vfs-count`` as one ``settings=RunSettings(...)``."""

    @functools.wraps(callback)
    def call(extra_pragmas: tuple[str, ...], no_vfs_count: bool, **values: Any) -> Any:
        # a command may leave a setting out (sqlwa crash has no --duration): its default
        given = {name: values.pop(name) for name in setting_names() if name in values}
        settings = engine.RunSettings.from_flat(
            {**given, "extra_pragmas": list(extra_pragmas), "count_vfs": not no_vfs_count}
        )
        from_db = settings.replay.from_db
        if from_db is not None:
            if not Path(from_db).is_file():
                raise UsageError(f"--from {from_db}: no such database file", "give the app's database file")
            # absolute: a --vm guest sees the host's files at the same paths, not its working directory
            settings = settings.replace(from_db=str(Path(from_db).resolve()))
        return callback(settings=settings, **values)

    return call


def _click_type(setting: dataclasses.Field[Any], option: engine.Option) -> click.ParamType:
    if option.choices:
        return click.Choice(option.choices, case_sensitive=False)
    if option.metavar == "DURATION":
        return Duration()
    if "float" in str(setting.type):
        return FiniteFloat(min=option.minimum, max=option.maximum)
    if str(setting.type).startswith("str"):
        return click.STRING
    return click.IntRange(min=int(option.minimum)) if option.minimum is not None else click.INT


@click.command()
@click.option(
    "-s",
    "--scenario",
    default="mobibench-insert",
    show_default=True,
    metavar="NAME|PATH",
    help="A built-in scenario (see `sqlwa scenarios`), a scenario TOML file, or a recorded SQL log "
    "(sqlwa record; replayed as recorded).",
)
@setting_options
@click.option("--pragma", "extra_pragmas", multiple=True, metavar="NAME[=VALUE]", help="Any other PRAGMA; repeatable.")
@stack_options(
    "fs", "image_size", "mkfs_opts", "mount_opts", "fill_pct", "profile", "encrypt", "fuse", "crypt", "device_delay_ms"
)
@click.option(
    "--frame-budget-ms",
    type=FiniteFloat(min=0, min_open=True),
    default=DEFAULT_FRAME_BUDGET_MS,
    show_default=True,
    help="Commits longer than this count as frame-budget misses (60 Hz: 16.67).",
)
@click.option(
    "--frame-rate",
    "frame_rate",
    type=click.Choice([str(rate) for rate in FRAME_RATES]),
    metavar="|".join(str(rate) for rate in FRAME_RATES),
    help="The display's refresh rate, Hz: its frame is the frame budget "
    f"({', '.join(f'{rate} Hz: {ms:g} ms' for rate, ms in FRAME_RATES.items())}); instead of --frame-budget-ms.",
)
@click.option("--allow-loss", is_flag=True, help="Keep a run whose trace lost events instead of failing it.")
@click.option(
    "--buffer-kb",
    type=click.IntRange(64, 1 << 20),
    default=tracing.DEFAULT_BUFFER_KB,
    show_default=True,
    help="tracefs ring buffer per CPU, KiB (--fs); larger if a run loses events.",
)
@click.option(
    "--dir",
    "run_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run in a fresh sub-directory of this existing directory (VFS level only) "
    "[default: a fresh temporary directory].",
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where summary.json and commits.parquet go [default: sqlwa-out/SCENARIO-JOURNAL-SYNC-TIME].",
)
@click.option(
    "--keep-db",
    is_flag=True,
    help="Keep the database files after a run without --fs (the directory is printed; `lab cleanup` leaves it).",
)
@stack_options("vm", "kernel")
@click.option(
    "--guest-strace",
    is_flag=True,
    hidden=True,
    help="With --vm: run the guest's program under strace, into OUT/guest.strace (a check of the syscall level).",
)
@click.option(
    "--keep-image",
    is_flag=True,
    hidden=True,
    help="Copy the lab's image into OUT/lab.img (zero blocks left out) before it is removed: what reached the disk.",
)
@click.option("--no-vfs-count", is_flag=True, hidden=True, help="Run on the plain unix VFS (benchmark baseline).")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json to stdout instead of the table.")
@allow_system_option
@with_stack
@with_settings
def run(
    scenario: str,
    settings: engine.RunSettings,
    stack: StackSpec,
    frame_budget_ms: float,
    frame_rate: str | None,
    allow_loss: bool,
    buffer_kb: int,
    run_dir: Path | None,
    out_dir: Path | None,
    keep_db: bool,
    guest_strace: bool,
    keep_image: bool,
    as_json: bool,
    allow_system_dir: bool,
) -> None:
    """Run one SQLite workload and report what each commit cost.

    \b
    Examples:
      sqlwa run                                        # mobibench-insert, DELETE, FULL
      sqlwa run -j wal --sync normal -n 2000
      sqlwa run --duration 10m                         # as many transactions as fit in 10 minutes
      sqlwa run -s messenger --dir /data/tmp --out results/messenger
      sqlwa run -s ./my-app.toml --pragma temp_store=memory
      sudo sqlwa run --fs ext4 -j wal             # + syscall and block levels on a fresh ext4
      sudo sqlwa run --fs ext4 -j wal --duration 24h  # a day's soak; Ctrl-C keeps what was measured
      sudo sqlwa run --fs xfs --fill 85 --mount-opts noatime
      sudo sqlwa run --fs ext4 --fuse passthrough # through a FUSE daemon, as on /sdcard
      sqlwa run --vm --fs f2fs -j wal             # in a qemu guest with Debian's kernel (no root needed)
      sqlwa run --vm --crypt dm-crypt             # ext4 on dm-crypt, as Android's FDE
      sqlwa run --vm --fs ecryptfs                # eCryptfs over ext4
      sqlwa run --vm --device-delay 10            # on a device whose writes and flushes take 10 ms

    Writes OUT/summary.json (means per commit) and OUT/commits.parquet (one row per
    transaction). Without a lab filesystem only the VFS level is measured: SQLite's own
    writes and syncs per file, counted by a shim inside the engine; no root needed.
    With --fs the syscall and block levels are traced too, and the raw trace is kept in
    OUT/trace.txt for re-analysis.

    A long run (--duration, or -n 100000 and more) shows its progress on stderr: commits,
    trace events, disk used, syncs and bytes written per commit so far (a line every 10 s
    when stderr is not a terminal). Ctrl-C or SIGTERM during its transactions stops it
    at the next commit boundary; what was measured is analysed and written, summary.json's
    "stopped" says "interrupted after N of M commits", and sqlwa exits 130. A second
    Ctrl-C aborts at once (nothing is written; the lab is still taken down).
    """
    from sqlwa.views import json_output, terminal

    request = run_request(
        scenario,
        settings,
        stack,
        out_dir=out_dir,
        run_dir=run_dir,
        keep_db=keep_db,
        frame_budget_ms=frame_budget_of(frame_budget_ms, frame_rate),
        allow_loss=allow_loss,
        buffer_kb=buffer_kb,
        guest_strace=guest_strace,
        keep_image=keep_image,
        allow_system_dir=allow_system_dir,
    )
    # Ctrl-C keeps what was measured, on this host: a lab run's keeping gives up on an OUT
    # that takes no writes (targets.host_lab.keep_what_was_measured). A run in the VM lab ends at once.
    request.capture.keep_measured = not request.stack.machine.vm
    outcome = execute_with_bar(request)
    if as_json:
        click.echo(json_output.dumps(outcome.summary))
        raise_if_partial(outcome)
        return
    terminal.print_summary(outcome.summary)
    click.echo(f"wrote {outcome.out_dir}/summary.json and commits.parquet")
    if outcome.kept_database is not None:
        click.echo(f"kept the database in {outcome.kept_database}")
    raise_if_partial(outcome)


def run_request(
    scenario: str,
    settings: engine.RunSettings,
    stack: StackSpec,
    *,
    out_dir: Path | None = None,
    run_dir: Path | None = None,
    keep_db: bool = False,
    frame_budget_ms: float = DEFAULT_FRAME_BUDGET_MS,
    allow_loss: bool = False,
    buffer_kb: int = tracing.DEFAULT_BUFFER_KB,
    guest_strace: bool = False,
    keep_image: bool = False,
    allow_system_dir: bool = False,
) -> runner.RunRequest:
    """The run the options of ``sqlwa run`` (and ``sqlwa crash``, which has them all) ask
    for: the stack completed (the VM lab's default filesystem, the profile's options)."""
    from sqlwa.measure.lab_capture import CaptureOptions
    from sqlwa.measure.request import LabDebug, Output, RunRequest

    if (
        not stack.machine.vm
        and click.get_current_context().get_parameter_source("kernel") != click.core.ParameterSource.DEFAULT
    ):
        raise UsageError("--kernel chooses the VM lab's kernel, and this run is not in the VM lab", "add --vm")
    if guest_strace and not stack.machine.vm:
        raise UsageError("--guest-strace traces the VM lab's guest, and this run is not in the VM lab", "add --vm")
    stack = stack.replace(fs=stack.volume.fs or (VM_DEFAULT_FS if stack.machine.vm else None))
    if stack.profile is not None:
        stack = dataclasses.replace(stack, profile_overrides=given_options(PROFILE_OPTIONS)).with_profile()
    return RunRequest(
        scenario=scenario,
        settings=settings,
        stack=stack,
        output=Output(
            out_dir=out_dir or default_out_dir(scenario, settings.journal, settings.sync),
            dir=run_dir,
            keep_db=keep_db,
            allow_system_dir=allow_system_dir,
        ),
        capture=CaptureOptions(allow_loss=allow_loss, buffer_kb=buffer_kb),
        frame_budget_ms=frame_budget_ms,
        debug=LabDebug(guest_strace=guest_strace, keep_image=keep_image),
    )


def frame_budget_of(frame_budget_ms: float, frame_rate: str | None) -> float:
    """The frame budget ``--frame-budget-ms`` or ``--frame-rate`` asks for (not both: two
    budgets for one run would leave one unsaid)."""
    if frame_rate is None:
        return frame_budget_ms
    source = click.get_current_context().get_parameter_source("frame_budget_ms")
    if source not in (None, click.core.ParameterSource.DEFAULT):
        raise UsageError("--frame-rate and --frame-budget-ms both set the frame budget", "give one of them")
    return FRAME_RATES[int(frame_rate)]


def execute_with_bar(request: runner.RunRequest) -> runner.RunOutcome:
    """Execute ``request`` with a progress line; an interruption says what was left unfinished."""
    from sqlwa.capture import estimate
    from sqlwa.measure import runner

    settings = request.settings
    length = settings.length
    long_run = length.duration_s is not None or (length.txns or 0) >= estimate.LONG_RUN_TXNS
    label = f"{request.scenario} {settings.journal}/{settings.sync}"
    with ProgressLine(label, length.duration_s, long_run) as bar:
        try:
            outcome = runner.execute(request, progress=bar)
        except (Interrupted, KeyboardInterrupt) as exc:
            reason = (exc.args[0] if exc.args else "") or "interrupted"
            raise Interrupted(
                f"{reason}; {request.output.out_dir} holds no finished run (re-run the same command to measure it)"
            ) from None
    return outcome


def raise_if_partial(outcome: runner.RunOutcome) -> None:
    """A run a signal stopped between its commits has written what was measured: said
    so, and exit 130 as for any interruption (summary.json's ``stopped`` tells the two
    apart: a run with no summary.json did not finish)."""
    if outcome.partial is not None:
        raise Interrupted(f'{outcome.partial}; {outcome.out_dir} holds what was measured (summary.json: "stopped")')


def given_options(names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``names`` (click parameters) the command line gave explicitly: as they
    win over a profile's values."""
    context = click.get_current_context()
    return tuple(
        name for name in names if context.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    )


@click.command()
def scenarios():
    """List the built-in scenarios."""
    from rich.table import Table

    from sqlwa.views import terminal

    table = Table("scenario", "what one transaction does")
    for name, description in engine.builtin_scenarios():
        table.add_row(name, " ".join(description.split()))
    terminal.wide_console().print(table)
