"""What ``--mkfs-opts`` and ``--mount-opts`` may say: nothing that points mkfs or mount at
a file or device other than the lab's own loop device.

mkfs takes the device to format as a bare argument, and several of its options name
further devices or files it writes to or reads from (btrfs' extra devices, an external
XFS log ``-l logdev=``, ext4's ``-J device=`` or undo file ``-z``); so do some mount
options (``logdev=``, ``journal_path=``, ``device=``). Two rules, both checked before
anything is made:

1. **Nothing names a path.** No option, and no piece of a ``KEY=VALUE,...`` list, may
   contain a ``/``, be a device, or name an existing file or directory (relative to the
   current directory) — wherever it stands: a bare argument, a glued value (``-L/dev/x``),
   ``--opt=/path``, ``key=/path`` anywhere in a comma list.
2. **mkfs options come from an allow-list** per mkfs tool (:data:`MKFS_FLAGS`): the
   options that name no file or device and do not stop mkfs from making the filesystem.
   Options are read the way mkfs's getopt reads them (glued values, ``-fq`` bundles,
   ``--long=value``), an option whose value is a ``KEY[=VALUE],...`` list may use only the
   keys listed, and a bare argument or ``--`` is refused (mkfs would take what follows as
   a device). Mount options are the kernel's and many; those that name another device
   (:data:`MOUNT_KEYS_REFUSED`) and mount(8)'s own ``x-``/``X-`` options are refused.

Every refusal is one :class:`~sqlwa.errors.LabError` naming the option and why, with what
is allowed as its fix. docs/guide/device-level.md lists the allow-lists.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sqlwa.errors import LabError, UsageError


@dataclass(frozen=True)
class Flag:
    """One mkfs option the lab passes on."""

    short: str | None  # "-O"
    long: str | None = None  # "--features" (btrfs only)
    value: str | None = None  # what it takes, for the help; None: a switch without a value
    keys: tuple[str, ...] = ()  # for a KEY[=VALUE],... value: the keys allowed

    def __post_init__(self) -> None:
        if self.keys and self.value is None:
            object.__setattr__(self, "value", "KEY[=VALUE],...")

    def __str__(self) -> str:
        names = "/".join(n for n in (self.short, self.long) if n)
        return f"{names} {self.value}" if self.value else names


def _keys(words: str) -> tuple[str, ...]:
    return tuple(words.split())


# mke2fs (getopt "b:cd:e:g:i:jl:m:no:qr:s:t:vC:DE:FG:I:J:KL:M:N:O:R:ST:U:Vz:"). Left out:
# -d DIR (copies a directory in), -l FILE (bad-blocks list), -z FILE (undo file), -M DIR,
# -J device=, -E offset= / no_copy_xattrs; -c (badblocks scan), -e (panic on errors),
# -t (the lab's --fs chooses the type), -n / -S / -V (make no filesystem), -K / -R (old
# spellings of -E nodiscard / -E).
EXT4_FLAGS = (
    Flag("-b", value="BLOCK-SIZE"),
    Flag("-C", value="CLUSTER-SIZE"),
    Flag("-D"),
    Flag(
        "-E",
        keys=_keys(
            "lazy_itable_init lazy_journal_init assume_storage_prezeroed stride stripe_width stripe-width "
            "resize packed_meta_blocks num_backup_sb root_owner test_fs orphan_file_size discard nodiscard "
            "quotatype encoding encoding_flags mmp_update_interval"
        ),
    ),
    Flag("-F"),
    Flag("-g", value="BLOCKS-PER-GROUP"),
    Flag("-G", value="GROUPS"),
    Flag("-i", value="BYTES-PER-INODE"),
    Flag("-I", value="INODE-SIZE"),
    Flag("-j"),
    Flag("-J", keys=_keys("size fast_commit_size location")),
    Flag("-L", value="LABEL"),
    Flag("-m", value="RESERVED-PCT"),
    Flag("-N", value="INODES"),
    Flag("-o", value="CREATOR-OS"),
    Flag("-O", value="[^]FEATURE,..."),
    Flag("-q"),
    Flag("-r", value="REVISION"),
    Flag("-T", value="USAGE-TYPE,..."),
    Flag("-U", value="UUID"),
    Flag("-v"),
)

# mkfs.xfs (getopt "b:c:d:i:l:L:m:n:KNp:qr:s:CfV"). Left out: -l logdev= / name=, -d name= /
# file, -r (a realtime device), -c FILE (a config file), -p FILE (a protofile), -N / -V
# (make no filesystem), -C.
XFS_FLAGS = (
    Flag("-b", keys=_keys("size")),
    Flag(
        "-d",
        keys=_keys("agcount agsize cowextsize size sunit su swidth sw noalign projinherit extszinherit daxinherit"),
    ),
    Flag("-f"),
    Flag("-i", keys=_keys("size perblock maxpct align attr projid32bit sparse nrext64")),
    Flag("-K"),
    Flag("-l", keys=_keys("size agnum internal version sunit su lazy-count")),
    Flag("-L", value="LABEL"),
    Flag("-m", keys=_keys("crc finobt inobtcount uuid rmapbt reflink bigtime")),
    Flag("-n", keys=_keys("size version ftype")),
    Flag("-q"),
    Flag("-s", keys=_keys("size")),
)

# mkfs.btrfs (getopt "A:b:fl:n:s:m:d:L:R:O:r:U:VvMKq" and long options; abbreviated long
# options are not accepted here). Left out: -r/--rootdir DIR, --shrink, every extra bare
# argument (a further device of the filesystem), -A, -l/--leafsize, -V/--version, --help.
BTRFS_FLAGS = (
    Flag("-b", "--byte-count", "SIZE"),
    Flag(None, "--checksum", "TYPE"),
    Flag(None, "--csum", "TYPE"),
    Flag("-d", "--data", "PROFILE"),
    Flag("-f", "--force"),
    Flag("-K", "--nodiscard"),
    Flag("-L", "--label", "LABEL"),
    Flag("-m", "--metadata", "PROFILE"),
    Flag("-M", "--mixed"),
    Flag("-n", "--nodesize", "SIZE"),
    Flag("-O", "--features", "FEATURE,..."),
    Flag("-q", "--quiet"),
    Flag("-R", "--runtime-features", "FEATURE,..."),
    Flag("-s", "--sectorsize", "SIZE"),
    Flag("-U", "--uuid", "UUID"),
    Flag("-v", "--verbose"),
)

# mkfs.f2fs (getopt "qa:c:C:d:e:E:g:hil:mo:O:rR:s:S:z:t:T:U:Vfw:"). Left out: -c DEVICE (a
# further device), -m (zoned devices), -S (sparse files), -h / -V (make no filesystem).
F2FS_FLAGS = (
    Flag("-a", value="0|1"),
    Flag("-C", value="ENCODING[:FLAGS]"),
    Flag("-d", value="DEBUG-LEVEL"),
    Flag("-e", value="EXTENSION,..."),
    Flag("-E", value="EXTENSION,..."),
    Flag("-f"),
    Flag("-g", value="DEFAULTS"),
    Flag("-i"),
    Flag("-l", value="LABEL"),
    Flag("-o", value="OVERPROVISION-PCT"),
    Flag("-O", value="FEATURE,..."),
    Flag("-q"),
    Flag("-r"),
    Flag("-R", value="UID:GID"),
    Flag("-s", value="SEGMENTS-PER-SECTION"),
    Flag("-t", value="0|1"),
    Flag("-T", value="TIMESTAMP"),
    Flag("-U", value="UUID"),
    Flag("-w", value="SECTOR-SIZE"),
    Flag("-z", value="SECTIONS-PER-ZONE"),
)

# Every option each mkfs knows, in getopt's notation ("b:" takes a value, "c" does not),
# so that an option left out above still consumes its value as mkfs would, and the
# refusal names the option together with its value ("-d /tmp", not "/tmp").
MKFS_GETOPT = {
    "mkfs.ext4": "b:cd:e:g:i:jl:m:no:qr:s:t:vC:DE:FG:I:J:KL:M:N:O:R:ST:U:Vz:",
    "mkfs.xfs": "b:c:d:i:l:L:m:n:KNp:qr:s:CfV",
    "mkfs.btrfs": "A:b:fl:n:s:m:d:L:R:O:r:U:VvMKq",
    "mkfs.f2fs": "qa:c:C:d:e:E:g:hil:mo:O:rR:s:S:z:t:T:U:Vfw:",
}
BTRFS_LONG_GETOPT = {  # mkfs.btrfs's long options: True where they take a value
    **{name: True for name in "alloc-start byte-count checksum csum data metadata nodesize sectorsize".split()},
    **{name: True for name in "label rootdir features runtime-features uuid leafsize".split()},
    **{name: False for name in "force nodiscard mixed quiet verbose version help shrink".split()},
}

MKFS_FLAGS: dict[str, tuple[Flag, ...]] = {
    "mkfs.ext4": EXT4_FLAGS,
    "mkfs.xfs": XFS_FLAGS,
    "mkfs.btrfs": BTRFS_FLAGS,
    "mkfs.f2fs": F2FS_FLAGS,
}

# Mount options that make the kernel (or mount(8)) use another device or file.
MOUNT_KEYS_REFUSED = {
    "journal_dev": "ext4's external journal device (by number)",
    "journal_path": "ext4's external journal device",
    "logdev": "XFS's external log device",
    "rtdev": "XFS's realtime device",
    "device": "a further device of a btrfs",
    "loop": "a loop device mount(8) would set up",
    "offset": "mount(8)'s loop device set-up",
    "sizelimit": "mount(8)'s loop device set-up",
    "helper": "a mount helper program",
}
TMPFS_SIZE_KEYS = ("size", "nr_blocks")

LAB_FORMATS_ITS_OWN = "sqlwa formats and mounts only the image it creates"


# --------------------------------------------------------------------------- paths


def is_device(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISBLK(mode) or stat.S_ISCHR(mode)


def _exists(path: str) -> bool:
    try:
        return os.path.lexists(path)
    except ValueError:  # a NUL byte
        return False


def path_named(text: str) -> str | None:
    """Why ``text`` (an option, or any piece of it: a ``KEY=VALUE,...`` list is cut at
    commas and equals signs, an option and its value at the space) names a device, a path
    or an existing file; None if it names none. A glued value (``-L/dev/sda``) counts from
    its first ``/``."""
    for piece in re.split(r"[,=\s]", text):
        if not piece:
            continue
        path = piece[piece.find("/") :] if "/" in piece else piece
        if "/dev/" in path or is_device(path):
            return f"it names a device ({path})"
        if "/" in piece:
            return f"it names a path ({path})"
        if _exists(piece):
            return f"it names an existing file ({piece}, in the current directory)"
    return None


def _split(opts: Sequence[str] | str) -> list[str]:
    if isinstance(opts, str):  # "-O fast_commit" as typed on the command line
        try:
            return shlex.split(opts)
        except ValueError as exc:  # an unclosed quote
            raise LabError(f"refusing --mkfs-opts {opts!r}: {exc}", "quote each option whole") from None
    return [str(o) for o in opts]


# --------------------------------------------------------------------------- mkfs


def allowed_mkfs_opts(tool: str) -> str:
    """The allow-list of ``tool`` in one line, for an error's fix."""
    return (
        f"{tool} takes here only: " + ", ".join(str(f) for f in MKFS_FLAGS[tool]) + " (see docs/guide/device-level.md)"
    )


