"""A sweep's cell refused before it measured anything leaves no directory behind: the
RUNNING mark goes, and with it a --vm cell's guest console (the refusal is in the
store); a directory with anything else in it is left as it is."""

from __future__ import annotations

from pathlib import Path

from sqlwa.results import rundir


def unstarted(tmp_path: Path, *names: str) -> Path:
    run_dir = tmp_path / "cell"
    run_dir.mkdir()
    for name in (rundir.RUNNING_FILE, *names):
        (run_dir / name).write_text("x\n")
    return run_dir


def test_a_skipped_vm_cells_directory_goes_with_its_console(tmp_path: Path) -> None:
    run_dir = unstarted(tmp_path, "console.log")
    rundir.discard_unstarted(run_dir)
    assert not run_dir.exists()


def test_a_directory_with_more_in_it_is_kept(tmp_path: Path) -> None:
    run_dir = unstarted(tmp_path, "console.log", "trace.txt")
    rundir.discard_unstarted(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["RUNNING", "console.log", "trace.txt"]


def test_a_directory_without_the_mark_is_kept(tmp_path: Path) -> None:
    run_dir = tmp_path / "cell"
    run_dir.mkdir()
    (run_dir / "console.log").write_text("mine\n")
    rundir.discard_unstarted(run_dir)
    assert (run_dir / "console.log").read_text() == "mine\n"
