"""A layer of the lab made for the tests: the lab's data directory bind-mounted at
``<lab dir>/passthrough``, where the workload then runs, every call passing straight
through to the directory under it.

It shows what adding a layer takes: this module (a :class:`~sqlwa.lab.layer.DirectoryLayer`)
and one line in :data:`sqlwa.lab.layers.KINDS` (the tests add it with monkeypatch). It
also records what the lab asked of it, in order, to show when set-up, sync and teardown
reach it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from sqlwa import _system
from sqlwa.lab.layer import Critical, DirectoryLayer, Site, Step, Want

MOUNT_DIR = "passthrough"


class PassthroughLayer(DirectoryLayer):
    """A bind mount of the workload's directory; asked for by every stack."""

    key = "passthrough"
    stage = "passthrough"

    def __init__(self) -> None:
        self.mountpoint: str | None = None
        self.lab_mountpoint: str | None = None
        self.lower: str | None = None
        # (what was asked, whether the lab filesystem was mounted then)
        self.calls: list[tuple[str, bool]] = []

    @classmethod
    def asked(cls, want: Want) -> PassthroughLayer | None:
        return cls()

    def bind(self, site: Site) -> None:
        self.mountpoint = os.path.join(site.lab_dir, MOUNT_DIR)
        self.lab_mountpoint = site.mountpoint

    def _record(self, call: str) -> None:
        assert self.lab_mountpoint is not None
        self.calls.append((call, _system.mounts.mount_at(self.lab_mountpoint) is not None))

    def open(self, mountpoint: str, data_dir: str, critical: Critical) -> str:
        assert self.mountpoint is not None
        self._record("open")
        self.lower = data_dir
        os.mkdir(self.mountpoint, 0o700)
        with critical():
            _system.tools.mount(["mount", "--bind", data_dir, self.mountpoint], "bind-mounting", "", "bind")
        return self.mountpoint

    def teardown_steps(self) -> Sequence[Step]:
        return (("unmount_passthrough", self._teardown),)

    def _teardown(self) -> None:
        """Found by its name: unmounted and removed if it exists."""
        assert self.mountpoint is not None
        self._record("teardown")
        if _system.mounts.mount_at(self.mountpoint) is not None:
            _system.mounts.unmount(self.mountpoint)
        if os.path.isdir(self.mountpoint):
            os.rmdir(self.mountpoint)

    def sync(self) -> None:
        self._record("sync")

    def describe(self) -> dict | None:
        return {"mountpoint": self.mountpoint, "lower": self.lower}
