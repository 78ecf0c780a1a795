"""dm-crypt under the lab filesystem (``--crypt``), as Android's FDE: the layer over
:class:`sqlwa.lab.devmapper.DmCrypt`, and the one place its refusals are made."""

from __future__ import annotations

from collections.abc import Sequence

from sqlwa import _system
from sqlwa.errors import UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import devmapper
from sqlwa.lab.layer import Ground, Layer, StackView, Want
from sqlwa.lab.layers._dm import DmTargetLayer, check_target


def check_crypt(mode: str, fs: str, has_device: bool) -> None:
    """Refuse, before anything is made, a --crypt this run cannot have."""
    if mode not in devmapper.CHOICES:
        raise UsageError(f"--crypt {mode!r} is not a crypt mode", f"choose one of: {', '.join(devmapper.CHOICES)}")
    if mode == devmapper.NO_CRYPT:
        return
    if not has_device:  # what the filesystem lacks: a sweep skips the cell with this reason
        raise UnsupportedFilesystem(
            f"--crypt {mode}: {fs} has no block device to encrypt", "use a disk filesystem such as ext4"
        )
    check_target("--crypt", "crypt", "dm-crypt", "dm_crypt")
    if not _system.tools.find_tool("cryptsetup"):
        raise UsageError("--crypt needs cryptsetup, which this machine lacks", "apt-get install cryptsetup-bin")


def crypt_support() -> tuple[bool, str, str | None]:
    """(available, reason, fix) of --crypt on this machine, for ``sqlwa lab check``."""
    try:
        check_crypt("dm-crypt", "ext4", has_device=True)
    except UsageError as exc:
        return False, str(exc), hint_of(exc)
    return True, "device-mapper, its crypt target and cryptsetup present", None


def crypt_mode(layers: Sequence[Layer]) -> str:
    """The --crypt of a lab with these layers."""
    return next((layer.mode for layer in layers if isinstance(layer, DmCryptLayer)), devmapper.NO_CRYPT)


class DmCryptLayer(DmTargetLayer):
    """dm-crypt between the loop device and the filesystem, named like the lab."""

    key = "crypt"
    stage = "crypt"

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    @classmethod
    def asked(cls, want: Want) -> DmCryptLayer | None:
        return cls(want.stack.layers.crypt) if want.stack.layers.crypt != devmapper.NO_CRYPT else None

    @classmethod
    def check_stack(cls, stack: StackView, has_device: bool, host: bool) -> None:
        if host:  # the guest checks its own kernel
            check_crypt(stack.layers.crypt, stack.volume.fs or "", has_device)

    def check(self, ground: Ground, layers: Sequence[Layer]) -> None:
        check_crypt(self.mode, ground.fs, ground.has_device)

    def make_target(self, name: str) -> devmapper.DmCrypt:
        return devmapper.DmCrypt(self.mode, name)
