"""Shared test helpers: running the CLI as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlwa's events table, only in annotations: helpers loads no polars
    import polars as pl

REPO = Path(__file__).resolve().parent.parent

# SQLite's documented xSync calls per commit (docs/reference/sqlite-commit-syncs.md;
# synchronous FULL, one row per commit); at the syscall level a rollback commit adds one
# directory sync (the journal is created anew each transaction), as docs/findings.md's tables show.
VFS_SYNCS = {"delete": 3, "wal": 1}
DIRECTORY_SYNCS = {"delete": 1, "wal": 0}


def sqlwa(*args: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run ``python -m sqlwa ARGS`` and return the completed process (text mode)."""
    proc = subprocess.run([sys.executable, "-m", "sqlwa", *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"sqlwa {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    """A user mistake as the CLI must report it: exit 2, no traceback, exactly one
    ``sqlwa: error:`` line, holding each of ``words``."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0], errors[0]


def sqlwa_vm_run(out: Path, *args: str) -> dict:
    """``sqlwa run --vm ARGS --out OUT`` (a guest of its own), and the run's summary.json."""
    sqlwa("run", "--vm", *args, "--out", str(out), timeout=900)
    return json.loads((out / "summary.json").read_text())


def sqlwa_in_process(*args: str) -> subprocess.CompletedProcess:
    """``sqlwa ARGS`` through the CLI's entry point in this process (exit code and both
    streams as a subprocess would give them), for commands that are quick once Polars is
    imported: a subprocess per case would spend most of its time importing it."""
    import contextlib
    import io

    from sqlwa import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["sqlwa", *args], code, out.getvalue(), err.getvalue())


def run_summary(out: Path, *args: str) -> dict:
    """``sqlwa run ARGS --out OUT`` and its summary.json."""
    sqlwa("run", *args, "--out", str(out))
    return json.loads((out / "summary.json").read_text())


def lab_matrix(tmp_path_factory, name: str, *args: str) -> Path:
    """``sqlwa matrix --fs ext4 ARGS`` into a fresh ``NAME/m`` directory (tests that use it
    carry the ``root`` marker)."""
    out = tmp_path_factory.mktemp(name) / "m"
    sqlwa("matrix", "--fs", "ext4", *args, "--out", str(out))
    return out


@contextmanager
def sqlwa_as_nobody(
    *args: str, prefix: str, timeout: float = 120
) -> Iterator[tuple[subprocess.CompletedProcess, Path]]:
    """Run ``python -m sqlwa ARGS`` as nobody (setpriv) in a fresh world-writable directory
    (nobody cannot enter pytest's root-only tmp_path); ``{dir}`` in ARGS is that directory.
    Yields the process and the directory, removed afterwards. Tests that use it carry the
    ``root`` marker; it skips without setpriv."""
    import os
    import shutil
    import tempfile

    import pytest

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed (Debian package util-linux)")
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(workdir, 0o777)
    try:
        proc = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-m",
                "sqlwa",
                *(arg.format(dir=workdir) for arg in args),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=workdir,
        )
        yield proc, workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def filefrag_sectors(path: Path) -> list[tuple[int, int]]:
    """[start, end) sector ranges of ``path`` according to ``filefrag -e -v`` (e2fsprogs:
    FIEMAP asked by another program than sqlwa)."""
    import re

    text = subprocess.run(["filefrag", "-e", "-v", str(path)], capture_output=True, text=True, check=True).stdout
    block = int(re.search(r"blocks of (\d+) bytes", text).group(1))
    ranges = []
    for m in re.finditer(r"^\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*(\d+):", text, re.M):
        first, last = int(m.group(1)), int(m.group(2))
        ranges.append((first * block // 512, (last + 1) * block // 512))
    assert ranges, text
    return ranges


def have_record_preload() -> bool:
    """Whether sqlwa record's preload library is built (scripts/setup builds it)."""
    from sqlwa.errors import UsageError
    from sqlwa.record import program

    try:
        program.preload_library()
    except UsageError:
        return False
    return True


def sqlwa_leftovers(pid: int | None = None) -> list[str]:
    """What of sqlwa's exists on this machine, of process ``pid`` or of any: loop devices
    (as `losetup -l` lists them), device-mapper targets (--crypt), mounts (/proc/mounts, FUSE mounts included), FUSE
    daemons (named fuse-<token>, their command line in a lab directory), tracefs
    instances, lab directories and VFS-only runs' scratch directories in the temp dir,
    host-sharing markers (:func:`measuring_leftovers`), VM lab guests (qemu serving
    such a scratch directory as its control directory), and the tests' stand-in Android
    devices (standin_device.py: their image's loop device, tracefs instance and temp
    directory), each found by the name sqlwa gives it."""
    import os
    import re
    import tempfile

    from sqlwa import _system
    from sqlwa.capture.tracing import INSTANCE_PREFIX
    from sqlwa.lab.filesystem import LAB_PREFIX
    from sqlwa.lab.scratch import SCRATCH_PREFIX

    owner = str(pid) if pid is not None else r"\d+"
    lab_name = re.compile(rf"{LAB_PREFIX}-{owner}-[0-9a-f]+")
    instance_name = re.compile(rf"{INSTANCE_PREFIX}-{owner}-[0-9a-f]+")
    try:
        losetup = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True)
        loops = losetup.stdout.splitlines()
    except OSError:
        loops = []  # no losetup: no loop devices of ours either
    found = [f"loop: {line.strip()}" for line in loops if lab_name.search(line)]
    found += [f"mount: {line}" for line in Path("/proc/mounts").read_text().splitlines() if lab_name.search(line)]
    found += [
        f"daemon: {p.pid} {p.comm} {' '.join(p.argv)}"
        for p in _system.processes.processes()
        if re.fullmatch(r"fuse-[0-9a-f]+", p.comm) and any(lab_name.search(arg) for arg in p.argv)
    ]
    found += [f"dm: {d.name} over {','.join(d.slaves)}" for d in _system.dm.dm_devices() if lab_name.fullmatch(d.name)]
    tracefs = _system.tracefs.tracefs_root()
    if tracefs is not None:
        found += [f"tracefs: {n}" for n in os.listdir(tracefs / "instances") if instance_name.fullmatch(n)]
    found += [f"dir: {n}" for n in os.listdir(tempfile.gettempdir()) if lab_name.fullmatch(n)]
    scratch_name = re.compile(rf"{SCRATCH_PREFIX}-{owner}-\w+")
    found += [f"scratch: {n}" for n in os.listdir(tempfile.gettempdir()) if scratch_name.fullmatch(n)]
    found += measuring_leftovers(pid)
    # the stand-in Android device of the tests (standin_device.py): its image's loop
    # device, its tracefs instance and its temp directory
    standin_name = re.compile(rf"sqlwa-standin-{owner}-[0-9a-f]+")
    found += [f"loop: {line.strip()}" for line in loops if standin_name.search(line)]
    if tracefs is not None:
        found += [f"tracefs: {n}" for n in os.listdir(tracefs / "instances") if standin_name.fullmatch(n)]
    found += [f"dir: {n}" for n in os.listdir(tempfile.gettempdir()) if standin_name.fullmatch(n)]
    # a VM lab guest: qemu sharing a control directory of sqlwa's (a scratch directory)
    found += [
        f"qemu: {p.pid} {' '.join(p.argv)}"
        for p in _system.processes.processes()
        if p.comm.startswith("qemu-system") and any(scratch_name.search(arg) for arg in p.argv)
    ]
    return found


def measuring_leftovers(pid: int | None = None) -> list[str]:
    """The host-sharing markers of process ``pid`` (or of any) in the directory runs mark
    their measuring in, and that directory when it is empty: a run removes both at its end."""
    import os
    import re

    from sqlwa._system import sharing

    place = sharing.marker_dir()
    owner = str(pid) if pid is not None else r"\d+"
    name = re.compile(rf"\.?{owner}-\d+(?:-\d+|\.new)?")
    try:
        names = os.listdir(place) if place.is_dir() and not place.is_symlink() else []
    except OSError:
        return []
    if not names and pid is None and place.is_dir() and not place.is_symlink():
        return [f"dir: {place} (empty)"]
    return [f"marker: {place}/{n}" for n in sorted(names) if name.fullmatch(n)]


def leftovers_after_release(pid: int | None = None) -> list[str]:
    """:func:`sqlwa_leftovers` of process ``pid`` (or of any) once the kernel has had time
    to release them (:func:`sqlwa._system.settle.polled`): a loop device auto-clears on its
    last close, a lazy unmount completes when its last file closes and an exiting process
    closes its tracefs files a moment after its parent saw it end. [] once all are gone;
    else what stayed, so the failing assertion names it."""
    from sqlwa._system import settle

    return settle.polled(lambda: sqlwa_leftovers(pid), lambda left: not left)


def lab_leftovers(pid: int) -> list[str]:
    """:func:`sqlwa_leftovers` of process ``pid`` but its scratch directories: its lab and
    capture. A lab run's engine records live in a scratch directory until its analysis
    has read them, so these are gone first, when the analysis begins."""
    return [found for found in sqlwa_leftovers(pid) if not found.startswith("scratch: ")]


def numbers_in(value: object) -> list[float]:
    """Every number in a JSON value (booleans are not numbers here)."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers_in(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers_in(v)]
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []


def tally_parsed(events: pl.DataFrame, dev: str) -> Counter:
    """Commit 1's write requests, bytes and flushes issued on ``dev``, from sqlwa's events."""
    major, minor = map(int, dev.split(","))
    tally: Counter = Counter()
    inside = False
    for row in events.iter_rows(named=True):
        if row["kind"] == "marker":
            inside = (row["text"] or "").startswith("sqlwa txn_begin i=1")
        elif inside and row["name"] == "block_rq_issue" and (row["dev_major"], row["dev_minor"]) == (major, minor):
            rwbs = row["rwbs"] or ""
            tally["flush"] += rwbs.startswith("F")
            if "W" in rwbs:
                tally["writes"] += 1
                tally["bytes"] += row["bytes"]
    return +tally
