"""``sqlwa device``: measure, import, list and show device profiles."""

from __future__ import annotations

from pathlib import Path

import click

from sqlwa import device as devices
from sqlwa import inputs, outputs
from sqlwa.device import fio
from sqlwa.device import probe as probing
from sqlwa.device.profile import Profile, Provenance, load, save
from sqlwa.errors import UsageError
from sqlwa.outputs import allow_system_option

ANDROID_STEPS = """\b
  On a phone (no root needed; Termux's fio runs in app storage on /data,
  encrypted as every app's data is):
    sqlwa device jobfile > sqlwa-probe.fio      # on this machine
    adb push sqlwa-probe.fio /sdcard/Download/
    # in Termux on the phone:
    pkg install fio
    mkdir -p ~/probe && cd ~/probe && cp /sdcard/Download/sqlwa-probe.fio .
    fio --output-format=json --output=probe.json sqlwa-probe.fio
    rm sqlwa-probe.dat && cp probe.json /sdcard/Download/
    # back here:
    adb pull /sdcard/Download/probe.json
    sqlwa device import probe.json --name my-phone -o my-phone.toml
  With adb alone: push an arm64 fio to /data/local/tmp and run it there
  (adb shell 'cd /data/local/tmp && ./fio --output-format=json
  --output=probe.json sqlwa-probe.fio'). A fio without the libaio engine
  fails job write_qd8: delete that section; the profile then has no
  queue depth and serves requests one at a time."""


@click.group("device")
def device() -> None:
    """Device profiles: how long a storage device takes per request, for `sqlwa predict`.

    A profile holds latency distributions (p50 … p99.99, ms) of 4 KiB random writes, of
    the cache flush after one (fdatasync), of durable 4 KiB writes (O_DSYNC: write and
    flush, or a FUA write), of 4 KiB reads, the sequential write bandwidth and the queue
    depth, at one or more fill levels. It is measured here with fio (`probe`), imported
    from a phone's own fio run (`import`), or one of the published ones shipped with
    sqlwa (`list`).

    \b
      sqlwa device list                                   the shipped profiles
      sqlwa device show pixel-2016                        one profile's figures
      sudo sqlwa device probe /mnt/sd --fill 50 --fill 85 -o sd.toml
      sqlwa device jobfile > sqlwa-probe.fio              fio jobs for a phone
      sqlwa device import probe.json -o phone.toml
    """


def check_output(out: Path, allow_system: bool, reads: tuple[Path, ...] = ()) -> Path:
    """Where the profile goes, checked before minutes of measuring, not after; never one
    of the files it is made from (``reads``)."""
    return outputs.check_file(out, "-o", allow_system=allow_system, reads=reads)


def show(profile: Profile, written: Path | None = None) -> None:
    from sqlwa.views import device as view
    from sqlwa.views.terminal import wide_console

    console = wide_console()
    console.print(view.profile_table(profile))
    for line in view.profile_lines(profile):
        click.echo(line)
    if written is not None:
        click.echo(f"wrote {written}")


@device.command("probe")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="The profile TOML to write.")
@click.option(
    "--fill",
    "fills",
    type=float,
    multiple=True,
    metavar="PCT",
    help="Measure with the filesystem filled to PCT% used, one level per --fill, in rising order (0-99; filler "
    "files in the probe's own directory, removed afterwards). Default: one level, as full as it is.",
)
@click.option(
    "--seconds",
    type=float,
    default=probing.DEFAULT_SECONDS,
    show_default=True,
    help="How long each fio job runs (6 jobs per fill level): longer gives steadier tails.",
)
@click.option(
    "--size", "size_mib", type=click.IntRange(1, 1 << 20), default=probing.DEFAULT_SIZE_MIB, show_default=True,
    help="fio's data file, MiB.",
)  # fmt: skip
@click.option("--name", help="The profile's name [default: probe-<block device>].")
@allow_system_option
def probe_command(
    directory: Path, out: Path, fills: tuple[float, ...], seconds: float, size_mib: int, name, allow_system_dir
):
    """Measure the storage under DIRECTORY with fio and write its profile.

    Runs fio (`apt-get install fio`) in a fresh directory DIRECTORY/sqlwa-probe-<pid>-*
    that it removes afterwards (also on Ctrl-C or SIGTERM; after a kill -9,
    `sqlwa lab cleanup --workdir DIRECTORY`); nothing else is written. fio's jobs
    (`sqlwa device jobfile` prints them): 4 KiB random writes with O_DIRECT, each
    followed by fdatasync (their latency gives `write`, the fdatasync's gives `flush`);
    4 KiB random writes with O_DSYNC (`durable_write`, a FUA write where the device has
    FUA); 4 KiB random reads; IOPS one at a time and 8 at a time (the queue depth); 1 MiB
    sequential writes (bandwidth). The profile records the directory, filesystem, mount
    options, block device (model, write cache, FUA), kernel and fio version.

    The filesystem must take O_DIRECT. Measuring a directory on a loop device measures
    the loop device and what is under it.

    \b
    Examples:
      sqlwa device probe /var/tmp -o disk.toml --seconds 10
      sudo sqlwa device probe /mnt/sd --fill 50 --fill 85 -o sd.toml
    """
    target = check_output(out, allow_system_dir)
    options = probing.ProbeOptions(directory, tuple(fills), seconds, size_mib, name)
    profile = probing.probe(options, lambda text: click.echo(text, err=True))
    save(profile, target)
    show(profile, out)


