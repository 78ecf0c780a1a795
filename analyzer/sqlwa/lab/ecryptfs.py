"""eCryptfs over the lab's ext4 (``--fs ecryptfs``), as in the published comparison of
eCryptfs with dm-crypt on a phone: a stacked filesystem that encrypts each file into a
lower file of the same name on ext4, with an 8 KiB header in front of its data.

The lower directory is ``mnt/lower`` on the fresh ext4; eCryptfs is mounted from it on
``sqlwa-lab-<pid>-<token>/ecryptfs/``, where the workload runs. The key is a fresh random
AES-256 key, given to the kernel directly: a ``user`` key whose payload is the kernel's
``struct ecryptfs_auth_tok`` (include/linux/ecryptfs.h) and whose description is the
signature the mount option ``ecryptfs_sig`` names, added with add_key(2) to a keyring
named like the lab in a session keyring of the process's own — no ecryptfs-utils
prompts, no mount helper (``mount -i``). Teardown unmounts eCryptfs first and then
invalidates the keyring; the session keyring dies with the process however it ends, so
a killed run leaves no key (``sqlwa lab cleanup`` unmounts what it leaves).

FIEMAP does not work through eCryptfs (it has no fiemap), so the engine's ``extents``
markers for the upper files say EOPNOTSUPP; the lower files are the ones with blocks
(:meth:`EcryptfsLayer.lower_path`).
"""

from __future__ import annotations

import os
import secrets
import struct
from collections.abc import Callable
from contextlib import AbstractContextManager

from sqlwa import _system
from sqlwa.errors import UnsupportedFilesystem

LOWER_DIR = "lower"  # under the ext4 mountpoint
MOUNT_DIR = "ecryptfs"  # in the lab directory, where the workload runs
HEADER_BYTES = 8192  # eCryptfs's metadata header in front of every lower file (2 x 4 KiB pages)
CIPHER = "aes"
KEY_BYTES = 32  # AES-256, as dm-crypt's AES-256-XTS
CRYPTO_API_NAME = "cbc(aes)"  # what eCryptfs asks the crypto API for (its extents are AES-CBC)

# struct ecryptfs_auth_tok (packed) with a password token: version 0.4, token type 0 (password)
AUTH_TOK_VERSION = 0x0004
PGP_DIGEST_ALGO_SHA512 = 10
SESSION_KEY_ENCRYPTION_KEY_SET = 0x02
SESSION_KEY_BYTES = 4 * 3 + 512 + 64  # struct ecryptfs_session_key
RESERVED_BYTES = 32
TOKEN_BYTES = 112  # the union: struct ecryptfs_password (109 bytes, aligned to 4)
AUTH_TOK_BYTES = 8 + SESSION_KEY_BYTES + RESERVED_BYTES + TOKEN_BYTES


def check_ecryptfs() -> None:
    """Refuse a kernel without eCryptfs (after a modprobe attempt), before anything is made."""
    if "ecryptfs" in _system.mounts.kernel_filesystems():
        return
    if _system.processes.is_root():
        _system.tools.try_tool(["modprobe", "-q", "ecryptfs"], timeout=30)
        if "ecryptfs" in _system.mounts.kernel_filesystems():
            return
    raise UnsupportedFilesystem(
        "--fs ecryptfs: the kernel has no ecryptfs support (not in /proc/filesystems)",
        "add --vm (Debian's kernel has it), or run on a kernel with CONFIG_ECRYPT_FS",
    )


def auth_tok(key: bytes, signature: str) -> bytes:
    """The ``user`` key payload eCryptfs reads: a password token whose session key
    encryption key is ``key`` itself (the flag says it is set, so no passphrase is hashed)."""
    password = struct.pack(
        "=IiIII64s17s8s", 0, PGP_DIGEST_ALGO_SHA512, 0, len(key), SESSION_KEY_ENCRYPTION_KEY_SET,
        key, signature.encode(), b"",
    )  # fmt: skip
    header = struct.pack("=HHI", AUTH_TOK_VERSION, 0, 0)
    token = header + bytes(SESSION_KEY_BYTES + RESERVED_BYTES) + password.ljust(TOKEN_BYTES, b"\0")
    assert len(token) == AUTH_TOK_BYTES
    return token


class EcryptfsLayer:
    """The eCryptfs mount of one lab and its key."""

    def __init__(self, lab_dir: str, name: str) -> None:
        self.name = name
        self.mountpoint = os.path.join(lab_dir, MOUNT_DIR)
        self.lower_dir: str | None = None
        self.signature = secrets.token_hex(8)  # ECRYPTFS_SIG_SIZE_HEX: 16 hex digits
        self.keyring: int | None = None
        self.mount_options: str | None = None

    def setup(self, ext4_mountpoint: str, critical: Callable[[], AbstractContextManager]) -> str:
        """Add the key, mount eCryptfs over a directory of the ext4; returns where the workload runs."""
        self.lower_dir = os.path.join(ext4_mountpoint, LOWER_DIR)
        os.mkdir(self.lower_dir, 0o700)
        os.mkdir(self.mountpoint, 0o700)
        _system.keyrings.join_new_session_keyring()  # the key dies with this process, however it ends
        self.keyring = _system.keyrings.add_key("keyring", self.name, None, _system.keyrings.KEY_SPEC_SESSION_KEYRING)
        _system.keyrings.add_key(
            "user", self.signature, auth_tok(secrets.token_bytes(KEY_BYTES), self.signature), self.keyring
        )
        options = f"ecryptfs_sig={self.signature},ecryptfs_cipher={CIPHER},ecryptfs_key_bytes={KEY_BYTES}"
        options += ",ecryptfs_unlink_sigs"  # unmounting drops the key from eCryptfs's own list too
        with critical():
            # -i: no /sbin/mount.ecryptfs helper (it prompts); the kernel reads the options itself
            argv = ["mount", "-i", "-t", "ecryptfs", "-o", options, self.lower_dir, self.mountpoint]
            _system.tools.mount(argv, "mounting eCryptfs", "check that the kernel has eCryptfs", "ecryptfs")
        self.mount_options = _system.mounts.options_at(self.mountpoint)
        return self.mountpoint

    def lower_path(self, path: str) -> str:
        """The lower file of the database file ``path`` (in the eCryptfs mount, or in a
        FUSE mirror of it): its name in the lower directory (names are not encrypted)."""
        assert self.lower_dir is not None
        return os.path.join(self.lower_dir, os.path.basename(path))

    def teardown(self) -> None:
        """Unmount eCryptfs, then drop the key; each only where it exists."""
        if _system.mounts.mount_at(self.mountpoint) is not None:
            _system.mounts.unmount(self.mountpoint)
        if self.keyring is not None:
            _system.keyrings.invalidate_key(self.keyring)
            self.keyring = None

    def describe(self) -> dict:
        drivers = _system.fscrypt.crypto_drivers(CRYPTO_API_NAME)
        return {
            "lower_dir": self.lower_dir,
            "mountpoint": self.mountpoint,
            "mount_options": self.mount_options,
            "cipher": f"{CIPHER}-{KEY_BYTES * 8}",
            "header_bytes": HEADER_BYTES,
            "crypto_api": CRYPTO_API_NAME,
            "driver": drivers[0][1] if drivers else None,
        }


def remove_layer_files(lab_dir: str) -> None:
    """The (unmounted, empty) eCryptfs mountpoint of a lab."""
    mountpoint = os.path.join(lab_dir, MOUNT_DIR)
    if os.path.isdir(mountpoint) and _system.mounts.mount_at(mountpoint) is None:
        os.rmdir(mountpoint)
