"""The guest's kernel: Debian's current one, fetched once into the cache, or the user's.

``--kernel debian`` downloads the package ``linux-image-amd64`` depends on with
``apt-get download`` (no root, nothing installed), unpacks it with ``dpkg-deb -x`` into
``~/.cache/sqlwa/kernels/<package>_<version>/`` and indexes its modules with ``depmod -b``.
``--kernel PATH`` takes another ``linux-image-*.deb`` (any version Debian or Ubuntu
ships, or one built with ``make bindeb-pkg``), prepared the same way, or a directory
that already holds ``boot/vmlinuz-<release>`` and ``lib/modules/<release>/`` with its
``modules.dep``.

The compressed bzImage is unpacked once into ``vmlinux``: qemu starts an uncompressed
kernel directly at its PVH entry point, skipping the firmware and the decompression,
which take seconds under TCG.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlwa import _system, inputs
from sqlwa.catalogue import DEBIAN_KERNEL
from sqlwa.errors import UsageError

DEBIAN = DEBIAN_KERNEL
DEBIAN_META_PACKAGE = "linux-image-amd64"
KERNEL_FILE = "kernel.json"  # what a prepared kernel directory holds, beside boot/ and lib/
DEBIAN_CHOICE_FILE = "kernels/debian.json"  # in the cache, beside the prepared kernels: apt's answer and its state
# What apt-cache's answer depends on (a directory: each file in it).
APT_STATE_PATHS = tuple(
    Path(p)
    for p in (
        "/var/lib/apt/lists",
        "/var/lib/dpkg/status",
        "/etc/apt/sources.list",
        "/etc/apt/sources.list.d",
        "/etc/apt/preferences",
        "/etc/apt/preferences.d",
        "/etc/apt/apt.conf",
        "/etc/apt/apt.conf.d",
    )
)
VMLINUX = "vmlinux"
# Where a bzImage's compressed payload starts, by format (magic bytes).
PAYLOAD_MAGIC = {b"\xfd7zXZ\x00": "xz", b"\x1f\x8b\x08": "gzip"}


@dataclass(frozen=True)
class GuestKernel:
    """A kernel ready to boot: its image, its modules and where it came from."""

    release: str  # uname -r inside the guest, e.g. 6.1.0-56-amd64
    source: str  # "debian linux-image-6.1.0-56-amd64 6.1.192-2", or the path given
    root: str  # the prepared directory: boot/, lib/modules/<release>/, vmlinux
    image: str  # what qemu boots: vmlinux, or the bzImage when it could not be unpacked

    @property
    def modules_dir(self) -> Path:
        return Path(self.root) / "lib" / "modules" / self.release

    def describe(self) -> dict:
        return asdict(self)


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/sqlwa`` or ``~/.cache/sqlwa``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sqlwa"


CACHED_LIMIT = inputs.MiB  # a cache file holds a few remembered answers


def read_cached(name: str) -> object | None:
    """The JSON document kept as ``name`` in the cache; None when it is not there or
    cannot be read: missing, damaged, not a regular file (a FIFO would block the read) or
    too large. A cache is never a reason to fail."""
    try:
        return inputs.parse_json(inputs.read_input(cache_dir() / name, "cache file", CACHED_LIMIT))
    except (OSError, ValueError, UsageError):
        return None


def write_cached(name: str, document: object) -> None:
    """Keep ``document`` as ``name`` in the cache. Written whole (a rename), so runs at
    once never read half a file; best effort: a cache that cannot be written costs the
    next run the work again, and leaves nothing behind."""
    path = cache_dir() / name
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(document, indent=1) + "\n")
        staged.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            staged.unlink(missing_ok=True)


def tell(message: str) -> None:
    print(f"sqlwa: {message}", file=sys.stderr, flush=True)


def resolve(choice: str, announce: Callable[[str], None] = tell) -> GuestKernel:
    """The kernel ``--kernel`` names (``debian`` or a path), prepared in the cache."""
    if choice == DEBIAN:
        return debian_kernel(announce)
    path = Path(choice)
    if path.is_dir():
        return kernel_in_directory(path, source=str(path))
    if path.is_file() and path.suffix == ".deb":
        with open(path, "rb") as deb:  # a kernel package is tens of MB: hashed as it streams
            digest = hashlib.file_digest(deb, "sha256").hexdigest()[:16]
        return prepared(
            f"deb-{digest}", lambda into: unpack_deb(path, into), source=str(path.resolve()), announce=announce
        )
    raise UsageError(
        f"--kernel {choice}: not a linux-image .deb nor a directory holding boot/vmlinuz-* and lib/modules/",
        "give --kernel debian, a linux-image-*.deb, or an unpacked kernel package directory",
    )


def debian_kernel(announce) -> GuestKernel:
    """Debian's current amd64 kernel for this machine's release, fetched once."""
    apt_get = _system.tools.find_tool("apt-get")
    if apt_get is None:
        raise UsageError(
            "--kernel debian fetches Debian's kernel package with apt-get, which this machine lacks",
            "give --kernel PATH: a linux-image-*.deb or an unpacked kernel package directory",
        )
    package, version = debian_kernel_package()
    key = f"{package}_{version}"

    def fetch(into: Path) -> None:
        announce(f"fetching Debian's kernel {package} {version} (once; cached in {cache_dir() / 'kernels'})")
        _system.tools.run_tool(
            [apt_get, "download", "-q", f"{package}={version}"],
            f"downloading {package}",
            "check that apt can reach Debian's mirrors (apt-get update), or give --kernel PATH",
            timeout=600,
            cwd=into,
        )
        deb = next(into.glob("*.deb"))
        unpack_deb(deb, into)
        deb.unlink()

    return prepared(key, fetch, source=f"debian {package} {version}", announce=announce)


def debian_kernel_package() -> tuple[str, str]:
    """(package, version) that Debian's ``linux-image-amd64`` currently depends on: asked
    of apt once for each state of its package lists and settings, then remembered in the
    cache (where apt keeps no binary cache, as Debian's container images have it, each
    ``apt-cache show`` reads every list anew: three seconds before each VM lab run)."""
    state = apt_state()
    saved = read_cached(DEBIAN_CHOICE_FILE)
    if isinstance(saved, dict) and saved.get("apt_state") == state:
        package, version = saved.get("package"), saved.get("version")
        if isinstance(package, str) and isinstance(version, str):
            return package, version
    package, version = ask_apt_for_debian_kernel()
    write_cached(DEBIAN_CHOICE_FILE, {"apt_state": state, "package": package, "version": version})
    return package, version


def apt_state() -> str:
    """A digest of what ``apt-cache show`` answers from: the names, sizes and times of
    change of apt's package lists, dpkg's status and apt's settings (an ``apt-get update``
    or a new pin changes it)."""
    entries = []
    for place in APT_STATE_PATHS:
        try:
            paths = sorted(place.iterdir()) if place.is_dir() else [place]
        except OSError:  # a directory this user cannot list: its own time of change
            paths = [place]
        for path in paths:
            try:
                info = path.stat()
            except OSError:
                continue
            entries.append(f"{path}\t{info.st_size}\t{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def ask_apt_for_debian_kernel() -> tuple[str, str]:
    proc = _system.tools.run_tool(
        ["apt-cache", "show", "--no-all-versions", DEBIAN_META_PACKAGE],
        f"looking up {DEBIAN_META_PACKAGE}",
        "run apt-get update, or give --kernel PATH",
    )
    for line in proc.stdout.splitlines():
        if line.startswith("Depends:"):
            package = line.split(":", 1)[1].split(",")[0].split("(")[0].strip()
            return package, package_version(package)
    raise UsageError(f"apt knows {DEBIAN_META_PACKAGE} but not which kernel it depends on", "give --kernel PATH")


def package_version(package: str) -> str:
    proc = _system.tools.run_tool(["apt-cache", "show", "--no-all-versions", package], f"looking up {package}")
    for line in proc.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise UsageError(f"apt has no version of {package}", "run apt-get update, or give --kernel PATH")


def prepared(key: str, make, source: str, announce) -> GuestKernel:
    """The kernel cached under ``key``, made by ``make(into)`` first if it is not there.

    Made in a temporary directory beside the cache entry and renamed into place, so two
    runs preparing the same kernel at once, or one interrupted, leave no half entry."""
    entry = cache_dir() / "kernels" / key
    if not (entry / KERNEL_FILE).is_file():
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=entry.parent))
        try:
            make(staging)
            kernel = kernel_in_directory(staging, source, index=True)
            (staging / KERNEL_FILE).write_text(json.dumps({"release": kernel.release, "source": source}) + "\n")
            try:
                staging.rename(entry)
            except OSError:  # another run put it there first
                pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return kernel_in_directory(entry, source)


def unpack_deb(deb: Path, into: Path) -> None:
    _system.tools.run_tool(
        ["dpkg-deb", "-x", deb, into],
        f"unpacking {deb.name}",
        f"give a linux-image-*.deb as --kernel ({deb.name} is not one), or --kernel debian",
    )


def kernel_in_directory(root: Path, source: str, index: bool = False) -> GuestKernel:
    """The kernel an unpacked kernel package directory holds; with ``index``, its modules
    indexed (depmod) and its bzImage unpacked into ``vmlinux`` first."""
    images = sorted((root / "boot").glob("vmlinuz-*"))
    if not images:
        raise UsageError(f"{root} holds no boot/vmlinuz-*", "give an unpacked linux-image package directory")
    release = images[-1].name.removeprefix("vmlinuz-")
    modules = root / "lib" / "modules" / release
    if not modules.is_dir():
        raise UsageError(f"{root} has no lib/modules/{release}/", "give the kernel's package with its modules")
    if index:
        _system.tools.run_tool(["depmod", "-b", root, release], "indexing the guest kernel's modules", "install kmod")
        unpack_vmlinux(images[-1], root / VMLINUX)
    if not (modules / "modules.dep").is_file():
        raise UsageError(f"{modules} has no modules.dep", f"run: depmod -b {root} {release}")
    vmlinux = root / VMLINUX
    image = vmlinux if vmlinux.is_file() else images[-1]
    return GuestKernel(release=release, source=source, root=str(root), image=str(image))


def unpack_vmlinux(bzimage: Path, into: Path) -> bool:
    """Write the ELF kernel a bzImage carries compressed to ``into``; False when its
    payload is in none of the formats known here (the bzImage then boots as it is)."""
    data = bzimage.read_bytes()
    for magic, form in PAYLOAD_MAGIC.items():
        start = data.find(magic)
        if start < 0:
            continue
        try:
            payload = decompress(data[start:], form)
        except (lzma.LZMAError, zlib.error):
            continue
        if payload.startswith(b"\x7fELF"):
            into.write_bytes(payload)
            return True
    return False


def decompress(data: bytes, form: str) -> bytes:
    """The first compressed stream in ``data``; what follows it (the bzImage's tail) is ignored."""
    if form == "xz":
        return lzma.LZMADecompressor().decompress(data)
    return zlib.decompressobj(wbits=zlib.MAX_WBITS | 16).decompress(data)  # gzip framing
