"""Named bundles of lab options that reproduce a phone's storage set-up (``--profile``).

A profile only fills in options a user could give by hand (filesystem, mkfs and mount
options, encryption, a FUSE layer); an option given explicitly wins. Each one names the
files it was read from, so a reader can check it, and says where the lab departs from it
and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlwa.errors import UsageError

NO_PROFILE = "none"

# AOSP's reference virtual device (Cuttlefish), its /data line:
#   /dev/block/by-name/userdata /data ext4 nodev,noatime,nosuid,errors=panic
#       latemount,wait,check,quota,formattable,fileencryption=aes-256-xts:aes-256-cts,...
CUTTLEFISH_FSTAB = (
    "AOSP device/google/cuttlefish shared/config/fstab.ext4 "
    "(mirror msft-mirror-aosp/device.google.cuttlefish, commit 639d65a91ada62d5c82efd5c446dfd9771da27f9)"
)
# The same device's product properties turn MediaProvider's FUSE passthrough on:
#   PRODUCT_PRODUCT_PROPERTIES += ... persist.sys.fuse.passthrough.enable=true
CUTTLEFISH_DEVICE_MK = (
    "AOSP device/google/cuttlefish shared/device.mk, persist.sys.fuse.passthrough.enable=true (the same commit)"
)
# The daemon in front of /sdcard: pf_init() asks the kernel for passthrough (Android's own
# FUSE_CAP_PASSTHROUGH, or FUSE_CAP_PASSTHROUGH_UPSTREAM on Linux 6.9+) when that property
# is set, and for FUSE_CAP_WRITEBACK_CACHE unless in uncached mode or on ARC.
MEDIAPROVIDER_FUSE_DAEMON = (
    "AOSP packages/providers/MediaProvider jni/FuseDaemon.cpp, pf_init() and create_handle_for_node() "
    "(mirror aosp-mirror/platform_packages_providers_mediaprovider, commit a183e2b92c71d86ec7b104c116ef3f4dbcbb523f)"
)

ANDROID_DATA_DEPARTURES = (
    "fs_mgr's quota flag (mkfs -O quota) is left out: it needs a kernel with CONFIG_QUOTA, which "
    "many hosts lack (this one too); add --mkfs-opts '-O quota' where the kernel has it",
    "errors=panic is left out: an ext4 error on the lab's loop device must not panic the host",
    "software AES here (the kernel's crypto API); phones encrypt inline in the storage controller",
)


@dataclass(frozen=True)
class ProfileOptions:
    """The lab options a profile fills in (:data:`PROFILE_OPTIONS`)."""

    fs: str
    mkfs_opts: str
    mount_opts: str
    encrypt: str
    fuse: str = "none"  # the --fuse layer (sqlwa.lab.fuse.NO_FUSE: none)


@dataclass(frozen=True)
class Provenance:
    """What a profile reproduces, the files it was read from, and where the lab departs from it."""

    what: str
    source: str
    why: str = ""  # why these layers, where the choice is not read off one line of the source
    departures: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Profile:
    """A phone's storage set-up: the lab options it fills in and where they come from."""

    name: str
    options: ProfileOptions
    provenance: Provenance


ANDROID_EXT4 = Profile(
    name="android-ext4",
    options=ProfileOptions(
        fs="ext4",
        mkfs_opts="",
        mount_opts="nodev,noatime,nosuid",
        encrypt="fscrypt",  # fileencryption=aes-256-xts:aes-256-cts (a v2 policy since Android 11)
    ),
    provenance=Provenance(
        what="Android's /data on ext4 with file-based encryption",
        source=CUTTLEFISH_FSTAB,
        departures=ANDROID_DATA_DEPARTURES,
    ),
)

