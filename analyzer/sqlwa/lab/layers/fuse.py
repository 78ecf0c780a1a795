"""A FUSE daemon between SQLite and the lab filesystem (``--fuse``), as Android's /sdcard:
the layer over :class:`sqlwa.lab.fuse.FuseLayer`. Last over the mount: the daemon serves
the directory as the workload would otherwise find it."""

from __future__ import annotations

from collections.abc import Sequence

from sqlwa import _system
from sqlwa.lab import fuse
from sqlwa.lab.layer import Critical, DirectoryLayer, Ground, Layer, Site, Step, Want


class FuseDaemonLayer(DirectoryLayer):
    """The daemon and its mount, named after the lab's token (the daemon's comm)."""

    key = "fuse"
    stage = "fuse"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.daemon: fuse.FuseLayer | None = None

    @classmethod
    def asked(cls, want: Want) -> FuseDaemonLayer | None:
        return cls(want.stack.layers.fuse) if want.stack.layers.fuse != fuse.NO_FUSE else None

    def check(self, ground: Ground, layers: Sequence[Layer]) -> None:
        fuse.check_fuse(self.mode)

    def bind(self, site: Site) -> None:
        self.daemon = fuse.FuseLayer(fuse.LAYERS[self.mode], site.lab_dir, site.token)

    def _daemon(self) -> fuse.FuseLayer:
        assert self.daemon is not None, "bound to its lab"
        return self.daemon

    def open(self, mountpoint: str, data_dir: str, critical: Critical) -> str:
        return self._daemon().setup(data_dir, critical)

    def teardown_steps(self) -> Sequence[Step]:
        # first of all: the daemon holds lower files open, which would keep the key and the mount busy
        return (("stop_fuse", self._daemon().teardown),)

    def sync(self) -> None:
        _system.mounts.syncfs(self._daemon().mountpoint)  # a writeback cache sends its dirty pages to the daemon

    def describe(self) -> dict | None:
        return self._daemon().describe()
