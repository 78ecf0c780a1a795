"""File-based encryption of the workload's directory (``--encrypt``), as Android's FBE:
the layer over :class:`sqlwa.lab.encryption.Encryption`."""

from __future__ import annotations

from collections.abc import Sequence

from sqlwa.errors import UsageError
from sqlwa.lab import encryption
from sqlwa.lab.layer import Critical, DirectoryLayer, Ground, Layer, Site, Step, Want


class FscryptLayer(DirectoryLayer):
    """A v2 fscrypt policy on the directory the workload runs in, its key added at set-up
    and removed at teardown (while the filesystem is mounted)."""

    key = "encryption"
    stage = "encrypt"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.encryption: encryption.Encryption | None = None

    @classmethod
    def asked(cls, want: Want) -> FscryptLayer | None:
        return cls(want.stack.layers.encrypt) if want.stack.layers.encrypt != encryption.NO_ENCRYPTION else None

    def check(self, ground: Ground, layers: Sequence[Layer]) -> None:
        encryption.check_encryption(self.mode, ground.fs, ground.kernel_type)
        if ground.stacked:
            raise UsageError(
                f"--encrypt {self.mode} and --fs {ground.fs} are two file encryptions on top of each other",
                "choose one: --fs ext4 --encrypt fscrypt, or --fs ecryptfs",
            )

    def bind(self, site: Site) -> None:
        self.encryption = encryption.Encryption(self.mode)

    def _encryption(self) -> encryption.Encryption:
        assert self.encryption is not None, "bound to its lab"
        return self.encryption

    def mkfs_options(self, kernel_type: str) -> tuple[str, ...]:
        return encryption.ENCRYPTING_FILESYSTEMS[kernel_type]

    def open(self, mountpoint: str, data_dir: str, critical: Critical) -> str:
        return self._encryption().setup(mountpoint)

    def teardown_steps(self) -> Sequence[Step]:
        return (("remove_key", self._encryption().remove_key),)

    def describe(self) -> dict | None:
        return self._encryption().describe()
