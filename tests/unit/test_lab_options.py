"""What --mkfs-opts, --mount-opts and --image-size may say (issue #15), as pure functions:
no root, nothing made. tests/lab/test_lab_safety.py tries the same through the CLI against
real victims and real mkfs runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sqlwa import _system
from sqlwa.errors import LabError, UsageError, hint_of
from sqlwa.lab import options
from sqlwa.lab.filesystem import (
    FILESYSTEMS,
    LabFilesystem,
    LabOptions,
    check_image_size,
    format_size,
    free_space_margin,
)
from sqlwa.lab.options import MKFS_FLAGS, MKFS_GETOPT, checked_mkfs_opts, checked_mount_opts

GiB = 1 << 30


def mkfs_opts(fs: str, opts: str | list[str]) -> tuple[str, ...]:
    return checked_mkfs_opts(fs, FILESYSTEMS[fs].mkfs_tool, opts)


# --------------------------------------------------------------------------- mkfs: allowed


@pytest.mark.parametrize(
    "fs, opts",
    [
        ("ext4", "-O fast_commit"),
        ("ext4", "-O ^has_journal,^metadata_csum"),
        ("ext4", "-E lazy_itable_init=0,lazy_journal_init=0,stride=16"),
        ("ext4", "-J size=16"),
        ("ext4", "-Jsize=16 -qF -m0 -i 65536 -I 512 -N 2000 -T small -L 'my label' -U random"),
        ("ext4-journal", "-j -b 4096"),
        ("xfs", "-l size=64m"),
        ("xfs", "-lsize=64m,sunit=8 -m crc=1,reflink=0 -i sparse=1 -n size=8192 -d agcount=4 -s size=4096"),
        ("xfs", "-fqK -L lab"),
        ("btrfs", "-m dup"),
        ("btrfs", "-n 16k"),
        ("btrfs", "-m single -d single --nodesize=32k --csum xxhash -O no-holes -R quota -fMq"),
        ("btrfs", "--metadata dup --label=lab --byte-count 200M"),
        ("f2fs", "-O encrypt"),
        ("f2fs", "-O extra_attr,compression -l lab -o 5 -s 2 -t 0 -e mp4,jpg"),
    ],
)
def test_allowed_mkfs_options_pass_unchanged(fs: str, opts: str) -> None:
    import shlex

    assert mkfs_opts(fs, opts) == tuple(shlex.split(opts))
    assert mkfs_opts(fs, shlex.split(opts)) == tuple(shlex.split(opts))


def test_no_mkfs_options_is_fine_for_every_filesystem() -> None:
    for fs in FILESYSTEMS:
        assert mkfs_opts(fs, "") == () == mkfs_opts(fs, [])


# --------------------------------------------------------------------------- mkfs: refused

# (fs, --mkfs-opts, what the error must say: the option as given, and why)
REFUSED = [
    # a bare path: mkfs would format it (btrfs: as a further device)
    ("btrfs", "/tmp/x.img", ["'/tmp/x.img'", "names a path"]),
    ("ext4", "-O fast_commit /dev/vda", ["'/dev/vda'", "names a device"]),
    # key=/path anywhere in a comma list
    ("xfs", "-l logdev=/tmp/x.img,size=64m", ["'-l logdev=/tmp/x.img,size=64m'", "names a path (/tmp/x.img)"]),
    ("xfs", "-l size=64m,logdev=/dev/loop7", ["'-l size=64m,logdev=/dev/loop7'", "names a device (/dev/loop7)"]),
    ("ext4", "-J size=16,device=/dev/sdb", ["device=/dev/sdb", "names a device (/dev/sdb)"]),
    # glued values
    ("ext4", "-L/dev/sda", ["'-L/dev/sda'", "names a device (/dev/sda)"]),
    ("xfs", "-llogdev=/dev/loop7", ["'-llogdev=/dev/loop7'", "names a device"]),
    ("ext4", "-qz/tmp/undo", ["'-qz/tmp/undo'", "names a path"]),
    # --opt=/path, --opt /path
    ("btrfs", "--rootdir=/etc", ["'--rootdir=/etc'", "names a path (/etc)"]),
    ("btrfs", "--rootdir /etc", ["'--rootdir /etc'", "names a path (/etc)"]),
    # -- makes what follows bare arguments
    ("btrfs", "-f -- /dev/loop7", ["'-- /dev/loop7'", "names a device"]),
    ("btrfs", "-f --", ["'--'", "after --, every bare argument is a device"]),
    # no path, but a bare argument
    ("btrfs", "scratch", ["'scratch'", "a bare argument is a device to mkfs"]),
    # off the allow-list
    ("ext4", "-d rootfs", ["'-d rootfs'", "-d is not one of the mkfs.ext4 options"]),
    ("ext4", "-l badblocks", ["'-l badblocks'", "-l is not one of"]),
    ("ext4", "-c", ["'-c'", "-c is not one of"]),
    ("ext4", "-qn", ["'-qn'", "-n is not one of"]),  # a dry run: no filesystem would be made
    ("ext4", "-t ext2", ["'-t ext2'", "-t is not one of"]),
    ("xfs", "-p protofile", ["'-p protofile'", "-p is not one of the mkfs.xfs options"]),
    ("xfs", "-r extsize=4k", ["'-r extsize=4k'", "-r is not one of"]),
    ("xfs", "-N", ["'-N'", "-N is not one of"]),
    ("btrfs", "--shrink", ["'--shrink'", "--shrink is not one of the mkfs.btrfs options"]),
    ("btrfs", "--root=x", ["'--root=x'", "--root is not one of"]),  # getopt_long would expand it
    ("f2fs", "-c loop7", ["'-c loop7'", "-c is not one of the mkfs.f2fs options"]),
    # keys off the allow-list inside an allowed option
    ("xfs", "-l logdev=loop7", ["'-l logdev=loop7'", "logdev is not one of the -l keys"]),
    ("xfs", "-d name=x.img", ["name is not one of the -d keys"]),
    ("ext4", "-E offset=4096", ["offset is not one of the -E keys"]),
    ("ext4", "-J device=LABEL=log", ["device is not one of the -J keys"]),
    # values and arity
    ("ext4", "-L", ["'-L'", "-L needs a value"]),
    ("btrfs", "--label", ["'--label'", "--label needs a value"]),
    ("btrfs", "--force=yes", ["'--force=yes'", "--force takes no value"]),
    ("tmpfs", "-O x", ["'-O x'", "tmpfs has no mkfs"]),
]


@pytest.mark.parametrize("fs, opts, words", REFUSED, ids=[f"{fs}:{opts}" for fs, opts, _ in REFUSED])
def test_mkfs_options_that_name_a_path_or_are_not_allowed_are_refused(fs: str, opts: str, words: list[str]) -> None:
    with pytest.raises(LabError) as err:
        mkfs_opts(fs, opts)
    message = str(err.value.args[0])
    assert message.startswith("refusing --mkfs-opts '") and "\n" not in message
    for word in words:
        assert word in message
    if fs != "tmpfs" and "keys" not in message:  # the fix lists what is allowed
        assert hint_of(err.value).startswith(f"{FILESYSTEMS[fs].mkfs_tool} takes here only: -")


def test_a_refused_key_lists_the_keys_allowed() -> None:
    with pytest.raises(LabError) as err:
        mkfs_opts("xfs", "-l size=64m,logdev=log")
    assert hint_of(err.value) == "-l takes here only: size, agnum, internal, version, sunit, su, lazy-count"


def test_an_existing_file_is_refused_even_without_a_slash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "victim.img").write_bytes(b"data")
    for fs, opts in [("btrfs", "victim.img"), ("ext4", "-l victim.img"), ("ext4", "-L victim.img")]:
        with pytest.raises(LabError, match=r"names an existing file \(victim.img, in the current directory\)"):
            mkfs_opts(fs, opts)
    with pytest.raises(LabError, match="names an existing file"):
        checked_mount_opts("ext4", "usrjquota=victim.img")


def test_the_allow_lists_read_values_as_mkfs_does() -> None:
    """Each allowed option takes a value exactly where mkfs's getopt says it does, so the
    checker and mkfs split the same command line the same way."""
    for tool, flags in MKFS_FLAGS.items():
        getopt = MKFS_GETOPT[tool]
        for flag in flags:
            if flag.short:
                letter = flag.short[1]
                assert re.search(rf"{re.escape(letter)}:?", getopt), (tool, flag)
                assert (f"{letter}:" in getopt) == (flag.value is not None), (tool, flag)
            if flag.long:
                assert options.BTRFS_LONG_GETOPT[flag.long[2:]] == (flag.value is not None), (tool, flag)


def test_a_quote_left_open_is_one_error() -> None:
    with pytest.raises(LabError, match="No closing quotation"):
        mkfs_opts("ext4", "-L 'lab")


# --------------------------------------------------------------------------- mount options


@pytest.mark.parametrize(
    "fs, opts, words",
    [
        ("xfs", "logdev=/dev/loop7", ["'logdev=/dev/loop7'", "names a device"]),
        ("ext4", "noatime,journal_path=/dev/sdb", ["'journal_path=/dev/sdb'", "names a device"]),
        ("ext4", "journal_dev=1792", ["'journal_dev=1792'", "external journal device"]),
        ("xfs", "rtdev=loop7", ["rtdev names XFS's realtime device"]),
        ("btrfs", "device=/tmp/x.img", ["'device=/tmp/x.img'", "names a path"]),
        ("btrfs", "device=loop7", ["device names a further device"]),
        ("ext4", "noatime,/tmp/x.img", ["'/tmp/x.img'", "names a path"]),
        ("ext4", "loop=loop7", ["loop names"]),
        ("ext4", "X-mount.mkdir", ["'X-mount.mkdir'", "x-/X- options"]),
        ("ext4", "x-systemd.automount", ["x-/X- options"]),
        ("tmpfs", "size=0", ["'size=0'", "--image-size"]),
        ("tmpfs", "nr_blocks=0", ["'nr_blocks=0'", "--image-size"]),
    ],
)
def test_mount_options_that_name_a_device_or_file_are_refused(fs: str, opts: str, words: list[str]) -> None:
    with pytest.raises(LabError) as err:
        checked_mount_opts(fs, opts)
    message = str(err.value.args[0])
    assert message.startswith("refusing --mount-opts '")
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "fs, opts",
    [
        ("ext4", "noatime,barrier=0,commit=30,journal_checksum,nodelalloc"),
        ("xfs", "noatime,logbufs=8,logbsize=256k,allocsize=64k,discard"),
        ("btrfs", "noatime,compress=zstd:3,discard=async,ssd,nodatacow"),
        ("ext4", "size=1g"),  # only tmpfs takes its size from --image-size
        ("tmpfs", "noatime,mode=0700,huge=always"),
    ],
)
def test_ordinary_mount_options_pass(fs: str, opts: str) -> None:
    assert checked_mount_opts(fs, opts) == tuple(opts.split(","))


def test_mount_options_with_whitespace_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="whitespace"):
        checked_mount_opts("ext4", ["noatime, barrier=0"])


# --------------------------------------------------------------------------- image size


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch):
    """A host whose disk has 100 GiB free of 2 TiB and whose memory has 8 of 16 GiB free."""
    monkeypatch.setattr(_system.mounts, "free_space", lambda path: (100 * GiB, 2048 * GiB))
    monkeypatch.setattr(_system.mounts, "memory_available", lambda: (8 * GiB, 16 * GiB))


@pytest.mark.parametrize(
    "fs, size, words",
    [
        ("ext4", "10T", ["--image-size 10T does not fit", "{workdir} has 100G free", "1G of it must stay free"]),
        ("ext4", "17T", ["--image-size 17T does not fit"]),
        ("xfs", "99999999999999999999T", ["--image-size 99999999999999999999T does not fit"]),
        ("tmpfs", "0", ["--image-size 0", "unlimited"]),
        ("ext4", "0", ["--image-size 0", "needs a size"]),
        ("tmpfs", "10T", ["memory", "8G available"]),
        ("xfs", "200M", ["xfs needs at least 300M"]),
        ("btrfs", "100M", ["btrfs needs at least 109M"]),
        ("f2fs", "51M", ["f2fs needs at least 52M"]),
        ("ext4-journal", "7M", ["ext4-journal needs at least 8M", "journal"]),
        ("ext4", "lots", ["--image-size 'lots' is not a size"]),
    ],
)
def test_image_sizes_that_cannot_work_are_refused(host, tmp_path: Path, fs: str, size: str, words: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        LabFilesystem(fs, LabOptions(image_size=size, workdir=tmp_path))
    message = str(err.value.args[0])
    for word in words:
        assert word.format(workdir=tmp_path) in message, message
    assert list(tmp_path.iterdir()) == []


def test_the_free_space_margin_is_1_gib_or_5_percent(host) -> None:
    assert free_space_margin(2048 * GiB) == GiB and free_space_margin(4 * GiB) == 4 * GiB // 20
    check_image_size("ext4", 99 * GiB, "/work")  # 100 GiB free, 1 GiB stays free
    with pytest.raises(UsageError):
        check_image_size("ext4", 99 * GiB + 1, "/work")
    largest_tmpfs = 8 * GiB - 16 * GiB // 20  # memory: 8 of 16 GiB available, 5 % stays free
    check_image_size("tmpfs", largest_tmpfs, "/work")
    with pytest.raises(UsageError, match="memory"):
        check_image_size("tmpfs", largest_tmpfs + 1, "/work")


def test_every_filesystem_takes_its_own_minimum(host) -> None:
    for fs, spec in FILESYSTEMS.items():
        check_image_size(fs, spec.min_size, "/work")
        with pytest.raises(UsageError, match=f"{fs} needs at least {format_size(spec.min_size)}"):
            check_image_size(fs, spec.min_size - 1, "/work")


def test_format_size() -> None:
    assert [format_size(n) for n in (300 << 20, 109 << 20, 3 << 29, 1 << 40, 512)] == [
        "300M",
        "109M",
        "1.5G",
        "1T",
        "512",
    ]
