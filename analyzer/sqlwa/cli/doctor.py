"""``sqlwa doctor``: what this machine can measure, and the one command that adds each
missing piece. It only looks (a root doctor may load a filesystem module with modprobe, as
``sqlwa lab check`` does); it never mounts tracefs: ``sqlwa run --fs`` and ``sqlwa demo``
do that themselves, as root, when they need it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import click

SECTIONS = ("level", "filesystem", "layer", "vm lab")


@dataclass(frozen=True)
class Finding:
    section: str  # one of SECTIONS
    what: str
    ok: bool
    detail: str
    fix: str | None = None  # the one command that adds it, when it is missing


@click.command("doctor")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON list instead, one {"section", "what", "ok", "detail", "fix"} per line of the table.',
)
def doctor_command(as_json: bool) -> None:
    """What this machine can measure (levels, filesystems, layers, the VM lab), and the
    command that adds each missing piece.

    The levels are VFS (SQLite's own calls, anywhere), syscall and block (root and tracefs;
    block also a lab filesystem); the filesystems those of `sqlwa run --fs`; the layers
    fscrypt (--encrypt), FUSE (--fuse), dm-crypt (--crypt) and eCryptfs (--fs ecryptfs);
    the VM lab `sqlwa run --vm`, on KVM or TCG. Always exits 0: a missing piece is news,
    not an error.

    \b
      sqlwa doctor           # as you
      sudo sqlwa doctor      # as the lab runs it
      sqlwa doctor --json
    """
    findings = diagnose()
    if as_json:
        from sqlwa.views import json_output

        click.echo(json_output.dumps([asdict(f) for f in findings]))
        return
    section = None
    for f in findings:
        if f.section != section:
            section = f.section
            click.echo(click.style(f"{section}s" if section != "vm lab" else section, bold=True))
        mark = click.style("ok  ", fg="green") if f.ok else click.style("no  ", fg="red")
        click.echo(f"  {mark}{f.what:<12} {f.detail}")
        if f.fix and not f.ok:
            click.echo(f"      {'':<12} add it: {f.fix}")


def diagnose() -> list[Finding]:
    return [*levels(), *filesystems(), *layers(), *vm_lab()]


ROOT_FIX = "sudo sqlwa demo   (as root sqlwa mounts tracefs itself when it is absent)"
TRACEFS_FIX = "mount -t tracefs nodev /sys/kernel/tracing   (or let sudo sqlwa demo do it)"


def levels() -> list[Finding]:
    from sqlwa import _system
    from sqlwa.capture.tracing import tracefs_available
    from sqlwa.lab.filesystem import filesystem_support

    found = [Finding("level", "VFS", True, "SQLite's own calls, counted by sqlwa's VFS shim: any user, any directory")]
    if not _system.processes.is_root():
        why = "needs root (loop devices, mounts and tracefs are root-only)"
        return [
            *found,
            Finding("level", "syscall", False, why, ROOT_FIX),
            Finding("level", "block", False, why, ROOT_FIX),
        ]
    tracefs = tracefs_available()
    if not tracefs.available:
        fix = TRACEFS_FIX if _system.tracefs.tracefs_root() is None else tracefs.hint
        return [
            *found,
            Finding("level", "syscall", False, tracefs.reason, fix),
            Finding("level", "block", False, tracefs.reason, fix),
        ]
    found.append(
        Finding(
            "level",
            "syscall",
            tracefs.syscalls,
            tracefs.syscall_reason,
            None if tracefs.syscalls else "sqlwa run --vm   (Debian's kernel has CONFIG_FTRACE_SYSCALLS)",
        )
    )
    ext4 = filesystem_support("ext4")
    found.append(
        Finding(
            "level",
            "block",
            ext4.available,
            f"block tracepoints present ({tracefs.reason}); lab filesystems on loop devices"
            if ext4.available
            else f"block tracepoints present, but no lab filesystem: {ext4.reason}",
            ext4.fix,
        )
    )
    return found


def filesystems() -> list[Finding]:
    from sqlwa.lab.filesystem import filesystem_support

    found = []
    for fs in ("ext4", "xfs", "btrfs", "f2fs"):
        support = filesystem_support(fs)
        found.append(Finding("filesystem", fs, support.available, support.reason, support.fix))
    return found


def layers() -> list[Finding]:
    import os

    from sqlwa.errors import UnsupportedFilesystem, UsageError, hint_of
    from sqlwa.lab import ecryptfs, fuse
    from sqlwa.lab.layers.dmcrypt import crypt_support

    found = []
    fscrypt = os.path.exists("/sys/fs/ext4/features/encryption")
    found.append(
        Finding(
            "layer",
            "fscrypt",
            fscrypt,
            "ext4 has file-based encryption (/sys/fs/ext4/features/encryption)"
            if fscrypt
            else "this kernel's ext4 has no encryption feature",
            None if fscrypt else "sqlwa run --vm --fs ext4 --encrypt fscrypt   (Debian's kernel has it)",
        )
    )
    try:
        fuse.check_fuse("passthrough")
        daemon = fuse.daemon_binary(fuse.SQLWA_DAEMON)
        found.append(Finding("layer", "FUSE", True, f"the kernel's FUSE, /dev/fuse and {daemon}"))
    except (UnsupportedFilesystem, UsageError) as exc:
        found.append(Finding("layer", "FUSE", False, str(exc), hint_of(exc)))
    ok, reason, hint = crypt_support()
    if not ok and hint is None:
        hint = "sqlwa run --vm --crypt dm-crypt   (Debian's kernel has device-mapper)"
    found.append(Finding("layer", "dm-crypt", ok, reason, hint))
    try:
        ecryptfs.check_ecryptfs()
        found.append(Finding("layer", "eCryptfs", True, "the kernel has ecryptfs (/proc/filesystems)"))
    except UnsupportedFilesystem as exc:
        found.append(Finding("layer", "eCryptfs", False, str(exc), "sqlwa run --vm --fs ecryptfs"))
    return found


def vm_lab() -> list[Finding]:
    from sqlwa.errors import UsageError, hint_of
    from sqlwa.vm import initramfs, machine

    try:
        qemu = machine.qemu_binary()
        initramfs.static_busybox()
    except UsageError as exc:
        return [Finding("vm lab", "qemu", False, str(exc), hint_of(exc))]
    found = [Finding("vm lab", "qemu", True, f"{qemu} and a static busybox: sqlwa run --vm, no root needed")]
    if "kvm" in machine.accelerators():
        found.append(Finding("vm lab", "kvm", True, "/dev/kvm is usable: guests boot at native speed (TCG if not)"))
    else:
        found.append(
            Finding(
                "vm lab",
                "kvm",
                False,
                "no access to /dev/kvm: guests run on TCG (emulated, several times slower)",
                "sudo usermod -aG kvm $USER   (on a host with virtualization enabled)",
            )
        )
    return found
