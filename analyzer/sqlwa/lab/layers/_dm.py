"""What the device-mapper layers under the filesystem share: a target of the lab's name
over its loop device (:class:`sqlwa.lab.devmapper.DmTarget`), and the check that this
kernel has device-mapper and the target's type."""

from __future__ import annotations

from collections.abc import Sequence

from sqlwa import _system
from sqlwa.errors import UsageError
from sqlwa.lab import devmapper
from sqlwa.lab.layer import BlockLayer, Critical, Site, Step


def check_target(option: str, target: str, label: str, module: str) -> None:
    """device-mapper and its ``target`` type, or one line saying the VM lab has them."""
    if not _system.dm.device_mapper_available():
        raise UsageError(f"{option} needs device-mapper, which this kernel lacks; add --vm")
    # dmsetup needs root to list the targets; without root, the lab's root check says so next
    if _system.processes.is_root() and not _system.dm.dm_target_available(target, module):
        raise UsageError(f"{option} needs device-mapper's {target} target ({label}), which this kernel lacks; add --vm")


class DmTargetLayer(BlockLayer):
    """A device-mapper target named like the lab, over its loop device; found by that
    name at teardown, so a set-up cut short is undone."""

    def __init__(self) -> None:
        self.target: devmapper.DmCrypt | devmapper.DmDelay | None = None

    def bind(self, site: Site) -> None:
        self.target = self.make_target(site.name)

    def make_target(self, name: str) -> devmapper.DmCrypt | devmapper.DmDelay:
        raise NotImplementedError

    def _target(self) -> devmapper.DmCrypt | devmapper.DmDelay:
        assert self.target is not None, "bound to its lab"
        return self.target

    @property
    def path(self) -> str:
        return self._target().path

    @property
    def dev(self) -> tuple[int, int] | None:
        device = self._target().device
        return (device.major, device.minor) if device is not None else None

    def open(self, under: str, critical: Critical) -> None:
        with critical():
            self._target().open(under)

    def assert_over(self, under: str) -> None:
        self._target().assert_over(under)

    def teardown_steps(self) -> Sequence[Step]:
        return (("remove_dm_target", self._target().close),)

    def describe(self) -> dict | None:
        return self._target().describe()
