"""Where sqlwa writes (#32, points 1, 3 and 7): every option that names an output goes
through sqlwa.outputs. A device node, a FIFO, a symlink to one, a directory sqlwa did
not make, a system directory and a full filesystem are each given to every such option,
and the victim is compared before and after with the kernel's own view of it (stat,
dumpe2fs, the bytes on the device), never with sqlwa's output.

The victim block device is a loop device over an ext4 image this module makes; the
full filesystem a small tmpfs it mounts. Both are removed however the tests end.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers import REPO, sqlwa
from sqlwa import _system
from sqlwa.device import fio
from sqlwa.lab.scratch import SCRATCH_PREFIX
from sqlwa.results import rundir

pytestmark = pytest.mark.root

RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"
TRACE = RUN / "trace.txt"  # sqlwa's markers in it: parse --commits has commits to write
POLICY = REPO / "examples" / "policy.toml"
EXAMPLES = int(os.environ.get("SQLWA_FUZZ_EXAMPLES", "6"))
TIMEOUT = 120  # a write into a FIFO nobody reads waits for ever: a hang is a failure


# ------------------------------------------------------------------ victims


class Victim:
    """Something at ``path`` that must be as it was after sqlwa ran: its ``state()`` is
    what the kernel says it is (node type, device number, link target, bytes)."""

    def __init__(self, path: Path, state: Callable[[], object]) -> None:
        self.path = path
        self.state = state
        self.before = state()


def node_state(path: Path) -> tuple:
    st_ = os.lstat(path)
    target = os.readlink(path) if stat.S_ISLNK(st_.st_mode) else None
    return stat.S_IFMT(st_.st_mode), st_.st_rdev, st_.st_ino, target


def tree_state(path: Path) -> dict:
    """Every entry under ``path``: its type and, for a regular file, its bytes' digest."""
    found = {}
    for entry in sorted([path, *path.rglob("*")]):
        mode = os.lstat(entry).st_mode
        digest = hashlib.sha256(entry.read_bytes()).hexdigest() if stat.S_ISREG(mode) else None
        found[str(entry.relative_to(path))] = (stat.S_IFMT(mode), digest)
    return found


@pytest.fixture(scope="module")
def loop_ext4(tmp_path_factory) -> Iterator[str]:
    """A loop device over a 16 MiB ext4 image made here: the block device sqlwa must not touch."""
    image = tmp_path_factory.mktemp("victim") / "victim.img"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    device = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True)
    loop = device.stdout.strip()
    node = os.stat(loop)
    try:
        yield loop
    finally:
        if not stat.S_ISBLK(os.lstat(loop).st_mode):  # a rename replaced the node: put it back
            os.unlink(loop)
            os.mknod(loop, node.st_mode, node.st_rdev)
            os.chown(loop, node.st_uid, node.st_gid)
        subprocess.run(["losetup", "-d", loop], check=True)


