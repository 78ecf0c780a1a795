"""The layers between SQLite and the lab filesystem as parts of a configuration (#17):
labels that tell them apart, cell names that stay unique, profiles that explicit options
override, sweeps that resume only with the same layers, and a layer a filesystem cannot
have refused as unsupported (a sweep skips it). Pure functions: no root, nothing made."""

from __future__ import annotations

import pytest

from sqlwa.errors import UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import encryption, filesystem, fuse, profiles


def test_a_filesystem_without_fscrypt_is_unsupported_not_a_usage_error():
    """A sweep skips what this filesystem cannot have (with the fix) instead of failing it."""
    for fs in ("xfs", "btrfs", "tmpfs"):
        with pytest.raises(UnsupportedFilesystem, match=f"--encrypt fscrypt: {fs} has no file-based encryption"):
            encryption.check_encryption("fscrypt", fs, filesystem.FILESYSTEMS[fs].kernel_type)
    with pytest.raises(UsageError) as refused:
        encryption.check_encryption("rot13", "ext4", "ext4")
    assert not isinstance(refused.value, UnsupportedFilesystem)
    try:
        encryption.check_encryption("fscrypt", "xfs", "xfs")
    except UnsupportedFilesystem as exc:
        assert hint_of(exc) == "use --fs ext4, or leave --encrypt out"


def test_a_profile_fills_in_what_was_not_given_and_records_what_was():
    chosen = profiles.profile("android-sdcard")
    options = {"fs": None, "mkfs_opts": "", "mount_opts": "", "encrypt": "none", "fuse": "passthrough"}
    overridden = profiles.apply(chosen, options, given={"fuse"})
    assert options == {
        "fs": "ext4",
        "mkfs_opts": "",
        "mount_opts": "nodev,noatime,nosuid",
        "encrypt": "fscrypt",
        "fuse": "passthrough",
    }
    assert overridden == ["fuse"]
    same = {"fs": "ext4", "encrypt": "fscrypt"}
    assert profiles.apply(chosen, same, given={"fs", "encrypt"}) == []  # given, but what the profile says


def test_android_sdcard_is_android_ext4_behind_a_fuse_layer_sqlwa_has():
    data, sdcard = profiles.profile("android-ext4"), profiles.profile("android-sdcard")
    for key in ("fs", "mkfs_opts", "mount_opts", "encrypt"):
        assert getattr(sdcard, key) == getattr(data, key), key
    assert data.fuse == fuse.NO_FUSE and sdcard.fuse in fuse.LAYERS
    assert "FuseDaemon.cpp" in sdcard.source and "writeback" in sdcard.why
    assert set(data.departures) < set(sdcard.departures)
