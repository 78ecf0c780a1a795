"""The phone a run measures, described so two phones compare side by side: model, Android
build, kernel, the /data partition (filesystem, mount options, encryption, room) and the
SQLite the framework links.

Everything is read as the shell user may read it: system properties (``getprop``), the
kernel's mount table (``/proc/mounts``), ``df`` of /data, ``uname -r``, and the
framework's ``libsqlite.so`` (world-readable under /system), pulled and scanned for its
version string on the host.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlwa.errors import DeviceError
from sqlwa.phone.adb import Completed, Device

DATA = "/data"
#: Where the framework's SQLite lies: 64-bit builds first (AOSP: external/sqlite/dist, libsqlite).
FRAMEWORK_SQLITE = ("/system/lib64/libsqlite.so", "/system/lib/libsqlite.so")
#: Mount options that change what an fsync promises or what a write costs (f2fs, ext4).
DURABILITY_OPTIONS = ("nobarrier", "barrier=0", "fsync_mode=nobarrier", "fsync_mode=strict", "data=writeback")
SQLITE_VERSION = re.compile(rb"\x003\.(\d{1,2})\.(\d{1,2})\x00")


@dataclass(frozen=True)
class Build:
    """The Android build: release, API level, build type (user, userdebug, eng) and
    fingerprint, from the system properties."""

    release: str
    sdk: str
    build_type: str
    fingerprint: str


@dataclass(frozen=True)
class DataPartition:
    """/data as the kernel mounted it: filesystem, block device, every mount option, the
    ones that decide durability (``nobarrier``, f2fs's ``fsync_mode``) and whether its
    encryption is inline in the storage controller (``inlinecrypt``); its size and free
    room in bytes."""

    fs: str
    device: str
    options: tuple[str, ...]
    durability_options: tuple[str, ...]
    inline_encryption: bool
    size_bytes: int | None
    free_bytes: int | None


@dataclass(frozen=True)
class Phone:
    """One phone, as summary.json's ``config.phone`` records it."""

    serial: str
    model: str
    abi: str
    build: Build
    kernel: str
    encryption: str  # ro.crypto.type: file (FBE), block (FDE) or none
    data: DataPartition
    framework_sqlite: str | None  # None where libsqlite.so could not be read

    def describe(self) -> dict:
        return asdict(self)


def properties(device: Device) -> dict[str, str]:
    """Every system property, from ``getprop``'s ``[name]: [value]`` lines."""
    listing = device.shell(["getprop"]).stdout
    return dict(re.findall(r"^\[([^\]]+)\]: \[(.*)\]$", listing, flags=re.MULTILINE))


def data_partition(device: Device) -> DataPartition:
    """/data's entry of the mount table (the last one: what is mounted over the others)
    and its size and free room from ``df``."""
    mounts = device.shell(["cat", "/proc/mounts"]).stdout
    entries = [line.split() for line in mounts.splitlines() if len(line.split()) >= 4 and line.split()[1] == DATA]
    if not entries:
        raise DeviceError(f"{DATA} is not in the device's mount table", "is this an Android device?")
    source, _, fs, options, *_ = entries[-1]
    opts = tuple(options.split(","))
    size, free = room(device.shell(["df", "-k", DATA], check=False))
    return DataPartition(
        fs=fs,
        device=source,
        options=opts,
        durability_options=tuple(o for o in opts if o in DURABILITY_OPTIONS),
        inline_encryption="inlinecrypt" in opts,
        size_bytes=size,
        free_bytes=free,
    )


def room(df: Completed) -> tuple[int | None, int | None]:
    """Size and free bytes from ``df -k``'s one line under its header (toybox's and
    coreutils' agree: device, 1K-blocks, used, available, …)."""
    lines = [line.split() for line in df.stdout.splitlines()[1:] if line.strip()]
    if df.returncode != 0 or not lines or len(lines[-1]) < 4:
        return None, None
    fields = lines[-1]
    try:
        return int(fields[1]) * 1024, int(fields[3]) * 1024
    except ValueError:
        return None, None


def framework_sqlite(device: Device) -> str | None:
    """The version of the SQLite the framework links, read from its library's
    ``sqlite3_version`` string (the library is pulled, not run)."""
    with tempfile.TemporaryDirectory(prefix="sqlwa-libsqlite-") as scratch:
        for remote in FRAMEWORK_SQLITE:
            local = Path(scratch) / "libsqlite.so"
            try:
                device.pull(remote, local)
            except DeviceError:
                continue
            found = sqlite_version_in(local.read_bytes())
            if found:
                return found
    return None


def sqlite_version_in(library: bytes) -> str | None:
    """The version a SQLite library was built as: its ``sqlite3_version[]``, a string of
    its own in the read-only data (``SQLITE_VERSION``, e.g. ``3.39.2``)."""
    found = SQLITE_VERSION.search(library)
    return f"3.{int(found[1])}.{int(found[2])}" if found else None


def describe(device: Device, serial: str) -> Phone:
    """The phone behind ``device``, as the shell user can read it."""
    props = properties(device)
    maker, model = props.get("ro.product.manufacturer", ""), props.get("ro.product.model", "unknown")
    return Phone(
        serial=serial,
        model=f"{maker} {model}".strip(),
        abi=props.get("ro.product.cpu.abi", "unknown"),
        build=Build(
            release=props.get("ro.build.version.release", "unknown"),
            sdk=props.get("ro.build.version.sdk", "unknown"),
            build_type=props.get("ro.build.type", "unknown"),
            fingerprint=props.get("ro.build.fingerprint", ""),
        ),
        kernel=device.shell(["uname", "-r"]).stdout.strip(),
        encryption=props.get("ro.crypto.type", "none") or "none",
        data=data_partition(device),
        framework_sqlite=framework_sqlite(device),
    )
