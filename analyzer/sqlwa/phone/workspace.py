"""What a run puts on the phone, and taking it off again: one directory of its own under
/data/local/tmp (where the shell user may write and run programs: AOSP's sepolicy gives
``shell`` the ``shell_data_file`` type there), named ``sqlwa-PID-RANDOM``, holding an
``owner`` file that says which process of which host made it.

A run removes its directory (and the trace its perfetto session wrote under
/data/misc/perfetto-traces, named as the directory) on the way out, after success, failure or Ctrl-C. When the
connection is cut mid-run that cannot be done: the directory stays, and the next run on
that phone (or ``sqlwa lab cleanup --adb``) removes every ``sqlwa-`` directory whose
owner was a process of this host that is no longer running. A directory another host
made is named and left alone: its run may still be going on.
"""

from __future__ import annotations

import os
import posixpath
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlwa._system import processes
from sqlwa.phone import record
from sqlwa.phone.adb import Device

BASE = "/data/local/tmp"
PREFIX = "sqlwa-"
OWNER_FILE = "owner"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MACHINE_ID = Path("/etc/machine-id")


@dataclass(frozen=True)
class Owner:
    """The host process a directory on the phone belongs to: the host (its machine id,
    else its name), this boot of it (the kernel's boot id) and the pid."""

    host: str
    boot_id: str
    pid: int

    @classmethod
    def here(cls) -> Owner:
        return cls(host_id(), BOOT_ID.read_text().strip(), os.getpid())

    def line(self) -> str:
        return f"{self.host} {self.boot_id} {self.pid}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        words = text.split()
        if len(words) != 3 or not words[2].isdigit():
            return None
        return cls(words[0], words[1], int(words[2]))

    def is_ours(self) -> bool:
        """Whether this host made it, in this boot or an earlier one."""
        return self.host == host_id()

    def is_gone(self) -> bool:
        """Whether this owner, a process of this host, no longer runs."""
        return self.boot_id != BOOT_ID.read_text().strip() or processes.pid_is_dead(self.pid)


def host_id() -> str:
    """This host, as the owner files name it: systemd's machine id where there is one."""
    try:
        return MACHINE_ID.read_text().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


@contextmanager
def workspace(device: Device, base: str = BASE) -> Iterator[str]:
    """A fresh directory of this run's on the phone, removed on the way out."""
    path = posixpath.join(base, f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    device.shell(["mkdir", "-m", "0700", path])
    try:
        device.shell(["sh", "-c", f'echo "$1" > "$2/{OWNER_FILE}"', "sh", Owner.here().line(), path])
        yield path
    finally:
        remove(device, path)


def remove(device: Device, path: str) -> None:
    """``path`` removed from the phone with the trace its run recorded, if one is left
    there; a connection that is gone says so in the error (``sqlwa lab cleanup --adb``
    removes them later)."""
    device.shell(["rm", "-rf", path, record.trace_path(posixpath.basename(path))])


@dataclass(frozen=True)
class Leftover:
    """A ``sqlwa-`` directory on the phone, and who made it (None: no readable owner file)."""

    path: str
    owner: Owner | None

    @property
    def removable(self) -> bool:
        """A run of this host's that has ended left it (or it has no owner: a run cut
        before it could write one, the first step after mkdir)."""
        return self.owner is None or (self.owner.is_ours() and self.owner.is_gone())


def leftovers(device: Device, base: str = BASE) -> list[Leftover]:
    """Every ``sqlwa-`` directory under ``base`` on the phone, with its owner."""
    listing = device.shell(
        [
            "sh",
            "-c",
            'for d in "$1"/' + PREFIX + '*/; do [ -d "$d" ] && echo "${d%/} $(cat "$d/owner" 2>/dev/null)"; done',
            "sh",
            base,
        ],
        check=False,
    )
    found = []
    for line in listing.stdout.splitlines():
        path, _, owner = line.partition(" ")
        if posixpath.basename(path).startswith(PREFIX):
            found.append(Leftover(path, Owner.parse(owner)))
    return found


def clean(device: Device, base: str = BASE) -> tuple[list[Leftover], list[Leftover]]:
    """Remove what ended runs of this host left on the phone; returns (removed, kept)."""
    removed, kept = [], []
    for left in leftovers(device, base):
        if left.removable:
            remove(device, left.path)
            removed.append(left)
        else:
            kept.append(left)
    return removed, kept
