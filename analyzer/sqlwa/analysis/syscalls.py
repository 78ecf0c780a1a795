"""Syscall numbers of the two machines sqlwa meets in Perfetto traces.

Perfetto records the raw ``sys_enter``/``sys_exit`` tracepoints, which carry the
syscall's number, not its name, and the number depends on the machine: x86_64 has its
own table (``arch/x86/entry/syscalls/syscall_64.tbl``), arm64 uses the generic one
(``include/uapi/asm-generic/unistd.h``). Only the calls around a file's life are listed:
what sqlwa counts per commit (the fsync family, pwrite64, write, ftruncate, unlink) and
their neighbours, with the argument names of the kernel's own syscall format (the names
tracefs prints, so ``fd`` and ``count`` are read as tracefs text is).
"""

from __future__ import annotations

#: name → argument names, as ``include/linux/syscalls.h`` declares them.
ARGUMENTS: dict[str, tuple[str, ...]] = {
    "read": ("fd", "buf", "count"),
    "write": ("fd", "buf", "count"),
    "open": ("filename", "flags", "mode"),
    "close": ("fd",),
    "pread64": ("fd", "buf", "count", "pos"),
    "pwrite64": ("fd", "buf", "count", "pos"),
    "writev": ("fd", "vec", "vlen"),
    "pwritev": ("fd", "vec", "vlen", "pos_l", "pos_h"),
    "fsync": ("fd",),
    "fdatasync": ("fd",),
    "sync_file_range": ("fd", "offset", "nbytes", "flags"),
    "truncate": ("path", "length"),
    "ftruncate": ("fd", "length"),
    "fallocate": ("fd", "mode", "offset", "len"),
    "rename": ("oldname", "newname"),
    "renameat": ("olddfd", "oldname", "newdfd", "newname"),
    "renameat2": ("olddfd", "oldname", "newdfd", "newname", "flags"),
    "unlink": ("pathname",),
    "unlinkat": ("dfd", "pathname", "flag"),
    "openat": ("dfd", "filename", "flags", "mode"),
    "mkdirat": ("dfd", "pathname", "mode"),
    "sync": (),
    "syncfs": ("fd",),
}

#: machine (``uname -m``) → syscall number → name.
NUMBERS: dict[str, dict[int, str]] = {
    "x86_64": {
        0: "read",
        1: "write",
        2: "open",
        3: "close",
        17: "pread64",
        18: "pwrite64",
        20: "writev",
        74: "fsync",
        75: "fdatasync",
        76: "truncate",
        77: "ftruncate",
        82: "rename",
        87: "unlink",
        162: "sync",
        257: "openat",
        258: "mkdirat",
        263: "unlinkat",
        264: "renameat",
        277: "sync_file_range",
        285: "fallocate",
        296: "pwritev",
        306: "syncfs",
        316: "renameat2",
    },
    # arm64 has no open, unlink or rename: only their *at forms.
    "aarch64": {
        34: "mkdirat",
        35: "unlinkat",
        38: "renameat",
        45: "truncate",
        46: "ftruncate",
        47: "fallocate",
        56: "openat",
        57: "close",
        63: "read",
        64: "write",
        66: "writev",
        67: "pread64",
        68: "pwrite64",
        70: "pwritev",
        81: "sync",
        82: "fsync",
        83: "fdatasync",
        84: "sync_file_range",
        267: "syncfs",
        276: "renameat2",
    },
}
# uname spellings of the same machines.
NUMBERS["amd64"] = NUMBERS["x86_64"]
NUMBERS["arm64"] = NUMBERS["aarch64"]

#: The machine assumed when a trace does not say (Perfetto's system_info is missing):
#: Android phones are arm64.
DEFAULT_MACHINE = "aarch64"


def numbers_by_name(machine: str) -> dict[str, int]:
    """name → number on ``machine`` (KeyError for a machine not listed)."""
    return {name: number for number, name in NUMBERS[machine].items()}