ANDROID_SDCARD = Profile(
    name="android-sdcard",
    options=replace(ANDROID_EXT4.options, fuse="passthrough-kernel"),
    provenance=Provenance(
        what="Android's /sdcard: MediaProvider's FUSE daemon in front of /data/media (android-ext4)",
        source=f"{CUTTLEFISH_FSTAB}; {CUTTLEFISH_DEVICE_MK}; {MEDIAPROVIDER_FUSE_DAEMON}",
        why=(
            "Android 12+ serves /sdcard with FUSE passthrough where the device sets "
            "persist.sys.fuse.passthrough.enable (Cuttlefish does): MediaProvider's FuseDaemon then asks the kernel "
            "for passthrough and opens a file that needs no "
            "redaction or transcoding, such as a database, with passthrough, so its reads and writes go from the "
            "kernel to the lower file while the daemon sees opens, creates, unlinks and syncs (pf_fsync: fsync or "
            "fdatasync as asked; pf_fsyncdir the same on the directory). It asks for the writeback cache too "
            "(FUSE_CAP_WRITEBACK_CACHE, unless in uncached mode or on ARC); on Android's kernels a passthrough "
            "file's reads and writes bypass that cache, and upstream Linux grants passthrough only without it "
            "(fs/fuse/inode.c, process_init_reply), so the closest layer here is passthrough-kernel: passthrough, "
            "no writeback cache"
        ),
        departures=(
            *ANDROID_DATA_DEPARTURES,
            "MediaProvider's own bookkeeping is absent: on a phone each file created through /sdcard is inserted "
            "into MediaProvider's database first (pf_create: InsertFile) and each unlink deleted from it "
            "(pf_unlink: DeleteFile), so a rollback journal created and deleted every commit (DELETE) costs the "
            "phone MediaProvider database writes that sqlwa-fuse does not make",
            "emulated storage's casefolding and project quotas (build/make emulated_storage.mk: "
            "PRODUCT_FS_CASEFOLD, PRODUCT_QUOTA_PROJID) are left out",
            "an app's own external directory (Android/data, Android/obb) is bind-mounted past FUSE on Android 11+ "
            "(vold EmulatedVolume::mountFuseBindMounts): a database there costs what android-ext4 measures",
            "passthrough here is upstream Linux's (6.9+); Android's older kernels carry their own passthrough patch",
        ),
    ),
)

# The Moto Z (griffin) of the published comparison, its /data line as LineageOS carries
# the vendor's fstab:
#   /dev/block/bootdevice/by-name/userdata /data f2fs
#       rw,discard,nosuid,nodev,noatime,nodiratime,nobarrier,inline_xattr,inline_data
#       wait,check,latemount,formattable,quota,encryptable=/dev/block/bootdevice/by-name/metadata,...
MOTO_Z_FSTAB = (
    "LineageOS android_device_motorola_griffin rootdir/etc/fstab.qcom (commit 3a708d65b65e00cd18c22d358db70907607f5f2f)"
)

ANDROID_F2FS = Profile(
    name="android-f2fs",
    options=ProfileOptions(
        fs="f2fs",
        mkfs_opts="",
        mount_opts="discard,nosuid,nodev,noatime,nodiratime,nobarrier,inline_xattr,inline_data",
        encrypt="none",  # encryptable=: full-disk encryption (dm-crypt), not FBE
    ),
    provenance=Provenance(
        what="a phone's /data on f2fs as a vendor ships it: the Moto Z's, with nobarrier (f2fs: VM lab)",
        source=MOTO_Z_FSTAB,
        why=(
            "nobarrier is what made fsync nearly free on the Moto Z in the published comparison: f2fs then "
            "sends no cache flush, so a power cut may lose what fsync acknowledged"
        ),
        departures=(
            "full-disk encryption (encryptable=, dm-crypt under f2fs) is left out",
            "fs_mgr's quota flag (mkfs.f2fs -O quota) is left out, as for android-ext4",
        ),
    ),
)

PROFILES = {profile.name: profile for profile in (ANDROID_EXT4, ANDROID_SDCARD, ANDROID_F2FS)}

#: The options a profile fills in, in the order the summary lists what overrode it.
PROFILE_OPTIONS = ("fs", "mkfs_opts", "mount_opts", "encrypt", "fuse")


def profile(name: str) -> Profile:
    if name not in PROFILES:
        raise UsageError(f"--profile {name!r} is not a profile", f"choose one of: {', '.join(PROFILES)}")
    return PROFILES[name]


def describe(chosen: Profile, overridden: list[str]) -> dict:
    """What the summary records: the profile, its source, and which of its options the
    command line overrode (flat, in the order summary.json has always had)."""
    options, provenance = chosen.options, chosen.provenance
    return {
        "name": chosen.name,
        "what": provenance.what,
        "fs": options.fs,
        "mkfs_opts": options.mkfs_opts,
        "mount_opts": options.mount_opts,
        "encrypt": options.encrypt,
        "source": provenance.source,
        "fuse": options.fuse,
        "why": provenance.why,
        "departures": list(provenance.departures),
        "overridden": overridden,
    }
