"""``sqlwa run``: one measurement of one scenario under one journal/sync setting."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sqlwa.capture import tracing
from sqlwa.catalogue import DEFAULT_FRAME_BUDGET_MS, DEFAULT_IMAGE_SIZE, FRAME_RATES
from sqlwa.errors import Interrupted, UsageError
from sqlwa.lab import devmapper, encryption, filesystem, fuse, profiles
from sqlwa.measure import engine
from sqlwa.outputs import allow_system_option
from sqlwa.vm import kernel as vm_kernel

if TYPE_CHECKING:  # imported where a run runs: `sqlwa run --help` needs none of them
    from rich.progress import TaskID

    from sqlwa.measure import runner

VM_DEFAULT_FS = "ext4"


def default_out_dir(scenario: str, journal: str, sync: str) -> Path:
    stem = Path(scenario).stem if engine.looks_like_path(scenario) else scenario
    return Path("sqlwa-out") / f"{stem}-{journal}-{sync}-{time.strftime('%Y%m%d-%H%M%S')}"


class ProgressBar:
    """A transient progress bar on stderr, shown only on a terminal."""

    def __init__(self, label: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.enabled = sys.stderr.isatty()
        self.progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task: TaskID | None = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.progress.stop()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.task is None:
            self.task = self.progress.add_task("txns", total=total)
        self.progress.update(self.task, completed=done, total=total)


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One option per :class:`~sqlwa.measure.engine.RunSettings` field that has an
    :class:`~sqlwa.measure.engine.Option`, in the fields' order: name, type, bounds,
    choices, default and help all come from the field."""
    for setting in reversed(dataclasses.fields(engine.RunSettings)):
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


