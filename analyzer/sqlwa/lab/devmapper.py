"""Device-mapper under the lab filesystem: full-disk encryption, as Android's FDE
(dm-crypt between the lab's loop device, the "disk", and the filesystem: ``--crypt``),
or a slow device (dm-delay: ``--device-delay MS``). One of them at a time: attribution
follows a write through one remap.

Modes:

* ``dm-crypt``: plain dm-crypt, AES-XTS (``aes-xts-plain64``) with a fresh random 512-bit
  key read from /dev/urandom by cryptsetup itself (no header, no passphrase: the key
  exists only in the kernel's table, as with Android's FDE, whose key is wrapped by the
  TEE rather than derived from a header);
* ``dm-crypt-luks2``: the same cipher under a LUKS2 header (16 MiB at the start of the
  disk by default, read back from the table), with a random passphrase and PBKDF2 forced
  to its minimum of iterations, so formatting takes milliseconds; what the header costs
  the data path is only that offset.

dm-delay (``--device-delay MS``) holds every write and every cache flush MS milliseconds
before passing it to the loop device (reads are not delayed): a device of known latency
for the device-profile work, with the filesystem's requests unchanged.

The device-mapper target is named like the lab (``sqlwa-lab-<pid>-<token>``), so
teardown and ``sqlwa lab cleanup`` find it by name. Safety: cryptsetup and dmsetup are
only ever given the lab's own loop device, after the same check as mkfs's (its backing
file is the lab's image, same inode); and the device then given to mkfs is checked to be
the target of that name whose only slave is that loop device.

The filesystem's sectors are the target's; the disk's are the loop device's. How one
maps onto the other (the table's offset) is recorded, and attribution follows each write
from the one to the other through the kernel's ``block_bio_remap`` events
(:mod:`sqlwa.analysis.remap`).

The layers over these targets, and what they refuse, are :mod:`sqlwa.lab.layers.dmcrypt`,
:mod:`~sqlwa.lab.layers.dmdelay` and :mod:`~sqlwa.lab.layers.logwrites`.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from sqlwa import _system
from sqlwa.errors import LabError

NO_CRYPT = "none"
CIPHER = "aes-xts-plain64"
KEY_BITS = 512  # AES-256 in XTS mode: two 256-bit keys
CRYPTO_API_NAME = "xts(aes)"  # what dm-crypt asks the kernel's crypto API for
PBKDF2_MIN_ITERATIONS = 1000  # cryptsetup's floor for --pbkdf-force-iterations with pbkdf2
MAX_DELAY_MS = 10_000  # --device-delay: a phone's slowest flush is tens of ms; beyond 10 s is a typo
DMSETUP_TIMEOUT_S = 60


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


class DmTarget:
    """The device-mapper target of one lab, over its loop device, named like the lab."""

    def __init__(self, name: str) -> None:
        self.name = name  # the lab's name: the target is /dev/mapper/<name>
        self.device: _system.dm.DmDevice | None = None
        self.table: str | None = None

    @property
    def path(self) -> str:
        return f"/dev/mapper/{self.name}"

    def open(self, loop_device: str) -> None:
        """Make the target over ``loop_device``, which the caller has just checked is the lab's own."""
        self._create(loop_device)
        self.device = _system.dm.dm_device(self.name)
        if self.device is None:
            raise LabError(f"{self.name} was set up, but no such device-mapper device appeared")
        self.table = _system.dm.dm_table(self.name).strip()

    def _create(self, loop_device: str) -> None:
        raise NotImplementedError

    def assert_over(self, loop_device: str) -> None:
        """The last check before mkfs: the target of this name exists and sits on
        ``loop_device`` alone."""
        device = _system.dm.dm_device(self.name)
        if device is None or device.slaves != (os.path.basename(loop_device),):
            raise LabError(f"refusing to format {self.path}: it is not the lab's target over {loop_device}")

    def close(self) -> None:
        """Remove the target of this name if it exists (found by name, so a setup
        interrupted at any point is undone)."""
        if _system.dm.dm_device(self.name) is not None:
            _system.dm.remove_dm_device(self.name)

    def dev_text(self) -> str | None:
        return f"{self.device.major}:{self.device.minor}" if self.device else None