def checked_mkfs_opts(fs: str, tool: str | None, opts: Sequence[str] | str) -> tuple[str, ...]:
    """``opts`` (a list, or a string split as a shell would) if every option is one of
    ``tool``'s allowed ones and none names a path; else the :class:`LabError` naming the
    first offending option (with its value) and why. They are passed to mkfs unchanged."""
    tokens = _split(opts)
    if not tokens:
        return ()
    if tool is None:
        raise LabError(f"refusing --mkfs-opts {' '.join(tokens)!r}: {fs} has no mkfs", "leave --mkfs-opts out")
    options = list(_getopt(tool, tokens))
    for option in options:  # the most telling reason first, whatever the option
        reason = path_named(option.given)
        if reason:
            raise _refused(tool, option.given, f"{reason}; {LAB_FORMATS_ITS_OWN}")
    for option in options:
        if option.problem:
            raise _refused(tool, option.given, option.problem)
        if option.flag and option.flag.keys and option.value is not None:
            _check_keys(option.flag, option.value, option.given)
    return tuple(tokens)


@dataclass(frozen=True)
class _Option:
    given: str  # as typed: "-l size=64m", "-lsize=64m", "--label=x", "-fq"
    flag: Flag | None = None  # None: not on the allow-list
    value: str | None = None
    problem: str | None = None  # why it is refused, if it is


