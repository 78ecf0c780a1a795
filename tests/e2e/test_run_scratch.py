"""A VFS-only run's scratch directory: made only inside an existing --dir, removed when
the run is interrupted, and by `sqlwa lab cleanup` after a kill -9 (#15, point 10)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import sqlwa
from sqlwa.cli.lab import lab as lab_group


def test_a_missing_dir_is_refused_and_nothing_is_created(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    out = tmp_path / "out"
    proc = sqlwa("run", "-n", "2", "--dir", str(missing), "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("sqlwa: error: --dir") and "not an existing directory" in proc.stderr
    assert not (tmp_path / "no").exists() and not out.exists()


def test_a_file_as_dir_is_refused_before_the_output_directory_is_made(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    out = tmp_path / "out"
    proc = sqlwa("run", "-n", "2", "--dir", str(a_file), "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "is a file" in proc.stderr
    assert a_file.read_text() == "mine" and not out.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_run_removes_its_scratch_directory(tmp_path, signum):
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", "run", "-n", "200000", "--dir", str(work), "--out", str(tmp_path / "o")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(work.glob("sqlwa-run-*/*.db")) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the database exists: the workload is running
        assert list(work.glob("sqlwa-run-*/*.db")), "the run did not start"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode in (130, 2), (proc.returncode, err)
    assert "Traceback" not in err and ("interrupted" in err or "terminated" in err), err
    assert list(Path(work).iterdir()) == []


def test_cleanup_removes_a_killed_vfs_only_runs_scratch_directory_but_not_a_kept_one(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    kept = sqlwa("run", "-n", "2", "--dir", str(work), "--keep-db", "--out", str(tmp_path / "kept"))
    kept_dir = Path(kept.stdout.strip().splitlines()[-1].removeprefix("kept the database in "))
    assert kept_dir.parent == work and any(kept_dir.iterdir())
    argv = [sys.executable, "-m", "sqlwa", "run", "-n", "200000", "--dir", str(work), "--out", str(tmp_path / "o")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not [p for p in work.glob("sqlwa-run-*/*.db") if p.parent != kept_dir] and time.monotonic() < deadline:
            time.sleep(0.05)
        live = [p for p in work.iterdir() if p != kept_dir]
        assert len(live) == 1, live
        alive = CliRunner().invoke(lab_group, ["cleanup", "--workdir", str(work)])
        assert alive.exit_code == 0 and str(live[0]) not in alive.output
        proc.kill()
        proc.wait()
        assert live[0].is_dir()  # kill -9: nothing of the run's own removal ran
        result = CliRunner().invoke(lab_group, ["cleanup", "--workdir", str(work)])
        assert result.exit_code == 0, result.output
        assert f"removed {live[0]}" in result.output
        assert list(work.iterdir()) == [kept_dir] and any(kept_dir.iterdir()), (alive.output, result.output)
    finally:
        proc.kill()
        proc.wait()


def test_cleanup_removes_the_directory_of_a_run_killed_while_writing_its_mark(tmp_path: Path) -> None:
    """A kill -9 between creating the mark and writing its text leaves an empty or cut
    mark (CI met one); such a directory goes, one with anything else in it stays."""
    from sqlwa.lab.scratch import SCRATCH_MARK, SCRATCH_MARK_TEXT

    dead = subprocess.Popen(["true"])
    dead.wait()
    marks = {"empty": "", "cut": SCRATCH_MARK_TEXT[:7], "foreign": "not sqlwa's\n", "with-more": ""}
    dirs = {}
    for name, text in marks.items():
        directory = tmp_path / f"sqlwa-run-{dead.pid}-{name.replace('-', '')}"
        directory.mkdir()
        (directory / SCRATCH_MARK).write_text(text)
        dirs[name] = directory
    (dirs["with-more"] / "notes.txt").write_text("a user's")
    result = CliRunner().invoke(lab_group, ["cleanup", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([dirs["foreign"].name, dirs["with-more"].name])
