"""File-based encryption for the lab, as Android's FBE does it: the filesystem made with
its ``encrypt`` feature, the database directory under a v2 fscrypt policy whose master
key is added with the kernel's own ioctl (``FS_IOC_ADD_ENCRYPTION_KEY``) and removed at
the end (``FS_IOC_REMOVE_ENCRYPTION_KEY``); unmounting drops any key still there, so a
killed run leaves no key behind once ``sqlwa lab cleanup`` unmounts its filesystem.

Modes: ``fscrypt`` is AES-256-XTS for contents and AES-256-CTS for names (Android's
default on phones with AES instructions); ``fscrypt-adiantum`` is Adiantum for both
(Android's choice for phones without them). What a commit costs under encryption is
mostly CPU, and that depends on which implementation the kernel's crypto API picked
(software AES here, inline encryption hardware on a phone): :meth:`Encryption.describe`
records it from /proc/crypto.
"""

from __future__ import annotations

import errno
import os
import secrets
from dataclasses import dataclass

from sqlwa import _system
from sqlwa.errors import UnsupportedFilesystem, UsageError

# Filesystems with fscrypt in the kernel, and the mkfs option that turns it on.
ENCRYPTING_FILESYSTEMS = {"ext4": ("-O", "encrypt"), "f2fs": ("-O", "encrypt")}
NO_ENCRYPTION = "none"
DATA_DIR = "data"  # the encrypted directory the workload runs in, under the mountpoint
KEY_BYTES = 64  # a v2 master key: 64 random bytes, as fscrypt's tools make them
PAD_32 = 0x03  # FSCRYPT_POLICY_FLAGS_PAD_32: names padded to 32 bytes (the tools' default)
DIRECT_KEY = 0x04  # FSCRYPT_POLICY_FLAG_DIRECT_KEY: Adiantum's per-file nonce, no derivation


@dataclass(frozen=True)
class Mode:
    """One encryption setting: the kernel's mode numbers and crypto API names."""

    contents: int
    filenames: int
    flags: int
    contents_cipher: str  # the mode's name in the kernel's crypto API (/proc/crypto)
    filenames_cipher: str
    label: str


MODES = {
    "fscrypt": Mode(1, 4, PAD_32, "xts(aes)", "cts(cbc(aes))", "AES-256-XTS contents, AES-256-CTS names"),
    "fscrypt-adiantum": Mode(
        9, 9, PAD_32 | DIRECT_KEY, "adiantum(xchacha12,aes)", "adiantum(xchacha12,aes)", "Adiantum contents and names"
    ),
}
CHOICES = (NO_ENCRYPTION, *MODES)


def check_encryption(mode: str, fs: str, kernel_type: str) -> None:
    """Refuse, before anything is made, an encryption the filesystem or kernel cannot do:
    an unknown mode is a usage error, a mode this filesystem or kernel lacks unsupported."""
    if mode not in CHOICES:
        raise UsageError(f"--encrypt {mode!r} is not an encryption mode", f"choose one of: {', '.join(CHOICES)}")
    if mode == NO_ENCRYPTION:
        return
    if kernel_type not in ENCRYPTING_FILESYSTEMS:
        # What the filesystem lacks, like a kernel without the feature: a sweep skips the
        # cell with this reason instead of counting it as a failed measurement.
        raise UnsupportedFilesystem(
            f"--encrypt {mode}: {fs} has no file-based encryption (fscrypt is in ext4 and f2fs)",
            "use --fs ext4, or leave --encrypt out",
        )
    if not os.path.exists(f"/sys/fs/{kernel_type}/features/encryption"):
        raise UnsupportedFilesystem(
            f"--encrypt {mode}: this kernel's {kernel_type} has no encryption feature "
            f"(no /sys/fs/{kernel_type}/features/encryption)",
            "add --vm (Debian's kernel has it), or run on a kernel built with CONFIG_FS_ENCRYPTION=y",
        )


class Encryption:
    """The key and the encrypted directory of one lab filesystem."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.spec = MODES[mode]
        self.mountpoint: str | None = None
        self.key_id: bytes | None = None
        self.removal_flags: int | None = None

    def setup(self, mountpoint: str) -> str:
        """Add a fresh key and make the encrypted data directory; returns its path."""
        self.mountpoint = mountpoint
        self.key_id = _system.fscrypt.add_encryption_key(mountpoint, secrets.token_bytes(KEY_BYTES))
        data_dir = os.path.join(mountpoint, DATA_DIR)
        os.mkdir(data_dir, 0o700)
        _system.fscrypt.set_encryption_policy(
            data_dir, self.spec.contents, self.spec.filenames, self.spec.flags, self.key_id
        )
        self._probe(data_dir)
        return data_dir

    def _probe(self, data_dir: str) -> None:
        """Create and remove one file: the kernel sets up the ciphers on the first file
        (a policy is accepted even where the crypto API lacks them), so a missing cipher
        is one line here rather than a failure inside the workload."""
        probe = os.path.join(data_dir, ".sqlwa-probe")
        try:
            os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
        except OSError as exc:
            if exc.errno != errno.ENOPKG:
                raise
            ciphers = " and ".join(dict.fromkeys((self.spec.contents_cipher, self.spec.filenames_cipher)))
            raise UnsupportedFilesystem(
                f"--encrypt {self.mode}: this kernel's crypto API has no {ciphers} (ENOPKG)",
                "choose another --encrypt mode, or a kernel with that cipher (e.g. CONFIG_CRYPTO_ADIANTUM=y)",
            ) from None
        os.unlink(probe)

    def remove_key(self) -> None:
        """Remove the key while the filesystem is still mounted (unmounting would too)."""
        if self.key_id is not None and self.mountpoint and _system.mounts.mount_at(self.mountpoint):
            self.removal_flags = _system.fscrypt.remove_encryption_key(self.mountpoint, self.key_id)
        self.key_id = None

    def describe(self) -> dict:
        """What the summary records: the policy as the kernel reports it on the data
        directory, and the crypto drivers serving it (call while the key is present)."""
        data_dir = os.path.join(self.mountpoint or "", DATA_DIR)
        policy = _system.fscrypt.encryption_policy(data_dir)
        return {
            "mode": self.mode,
            "what": self.spec.label,
            "policy": None
            if policy is None
            else {"version": policy[0], "contents_mode": policy[1], "filenames_mode": policy[2], "flags": policy[3]},
            "contents_driver": _best_driver(self.spec.contents_cipher),
            "filenames_driver": _best_driver(self.spec.filenames_cipher),
        }


def _best_driver(cipher: str) -> str | None:
    drivers = _system.fscrypt.crypto_drivers(cipher)
    return drivers[0][1] if drivers else None
