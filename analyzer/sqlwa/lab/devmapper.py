"""Full-disk encryption under the lab filesystem, as Android's FDE: dm-crypt between the
lab's loop device (the "disk") and the filesystem (``--crypt``).

Modes:

* ``dm-crypt``: plain dm-crypt, AES-XTS (``aes-xts-plain64``) with a fresh random 512-bit
  key read from /dev/urandom by cryptsetup itself (no header, no passphrase: the key
  exists only in the kernel's table, as with Android's FDE, whose key is wrapped by the
  TEE rather than derived from a header);
* ``dm-crypt-luks2``: the same cipher under a LUKS2 header (16 MiB at the start of the
  disk by default, read back from the table), with a random passphrase and PBKDF2 forced
  to its minimum of iterations, so formatting takes milliseconds; what the header costs
  the data path is only that offset.

The device-mapper target is named like the lab (``sqlwa-lab-<pid>-<token>``), so
teardown and ``sqlwa lab cleanup`` find it by name. Safety: cryptsetup is only ever
given the lab's own loop device, after the same check as mkfs's (its backing file is the
lab's image, same inode); and the device then given to mkfs is checked to be the target
of that name whose only slave is that loop device.

The filesystem's sectors are the target's; the disk's are the loop device's. How one
maps onto the other (the table's offset) is recorded, and attribution follows each write
from the one to the other through the kernel's ``block_bio_remap`` events
(:mod:`sqlwa.analysis.remap`).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from sqlwa import _system
from sqlwa.errors import LabError, UnsupportedFilesystem, UsageError, hint_of

NO_CRYPT = "none"
CIPHER = "aes-xts-plain64"
KEY_BITS = 512  # AES-256 in XTS mode: two 256-bit keys
CRYPTO_API_NAME = "xts(aes)"  # what dm-crypt asks the kernel's crypto API for
PBKDF2_MIN_ITERATIONS = 1000  # cryptsetup's floor for --pbkdf-force-iterations with pbkdf2


@dataclass(frozen=True)
class CryptMode:
    name: str
    luks: bool
    label: str


MODES = {
    "dm-crypt": CryptMode("dm-crypt", False, "plain dm-crypt, AES-256-XTS, random key (Android FDE)"),
    "dm-crypt-luks2": CryptMode("dm-crypt-luks2", True, "LUKS2 dm-crypt, AES-256-XTS, PBKDF2 at minimum iterations"),
}
CHOICES = (NO_CRYPT, *MODES)


def check_crypt(mode: str, fs: str, has_device: bool) -> None:
    """Refuse, before anything is made, a --crypt this run cannot have."""
    if mode not in CHOICES:
        raise UsageError(f"--crypt {mode!r} is not a crypt mode", f"choose one of: {', '.join(CHOICES)}")
    if mode == NO_CRYPT:
        return
    if not has_device:  # what the filesystem lacks: a sweep skips the cell with this reason
        raise UnsupportedFilesystem(
            f"--crypt {mode}: {fs} has no block device to encrypt", "use a disk filesystem such as ext4"
        )
    if not _system.device_mapper_available():
        raise UsageError("--crypt needs device-mapper, which this kernel lacks; add --vm")
    if not _system.find_tool("cryptsetup"):
        raise UsageError("--crypt needs cryptsetup, which this machine lacks", "apt-get install cryptsetup-bin")
    # dmsetup needs root to list the targets; without root, the lab's root check says so next
    if _system.is_root() and not _system.dm_target_available("crypt", "dm_crypt"):
        raise UsageError("--crypt needs device-mapper's crypt target (dm-crypt), which this kernel lacks; add --vm")


def crypt_support() -> tuple[bool, str, str | None]:
    """(available, reason, fix) of --crypt on this machine, for ``sqlwa lab check``."""
    try:
        check_crypt("dm-crypt", "ext4", has_device=True)
    except UsageError as exc:
        return False, str(exc), hint_of(exc)
    return True, "device-mapper, its crypt target and cryptsetup present", None


class DmCrypt:
    """The dm-crypt target of one lab, over its loop device."""

    def __init__(self, mode: str, name: str) -> None:
        self.mode = MODES[mode]
        self.name = name  # the lab's name: the target is /dev/mapper/<name>
        self.device: _system.DmDevice | None = None
        self.table: str | None = None

    @property
    def path(self) -> str:
        return f"/dev/mapper/{self.name}"

    def open(self, loop_device: str) -> None:
        """Format (LUKS2) and open the target over ``loop_device``, which the caller has
        just checked is the lab's own."""
        _system.run_tool(["wipefs", "-a", loop_device], "wiping signatures off the lab's loop device")
        if self.mode.luks:
            self._open_luks2(loop_device)
        else:
            self._open_plain(loop_device)
        self.device = _system.dm_device(self.name)
        if self.device is None:
            raise LabError(f"cryptsetup opened {self.name}, but no such device-mapper device appeared")
        self.table = _system.dm_table(self.name).strip()

    def _open_plain(self, loop_device: str) -> None:
        argv = ["cryptsetup", "open", "--type", "plain", "--cipher", CIPHER, "--key-size", str(KEY_BITS)]
        argv += ["--key-file", "/dev/urandom", loop_device, self.name]
        _system.run_tool(argv, "opening plain dm-crypt over the lab's loop device", "check that dm-crypt is available")

    def _open_luks2(self, loop_device: str) -> None:
        passphrase = secrets.token_hex(32)
        fmt = ["cryptsetup", "luksFormat", "--type", "luks2", "--batch-mode", "--cipher", CIPHER]
        fmt += ["--key-size", str(KEY_BITS), "--pbkdf", "pbkdf2", "--pbkdf-force-iterations"]
        fmt += [str(PBKDF2_MIN_ITERATIONS), "--key-file", "-", loop_device]
        _system.run_tool(fmt, "formatting LUKS2 on the lab's loop device", input=passphrase)
        argv = ["cryptsetup", "open", "--type", "luks2", "--key-file", "-", loop_device, self.name]
        _system.run_tool(argv, "opening LUKS2 over the lab's loop device", input=passphrase)

    def assert_over(self, loop_device: str) -> None:
        """The last check before mkfs: the target of this name exists and sits on
        ``loop_device`` alone."""
        device = _system.dm_device(self.name)
        if device is None or device.slaves != (os.path.basename(loop_device),):
            raise LabError(f"refusing to format {self.path}: it is not the dm-crypt target over {loop_device}")

    def close(self) -> None:
        """Remove the target of this name if it exists (found by name, so a setup
        interrupted at any point is undone)."""
        if _system.dm_device(self.name) is not None:
            _system.remove_dm_device(self.name)

    def describe(self) -> dict:
        """What summary.json records: the mode, the table (keys masked by dmsetup), how
        the target maps onto the disk, and the crypto driver serving xts(aes)."""
        fields = (self.table or "").split()
        # <start> <length> crypt <cipher> <key> <iv_offset> <device> <offset> [<#opt> <opts>...]
        crypt = len(fields) >= 8 and fields[2] == "crypt"
        drivers = _system.crypto_drivers(CRYPTO_API_NAME)
        return {
            "mode": self.mode.name,
            "what": self.mode.label,
            "device": self.path,
            "dev": f"{self.device.major}:{self.device.minor}" if self.device else None,
            "table": self.table,
            "cipher": fields[3] if crypt else None,
            "key_bits": KEY_BITS,
            "offset_sectors": int(fields[7]) if crypt else None,
            "crypto_api": CRYPTO_API_NAME,
            "driver": drivers[0][1] if drivers else None,
        }
