"""The lab filesystem filled to a level before the workload (``--fill PCT``): the layer over
:func:`sqlwa.lab.fill.fill_filesystem`."""

from __future__ import annotations

from collections.abc import Sequence

from sqlwa.errors import UsageError
from sqlwa.lab.fill import fill_filesystem
from sqlwa.lab.layer import Critical, DirectoryLayer, Ground, Layer, Want


class FillLayer(DirectoryLayer):
    """Files of mixed sizes on the lab filesystem, up to ``pct`` % used; they go with it."""

    key = "fill"
    stage = "fill"

    def __init__(self, pct: float) -> None:
        self.pct = pct
        self.report: dict | None = None  # what was written, once set up

    @classmethod
    def asked(cls, want: Want) -> FillLayer | None:
        return cls(want.stack.volume.fill_pct) if want.stack.volume.fill_pct else None

    def check(self, ground: Ground, layers: Sequence[Layer]) -> None:
        if not 0 <= self.pct < 100:
            raise UsageError(f"--fill {self.pct}: must be between 0 and 99", "give a percentage such as 80")

    def open(self, mountpoint: str, data_dir: str, critical: Critical) -> str:
        self.report = fill_filesystem(mountpoint, self.pct)
        return data_dir

    def describe(self) -> dict | None:
        return self.report