def device_state(loop: str) -> tuple:
    """The device's bytes (digest) and whether dumpe2fs still finds its ext4."""
    with open(loop, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    dumpe2fs = subprocess.run(["dumpe2fs", "-h", loop], capture_output=True, text=True)
    return digest, dumpe2fs.returncode, "Bad magic number" in dumpe2fs.stderr


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, filled up but for a few bytes."""
    mountpoint = Path(tempfile.mkdtemp(prefix="sqlwa-test-full-", dir=tmp_path))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "sqlwa-test-full", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


def fill(directory: Path) -> None:
    """Fill ``directory``'s filesystem: every write from now on is ENOSPC."""
    with open(directory / "filler", "wb", buffering=0) as f:
        for chunk in (4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass


def make_victim(kind: str, where: Path, loop: str, full: Path) -> Victim:
    """A victim of ``kind`` for an output path in ``where`` (fresh for the example)."""
    path = where / "victim"
    if kind == "block device":
        os.mknod(path, stat.S_IFBLK | 0o600, os.stat(loop).st_rdev)  # the loop device's own node, here
        return Victim(path, lambda: (node_state(path), device_state(loop)))
    if kind == "fifo":
        os.mkfifo(path)
        return Victim(path, lambda: node_state(path))
    if kind in ("symlink to a block device", "symlink to a fifo"):
        target = where / "target"
        if kind.endswith("fifo"):
            os.mkfifo(target)
        else:
            os.mknod(target, stat.S_IFBLK | 0o600, os.stat(loop).st_rdev)
        path.symlink_to(target)
        return Victim(path, lambda: (node_state(path), node_state(target), device_state(loop)))
    if kind == "users directory":
        path.mkdir()
        (path / "notes.txt").write_text("mine\n")
        (path / "trace.txt").write_text("my own trace\n")
        return Victim(path, lambda: tree_state(path))
    if kind == "full filesystem":
        path = full / "victim"
        path.mkdir()
        (path / "old.txt").write_text("an earlier output\n")
        fill(full)
        # A directory output's own new directory ("victim/new") is no victim: all else is.
        return Victim(full, lambda: {k: v for k, v in tree_state(full).items() if not k.startswith("victim/new")})
    raise AssertionError(kind)


VICTIMS = ["block device", "fifo", "symlink to a block device", "symlink to a fifo", "users directory"]

# Every option naming an output sqlwa writes, as argv with {out} for the path. File outputs
# get the victim itself; directory outputs the victim as the directory.
FILE_OPTIONS = {
    "report -o": ["report", str(RUN), "-o", "{out}"],
    "parse -o": ["parse", str(TRACE), "-o", "{out}"],
    "parse --commits": ["parse", str(TRACE), "--commits", "{out}"],
    "check --junit": ["check", "--policy", str(POLICY), str(RUN), "--junit", "{out}"],
    "export -o": ["export", str(RUN), "-o", "{out}"],
    "device import -o": ["device", "import", "{fio}", "--name", "x", "-o", "{out}"],
    "device probe -o": ["device", "probe", "{where}", "--seconds", "0.5", "--size", "1", "-o", "{out}"],
}
DIR_OPTIONS = {
    "run --out": ["run", "-n", "2", "--out", "{out}"],
    "matrix --out": ["matrix", "-j", "wal", "--sync", "full", "-n", "2", "--vfs-only", "--out", "{out}"],
}
OPTIONS = {**FILE_OPTIONS, **DIR_OPTIONS}


@pytest.fixture(scope="module")
def fio_json(tmp_path_factory) -> Path:
    """fio's JSON output of sqlwa's job file (short jobs), for device import to reach its write."""
    where = tmp_path_factory.mktemp("fio")
    (where / "p.fio").write_text(fio.job_file(0.2, 4))
    subprocess.run(
        ["fio", "--output-format=json", "--output=probe.json", "p.fio"], cwd=where, check=True, capture_output=True
    )
    return where / "probe.json"


def run_option(option: str, out: Path, where: Path, fio_json: Path) -> subprocess.CompletedProcess:
    names = {"{out}": str(out), "{fio}": str(fio_json), "{where}": str(where)}
    argv = [names.get(arg, arg) for arg in OPTIONS[option]]
    try:
        return sqlwa(*argv, check=False, timeout=TIMEOUT, cwd=where)
    except subprocess.TimeoutExpired:
        pytest.fail(f"sqlwa {option} {out} did not finish in {TIMEOUT} s (writing into a FIFO?)")


def output_path(option: str, victim: Victim) -> Path:
    """The path given: the victim; on the full filesystem a new file or directory in it,
    or, for file outputs, the earlier output there."""
    if victim.path.name.startswith("sqlwa-test-full"):
        return victim.path / "victim" / ("old.txt" if option in FILE_OPTIONS else "new")
    return victim.path


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(option=st.sampled_from(sorted(OPTIONS)), kind=st.sampled_from([*VICTIMS, "full filesystem"]))
def test_no_output_option_harms_its_victim(option, kind, loop_ext4, fio_json, tmp_path):
    """Whatever output option gets whatever victim: exit 2 in one line, the victim as it was."""
    where = Path(tempfile.mkdtemp(dir=tmp_path))
    full = Path(tempfile.mkdtemp(prefix="sqlwa-test-full-", dir=tmp_path))
    mounted = kind == "full filesystem"
    if mounted:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "sqlwa-test-full", str(full)], check=True)
    try:
        victim = make_victim(kind, where, loop_ext4, full)
        proc = run_option(option, output_path(option, victim), where, fio_json)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (option, kind, proc.stderr)
        assert victim.state() == victim.before, (option, kind, proc.stderr)
    finally:
        if mounted:
            subprocess.run(["umount", str(full)], check=True)


# ------------------------------------------------------------------ the cases, one by one


@pytest.mark.parametrize("option", sorted(FILE_OPTIONS))
def test_a_file_option_leaves_the_block_device_whole(option, loop_ext4, fio_json, tmp_path):
    """report -o /dev/loopN wrote HTML into the device and destroyed its ext4; parse -o and
    export -o replaced the node with a regular file."""
    before = node_state(Path(loop_ext4)), device_state(loop_ext4)
    proc = run_option(option, Path(loop_ext4), tmp_path, fio_json)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (node_state(Path(loop_ext4)), device_state(loop_ext4)) == before
    assert device_state(loop_ext4)[1:] == (0, False)  # dumpe2fs finds the ext4


@pytest.fixture
def system_dir_out() -> Iterator[Path]:
    """A new directory in /var/lib, removed afterwards (whatever sqlwa did there)."""
    path = Path("/var/lib") / f"sqlwa-test-out-{os.getpid()}"
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_system_directory_needs_the_explicit_flag(system_dir_out, tmp_path):
    proc = sqlwa("run", "-n", "2", "--out", str(system_dir_out), check=False)
    assert proc.returncode == 2 and "system directory /var/lib" in proc.stderr and "--allow-system-dir" in proc.stderr
    assert not os.path.lexists(system_dir_out)
    sqlwa("run", "-n", "2", "--out", str(system_dir_out), "--allow-system-dir")
    assert (system_dir_out / rundir.SUMMARY_FILE).is_file()


