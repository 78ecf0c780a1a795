"""What a layer of the lab is: one thing between SQLite and the lab's disk that a run may
ask for (dm-crypt, dm-delay, log-writes under the filesystem; fscrypt, eCryptfs, fill,
FUSE over it), as one interface the lab filesystem walks without knowing the kinds.

A layer kind is a class: it says whether a stack asks for it (:meth:`Layer.asked`), what
the stack alone refuses wherever the run happens (:meth:`Layer.check_stack`, for the
runner's and the matrix's checks before root and before a guest boots), and, as an
object made for one lab, what it refuses on that lab's filesystem beside the other
layers (:meth:`Layer.check`), how it sets up, tears down (named, bounded steps), syncs,
and describes itself for summary.json (under :attr:`Layer.key`). The kinds and their
order are listed once, in :data:`sqlwa.lab.layers.KINDS`.

A :class:`BlockLayer` sits on the device under the filesystem and is set up before mkfs;
a :class:`DirectoryLayer` sits on the mounted filesystem. Set-up walks the list in
order, teardown in reverse: directory layers before the unmount, block layers after it.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar

#: A signal-guarded section: what set-up holds while it makes something teardown must know.
Critical = Callable[[], AbstractContextManager]
#: One teardown step: its name (what SQLWA_FAULT_HANG_TEARDOWN names) and what it does.
Step = tuple[str, Callable[[], None]]

L = TypeVar("L", bound="Layer")


class VolumeView(Protocol):
    """The fields of :class:`sqlwa.lab.stack.Volume` the layers read."""

    @property
    def fs(self) -> str | None: ...
    @property
    def fill_pct(self) -> float: ...


class LayersView(Protocol):
    """The fields of :class:`sqlwa.lab.stack.StackLayers` the layers read."""

    @property
    def encrypt(self) -> str: ...
    @property
    def fuse(self) -> str: ...
    @property
    def crypt(self) -> str: ...
    @property
    def device_delay_ms(self) -> int | None: ...


class StackView(Protocol):
    """The groups of :class:`sqlwa.lab.stack.StackSpec` the layers read (stack.py makes
    the lab of them, so this module cannot import it)."""

    @property
    def volume(self) -> VolumeView: ...
    @property
    def layers(self) -> LayersView: ...


@dataclass(frozen=True)
class Want:
    """What a lab is asked for: the stack, the layer its filesystem stacks on itself
    (``FsSpec.stacked``: eCryptfs for ``--fs ecryptfs``), and where a crash run's write
    log goes (None: no log)."""

    stack: StackView
    stacked: str | None = None
    write_log: str | os.PathLike | None = None


@dataclass(frozen=True)
class Ground:
    """The lab filesystem a layer is checked against, before anything is made."""

    fs: str
    kernel_type: str
    has_device: bool  # False for tmpfs: no block device under it
    stacked: str | None


@dataclass(frozen=True)
class Site:
    """One lab's names, from before anything exists: what its layers name their parts
    after, and what teardown finds them by (a set-up cut short recorded nothing)."""

    name: str  # sqlwa-lab-<pid>-<token>
    token: str
    lab_dir: str
    mountpoint: str  # the lab filesystem's own mount
    image_size: int
    log_image: str  # a crash run's write log beside the image


class Layer(ABC):
    """One layer of one lab (see the module's text); an object serves one lab."""

    #: its entry in the lab's facts (summary.json's ``config.lab``), None when absent
    key: ClassVar[str]
    #: the progress stage its set-up reports
    stage: ClassVar[str]

    @classmethod
    @abstractmethod
    def asked(cls: type[L], want: Want) -> L | None:
        """The layer ``want`` asks for, or None."""

    @classmethod  # noqa: B027 - most layers refuse nothing from the stack alone
    def check_stack(cls, stack: StackView, has_device: bool, host: bool) -> None:
        """Refuse what ``stack`` alone cannot have, before root and before a guest boots;
        ``host``: the run happens on this machine (False: in the VM lab, whose kernel
        the guest checks). Nothing by default."""

    def check(self, ground: Ground, layers: Sequence[Layer]) -> None:  # noqa: B027 - some can work anywhere
        """Refuse, before anything is made, what this layer cannot do on ``ground``
        beside the other ``layers`` (this one among them)."""

    def bind(self, site: Site) -> None:  # noqa: B027 - a layer without names of its own needs nothing
        """The lab's names, given before set-up."""

    def mkfs_options(self, kernel_type: str) -> tuple[str, ...]:
        """Options this layer needs mkfs to give the filesystem (fscrypt's ``-O encrypt``)."""
        return ()

    def teardown_steps(self) -> Sequence[Step]:
        """Its teardown, as named steps: each is bounded and its error collected."""
        return ()

    def sync(self) -> None:  # noqa: B027 - most layers hold no dirty pages of their own
        """Write back what this layer holds (called top down, before the filesystem's syncfs)."""

    def describe(self) -> dict | None:
        """What summary.json records of this layer, under :attr:`key`."""
        return None


class BlockLayer(Layer):
    """A device-mapper layer on the device under the filesystem, set up before mkfs."""

    @property
    @abstractmethod
    def path(self) -> str:
        """The device it makes, where the next layer (or mkfs) goes."""

    @property
    @abstractmethod
    def dev(self) -> tuple[int, int] | None:
        """(major, minor) of that device once made."""

    @abstractmethod
    def open(self, under: str, critical: Critical) -> None:
        """Make the layer over ``under`` (the lab's loop device, checked to be its own)."""

    @abstractmethod
    def assert_over(self, under: str) -> None:
        """The last check before mkfs: the layer of this lab's name sits on ``under``."""

    def mounted(self) -> None:
        """The filesystem over it is made and mounted."""


class DirectoryLayer(Layer):
    """A layer over the mounted lab filesystem: where the workload runs, or what it finds there."""

    @abstractmethod
    def open(self, mountpoint: str, data_dir: str, critical: Critical) -> str:
        """Set up over the lab filesystem at ``mountpoint`` (the workload's directory so
        far: ``data_dir``); returns the workload's directory from now on."""

    def mappable(self, path: str) -> str:
        """Where ``path`` has blocks FIEMAP maps, seen from below this layer."""
        return path
