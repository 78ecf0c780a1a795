"""One writer per output directory (#15, point 4): a second `sqlwa run` or `sqlwa matrix`
into a directory another one is writing is refused with one line naming the holder; the
lock goes with its holder, however that ends (a kill -9 included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa import _system

LONG_RUN = ("run", "-n", "200000", "--warmup", "0")


@contextmanager
def holder(*args: str, out: Path) -> Iterator[subprocess.Popen]:
    """A long sqlwa writing into ``out``, running until it holds the lock; killed after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", *args, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / _system.locks.LOCK_FILE).is_file() or not (out / _system.locks.LOCK_FILE).read_text():
            assert proc.poll() is None, f"the holder ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        yield proc
    finally:
        # SIGTERM unwinds sqlwa, which removes its scratch directory; kill only if it hangs
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def refused(proc: subprocess.CompletedProcess, holder_pid: int, owner: str) -> None:
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{owner} (pid {holder_pid}," in errors[0] and "in use" in errors[0]


@pytest.mark.parametrize(
    ("first", "second", "owner", "not_made"),
    [
        (LONG_RUN, ("run", "-n", "20"), "sqlwa run", "summary.json"),
        (
            ("matrix", "--vfs-only", "-j", "delete", "--sync", "full", "-n", "200000", "--warmup", "0"),
            ("matrix", "--vfs-only", "-j", "wal", "--sync", "full", "-n", "20", "--resume"),
            "sqlwa matrix",
            "runs/mobibench-insert-none-wal-full-r1",
        ),
    ],
    ids=["run", "matrix"],
)
def test_second_writer_is_refused_and_the_first_goes_on(tmp_path, first, second, owner, not_made):
    out = tmp_path / "out"
    with holder(*first, out=out) as proc:
        second_proc = sqlwa(*second, "--out", str(out), check=False)
        refused(second_proc, proc.pid, owner)
        assert proc.poll() is None, "the first writer is still at work"
        assert not (out / not_made).exists(), "the refused writer wrote nothing"


def test_a_killed_holder_frees_the_directory(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    work.mkdir()  # a kill -9 leaves the run's scratch directory: keep it inside tmp_path
    with holder(*LONG_RUN, "--dir", str(work), out=out) as proc:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # The lock file may be left behind by a kill -9; its lock died with the process.
    sqlwa("run", "-n", "20", "--warmup", "0", "--out", str(out))
    assert (out / "summary.json").is_file()
    assert not (out / _system.locks.LOCK_FILE).exists(), "a finished run removes its lock file"


def test_a_finished_run_and_matrix_leave_no_lock_behind(tmp_path):
    sqlwa("run", "-n", "5", "--warmup", "0", "--out", str(tmp_path / "r"))
    sqlwa("matrix", "--vfs-only", "-j", "wal", "--sync", "full", "-n", "5", "--out", str(tmp_path / "m"))
    assert not list(tmp_path.rglob(_system.locks.LOCK_FILE))
    # a refused run (bad option) leaves none either
    assert sqlwa("run", "-n", "5", "--fill", "10", "--out", str(tmp_path / "r"), check=False).returncode == 2
    assert not list(tmp_path.rglob(_system.locks.LOCK_FILE))


def test_lock_is_released_by_an_exception(tmp_path):
    with pytest.raises(RuntimeError), _system.locks.directory_lock(tmp_path, "sqlwa run"):
        raise RuntimeError("boom")
    with _system.locks.directory_lock(tmp_path, "sqlwa run"):
        assert (tmp_path / _system.locks.LOCK_FILE).read_text().startswith(f"sqlwa run (pid {os.getpid()},")
    assert not (tmp_path / _system.locks.LOCK_FILE).exists()