def _getopt(tool: str, tokens: list[str]) -> Iterator[_Option]:
    """The options in ``tokens`` as mkfs's getopt reads them: switches bundled (``-fq``),
    values glued (``-Llabel``) or in the next token, ``--long=value`` or ``--long value``.
    Each comes with its allowed :class:`Flag`, or with the problem that refuses it."""
    allowed = {name: f for f in MKFS_FLAGS[tool] for name in (f.short, f.long) if name}
    getopt = MKFS_GETOPT[tool]
    not_allowed = f"is not one of the {tool} options sqlwa passes on"
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":  # all that follows is bare arguments: devices, to mkfs
            yield _Option(" ".join(tokens[i - 1 :]), problem="after --, every bare argument is a device to mkfs")
            return
        if not token.startswith("-") or token == "-":
            yield _Option(token, problem=f"a bare argument is a device to mkfs; {LAB_FORMATS_ITS_OWN}")
            continue
        if token.startswith("--"):
            name, eq, glued = token.partition("=")
            switches = [name]
            takes_value = tool == "mkfs.btrfs" and BTRFS_LONG_GETOPT.get(name[2:], False)
        else:
            switches, eq, glued = [], "", ""
            for j in range(1, len(token)):
                switches.append(f"-{token[j]}")
                if f"{token[j]}:" in getopt:  # takes a value: the rest of the token, or the next
                    glued = token[j + 1 :]
                    eq = "glued" if glued else ""
                    break
            takes_value = f"{switches[-1][1]}:" in getopt
        given, value = token, (glued if eq else None)
        if takes_value and not eq and i < len(tokens):
            given, value = f"{token} {tokens[i]}", tokens[i]
            i += 1
        for switch in switches:
            flag = allowed.get(switch)
            if flag is None:
                yield _Option(given, problem=f"{switch} {not_allowed}")
            elif switch != switches[-1]:
                yield _Option(given, flag)
            elif value is not None and not takes_value:
                yield _Option(given, flag, problem=f"{switch} takes no value")
            elif value is None and takes_value:
                yield _Option(given, flag, problem=f"{switch} needs a value")
            else:
                yield _Option(given, flag, value)


