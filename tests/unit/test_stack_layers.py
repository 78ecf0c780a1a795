"""The layers between SQLite and the lab filesystem as parts of a configuration (#17):
labels that tell them apart, cell names that stay unique, profiles that explicit options
override, sweeps that resume only with the same layers, and a layer a filesystem cannot
have refused as unsupported (a sweep skips it). Pure functions: no root, nothing made."""

from __future__ import annotations

import pytest

from sqlwa import catalogue
from sqlwa.catalogue import NO_LAYER, config_label, layers_of
from sqlwa.errors import UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import encryption, filesystem, fuse, profiles

PLAIN = {"scenario": "mobibench-insert", "fs": "ext4", "journal": "wal", "sync": "full"}


def test_a_plain_configuration_keeps_its_short_label_and_layers_are_told_apart():
    assert config_label({**PLAIN, **layers_of({})}) == "mobibench-insert ext4 wal/full"
    assert config_label(PLAIN) == "mobibench-insert ext4 wal/full"  # a row from before the layers
    both = {**PLAIN, "encrypt": "fscrypt", "fuse": "passthrough", "profile": NO_LAYER}
    assert config_label(both) == "mobibench-insert ext4+fscrypt+fuse:passthrough wal/full"
    sdcard = {**PLAIN, "encrypt": "fscrypt", "fuse": "passthrough-kernel", "profile": "android-sdcard"}
    assert config_label(sdcard) == "mobibench-insert android-sdcard (ext4+fscrypt+fuse:passthrough-kernel) wal/full"


def test_layers_a_summary_does_not_record_are_none():
    assert layers_of({"fs": "none"}) == {"encrypt": "none", "fuse": "none", "profile": "none"}
    summary_config = {"encrypt": "fscrypt", "fuse": "bindfs", "profile": {"name": "android-ext4", "fs": "ext4"}}
    assert layers_of(summary_config) == {"encrypt": "fscrypt", "fuse": "bindfs", "profile": "android-ext4"}
    assert set(catalogue.LAYER_KEYS) <= set(catalogue.CONFIG_KEYS)


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
