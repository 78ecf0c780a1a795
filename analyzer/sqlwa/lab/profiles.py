"""Named bundles of lab options that reproduce a phone's storage set-up (``--profile``).

A profile only fills in options a user could give by hand (filesystem, mkfs and mount
options, encryption); an option given explicitly wins. Each one names the file it was
read from, so a reader can check it, and says where the lab departs from it and why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sqlwa.errors import UsageError

# AOSP's reference virtual device (Cuttlefish), its /data line:
#   /dev/block/by-name/userdata /data ext4 nodev,noatime,nosuid,errors=panic
#       latemount,wait,check,quota,formattable,fileencryption=aes-256-xts:aes-256-cts,...
CUTTLEFISH_FSTAB = (
    "AOSP device/google/cuttlefish shared/config/fstab.ext4 "
    "(mirror msft-mirror-aosp/device.google.cuttlefish, commit 639d65a91ada62d5c82efd5c446dfd9771da27f9)"
)


@dataclass(frozen=True)
class Profile:
    name: str
    what: str
    fs: str
    mkfs_opts: str
    mount_opts: str
    encrypt: str
    source: str
    departures: tuple[str, ...] = field(default=())


PROFILES = {
    "android-ext4": Profile(
        name="android-ext4",
        what="Android's /data on ext4 with file-based encryption",
        fs="ext4",
        mkfs_opts="",
        mount_opts="nodev,noatime,nosuid",
        encrypt="fscrypt",  # fileencryption=aes-256-xts:aes-256-cts (a v2 policy since Android 11)
        source=CUTTLEFISH_FSTAB,
        departures=(
            "fs_mgr's quota flag (mkfs -O quota) is left out: it needs a kernel with CONFIG_QUOTA, which "
            "many hosts lack (this one too); add --mkfs-opts '-O quota' where the kernel has it",
            "errors=panic is left out: an ext4 error on the lab's loop device must not panic the host",
            "software AES here (the kernel's crypto API); phones encrypt inline in the storage controller",
        ),
    ),
}
# Need layers this host lab does not have yet: the FUSE layer (android-sdcard) and f2fs
# with a phone vendor's options (android-f2fs, in the VM lab).


def profile(name: str) -> Profile:
    if name not in PROFILES:
        raise UsageError(f"--profile {name!r} is not a profile", f"choose one of: {', '.join(PROFILES)}")
    return PROFILES[name]


def describe(chosen: Profile, overridden: list[str]) -> dict:
    """What the summary records: the profile, its source, and which of its options the
    command line overrode."""
    return {**asdict(chosen), "departures": list(chosen.departures), "overridden": overridden}