class FiniteFloat(click.FloatRange):
    """A float in range that is a number: nan and inf are refused like any value out of
    range (FloatRange alone lets nan through, as every comparison with it is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def _click_type(setting: dataclasses.Field[Any], option: engine.Option) -> click.ParamType:
    if option.choices:
        return click.Choice(option.choices, case_sensitive=False)
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
@click.option(
    "--fs",
    type=click.Choice(tuple(filesystem.FILESYSTEMS)),
    help="Measure on a fresh filesystem of this kind on a loop device, tracing block requests "
    "and syscalls (needs root and tracefs). ext4 = data=ordered.",
)
@click.option(
    "--image-size",
    default=DEFAULT_IMAGE_SIZE,
    show_default=True,
    metavar="SIZE",
    help="Size of the lab image (--fs).",
)
@click.option("--mkfs-opts", default="", metavar="OPTS", help="Extra mkfs options, e.g. '-O fast_commit' (--fs).")
@click.option("--mount-opts", default="", metavar="OPTS", help="Extra mount options, e.g. 'noatime,barrier=0' (--fs).")
@click.option(
    "--fill",
    "fill_pct",
    type=FiniteFloat(0, 99),
    default=0,
    metavar="PCT",
    help="Fill the lab filesystem to PCT % with files before the workload (--fs).",
)
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(tuple(profiles.PROFILES)),
    help="A phone's storage set-up as a bundle of lab options (android-ext4: Android's /data on ext4 "
    "with FBE, from AOSP's fstab; android-sdcard: the same behind the FUSE layer of /sdcard, "
    "--fuse passthrough-kernel); options given explicitly override the profile's.",
)
@click.option(
    "--encrypt",
    type=click.Choice(encryption.CHOICES),
    default=encryption.NO_ENCRYPTION,
    show_default=True,
    help="File-based encryption of the database directory, as Android's FBE (--fs ext4): fscrypt = "
    "AES-256-XTS/CTS, fscrypt-adiantum = Adiantum. The crypto driver that served it is recorded.",
)
@click.option(
    "--fuse",
    "fuse_layer",
    type=click.Choice(fuse.CHOICES),
    default=fuse.NO_FUSE,
    show_default=True,
    help="A FUSE daemon between SQLite and the lab filesystem, as Android's /sdcard (--fs): passthrough = "
    "sqlwa-fuse, every call through it; -writeback with the kernel's writeback cache; -kernel with the kernel's "
    "FUSE passthrough (Linux 6.9+); bindfs = Debian's bindfs. The daemon's syscalls are traced beside SQLite's.",
)
@click.option(
    "--crypt",
    type=click.Choice(devmapper.CHOICES),
    default=devmapper.NO_CRYPT,
    show_default=True,
    help="Full-disk encryption under the lab filesystem, as Android's FDE (needs device-mapper: --vm here): "
    "dm-crypt = plain AES-256-XTS with a random key, dm-crypt-luks2 = the same under a LUKS2 header. "
    "Block figures are the disk's (the loop device under dm-crypt); the cipher and its driver are recorded.",
)
@click.option(
    "--device-delay",
    "device_delay_ms",
    type=click.IntRange(0, devmapper.MAX_DELAY_MS),
    metavar="MS",
    help="A slow device under the lab filesystem (needs device-mapper: --vm here): dm-delay holds every write "
    "and cache flush MS ms on its way to the loop device (reads are not delayed; 0: the same layer, no delay). "
    "Not with --crypt.",
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
@click.option(
    "--vm",
    is_flag=True,
    help="Run the lab in a qemu guest with its own kernel (--kernel; --fs defaults to ext4 there): f2fs and "
    "kernels this host lacks, and block-level runs without root. Without a usable KVM the guest runs under "
    "TCG: counts exact, timings not comparable (recorded in config.vm).",
)
@click.option(
    "--kernel",
    "vm_kernel",
    default=vm_kernel.DEBIAN,
    show_default=True,
    metavar="debian|PATH",
    help="The guest's kernel (--vm): Debian's current one (fetched once into ~/.cache/sqlwa/kernels), "
    "a linux-image-*.deb, or an unpacked kernel package directory (boot/vmlinuz-*, lib/modules/).",
)
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
def run(
    scenario: str,
    extra_pragmas: tuple[str, ...],
    fs: str | None,
    image_size: str,
    mkfs_opts: str,
    profile_name: str | None,
    encrypt: str,
    fuse_layer: str,
    crypt: str,
    device_delay_ms: int | None,
    mount_opts: str,
    fill_pct: float,
    frame_budget_ms: float,
    frame_rate: str | None,
    allow_loss: bool,
    buffer_kb: int,
    run_dir: Path | None,
    out_dir: Path | None,
    keep_db: bool,
    vm: bool,
    vm_kernel: str,
    guest_strace: bool,
    keep_image: bool,
    no_vfs_count: bool,
    as_json: bool,
    allow_system_dir: bool,
    **settings_given: Any,
) -> None:
    """Run one SQLite workload and report what each commit cost.

    \b
    Examples:
      sqlwa run                                        # mobibench-insert, DELETE, FULL
      sqlwa run -j wal --sync normal -n 2000
      sqlwa run -s messenger --dir /data/tmp --out results/messenger
      sqlwa run -s ./my-app.toml --pragma temp_store=memory
      sudo sqlwa run --fs ext4 -j wal             # + syscall and block levels on a fresh ext4
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
    """
    from sqlwa.views import json_output, terminal

    request = run_request(**locals())
    outcome = execute_with_bar(request)
    if as_json:
        click.echo(json_output.dumps(outcome.summary))
        return
    terminal.print_summary(outcome.summary)
    click.echo(f"wrote {outcome.out_dir}/summary.json and commits.parquet")
    if outcome.kept_database is not None:
        click.echo(f"kept the database in {outcome.kept_database}")


def run_request(
    scenario: str,
    extra_pragmas: tuple[str, ...],
    fs: str | None,
    image_size: str,
    mkfs_opts: str,
    profile_name: str | None,
    encrypt: str,
    fuse_layer: str,
    crypt: str,
    device_delay_ms: int | None,
    mount_opts: str,
    fill_pct: float,
    frame_budget_ms: float,
    allow_loss: bool,
    buffer_kb: int,
    run_dir: Path | None,
    out_dir: Path | None,
    keep_db: bool,
    vm: bool,
    vm_kernel: str,
    guest_strace: bool,
    keep_image: bool,
    no_vfs_count: bool,
    settings_given: dict[str, Any],
    frame_rate: str | None = None,
    allow_system_dir: bool = False,
    **_: Any,
) -> runner.RunRequest:
    """The run the options of ``sqlwa run`` (and ``sqlwa crash``, which has them all) ask for."""
    from sqlwa.measure import runner

    settings = engine.RunSettings(**settings_given, extra_pragmas=list(extra_pragmas), count_vfs=not no_vfs_count)
    if settings.from_db is not None:
        if not Path(settings.from_db).is_file():
            raise UsageError(f"--from {settings.from_db}: no such database file", "give the app's database file")
        # absolute: a --vm guest sees the host's files at the same paths, not its working directory
        settings.from_db = str(Path(settings.from_db).resolve())
    if not vm and click.get_current_context().get_parameter_source("vm_kernel") != click.core.ParameterSource.DEFAULT:
        raise UsageError("--kernel chooses the VM lab's kernel, and this run is not in the VM lab", "add --vm")
    if guest_strace and not vm:
        raise UsageError("--guest-strace traces the VM lab's guest, and this run is not in the VM lab", "add --vm")
    fs = fs or (VM_DEFAULT_FS if vm else None)
    lab_options: dict[str, Any] = {
        "fs": fs,
        "mkfs_opts": mkfs_opts,
        "mount_opts": mount_opts,
        "encrypt": encrypt,
        "fuse": fuse_layer,
    }
    profile = with_profile(profile_name, lab_options) if profile_name else None
    request = runner.RunRequest(
        scenario=scenario,
        settings=settings,
        out_dir=out_dir or default_out_dir(scenario, settings.journal, settings.sync),
        dir=run_dir,
        keep_db=keep_db,
        fs=lab_options["fs"],
        image_size=image_size,
        mkfs_opts=lab_options["mkfs_opts"],
        encrypt=lab_options["encrypt"],
        profile=profile,
        fuse=lab_options["fuse"],
        crypt=crypt,
        device_delay_ms=device_delay_ms,
        mount_opts=lab_options["mount_opts"],
        fill_pct=fill_pct,
        allow_loss=allow_loss,
        buffer_kb=buffer_kb,
        frame_budget_ms=frame_budget_of(frame_budget_ms, frame_rate),
        vm=vm,
        kernel=vm_kernel,
        guest_strace=guest_strace,
        keep_image=keep_image,
        allow_system_dir=allow_system_dir,
    )
    return request


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
    """Execute ``request`` with a progress bar; an interruption says what was left unfinished."""
    from sqlwa.measure import runner

    settings = request.settings
    with ProgressBar(f"{request.scenario} {settings.journal}/{settings.sync}") as bar:
        try:
            outcome = runner.execute(request, progress=bar)
        except (Interrupted, KeyboardInterrupt) as exc:
            reason = (exc.args[0] if exc.args else "") or "interrupted"
            raise Interrupted(
                f"{reason}; {request.out_dir} holds no finished run (re-run the same command to measure it)"
            ) from None
    return outcome


# The click parameter behind each option a profile fills in, where its name differs.
PROFILE_PARAMETERS = {"fuse": "fuse_layer"}


def with_profile(name: str, options: dict[str, Any]) -> dict:
    """Fill ``options`` from the profile where the command line left them at their
    defaults; returns what the summary records of the profile."""
    chosen = profiles.profile(name)
    context = click.get_current_context()
    given = {
        key
        for key in options
        if context.get_parameter_source(PROFILE_PARAMETERS.get(key, key))
        not in (None, click.core.ParameterSource.DEFAULT)
    }
    return profiles.describe(chosen, profiles.apply(chosen, options, given))


@click.command()
def scenarios():
    """List the built-in scenarios."""
    from rich.table import Table

    from sqlwa.views import terminal

    table = Table("scenario", "what one transaction does")
    for name, description in engine.builtin_scenarios():
        table.add_row(name, " ".join(description.split()))
    terminal.wide_console().print(table)
