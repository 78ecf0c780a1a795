"""Issue #15, what a hostile tester found: sqlwa must format nothing it did not create and
must not fill the host's disk, whatever --mkfs-opts, --mount-opts and --image-size say.

Each attack goes through the command line (``python -m sqlwa run --fs ...``) against
victims the test makes itself: an image file with known content and a loop device it
attached (always detached again). sqlwa must refuse with exit code 2 and one error line
(no traceback), before anything exists (no output directory, no lab leftovers), and the
victims' checksums and ``blkid`` must be unchanged. The allowed options are shown to reach
a real mkfs and give a working lab.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import sqlwa_leftovers
from sqlwa import _system
from sqlwa.errors import LabError
from sqlwa.lab import filesystem
from sqlwa.lab.cleanup import cleanup_leftovers
from sqlwa.lab.filesystem import LabFilesystem, LabOptions, filesystem_support, mkfs_argv

pytestmark = pytest.mark.root

MiB = 1 << 20
VICTIM_FILE_SIZE = 320 * MiB  # big enough for any mkfs (btrfs needs 109 MiB, xfs 300 MiB)
VICTIM_DEV_SIZE = 128 * MiB  # big enough for an external XFS log of 64 MiB


# --------------------------------------------------------------------------- victims


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def blkid(device: str) -> str:
    """What a low-level probe finds on ``device`` (no cache): TYPE, UUID, LABEL ..."""
    return subprocess.run(["blkid", "-p", "-o", "export", device], capture_output=True, text=True).stdout


@dataclass
class Victims:
    file: Path  # an image file with data, not sqlwa's
    dev: str  # a loop device with an ext4 on it, attached by the test
    dev_image: Path

    def state(self) -> dict:
        return {
            "file": (self.file.stat().st_size, sha256_of(self.file)),
            "dev": (blkid(self.dev), sha256_of(self.dev)),
            "dev_image": sha256_of(self.dev_image),
        }


def make_victim_file(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.write(os.urandom(MiB))
        f.seek(size - MiB)
        f.write(os.urandom(MiB))


@pytest.fixture
def victims(tmp_path: Path):
    token = secrets.token_hex(4)
    file = tmp_path / f"victim-{token}.img"
    make_victim_file(file, VICTIM_FILE_SIZE)
    dev_image = tmp_path / f"victim-dev-{token}.img"
    make_victim_file(dev_image, VICTIM_DEV_SIZE)
    subprocess.run(["mkfs.ext4", "-F", "-q", "-L", f"v{token}", str(dev_image)], check=True, capture_output=True)
    attach = subprocess.run(["losetup", "--find", "--show", str(dev_image)], capture_output=True, text=True, check=True)
    dev = attach.stdout.strip()
    try:
        assert dev.startswith("/dev/loop") and f"v{token}" in blkid(dev)
        yield Victims(file, dev, dev_image)
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


# --------------------------------------------------------------------------- the CLI


def sqlwa_refuses(tmp_path: Path, *args: str, cwd: Path | None = None, env: dict | None = None) -> tuple[str, str]:
    """Run ``sqlwa run ARGS`` and assert it refused cleanly: exit 2, one error line (and
    at most its `fix:` line), no traceback, no output directory, nothing of the lab left.
    Returns the error line and the fix line ("" if none)."""
    out = tmp_path / f"out-{secrets.token_hex(3)}"
    argv = [sys.executable, "-m", "sqlwa", "run", *args, "-n", "5", "--warmup", "0", "--out", str(out)]
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env={**os.environ, **(env or {})}
    )
    try:
        _, stderr = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        left = sqlwa_leftovers(child.pid)
        if left:
            cleanup_leftovers()  # do not leave a failed test's debris on the machine
    assert child.returncode == 2, f"sqlwa {' '.join(args)} exited {child.returncode}:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("sqlwa: error: "), stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  fix: ")), stderr
    assert not out.exists(), "refused after the output directory was made"
    assert left == [], left
    return lines[0], lines[1] if len(lines) > 1 else ""


def attack(tmp_path: Path, victims: Victims, fs: str, option: str, opts: str, words: list[str]) -> None:
    """``sqlwa run --fs FS OPTION OPTS`` from the victims' directory: refused with an error
    line that names OPTION and has all ``words``, and the victims untouched. In OPTS and
    ``words``, {file} is the victim file, {name} its name alone, {dev} the victim loop
    device and {devnum} its device number (as ext4's journal_dev= takes it)."""
    if not filesystem_support(fs).available:
        pytest.skip(filesystem_support(fs).reason)
    rdev = os.stat(victims.dev).st_rdev
    names = {
        "file": str(victims.file),
        "name": victims.file.name,
        "dev": victims.dev,
        "devnum": str(os.major(rdev) << 8 | os.minor(rdev)),
    }
    before = victims.state()
    line, _ = sqlwa_refuses(tmp_path, "--fs", fs, option, opts.format(**names), cwd=victims.file.parent)
    assert option in line, line
    for word in words:
        assert word.format(**names) in line, line
    assert victims.state() == before


# --------------------------------------------------------------------------- 1. mkfs options

# (fs, --mkfs-opts, words the error line must contain; see attack())
MKFS_ATTACKS = [
    # the three: a positional path, a path and a device inside a key=value list
    ("btrfs", "{file}", ["{file}", "path"]),
    ("xfs", "-l logdev={file},size=64m", ["logdev={file}", "path"]),
    ("xfs", "-l size=64m,logdev={dev}", ["logdev={dev}", "device"]),
    # glued values, long options with =, a positional device after an allowed option
    ("xfs", "-llogdev={dev},size=64m", ["{dev}", "device"]),
    ("xfs", "-d name={file}", ["{file}"]),
    ("ext4", "-L{dev}", ["-L{dev}", "device"]),
    ("ext4", "-z{file}", ["-z{file}", "path"]),
    ("ext4", "-J device={dev}", ["device={dev}", "device"]),
    ("ext4", "-O fast_commit {dev}", ["{dev}", "device"]),
    ("btrfs", "--rootdir={file}", ["--rootdir={file}", "path"]),
    ("btrfs", "-m dup -- {dev}", ["{dev}", "device"]),
    # a value that is an existing file, named without any slash
    ("btrfs", "{name}", ["{name}", "existing file"]),
    ("ext4", "-l {name}", ["{name}", "existing file"]),
]


@pytest.mark.parametrize(
    "fs, opts, words", MKFS_ATTACKS, ids=[f"{fs}:{opts.split(' ')[0][:12]}" for fs, opts, _ in MKFS_ATTACKS]
)
def test_mkfs_options_naming_a_path_are_refused_and_the_victims_untouched(
    tmp_path: Path, victims: Victims, fs: str, opts: str, words: list[str]
) -> None:
    attack(tmp_path, victims, fs, "--mkfs-opts", opts, words)


# (fs, --mount-opts, words): the mount options that name a device or a file
MOUNT_ATTACKS = [
    ("xfs", "logdev={dev}", ["logdev={dev}", "device"]),
    ("ext4", "noatime,journal_path={dev}", ["journal_path={dev}", "device"]),
    ("ext4", "journal_dev={devnum}", ["journal_dev={devnum}", "device"]),
    ("btrfs", "device={file}", ["device={file}"]),
    ("ext4", "noatime,{file}", ["{file}", "path"]),
    ("ext4", "X-mount.mkdir={file}", ["X-mount.mkdir"]),
    ("ext4", "{name}", ["{name}", "existing file"]),
    ("tmpfs", "size=0", ["size=0", "--image-size"]),
]


@pytest.mark.parametrize(
    "fs, opts, words", MOUNT_ATTACKS, ids=[f"{fs}:{opts.split('=')[0][:14]}" for fs, opts, _ in MOUNT_ATTACKS]
)
def test_mount_options_naming_a_device_or_file_are_refused(
    tmp_path: Path, victims: Victims, fs: str, opts: str, words: list[str]
) -> None:
    attack(tmp_path, victims, fs, "--mount-opts", opts, words)


@pytest.mark.parametrize(
    "fs, opts, words",
    [
        ("ext4", "-d /tmp", ["-d", "path"]),
        ("ext4", "-c", ["-c", "not one of", "-O"]),
        ("ext4", "-E offset=4096", ["offset", "lazy_itable_init"]),
        ("xfs", "-p proto", ["-p", "not one of", "-l"]),
        ("xfs", "-r extsize=4k", ["-r"]),
        ("btrfs", "--shrink", ["--shrink", "--metadata"]),
        ("btrfs", "-f --", ["--", "bare argument"]),
        ("tmpfs", "-O x", ["tmpfs", "no mkfs"]),
    ],
)
def test_mkfs_options_off_the_allow_list_are_refused_with_what_is_allowed(
    tmp_path: Path, fs: str, opts: str, words: list[str]
) -> None:
    line, fix = sqlwa_refuses(tmp_path, "--fs", fs, "--mkfs-opts", opts)
    assert words[0] in line and "--mkfs-opts" in line, line
    for word in words[1:]:
        assert word in f"{line}\n{fix}", (line, fix)


# --------------------------------------------------------------------------- allowed options work

# (fs, --mkfs-opts, a command that reads the made filesystem, what it must show)
ALLOWED = [
    ("ext4", "-O fast_commit", ["dumpe2fs", "-h", "{dev}"], "fast_commit"),
    ("ext4", "-E lazy_itable_init=0,stride=16", ["dumpe2fs", "-h", "{dev}"], "RAID stride:              16"),
    ("ext4", "-J size=16", ["dumpe2fs", "-h", "{dev}"], "Total journal size:       16M"),
    ("ext4", "-m 0 -i 65536 -L lbl", ["dumpe2fs", "-h", "{dev}"], "Reserved block count:     0"),
    ("ext4-journal", "-O ^metadata_csum", ["dumpe2fs", "-h", "{dev}"], "Filesystem features:"),
    ("xfs", "-l size=64m", ["xfs_info", "{mnt}"], "blocks=16384"),
    ("xfs", "-m crc=1,reflink=0", ["xfs_info", "{mnt}"], "reflink=0"),
    ("xfs", "-isparse=0 -n size=8192", ["xfs_info", "{mnt}"], "bsize=8192"),
    ("btrfs", "-m dup", ["btrfs", "filesystem", "df", "{mnt}"], "Metadata, DUP"),
    ("btrfs", "-m single", ["btrfs", "filesystem", "df", "{mnt}"], "Metadata, single"),
    ("btrfs", "-n 16k", ["btrfs", "inspect-internal", "dump-super", "{dev}"], "nodesize\t\t16384"),
    (
        "btrfs",
        "--nodesize=32k --csum xxhash",
        ["btrfs", "inspect-internal", "dump-super", "{dev}"],
        "nodesize\t\t32768",
    ),
]


@pytest.mark.parametrize("fs, opts, probe, expected", ALLOWED, ids=[f"{a[0]}:{a[1]}" for a in ALLOWED])
def test_allowed_mkfs_options_reach_mkfs_and_the_lab_works(fs: str, opts: str, probe: list[str], expected: str) -> None:
    with LabFilesystem(fs, LabOptions(image_size="320M", mkfs_opts=opts)) as lab:
        assert lab.mkfs is not None and lab.mkfs.argv[-1] == lab.loop_device
        assert " ".join(lab.mkfs.argv).endswith(f" {opts} {lab.loop_device}")
        shown = subprocess.run(
            [a.format(dev=lab.loop_device, mnt=lab.mountpoint) for a in probe], capture_output=True, text=True
        )
        assert expected in shown.stdout, shown.stdout + shown.stderr
        path = Path(lab.mountpoint) / "data"
        path.write_bytes(os.urandom(64 * 1024))
        os.sync()
        assert path.stat().st_size == 64 * 1024
    assert not os.path.exists(lab.lab.lab_dir)


def test_allowed_f2fs_option_reaches_mkfs_f2fs(tmp_path: Path) -> None:
    """This kernel may lack f2fs, so maybe no lab: the command the lab would run, on a file."""
    if not _system.tools.find_tool("mkfs.f2fs"):
        pytest.skip("mkfs.f2fs is not installed (f2fs-tools)")
    lab = LabFilesystem("f2fs", LabOptions(image_size="64M", mkfs_opts="-O encrypt -l lbl", workdir=tmp_path))
    assert lab.user_mkfs_opts == ("-O", "encrypt", "-l", "lbl")
    image = tmp_path / "f2fs.img"
    image.write_bytes(b"")
    os.truncate(image, 64 * MiB)
    _system.tools.run_tool(mkfs_argv("f2fs", lab.user_mkfs_opts, str(image)), "mkfs.f2fs")
    dump = subprocess.run(["dump.f2fs", str(image)], capture_output=True, text=True)
    assert "encrypt" in dump.stdout + dump.stderr


def test_a_run_with_allowed_options_measures(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "-n", "5"]
    argv += ["--mkfs-opts", "-O fast_commit -J size=8 -E lazy_itable_init=0", "--mount-opts", "noatime,commit=7"]
    proc = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lab = json.loads((out / "summary.json").read_text())["config"]["lab"]
    assert lab["mkfs_cmd"][-7:-1] == ["-O", "fast_commit", "-J", "size=8", "-E", "lazy_itable_init=0"]
    assert "noatime" in lab["mount_options"] and "commit=7" in lab["mount_options"]


# --------------------------------------------------------------------------- 2. image size


@pytest.mark.parametrize(
    "fs, size, words",
    [
        ("ext4", "10T", ["10T", "free"]),  # fills the host's disk
        ("ext4", "17T", ["17T", "free"]),  # EFBIG on ext4
        ("xfs", "99999999999999999999T", ["99999999999999999999T", "free"]),  # OverflowError
        ("tmpfs", "0", ["0", "unlimited"]),
        ("ext4", "0", ["0"]),
        ("tmpfs", "10T", ["10T", "memory"]),
        ("xfs", "200M", ["xfs", "300M"]),
        ("btrfs", "100M", ["btrfs", "109M"]),
        ("ext4", "4M", ["ext4", "8M", "journal"]),
        ("ext4", "lots", ["lots", "not a size"]),
    ],
)
def test_image_sizes_that_cannot_work_are_refused_before_anything_is_made(
    tmp_path: Path, fs: str, size: str, words: list[str]
) -> None:
    work = tmp_path / "work"  # the image's filesystem (TMPDIR): nothing may appear in it
    work.mkdir()
    free_before = os.statvfs(work).f_bavail * os.statvfs(work).f_frsize
    line, _ = sqlwa_refuses(tmp_path, "--fs", fs, "--image-size", size, env={"TMPDIR": str(work)})
    for word in words:
        assert word in line, line
    assert "--image-size" in line
    assert list(work.iterdir()) == []
    free_after = os.statvfs(work).f_bavail * os.statvfs(work).f_frsize
    assert free_after > free_before - 256 * MiB  # others may write meanwhile, but not GBs


def test_a_failing_mkfs_leaves_no_image(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "64M", "-n", "5"]
    argv += ["--mkfs-opts", "-O no_such_feature", "--out", str(out)]
    child = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(work)})
    _, stderr = child.communicate(timeout=300)
    assert child.returncode == 2 and "Traceback" not in stderr, stderr
    assert "mkfs for ext4 failed" in stderr and "no_such_feature" in stderr
    assert list(work.iterdir()) == [] and sqlwa_leftovers(child.pid) == []


def holds_a_file_of(directory: Path, size: int) -> bool:
    """Whether ``directory``'s filesystem lets a sparse file grow to ``size`` (ext4: 16 TiB
    at most)."""
    probe = directory / "size-probe"
    try:
        with open(probe, "wb") as f:
            f.truncate(size)
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


@pytest.mark.parametrize("size", ["17T", "99999999999999999999T"])
def test_an_image_the_host_cannot_hold_is_one_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    """Past the free-space check (here: a host that claims to have room), ftruncate's
    EFBIG / OverflowError is one LabError and the partial lab is removed."""
    if size == "17T" and holds_a_file_of(tmp_path, filesystem.parse_size(size)):
        pytest.skip(f"{tmp_path}'s filesystem holds a {size} file (tmpfs does): no EFBIG to meet")
    huge = 10**40
    monkeypatch.setattr(_system.mounts, "free_space", lambda path: (huge, huge))
    lab = LabFilesystem("ext4", LabOptions(image_size=size, workdir=tmp_path))
    with pytest.raises(LabError, match="creating the image"):
        with lab:
            pass
    assert list(tmp_path.iterdir()) == []
    assert filesystem.parse_size(size) > 16 << 40
