"""The guest's initramfs: a static busybox, the init script, and the few modules init
needs before it can reach the host (virtio PCI, 9p, overlay) — everything else comes
from the host over 9p. Built with busybox's own ``cpio`` and cached beside the kernel,
named by what went into it."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import struct
import tempfile
from importlib import resources
from pathlib import Path

from sqlwa import _system
from sqlwa.errors import UsageError
from sqlwa.vm.kernel import GuestKernel

# What init loads itself: enough to mount the host's shares and lay the overlay.
EARLY_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
BUSYBOX_APPLETS = ("sh", "mount", "mkdir", "insmod", "cat", "cut", "chroot", "poweroff", "echo")
MODPROBE_INSIDE = "#!/bin/sh\n# the kernel's module loader: the host's modprobe, in the guest's root\nexec /bin/chroot /root /sbin/modprobe \"$@\"\n"
PT_INTERP = 3  # the ELF program header naming the dynamic loader
BUSYBOX_FIX = "install Debian's busybox-static (the guest's init needs a static busybox)"


def initramfs_for(kernel: GuestKernel) -> Path:
    """The initramfs for ``kernel``, built once."""
    busybox = static_busybox()
    init_script = resources.files("sqlwa.vm").joinpath("init.sh").read_bytes()
    digest = hashlib.sha256(init_script + MODPROBE_INSIDE.encode() + Path(busybox).read_bytes()).hexdigest()[:16]
    target = Path(kernel.root) / f"initramfs-{digest}.cpio.gz"
    if not target.is_file():
        build(kernel, busybox, init_script, target)
    return target


def static_busybox() -> str:
    busybox = _system.tools.find_tool("busybox")
    if busybox is None:
        raise UsageError("the VM lab needs busybox, which this machine lacks", BUSYBOX_FIX)
    if not is_static_elf(Path(busybox)):
        raise UsageError(f"{busybox} is linked dynamically; the guest's init needs a static one", BUSYBOX_FIX)
    return busybox


def is_static_elf(path: Path) -> bool:
    """Whether ``path`` is a 64-bit ELF executable without a program interpreter
    (PT_INTERP): one that runs where no dynamic loader or C library is."""
    with open(path, "rb") as elf:
        header = elf.read(64)
        if header[:5] != b"\x7fELF\x02":
            return False
        (phoff,) = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        elf.seek(phoff)
        table = elf.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != PT_INTERP for i in range(phnum))


def build(kernel: GuestKernel, busybox: str, init_script: bytes, target: Path) -> None:
    """Lay the tree out in a temporary directory and pack it; renamed into place at the end."""
    with tempfile.TemporaryDirectory(prefix=".initramfs-", dir=kernel.root) as staging:
        tree = Path(staging) / "tree"
        for directory in ("bin", "dev", "proc", "sys", "ctl", "ro", "rw", "root", "modules"):
            (tree / directory).mkdir(parents=True)
        shutil.copy2(busybox, tree / "bin" / "busybox")
        for applet in BUSYBOX_APPLETS:
            (tree / "bin" / applet).symlink_to("busybox")
        write_executable(tree / "init", init_script)
        write_executable(tree / "bin" / "modprobe-inside", MODPROBE_INSIDE.encode())
        order = [copy_module(path, tree / "modules") for path in early_module_files(kernel)]
        (tree / "modules" / "order").write_text("\n".join(order) + "\n")
        packed = Path(staging) / "initramfs.cpio"
        listing = "\n".join(sorted(str(p.relative_to(tree)) for p in tree.rglob("*")))
        _system.tools.run_tool(
            [busybox, "cpio", "-o", "-H", "newc", "-F", packed],
            "packing the guest's initramfs",
            cwd=tree,
            input=".\n" + listing + "\n",
        )
        with open(packed, "rb") as raw, gzip.open(Path(staging) / "out.gz", "wb", compresslevel=1) as out:
            shutil.copyfileobj(raw, out)
        os.replace(Path(staging) / "out.gz", target)


def write_executable(path: Path, content: bytes) -> None:
    path.write_bytes(content)
    path.chmod(0o755)


def early_module_files(kernel: GuestKernel) -> list[Path]:
    """The .ko files of :data:`EARLY_MODULES` and what they depend on, in load order
    (those built into the kernel need nothing)."""
    files: list[Path] = []
    for module in EARLY_MODULES:
        proc = _system.tools.run_tool(
            ["modprobe", "-d", kernel.root, "-S", kernel.release, "--show-depends", module],
            f"listing what the guest kernel's {module} module needs",
            "install kmod",
        )
        for line in proc.stdout.splitlines():
            words = line.split()
            if words and words[0] == "insmod" and Path(words[1]) not in files:
                files.append(Path(words[1]))
    return files


def copy_module(path: Path, into: Path) -> str:
    if path.suffix != ".ko":
        raise UsageError(
            f"the guest kernel's module {path.name} is compressed; the guest's busybox insmod needs plain .ko files",
            "give a kernel package whose modules are not compressed (Debian's 6.1 is not)",
        )
    shutil.copy2(path, into / path.name)
    return path.name
