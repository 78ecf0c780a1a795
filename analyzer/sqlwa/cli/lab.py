"""``sqlwa lab``: what this machine's lab can provide, and cleaning up after crashed runs."""

from __future__ import annotations

import click


@click.group()
def lab() -> None:
    """The lab: fresh filesystems on loop devices, and the tracefs capture."""


@lab.command()
@click.option(
    "--workdir",
    "workdirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Also look for leftover lab and scratch directories here (the temp dir is always searched).",
)
def cleanup(workdirs: tuple[str, ...]) -> None:
    """Remove what crashed or killed sqlwa runs left behind.

    Only things named by sqlwa itself are looked at: sqlwa-lab-<pid>-* images, their loop
    devices and mounts, sqlwa-<pid>-* tracefs instances (these need root), and the
    sqlwa-run-<pid>-* scratch directories of runs without --fs (the temp dir's and those
    in each --workdir; a database kept with --keep-db stays), and the sqlwa-record-<pid>-*
    spools of killed recordings (the program's SQL, unredacted) with the .part file of
    the log they were writing, and the markers killed runs left in /tmp/sqlwa-measuring
    (the directory goes once empty). Each is removed only where
    its owner is gone: the pid is dead and nobody holds the lock its owner keeps on it,
    so a cleanup inside a container (another PID namespace) never touches a live run
    outside it, and the other way round. A lab or scratch directory must also carry the
    mark sqlwa writes into it as it makes it (.sqlwa-lab, .sqlwa-scratch): one merely
    named like it (a user's own, or an older sqlwa's) is left, with its loop devices and
    mounts, and said so. Nothing else is touched.

    \b
      sudo sqlwa lab cleanup                  # after a kill -9 of a lab run
      sqlwa lab cleanup --workdir ~/scratch   # a killed run's --dir ~/scratch
    """
    from sqlwa.lab.cleanup import ROOT_ONLY, cleanup_leftovers

    lines = cleanup_leftovers(workdirs)
    if not [line for line in lines if line != ROOT_ONLY]:
        click.echo("nothing to clean")
    for line in lines:
        click.echo(line)
    if any(line.startswith("failed") for line in lines):
        raise SystemExit(1)


@lab.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON list instead, one {"what", "ok", "reason", "hint"} per line of the table.',
)
def check(as_json: bool) -> None:
    """Which filesystems this machine can provide, and whether the capture can run."""
    lines = availability()
    if as_json:
        from sqlwa.views import json_output

        keys = ("what", "ok", "reason", "hint")
        click.echo(json_output.dumps([dict(zip(keys, line)) for line in lines]))
        return
    for line in lines:
        _line(*line)


def availability() -> list[tuple[str, bool, str, str | None]]:
    """(what, ok, reason, fix) for root, tracefs, the syscall tracepoints, each --fs,
    --crypt and --device-delay."""
    from sqlwa._system.processes import is_root
    from sqlwa.capture.tracing import tracefs_available
    from sqlwa.lab.filesystem import FILESYSTEMS, filesystem_support
    from sqlwa.lab.layers.dmcrypt import crypt_support
    from sqlwa.lab.layers.dmdelay import delay_support

    root = is_root()
    lines: list[tuple[str, bool, str, str | None]] = [
        ("root", root, "yes" if root else "no: --fs and the capture need root (use sudo, or --dir)", None)
    ]
    tracefs = tracefs_available()
    lines.append(("tracefs", tracefs.available, tracefs.reason, tracefs.hint))
    if tracefs.available:
        lines.append(("syscall tracepoints", tracefs.syscalls, tracefs.syscall_reason, None))
    for fs in FILESYSTEMS:
        support = filesystem_support(fs)
        lines.append((f"--fs {fs}", support.available, support.reason, support.hint))
    lines.append(("--crypt", *crypt_support()))
    lines.append(("--device-delay", *delay_support()))
    lines.append(vm_availability())
    return lines


def vm_availability() -> tuple[str, bool, str, str | None]:
    """Whether ``sqlwa run --vm`` can boot a guest here, and on which accelerator."""
    from sqlwa.errors import UsageError, hint_of
    from sqlwa.vm import initramfs, machine

    try:
        qemu = machine.qemu_binary()
        initramfs.static_busybox()
    except UsageError as exc:
        return ("--vm", False, str(exc), hint_of(exc))
    accelerators = machine.accelerators()
    how = (
        "KVM tried first, TCG where it cannot boot the kernel"
        if "kvm" in accelerators
        else "TCG (no access to /dev/kvm)"
    )
    return ("--vm", True, f"{qemu} and a static busybox present; {how}; no root needed", None)


def _line(what: str, ok: bool, reason: str, hint: str | None = None) -> None:
    mark = click.style("ok  ", fg="green") if ok else click.style("no  ", fg="red")
    click.echo(f"{mark}{what:<22} {reason}")
    if hint and not ok:
        click.echo(f"    {'':<22} fix: {hint}")
