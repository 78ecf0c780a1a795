"""The storage stack of a run, as one value: :class:`StackSpec`.

A run chooses each layer between SQLite and the device: a lab filesystem (its image size,
mkfs and mount options, how full it is), file encryption, a FUSE layer, dm-crypt or
dm-delay under it, a phone profile that bundles some of these, and whether all of it runs
in the VM lab's guest with which kernel. ``sqlwa run``, ``sqlwa crash``, ``sqlwa matrix``
(as the stack every cell shares), the runner, the lab and the VM lab pass this one frozen
value around, as :class:`~sqlwa.measure.engine.RunSettings` carries SQLite's settings.

Each field with a :class:`Layer` is a command-line option; its flag, type, default and
help come from the field, once (``sqlwa.cli._stack`` makes the click options of them for
``sqlwa run``, ``sqlwa crash`` and ``sqlwa matrix``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any

from sqlwa.catalogue import DEBIAN_KERNEL, DEFAULT_IMAGE_SIZE, NO_LAYER
from sqlwa.lab import devmapper, encryption, filesystem, fuse, layers, profiles


@dataclass(frozen=True)
class Sweep:
    """How ``sqlwa matrix`` offers a layer: a comma-separated axis of the plan (``axis``,
    the :class:`~sqlwa.measure.matrix.MatrixPlan` field, with its ``default`` and
    ``metavar``) or, without ``axis``, one value every cell shares."""

    help: str
    axis: str | None = None
    default: str | None = None
    metavar: str | None = None


@dataclass(frozen=True)
class Layer:
    """How ``sqlwa run`` offers a layer of the stack. The option's name is the field's
    (``mkfs_opts`` → ``--mkfs-opts``) unless ``flag`` says otherwise; ``sweep`` says how
    ``sqlwa matrix`` offers it (None: it does not)."""

    help: str
    flag: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    show_default: bool = False
    sweep: Sweep | None = None


def _layer(default: Any, layer: Layer) -> Any:
    return field(default=default, metadata={"layer": layer})


def layer_of(spec_field: Field[Any]) -> Layer | None:
    """The command-line option of a StackSpec field, or None for one set otherwise."""
    return spec_field.metadata.get("layer")


# The options a profile fills in, in the order the summary lists the overridden ones.
PROFILE_OPTIONS = ("fs", "mkfs_opts", "mount_opts", "encrypt", "fuse")


@dataclass(frozen=True)
class StackSpec:
    """The storage stack one run measures on; the defaults are a run without a lab
    filesystem (the VFS level only, on this host)."""

    fs: str | None = _layer(
        None,
        Layer(
            "Measure on a fresh filesystem of this kind on a loop device, tracing block requests "
            "and syscalls (needs root and tracefs). ext4 = data=ordered.",
            choices=tuple(filesystem.FILESYSTEMS),
            sweep=Sweep(
                "Lab filesystems, e.g. ext4,xfs,btrfs (each cell gets a fresh one; needs root).",
                axis="filesystems",
                default="ext4",
                metavar="FS,..",
            ),
        ),
    )
    image_size: str = _layer(
        DEFAULT_IMAGE_SIZE,
        Layer(
            "Size of the lab image (--fs).", metavar="SIZE", show_default=True, sweep=Sweep("Size of each lab image.")
        ),
    )
    mkfs_opts: str = _layer("", Layer("Extra mkfs options, e.g. '-O fast_commit' (--fs).", metavar="OPTS"))
    mount_opts: str = _layer("", Layer("Extra mount options, e.g. 'noatime,barrier=0' (--fs).", metavar="OPTS"))
    fill_pct: float = _layer(
        0,
        Layer(
            "Fill the lab filesystem to PCT % with files before the workload (--fs).",
            flag="--fill",
            metavar="PCT",
            minimum=0,
            maximum=99,
        ),
    )
    # the profile's name; the options it fills in are filled in by with_profile()
    profile: str | None = _layer(
        None,
        Layer(
            "A phone's storage set-up as a bundle of lab options (android-ext4: Android's /data on ext4 "
            "with FBE, from AOSP's fstab; android-sdcard: the same behind the FUSE layer of /sdcard, "
            "--fuse passthrough-kernel); options given explicitly override the profile's.",
            choices=tuple(profiles.PROFILES),
            sweep=Sweep(
                "Phone profiles, e.g. none,android-ext4,android-sdcard (as `sqlwa run --profile`); a profile cell "
                "takes the profile's filesystem and layers unless --fs, --encrypt or --fuse is given.",
                axis="profiles",
                default=NO_LAYER,
                metavar="NAME,..",
            ),
        ),
    )
    encrypt: str = _layer(
        encryption.NO_ENCRYPTION,
        Layer(
            "File-based encryption of the database directory, as Android's FBE (--fs ext4): fscrypt = "
            "AES-256-XTS/CTS, fscrypt-adiantum = Adiantum. The crypto driver that served it is recorded.",
            choices=encryption.CHOICES,
            show_default=True,
            sweep=Sweep(
                "File-based encryption of each cell's database directory, e.g. none,fscrypt (as `sqlwa run "
                "--encrypt`).",
                axis="encrypts",
                default=NO_LAYER,
                metavar="MODE,..",
            ),
        ),
    )
    fuse: str = _layer(
        fuse.NO_FUSE,
        Layer(
            "A FUSE daemon between SQLite and the lab filesystem, as Android's /sdcard (--fs): passthrough = "
            "sqlwa-fuse, every call through it; -writeback with the kernel's writeback cache; -kernel with the "
            "kernel's FUSE passthrough (Linux 6.9+); bindfs = Debian's bindfs. The daemon's syscalls are traced "
            "beside SQLite's.",
            choices=fuse.CHOICES,
            show_default=True,
            sweep=Sweep(
                "A FUSE daemon in front of each cell's lab filesystem, e.g. none,passthrough,passthrough-kernel "
                "(as `sqlwa run --fuse`).",
                axis="fuses",
                default=NO_LAYER,
                metavar="LAYER,..",
            ),
        ),
    )
    crypt: str = _layer(
        devmapper.NO_CRYPT,
        Layer(
            "Full-disk encryption under the lab filesystem, as Android's FDE (needs device-mapper: --vm here): "
            "dm-crypt = plain AES-256-XTS with a random key, dm-crypt-luks2 = the same under a LUKS2 header. "
            "Block figures are the disk's (the loop device under dm-crypt); the cipher and its driver are "
            "recorded.",
            choices=devmapper.CHOICES,
            show_default=True,
            sweep=Sweep(
                "dm-crypt under each cell's lab filesystem, e.g. none,dm-crypt,dm-crypt-luks2 (as `sqlwa run "
                "--crypt`; needs device-mapper: --vm here).",
                axis="crypts",
                default=NO_LAYER,
                metavar="MODE,..",
            ),
        ),
    )
    device_delay_ms: int | None = _layer(
        None,
        Layer(
            "A slow device under the lab filesystem (needs device-mapper: --vm here): dm-delay holds every write "
            "and cache flush MS ms on its way to the loop device (reads are not delayed; 0: the same layer, no "
            "delay). Not with --crypt.",
            flag="--device-delay",
            metavar="MS",
            minimum=0,
            maximum=devmapper.MAX_DELAY_MS,
            sweep=Sweep(
                "dm-delay under every cell's lab filesystem: writes and cache flushes held MS ms (as `sqlwa run "
                "--device-delay`; needs device-mapper: --vm here).",
            ),
        ),
    )
    vm: bool = _layer(
        False,
        Layer(
            "Run the lab in a qemu guest with its own kernel (--kernel; --fs defaults to ext4 there): f2fs and "
            "kernels this host lacks, and block-level runs without root. Without a usable KVM the guest runs "
            "under TCG: counts exact, timings not comparable (recorded in config.vm).",
            sweep=Sweep(
                "Run every cell in one VM lab guest with its own kernel (no root needed; see `sqlwa run --vm`)."
            ),
        ),
    )
    kernel: str = _layer(
        DEBIAN_KERNEL,
        Layer(
            "The guest's kernel (--vm): Debian's current one (fetched once into ~/.cache/sqlwa/kernels), "
            "a linux-image-*.deb, or an unpacked kernel package directory (boot/vmlinuz-*, lib/modules/).",
            metavar="debian|PATH",
            show_default=True,
            sweep=Sweep("The guest's kernel with --vm: Debian's current one, a linux-image-*.deb or an unpacked one."),
        ),
    )
    # the PROFILE_OPTIONS given explicitly, which win over the profile's values
    profile_overrides: tuple[str, ...] = ()

    def with_profile(self) -> StackSpec:
        """The stack with the profile's options filled in where they were not given."""
        if self.profile is None:
            return self
        chosen = profiles.profile(self.profile)
        filled = {key: getattr(chosen, key) for key in PROFILE_OPTIONS if key not in self.profile_overrides}
        return replace(self, **filled)

    def profile_record(self) -> dict | None:
        """What summary.json records of the profile (None without one): the profile, its
        source, and which of its options the run overrode with other values."""
        if self.profile is None:
            return None
        chosen = profiles.profile(self.profile)
        overridden = [
            key
            for key in PROFILE_OPTIONS
            if key in self.profile_overrides and getattr(self, key) != getattr(chosen, key)
        ]
        return profiles.describe(chosen, overridden)

    @property
    def lab_options_given(self) -> list[str]:
        """The options that shape a lab filesystem and differ from a run without one."""
        return [
            flag
            for flag, value in (
                ("--fill", self.fill_pct),
                ("--mkfs-opts", self.mkfs_opts),
                ("--mount-opts", self.mount_opts),
                ("--encrypt", self.encrypt != encryption.NO_ENCRYPTION),
                ("--fuse", self.fuse != fuse.NO_FUSE),
                ("--crypt", self.crypt != devmapper.NO_CRYPT),
                ("--device-delay", self.device_delay_ms is not None),
            )
            if value
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON values (the VM lab's request to its guest)."""
        return {**asdict(self), "profile_overrides": list(self.profile_overrides)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> StackSpec:
        """The inverse of :meth:`as_dict`."""
        return cls(**{**values, "profile_overrides": tuple(values.get("profile_overrides", ()))})


STACK_FIELDS = tuple(f.name for f in fields(StackSpec) if layer_of(f) is not None)


def lab_filesystem(
    spec: StackSpec,
    *,
    keep_image: str | os.PathLike | None = None,
    write_log: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
) -> filesystem.LabFilesystem:
    """The lab filesystem ``spec`` asks for (it names one: ``spec.fs``), with the layers it asks for."""
    assert spec.fs is not None, "a lab run names its filesystem"
    fs_spec = filesystem.FILESYSTEMS.get(spec.fs)
    options = filesystem.LabOptions(
        image_size=spec.image_size, mkfs_opts=spec.mkfs_opts, mount_opts=spec.mount_opts, keep_image=keep_image
    )
    asked = layers.asked(spec, fs_spec.stacked if fs_spec else None, write_log)
    return filesystem.LabFilesystem(spec.fs, options, asked, progress)
