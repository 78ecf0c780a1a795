"""eCryptfs over the lab's ext4 (``--fs ecryptfs``): the layer over
:class:`sqlwa.lab.ecryptfs.EcryptfsLayer`, asked for by the filesystem itself
(``FsSpec.stacked``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlwa import _system
from sqlwa.lab import ecryptfs
from sqlwa.lab.layer import Critical, DirectoryLayer, Site, Step, Want


class EcryptfsStack(DirectoryLayer):
    """The eCryptfs mount the workload runs in, over a directory of the lab's ext4."""

    key = "ecryptfs"
    stage = "ecryptfs"

    def __init__(self) -> None:
        self.mount: ecryptfs.EcryptfsLayer | None = None

    @classmethod
    def asked(cls, want: Want) -> EcryptfsStack | None:
        return cls() if want.stacked == cls.key else None

    def bind(self, site: Site) -> None:
        self.mount = ecryptfs.EcryptfsLayer(site.lab_dir, site.name)

    def _mount(self) -> ecryptfs.EcryptfsLayer:
        assert self.mount is not None, "bound to its lab"
        return self.mount

    def open(self, mountpoint: str, data_dir: str, critical: Critical) -> str:
        return self._mount().setup(mountpoint, critical)

    def mappable(self, path: str) -> str:
        return self._mount().lower_path(path)  # eCryptfs has no FIEMAP; its lower files have the blocks

    def teardown_steps(self) -> Sequence[Step]:
        return (("unmount_ecryptfs", self._mount().teardown),)

    def sync(self) -> None:
        _system.mounts.syncfs(self._mount().mountpoint)  # its dirty pages become the lower files' first

    def describe(self) -> dict | None:
        return self._mount().describe()
