"""The layers a lab can have between SQLite and its disk, one module each, and their one
registry: :data:`KINDS`, in set-up order (teardown walks it back).

Under the filesystem, over the loop device and before mkfs: dm-crypt, dm-delay (one
device-mapper layer at a time: their checks refuse two), a crash run's log-writes. Over
the mounted filesystem: fscrypt, eCryptfs, the fill, and FUSE last (the daemon serves the
directory as the workload finds it). Adding a layer: its module here (a
:class:`~sqlwa.lab.layer.Layer`) and its line in :data:`KINDS`.
"""

from __future__ import annotations

import os

from sqlwa.lab.layer import Layer, StackView, Want
from sqlwa.lab.layers.dmcrypt import DmCryptLayer
from sqlwa.lab.layers.dmdelay import DmDelayLayer
from sqlwa.lab.layers.ecryptfs import EcryptfsStack
from sqlwa.lab.layers.fill import FillLayer
from sqlwa.lab.layers.fscrypt import FscryptLayer
from sqlwa.lab.layers.fuse import FuseDaemonLayer
from sqlwa.lab.layers.logwrites import LogWritesLayer

#: Every layer kind, in the order a lab sets them up.
KINDS: tuple[type[Layer], ...] = (
    DmCryptLayer,
    DmDelayLayer,
    LogWritesLayer,
    FscryptLayer,
    EcryptfsStack,
    FillLayer,
    FuseDaemonLayer,
)


def asked(stack: StackView, stacked: str | None = None, write_log: str | os.PathLike | None = None) -> list[Layer]:
    """The layers ``stack`` asks for (on a filesystem that stacks ``stacked`` on itself;
    with a crash run's ``write_log``), in set-up order."""
    want = Want(stack, stacked, write_log)
    return [layer for kind in KINDS if (layer := kind.asked(want)) is not None]


def check(stack: StackView, has_device: bool, *, host: bool = True) -> None:
    """Refuse what ``stack`` alone cannot have, before root and before anything is made
    (``host``: on this machine; False: in the VM lab, whose guest checks its kernel)."""
    for kind in KINDS:
        kind.check_stack(stack, has_device, host)
