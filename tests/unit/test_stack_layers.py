"""The layers between SQLite and the lab filesystem as parts of a configuration (#17):
labels that tell them apart, cell names that stay unique, profiles that explicit options
override, sweeps that resume only with the same layers, and a layer a filesystem cannot
have refused as unsupported (a sweep skips it). Pure functions: no root, nothing made."""

from __future__ import annotations

import pytest

from sqlwa.errors import UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import encryption, filesystem


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