@device.command("import")
@click.argument("fio_json", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="The profile TOML to write.")
@click.option("--name", required=True, help="The profile's name, e.g. the phone's model.")
@click.option("--description", default="", help="One line: which device, which partition.")
@click.option(
    "--fill",
    "fills",
    type=click.FloatRange(0, 100),
    multiple=True,
    metavar="PCT",
    help="How full the filesystem was for each FIO_JSON, in order (repeat once per file).",
)
@click.option("--fua/--no-fua", default=None, help="Whether the device has FUA (then O_DSYNC writes were FUA writes).")
@allow_system_option
def import_command(fio_json: tuple[Path, ...], out: Path, name: str, description: str, fills, fua, allow_system_dir):
    """Make a profile from fio's JSON output of sqlwa's job file, run elsewhere.

    Each FIO_JSON is one fill level: the output of
    `fio --output-format=json --output=FILE sqlwa-probe.fio`, the job file that
    `sqlwa device jobfile` prints. Jobs it does not know are ignored; a job fio reports
    an error for is refused.

    """
    if fills and len(fills) != len(fio_json):
        raise UsageError(
            f"{len(fills)} --fill for {len(fio_json)} fio outputs", "give one --fill per file, in the same order"
        )
    target = check_output(out, allow_system_dir, reads=fio_json)
    levels, versions, disks = [], set(), set()
    for number, path in enumerate(fio_json):
        data = fio.read_json(read_text(path), str(path))
        levels.append(fio.level_from_jobs(fio.jobs_by_name(data, str(path)), fua, fills[number] if fills else None))
        versions.add(str(data["fio version"]))
        disks.update(fio.disk_names(data))
    profile = Profile(
        name=name,
        kind="imported",
        provenance=Provenance(
            description=description,
            source=f"fio output imported by sqlwa device import: {', '.join(str(p) for p in fio_json)}",
        ),
        device={"fio_version": ", ".join(sorted(versions)), "disks": ", ".join(sorted(disks)) or None, "fua": fua},
        levels=levels,
    )
    save(profile, target)
    show(profile, out)


import_command.help = (import_command.help or "") + ANDROID_STEPS


def read_text(path: Path) -> str:
    try:
        data = inputs.read_input(path, "fio JSON output", inputs.FIO_JSON_LIMIT)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}", "pass fio's JSON output file") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not text: not fio's JSON output", "pass fio's JSON output file") from None


@device.command("jobfile")
@click.option("--seconds", type=click.FloatRange(0.5, 600), default=probing.DEFAULT_SECONDS, show_default=True)
@click.option(
    "--size", "size_mib", type=click.IntRange(1, 1 << 20), default=probing.DEFAULT_SIZE_MIB, show_default=True
)
def jobfile_command(seconds: float, size_mib: int):
    """Print the fio job file a profile is measured with (for a phone: see below).

    Run it in an empty directory on the storage to measure; it writes only
    sqlwa-probe.dat there. Then `sqlwa device import` its JSON output.

    """
    click.echo(fio.job_file(seconds, size_mib), nl=False)


jobfile_command.help = (jobfile_command.help or "") + ANDROID_STEPS


@device.command("list")
def list_command():
    """The profiles shipped with sqlwa: published figures, each with its headline latency
    (one synced 4 KiB write, the figure phones are compared by) and its source."""
    for name, path in devices.shipped().items():
        profile = load(path)
        headline = profile.headline()
        click.echo(f"{name:20s} {profile.provenance.description}")
        click.echo(f"{'':20s} {headline.text() if headline else 'no synced 4 KiB write figure'}")
        click.echo(f"{'':20s} source: {profile.provenance.source}")


@device.command("show")
@click.argument("profile_spec", metavar="PROFILE")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON (the TOML's keys) instead.")
def show_command(profile_spec: str, as_json: bool):
    """Show a profile (a file, or a shipped profile's name): its figures per fill level,
    its source and notes, and how `sqlwa predict` prices requests with it."""
    from sqlwa.views import device as view
    from sqlwa.views import json_output

    profile = devices.resolve(profile_spec)
    if as_json:
        click.echo(json_output.dumps(view.profile_document(profile)))
        return
    show(profile)
