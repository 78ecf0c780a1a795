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
    in each --workdir; a database kept with --keep-db stays). Each is removed only where
    its owner is gone: the pid is dead and nobody holds the lock its owner keeps on it,
    so a cleanup inside a container (another PID namespace) never touches a live run
    outside it, and the other way round. Nothing else is touched.

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
def check() -> None:
    """Which filesystems this machine can provide, and whether the capture can run."""
    from sqlwa._system import is_root
    from sqlwa.capture.tracing import tracefs_available
    from sqlwa.lab.filesystem import FILESYSTEMS, filesystem_support

    _line("root", is_root(), "yes" if is_root() else "no: --fs and the capture need root (use sudo, or --dir)")
    tracefs = tracefs_available()
    _line("tracefs", tracefs.available, tracefs.reason, tracefs.hint)
    if tracefs.available:
        _line("syscall tracepoints", tracefs.syscalls, tracefs.syscall_reason)
    for fs in FILESYSTEMS:
        support = filesystem_support(fs)
        _line(f"--fs {fs}", support.available, support.reason, support.hint)


def _line(what: str, ok: bool, reason: str, hint: str | None = None) -> None:
    mark = click.style("ok  ", fg="green") if ok else click.style("no  ", fg="red")
    click.echo(f"{mark}{what:<22} {reason}")
    if hint and not ok:
        click.echo(f"    {'':<22} fix: {hint}")