def test_run_out_etc_is_refused():
    before = sorted(os.listdir("/etc"))
    proc = sqlwa("run", "-n", "2", "--out", "/etc", check=False)
    assert proc.returncode == 2 and "system directory /etc" in proc.stderr
    assert sorted(os.listdir("/etc")) == before


@pytest.mark.parametrize("lab", [[], ["--fs", "ext4"]], ids=["vfs-only", "lab"])
def test_a_users_files_and_running_are_kept(lab, tmp_path):
    """A user's trace.txt, layout.json, events.parquet and a file named RUNNING in --out:
    the run is refused and every one of them is as it was."""
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("trace.txt", "layout.json", "events.parquet", "RUNNING"):
        (out / name).write_text(f"the user's own {name}\n")
    before = tree_state(out)
    proc = sqlwa("run", *lab, "-n", "2", "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert tree_state(out) == before


def test_an_interrupted_runs_files_are_replaced(tmp_path):
    """A directory sqlwa's own RUNNING mark is in is re-used: the files the mark lists go."""
    out = tmp_path / "out"
    out.mkdir()
    rundir.begin(out)  # what an interrupted run leaves: its mark, then some of its files
    (out / rundir.TRACE_FILE).write_text("a partial trace\n")
    (out / "notes.txt").write_text("the user's, beside the run\n")
    mark = json.loads((out / rundir.RUNNING_FILE).read_text())
    assert mark["sqlwa"] == "run" and rundir.TRACE_FILE in mark["files"] and mark["pid"] == os.getpid()
    sqlwa("run", "-n", "2", "--out", str(out))
    assert not (out / rundir.TRACE_FILE).exists() and not (out / rundir.RUNNING_FILE).exists()
    assert (out / rundir.SUMMARY_FILE).is_file()
    assert (out / "notes.txt").read_text() == "the user's, beside the run\n"  # not the mark's: kept


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_lab_cleanup_removes_only_marked_scratch_directories(tmp_path):
    pid = dead_pid()
    users = tmp_path / f"{SCRATCH_PREFIX}-{pid}-x"
    users.mkdir()
    (users / "precious.txt").write_text("mine\n")
    before = tree_state(users)
    from sqlwa.lab.scratch import make_owned_dir

    marked, ownership = make_owned_dir(SCRATCH_PREFIX, tmp_path)
    _system.ownership.release_ownership(ownership)
    dead = marked.with_name(f"{SCRATCH_PREFIX}-{pid}-y")
    marked.rename(dead)  # sqlwa's own, of a dead pid
    sqlwa("lab", "cleanup", "--workdir", str(tmp_path))
    assert tree_state(users) == before
    assert not dead.exists()


def test_matrix_out_refuses_a_run_directory(tmp_path):
    out = tmp_path / "run"
    sqlwa("run", "-n", "2", "--out", str(out))
    before = tree_state(out)
    proc = sqlwa(*DIR_OPTIONS["matrix --out"][:-1], str(out), check=False)
    assert proc.returncode == 2 and "holds a sqlwa run, not a matrix" in proc.stderr, proc.stderr
    assert tree_state(out) == before


def test_a_report_on_a_full_filesystem_leaves_the_old_file(full_fs):
    """ENOSPC left a truncated 64 KiB x.html: now the old x.html stays, and nothing beside it."""
    old = full_fs / "x.html"
    old.write_text("the report before\n")
    fill(full_fs)
    before = tree_state(full_fs)
    proc = sqlwa("report", str(RUN), "-o", str(old), check=False)
    assert proc.returncode == 2 and "No space left on device" in proc.stderr, proc.stderr
    assert tree_state(full_fs) == before


def test_readers_create_no_shm_beside_the_store(tmp_path):
    """A store left in WAL mode with commits only in its -wal (a killed matrix) and no
    -shm: readers see those commits and create nothing in the directory."""
    out = tmp_path / "m"
    sqlwa(*DIR_OPTIONS["matrix --out"][:-1], str(out))
    writer = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('PRAGMA journal_mode=wal'); c.execute('PRAGMA wal_autocheckpoint=0'); "
            "c.execute(\"UPDATE runs SET scenario = 'only-in-the-wal'\"); os._exit(0)",
            str(out / "results.sqlite"),
        ],
        check=True,
    )
    assert writer.returncode == 0
    (out / "results.sqlite-shm").unlink()
    before = sorted(os.listdir(out))
    assert "results.sqlite-wal" in before
    proc = sqlwa("report", str(out), "-o", str(tmp_path / "r.html"), check=False)
    assert proc.returncode == 0 and sorted(os.listdir(out)) == before, proc.stderr
    from sqlwa.results import store

    # What the writer committed into the WAL only, read back:
    assert store.load_results(out)["scenario"].to_list() == ["only-in-the-wal"]
    assert sorted(os.listdir(out)) == before
