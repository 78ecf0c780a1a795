"""The kernel's fscrypt ioctls and the crypto drivers that serve an algorithm."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path

# The kernel's fscrypt ioctls (include/uapi/linux/fscrypt.h), so no extra tool is needed
# (Debian 12 has no fscryptctl). Numbers are _IOC(dir, 'f', nr, size); a test compiles
# the header and compares.


FS_IOC_SET_ENCRYPTION_POLICY = 0x800C6613  # _IOR('f', 19, struct fscrypt_policy_v1)


FS_IOC_GET_ENCRYPTION_POLICY_EX = 0xC0096616  # _IOWR('f', 22, __u8[9])


FS_IOC_ADD_ENCRYPTION_KEY = 0xC0506617  # _IOWR('f', 23, struct fscrypt_add_key_arg)


FS_IOC_REMOVE_ENCRYPTION_KEY = 0xC0406618  # _IOWR('f', 24, struct fscrypt_remove_key_arg)


FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER = 2


FSCRYPT_POLICY_V2 = 2


_KEY_SPEC = "=II32s"  # type, reserved, identifier (16 bytes used) / descriptor


_POLICY_V2 = "=BBBB4s16s"  # version, contents mode, filenames mode, flags, reserved, key id


def _directory_fd(path: str | os.PathLike) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def add_encryption_key(mountpoint: str | os.PathLike, raw_key: bytes) -> bytes:
    """Add a v2 master key to the filesystem at ``mountpoint``; returns the 16-byte key
    identifier the kernel derived from it."""
    arg = bytearray(struct.pack(f"{_KEY_SPEC}II32s", FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER, 0, b"", len(raw_key), 0, b""))
    arg += raw_key
    fd = _directory_fd(mountpoint)
    try:
        fcntl.ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, arg)
    finally:
        os.close(fd)
    return bytes(arg[8:24])


def remove_encryption_key(mountpoint: str | os.PathLike, identifier: bytes) -> int:
    """Remove the key from the filesystem; returns the kernel's removal status flags
    (FSCRYPT_KEY_REMOVAL_STATUS_FLAG_FILES_BUSY = 1: files were still in use)."""
    arg = bytearray(struct.pack(f"{_KEY_SPEC}I20s", FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER, 0, identifier, 0, b""))
    fd = _directory_fd(mountpoint)
    try:
        fcntl.ioctl(fd, FS_IOC_REMOVE_ENCRYPTION_KEY, arg)
    finally:
        os.close(fd)
    return struct.unpack_from("=I", arg, 40)[0]


def set_encryption_policy(
    directory: str | os.PathLike, contents: int, filenames: int, flags: int, key_id: bytes
) -> None:
    """Put an empty ``directory`` under a v2 policy with the given modes and key."""
    policy = bytearray(struct.pack(_POLICY_V2, FSCRYPT_POLICY_V2, contents, filenames, flags, b"", key_id))
    fd = _directory_fd(directory)
    try:
        fcntl.ioctl(fd, FS_IOC_SET_ENCRYPTION_POLICY, policy)
    finally:
        os.close(fd)


def encryption_policy(path: str | os.PathLike) -> tuple[int, int, int, int, bytes] | None:
    """(version, contents mode, filenames mode, flags, key identifier) of ``path``'s
    policy as the kernel reports it, or None if it has none (ENODATA)."""
    arg = bytearray(struct.pack("=Q24s", 24, b""))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, FS_IOC_GET_ENCRYPTION_POLICY_EX, arg)
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return None
        raise
    finally:
        os.close(fd)
    version, contents, filenames, flags, _, key_id = struct.unpack_from(_POLICY_V2, arg, 8)
    return version, contents, filenames, flags, key_id


def crypto_drivers(algorithm: str) -> list[tuple[int, str]]:
    """(priority, driver) of every implementation of ``algorithm`` in /proc/crypto, best
    first: the kernel's crypto API gives a new user the highest-priority one."""
    found = []
    for block in Path("/proc/crypto").read_text().split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if fields.get("name") == algorithm and fields.get("selftest", "passed") == "passed":
            found.append((int(fields.get("priority", 0)), fields.get("driver", "")))
    return sorted(found, reverse=True)