def _check_keys(flag: Flag, value: str, given: str) -> None:
    for item in value.split(","):
        key = item.partition("=")[0]
        if item and key not in flag.keys:
            name = flag.short or flag.long
            raise LabError(
                f"refusing --mkfs-opts {given!r}: {key} is not one of the {name} keys sqlwa passes on "
                "(those that name no file or device)",
                f"{name} takes here only: {', '.join(flag.keys)}",
            )


def _refused(tool: str, option: str, why: str) -> LabError:
    return LabError(f"refusing --mkfs-opts {option!r}: {why}", allowed_mkfs_opts(tool))


# --------------------------------------------------------------------------- mount


def checked_mount_opts(fs: str, opts: Sequence[str] | str) -> tuple[str, ...]:
    """``opts`` split at commas, if none names a path, another device or (for tmpfs) the
    size; else the :class:`LabError` naming the first offending option and why."""
    if isinstance(opts, str):  # "noatime,barrier=0"
        opts = [opts]
    checked = tuple(o for opt in opts for o in str(opt).split(",") if o)
    hint = "mount options name no file or device: the lab mounts only its own loop device"
    for opt in checked:
        if any(c.isspace() for c in opt):
            raise UsageError(f"--mount-opts {opt!r} contains whitespace", "separate mount options with commas")
        key = opt.partition("=")[0]
        reason = path_named(opt)
        if reason:
            raise LabError(f"refusing --mount-opts {opt!r}: {reason}; {LAB_FORMATS_ITS_OWN}", hint)
        if key in MOUNT_KEYS_REFUSED:
            raise LabError(f"refusing --mount-opts {opt!r}: {key} names {MOUNT_KEYS_REFUSED[key]}", hint)
        if key.lower().startswith("x-"):
            raise LabError(f"refusing --mount-opts {opt!r}: mount(8)'s own x-/X- options act on the host", hint)
        if fs == "tmpfs" and key in TMPFS_SIZE_KEYS:
            raise LabError(
                f"refusing --mount-opts {opt!r}: the tmpfs size is --image-size's (size=0 would be unlimited)",
                "give the size with --image-size",
            )
    return checked