class DmCrypt(DmTarget):
    """The dm-crypt target of one lab, over its loop device."""

    def __init__(self, mode: str, name: str) -> None:
        super().__init__(name)
        self.mode = MODES[mode]

    def _create(self, loop_device: str) -> None:
        """Format (LUKS2) and open dm-crypt over the loop device."""
        _system.tools.run_tool(["wipefs", "-a", loop_device], "wiping signatures off the lab's loop device")
        if self.mode.luks:
            self._open_luks2(loop_device)
        else:
            self._open_plain(loop_device)

    def _open_plain(self, loop_device: str) -> None:
        argv = ["cryptsetup", "open", "--type", "plain", "--cipher", CIPHER, "--key-size", str(KEY_BITS)]
        argv += ["--key-file", "/dev/urandom", loop_device, self.name]
        _system.tools.run_tool(
            argv, "opening plain dm-crypt over the lab's loop device", "check that dm-crypt is available"
        )

    def _open_luks2(self, loop_device: str) -> None:
        passphrase = secrets.token_hex(32)
        fmt = ["cryptsetup", "luksFormat", "--type", "luks2", "--batch-mode", "--cipher", CIPHER]
        fmt += ["--key-size", str(KEY_BITS), "--pbkdf", "pbkdf2", "--pbkdf-force-iterations"]
        fmt += [str(PBKDF2_MIN_ITERATIONS), "--key-file", "-", loop_device]
        _system.tools.run_tool(fmt, "formatting LUKS2 on the lab's loop device", input=passphrase)
        argv = ["cryptsetup", "open", "--type", "luks2", "--key-file", "-", loop_device, self.name]
        _system.tools.run_tool(argv, "opening LUKS2 over the lab's loop device", input=passphrase)

    def describe(self) -> dict:
        """What summary.json records: the mode, the table (keys masked by dmsetup), how
        the target maps onto the disk, and the crypto driver serving xts(aes)."""
        fields = (self.table or "").split()
        # <start> <length> crypt <cipher> <key> <iv_offset> <device> <offset> [<#opt> <opts>...]
        crypt = len(fields) >= 8 and fields[2] == "crypt"
        drivers = _system.fscrypt.crypto_drivers(CRYPTO_API_NAME)
        return {
            "mode": self.mode.name,
            "what": self.mode.label,
            "device": self.path,
            "dev": self.dev_text(),
            "table": self.table,
            "cipher": fields[3] if crypt else None,
            "key_bits": KEY_BITS,
            "offset_sectors": int(fields[7]) if crypt else None,
            "crypto_api": CRYPTO_API_NAME,
            "driver": drivers[0][1] if drivers else None,
        }


class DmDelay(DmTarget):
    """A dm-delay target over the lab's loop device: writes and cache flushes held
    ``delay_ms`` each, reads passed at once."""

    def __init__(self, delay_ms: int, name: str) -> None:
        super().__init__(name)
        self.delay_ms = delay_ms

    def _create(self, loop_device: str) -> None:
        sectors = _system.loops.block_device_sectors(loop_device)
        # <start> <length> delay <read dev> <offset> <ms> <write dev> <offset> <ms> <flush dev> <offset> <ms>
        table = f"0 {sectors} delay {loop_device} 0 0 {loop_device} 0 {self.delay_ms} {loop_device} 0 {self.delay_ms}"
        _system.tools.run_tool(
            ["dmsetup", "create", self.name, "--table", table],
            "creating the dm-delay target over the lab's loop device",
            "check that dm-delay is available (modprobe dm_delay)",
            timeout=DMSETUP_TIMEOUT_S,
        )
        # /dev/mapper/<name> is udev's to make, and the VM lab's guest has no udev
        _system.tools.run_tool(["dmsetup", "mknodes", self.name], f"making the node /dev/mapper/{self.name}")

    def describe(self) -> dict:
        """What summary.json records: the delays, the table as the kernel reports it, and
        where the filesystem's sectors lie on the disk (the write class's offset)."""
        fields = (self.table or "").split()
        # <start> <length> delay <dev> <offset> <ms> [<dev> <offset> <ms> [<dev> <offset> <ms>]]
        delay = len(fields) >= 9 and fields[2] == "delay"
        return {
            "delay_ms": self.delay_ms,
            "delayed": ["write", "flush"],
            "device": self.path,
            "dev": self.dev_text(),
            "table": self.table,
            "offset_sectors": int(fields[7]) if delay else None,
        }


# --------------------------------------------------------------------------- log-writes

LOG_WRITES_SUFFIX = "-log"  # the log-writes target is named <lab name>-log
READY_MARK = "sqlwa-lab-ready"  # the filesystem is made and mounted: crash states start here


class LogWrites:
    """device-mapper's log-writes target between the disk (or dm-crypt) and the
    filesystem: every write with its data, every flush and FUA, in the order they
    became durable, go to a log on a second loop device (``sqlwa.durability``)."""

    def __init__(self, lab_name: str) -> None:
        self.name = lab_name + LOG_WRITES_SUFFIX
        self.device: _system.dm.DmDevice | None = None

    @property
    def path(self) -> str:
        return f"/dev/mapper/{self.name}"

    def open(self, data_device: str, log_device: str) -> None:
        """Create the target over ``data_device`` (the lab's, checked by the caller),
        logging to ``log_device``."""
        table = f"0 {_system.loops.block_device_sectors(data_device)} log-writes {data_device} {log_device}"
        _system.tools.run_tool(
            ["dmsetup", "create", self.name, "--table", table],
            "creating the log-writes target",
            timeout=DMSETUP_TIMEOUT_S,
        )
        # without udev (the VM lab's guest) the /dev/mapper node is only made when asked
        _system.tools.run_tool(["dmsetup", "mknodes", self.name], "making the log-writes target's device node")
        self.device = _system.dm.dm_device(self.name)
        if self.device is None:
            raise LabError(f"dmsetup created {self.name}, but no such device-mapper device appeared")

    def assert_over(self, data_device: str) -> None:
        """The last check before mkfs: the target of this name sits on ``data_device``."""
        device = self.device and _system.dm.dm_device(self.name)
        under = os.path.basename(os.path.realpath(data_device))
        if device is None or under not in device.slaves:
            raise LabError(f"refusing to format {self.path}: it is not the log-writes target over {data_device}")

    def mark(self, text: str) -> None:
        """A mark in the log, behind everything durable by now (``dmsetup message``)."""
        _system.tools.run_tool(["dmsetup", "message", self.name, "0", "mark", text], "marking the write log")

    def close(self) -> None:
        """Remove the target (it logs what no flush covered, then its end mark)."""
        if _system.dm.dm_device(self.name) is not None:
            _system.dm.remove_dm_device(self.name)
