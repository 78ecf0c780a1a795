"""A crash run's write log (``sqlwa crash``): device-mapper's log-writes target between the
loop device and the filesystem, logging to a second loop device over a sparse file in
the lab directory; the layer over :class:`sqlwa.lab.devmapper.LogWrites`, and the one
place what a crash run can log is checked."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from sqlwa import _system
from sqlwa.errors import UsageError
from sqlwa.lab import devmapper, encryption
from sqlwa.lab.layer import BlockLayer, Critical, Ground, Layer, Site, Step, Want
from sqlwa.lab.layers.dmcrypt import DmCryptLayer
from sqlwa.lab.layers.dmdelay import DmDelayLayer
from sqlwa.lab.layers.fscrypt import FscryptLayer

LOG_SLACK = 64 << 20  # beyond twice the image: one sector per logged entry, marks


def check_log_writes(has_device: bool, fs: str) -> None:
    """Refuse, before anything is made, a write log (``sqlwa crash``) this run cannot have."""
    if not has_device:
        raise UsageError(f"sqlwa crash: {fs} has no block device whose writes could be logged", "use --fs ext4")
    if not _system.dm.device_mapper_available():
        raise UsageError(
            "sqlwa crash records the device's writes with device-mapper's log-writes target, "
            "and this kernel has no device-mapper",
            "add --vm",
        )
    if _system.processes.is_root() and not _system.dm.dm_target_available("log-writes", "dm_log_writes"):
        raise UsageError("sqlwa crash needs device-mapper's log-writes target, which this kernel lacks", "add --vm")


def check_write_log(ground: Ground, layers: Sequence[Layer]) -> None:
    """What a crash run can log and read back: a plain block filesystem (with FUSE over
    it if asked). File encryption leaves the replayed database unreadable (its key is
    gone by then), and dm-crypt under the log would need a second remap to attribute."""
    encrypt = next((layer.mode for layer in layers if isinstance(layer, FscryptLayer)), encryption.NO_ENCRYPTION)
    if encrypt != encryption.NO_ENCRYPTION or ground.stacked:
        raise UsageError(f"sqlwa crash cannot read back an encrypted database (--encrypt {encrypt}, --fs {ground.fs})")
    if any(isinstance(layer, DmCryptLayer) for layer in layers):
        raise UsageError("sqlwa crash does not yet log writes under --crypt", "leave out --crypt")
    if any(isinstance(layer, DmDelayLayer) for layer in layers):  # a second device-mapper layer under the log
        raise UsageError("sqlwa crash does not log writes under --device-delay", "leave out --device-delay")
    check_log_writes(ground.has_device, ground.fs)


class LogWritesLayer(BlockLayer):
    """log-writes over the loop device; its log is moved to ``write_log`` at teardown."""

    key = "write_log"
    stage = "log-writes"

    def __init__(self, write_log: str | os.PathLike) -> None:
        self.write_log = write_log
        self.target: devmapper.LogWrites | None = None
        self.site: Site | None = None

    @classmethod
    def asked(cls, want: Want) -> LogWritesLayer | None:
        return cls(want.write_log) if want.write_log is not None else None

    def check(self, ground: Ground, layers: Sequence[Layer]) -> None:
        check_write_log(ground, layers)

    def bind(self, site: Site) -> None:
        self.site = site
        self.target = devmapper.LogWrites(site.name)

    def _bound(self) -> tuple[Site, devmapper.LogWrites]:
        assert self.site is not None and self.target is not None, "bound to its lab"
        return self.site, self.target

    @property
    def path(self) -> str:
        return self._bound()[1].path

    @property
    def dev(self) -> tuple[int, int] | None:
        device = self._bound()[1].device
        return (device.major, device.minor) if device is not None else None

    def open(self, under: str, critical: Critical) -> None:
        site, target = self._bound()
        with open(site.log_image, "xb") as f:
            f.truncate(2 * site.image_size + LOG_SLACK)  # sparse: only what is logged costs space
        with critical():
            argv = ["losetup", "--find", "--show", site.log_image]
            log_device = _system.tools.run_tool(argv, "attaching the write log to a loop device").stdout.strip()
            target.open(under, log_device)

    def assert_over(self, under: str) -> None:
        self._bound()[1].assert_over(under)

    def mounted(self) -> None:
        self._bound()[1].mark(devmapper.READY_MARK)  # what came before (mkfs) is no crash state of the run's

    def teardown_steps(self) -> Sequence[Step]:
        return (("close_log_writes", self._close), ("keep_write_log", self._keep))

    def _close(self) -> None:
        """Remove the target (it logs what no flush covered, then its end mark), then the
        log's loop device, found by its file."""
        site, target = self._bound()
        target.close()
        for loop in _system.loops.loops_backed_by(site.log_image):
            _system.loops.detach_loop(loop.device)

    def _keep(self) -> None:
        """The log to where the crash run reads it; not while a loop device still has it."""
        site = self._bound()[0]
        if os.path.isfile(site.log_image) and not _system.loops.loops_backed_by(site.log_image):
            shutil.move(site.log_image, self.write_log)

    def describe(self) -> dict | None:
        return {"target": self._bound()[1].name}
