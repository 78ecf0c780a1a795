"""dm-delay under the lab filesystem (``--device-delay MS``), a device of known latency:
the layer over :class:`sqlwa.lab.devmapper.DmDelay`, and the one place its refusals
(its range, dm-crypt beside it, device-mapper here) are made."""

from __future__ import annotations

from collections.abc import Sequence

from sqlwa.errors import UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import devmapper
from sqlwa.lab.layer import Ground, Layer, StackView, Want
from sqlwa.lab.layers._dm import DmTargetLayer, check_target
from sqlwa.lab.layers.dmcrypt import crypt_mode


def check_delay(delay_ms: int | None, crypt: str, fs: str, has_device: bool) -> None:
    """Refuse, before anything is made, a --device-delay this run cannot have."""
    if delay_ms is None:
        return
    check_delay_with(delay_ms, crypt)
    if not has_device:
        raise UnsupportedFilesystem(
            f"--device-delay: {fs} has no block device to delay", "use a disk filesystem such as ext4"
        )
    check_target("--device-delay", "delay", "dm-delay", "dm_delay")


def check_delay_with(delay_ms: int, crypt: str) -> None:
    """What a --device-delay is refused for wherever the run happens: its range, and dm-crypt beside it."""
    if not 0 <= delay_ms <= devmapper.MAX_DELAY_MS:  # 0: the same target, no delay (a control)
        raise UsageError(
            f"--device-delay {delay_ms}: must be 0 to {devmapper.MAX_DELAY_MS} ms", "give a delay such as 10"
        )
    if crypt != devmapper.NO_CRYPT:
        raise UsageError(
            f"--device-delay and --crypt {crypt} are two device-mapper layers, and sqlwa follows a write through one",
            "leave one of them out",
        )


def delay_support() -> tuple[bool, str, str | None]:
    """(available, reason, fix) of --device-delay on this machine, for ``sqlwa lab check``."""
    try:
        check_delay(10, devmapper.NO_CRYPT, "ext4", has_device=True)
    except UsageError as exc:
        return False, str(exc), hint_of(exc)
    return True, "device-mapper and its delay target present", None


class DmDelayLayer(DmTargetLayer):
    """dm-delay between the loop device and the filesystem, named like the lab."""

    key = "delay"
    stage = "delay"

    def __init__(self, delay_ms: int) -> None:
        super().__init__()
        self.delay_ms = delay_ms

    @classmethod
    def asked(cls, want: Want) -> DmDelayLayer | None:
        return cls(want.stack.layers.device_delay_ms) if want.stack.layers.device_delay_ms is not None else None

    @classmethod
    def check_stack(cls, stack: StackView, has_device: bool, host: bool) -> None:
        chosen = stack.layers
        if chosen.device_delay_ms is None:
            return
        if host:
            check_delay(chosen.device_delay_ms, chosen.crypt, stack.volume.fs or "", has_device)
        else:  # the guest checks its own kernel
            check_delay_with(chosen.device_delay_ms, chosen.crypt)

    def check(self, ground: Ground, layers: Sequence[Layer]) -> None:
        check_delay(self.delay_ms, crypt_mode(layers), ground.fs, ground.has_device)

    def make_target(self, name: str) -> devmapper.DmDelay:
        return devmapper.DmDelay(self.delay_ms, name)
