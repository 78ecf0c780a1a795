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
    help="Also look for leftover lab directories here (the temp dir is always searched).",
)
def cleanup(workdirs: tuple[str, ...]) -> None:
    """Remove what crashed sqlwa runs left behind.

    Only things named by sqlwa itself (sqlwa-lab-<pid>-* images, their loop devices and
    mounts, sqlwa-<pid>-* tracefs instances) whose owning process is dead are removed;
    nothing else is touched.
    """
    from sqlwa.lab.cleanup import cleanup_leftovers

    removed = cleanup_leftovers(workdirs)
    if not removed:
        click.echo("nothing to clean")
    for line in removed:
        click.echo(line)
    if any(line.startswith("failed") for line in removed):
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
