"""The capture estimate a long lab run prints before it starts (#37, item 3)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sqlwa.capture import estimate


def df_available_mib(path: Path) -> float:
    """What df says a user may still write there, in MiB."""
    out = subprocess.run(["df", "--output=avail", "-B1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 2**20


def test_a_duration_run_is_told_how_many_commits_its_disk_holds(tmp_path: Path, capsys) -> None:
    """A --duration run's commits are not known before it runs: the line gives bytes a
    commit and the commits the free space df reports holds at that rate."""
    estimate.check_capture_room(None, tmp_path / "out", 3600.0)
    line = capsys.readouterr().err.strip()
    said = re.fullmatch(
        r"sqlwa: capture estimate: ~25 trace events, ~([\d,]+) B a commit in \S+; its ([\d,]+) MiB free hold "
        r"~([\d,]+) commits",
        line,
    )
    assert said, line
    per_commit, free_mib, commits = (int(g.replace(",", "")) for g in said.groups())
    assert abs(free_mib - df_available_mib(tmp_path)) <= max(2, 0.01 * free_mib)
    assert abs(commits * per_commit / 2**20 - free_mib) <= 0.01 * free_mib + 1


def test_a_short_run_says_nothing(tmp_path: Path, capsys) -> None:
    estimate.check_capture_room(1000, tmp_path, None)
    estimate.check_capture_room(1000, tmp_path, 60.0)  # -n bounds it: short
    assert capsys.readouterr().err == ""


def test_the_room_warning_passes_over_a_directory_gone_meanwhile(tmp_path: Path) -> None:
    """The progress line's room check on a run directory removed under it: no exception
    out of the engine's progress callback (the run's own writes report the loss)."""
    from sqlwa.cli.run import ProgressLine

    line = ProgressLine("run", duration_s=3600.0, long_run=True)
    line.watch(tmp_path / "gone")
    line.started -= 60  # past the time the rate is projected from
    line.warn_if_room_runs_out(10**9)
    assert not line.warned_of_room
