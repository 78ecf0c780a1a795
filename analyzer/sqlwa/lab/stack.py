"""The storage stack of a run, as one value: :class:`StackSpec`.

A run chooses each layer between SQLite and the device: a lab filesystem (its image size,
mkfs and mount options, how full it is), file encryption, a FUSE layer, dm-crypt or
dm-delay under it, a phone profile that bundles some of these, and whether all of it runs
in the VM lab's guest with which kernel. ``sqlwa run``, ``sqlwa crash``, ``sqlwa matrix``
(as the stack every cell shares), the runner, the lab and the VM lab pass this one frozen
value around, as :class:`~sqlwa.measure.engine.RunSettings` carries SQLite's settings.
It keeps them in groups (the lab filesystem, the layers over and under it, where it runs)
and shows them flat to the command line, the VM lab's guest and a matrix's stored plan.

Each field with a :class:`Layer` is a command-line option; its flag, type, default and
help come from the field, once (``sqlwa.cli._stack`` makes the click options of them for
``sqlwa run``, ``sqlwa crash`` and ``sqlwa matrix``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
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
class Volume:
    """The fresh lab filesystem a run measures on: its kind (None: no lab filesystem,
    the VFS level only), its image, its mkfs and mount options, and how full it is."""

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


@dataclass(frozen=True)
class StackLayers:
    """The layers over the lab filesystem (file encryption, a FUSE daemon) and under it
    (dm-crypt, dm-delay)."""

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


@dataclass(frozen=True)
class Machine:
    """Where the stack runs: on this host, or (``vm``) in the VM lab's guest with its kernel."""

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


@dataclass(frozen=True)
class StackSpec:
    """The storage stack one run measures on, in groups: the lab filesystem
    (:class:`Volume`), the phone profile that fills in some of its options, the layers
    over and under it (:class:`StackLayers`) and where it runs (:class:`Machine`); the
    defaults are a run without a lab filesystem (the VFS level only, on this host).

    Outside, a stack is flat: the command line's options, the VM lab's request to its
    guest and a matrix's stored plan name each field of a group on its own (``fs``,
    ``crypt``, ``vm`` …), in the order :func:`stack_fields` lists them; :meth:`from_flat`,
    :meth:`replace` and :meth:`flat` go between the two."""

    volume: Volume = Volume()
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
    layers: StackLayers = StackLayers()
    machine: Machine = Machine()
    # the PROFILE_OPTIONS given explicitly, which win over the profile's values
    profile_overrides: tuple[str, ...] = ()

    @classmethod
    def from_flat(cls, **values: Any) -> StackSpec:
        """The stack of these fields by their flat names (``fs=``, ``crypt=``, ``vm=`` …);
        the others are the defaults."""
        return cls().replace(**values)

    def replace(self, **changes: Any) -> StackSpec:
        """This stack with the fields named by their flat names changed, in whichever group
        each one is."""
        unknown = sorted(set(changes) - set(_FLAT_NAMES))
        if unknown:
            raise TypeError(f"StackSpec has no field {unknown[0]!r}")
        parts: dict[str, Any] = {}
        for part in fields(self):
            if part.name in _GROUPS:
                group = {name: changes[name] for name in _GROUPS[part.name] if name in changes}
                if group:
                    parts[part.name] = dataclasses.replace(getattr(self, part.name), **group)
            elif part.name in changes:
                parts[part.name] = changes[part.name]
        return dataclasses.replace(self, **parts)

    def flat(self) -> dict[str, Any]:
        """Every field by its flat name, in :func:`stack_fields`'s order."""
        values: dict[str, Any] = {}
        for part in fields(self):
            value = getattr(self, part.name)
            if part.name in _GROUPS:
                values.update((name, getattr(value, name)) for name in _GROUPS[part.name])
            else:
                values[part.name] = value
        return values

    def with_profile(self) -> StackSpec:
        """The stack with the profile's options filled in where they were not given."""
        if self.profile is None:
            return self
        chosen = profiles.profile(self.profile).options
        filled = {key: getattr(chosen, key) for key in PROFILE_OPTIONS if key not in self.profile_overrides}
        return self.replace(**filled)

    def profile_record(self) -> dict | None:
        """What summary.json records of the profile (None without one): the profile, its
        source, and which of its options the run overrode with other values."""
        if self.profile is None:
            return None
        chosen = profiles.profile(self.profile)
        given = self.flat()
        overridden = [
            key
            for key in PROFILE_OPTIONS
            if key in self.profile_overrides and given[key] != getattr(chosen.options, key)
        ]
        return profiles.describe(chosen, overridden)

    @property
    def lab_options_given(self) -> list[str]:
        """The options that shape a lab filesystem and differ from a run without one."""
        volume, layers = self.volume, self.layers
        return [
            flag
            for flag, value in (
                ("--fill", volume.fill_pct),
                ("--mkfs-opts", volume.mkfs_opts),
                ("--mount-opts", volume.mount_opts),
                ("--encrypt", layers.encrypt != encryption.NO_ENCRYPTION),
                ("--fuse", layers.fuse != fuse.NO_FUSE),
                ("--crypt", layers.crypt != devmapper.NO_CRYPT),
                ("--device-delay", layers.device_delay_ms is not None),
            )
            if value
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON values (the VM lab's request to its guest): the flat fields."""
        return {**self.flat(), "profile_overrides": list(self.profile_overrides)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> StackSpec:
        """The inverse of :meth:`as_dict`."""
        return cls.from_flat(**{**values, "profile_overrides": tuple(values.get("profile_overrides", ()))})


# StackSpec's groups (its fields whose value is a dataclass), each with its own fields.
_GROUP_FIELDS = {
    part.name: fields(part.default) for part in fields(StackSpec) if dataclasses.is_dataclass(part.default)
}
# ... and with the names of them
_GROUPS = {name: tuple(f.name for f in group) for name, group in _GROUP_FIELDS.items()}


def stack_fields() -> Iterator[Field[Any]]:
    """StackSpec's fields as the outside sees them, flat and in order: each group's own
    in the group's place (``fs`` … ``fill_pct``, ``profile``, ``encrypt`` … ``device_delay_ms``,
    ``vm``, ``kernel``, ``profile_overrides``)."""
    for part in fields(StackSpec):
        yield from _GROUP_FIELDS.get(part.name, (part,))


_FLAT_NAMES = tuple(f.name for f in stack_fields())

STACK_FIELDS = tuple(f.name for f in stack_fields() if layer_of(f) is not None)


def lab_filesystem(
    spec: StackSpec,
    *,
    keep_image: str | os.PathLike | None = None,
    write_log: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
) -> filesystem.LabFilesystem:
    """The lab filesystem ``spec`` asks for (it names one: ``spec.volume.fs``), with the layers it asks for."""
    volume = spec.volume
    assert volume.fs is not None, "a lab run names its filesystem"
    fs_spec = filesystem.FILESYSTEMS.get(volume.fs)
    options = filesystem.LabOptions(
        image_size=volume.image_size, mkfs_opts=volume.mkfs_opts, mount_opts=volume.mount_opts, keep_image=keep_image
    )
    asked = layers.asked(spec, fs_spec.stacked if fs_spec else None, write_log)
    return filesystem.LabFilesystem(volume.fs, options, asked, progress)
