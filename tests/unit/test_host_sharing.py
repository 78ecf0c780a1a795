"""Which other runs measured on the host during a run (sqlwa._system.sharing): markers
made here by hand, each case's truth its own span against the run's."""

from __future__ import annotations

import fcntl
import os

from sqlwa._system import sharing

S = 1_000_000_000


def marker(directory, pid: int, start: int, end: int | None = None, live: bool = False) -> int | None:
    name = f"{pid}-{start * S}" + ("" if end is None else f"-{end * S}")
    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o644)
    if live:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: the check's shared lock conflicts
        return fd
    os.close(fd)
    return None


def test_only_runs_whose_span_meets_this_one_count(tmp_path):
    own = tmp_path / f"1-{100 * S}"
    own.touch()
    marker(tmp_path, 2, 50, 90)  # ended before this run began
    marker(tmp_path, 3, 50, 110)  # ended during it
    marker(tmp_path, 4, 120, 130)  # began and ended inside it
    marker(tmp_path, 5, 300, 310)  # began after it ended
    held = marker(tmp_path, 6, 40, live=True)  # still measuring
    marker(tmp_path, 7, 40)  # killed before this run began: no lock, no end
    marker(tmp_path, 8, 150)  # killed while this run measured
    (tmp_path / "not-a-marker").touch()
    try:
        assert sharing.overlapping(tmp_path, own, 100 * S, 200 * S) == [3, 4, 6, 8]
    finally:
        assert held is not None
        os.close(held)


def test_a_run_alone_counts_none_and_leaves_its_span(tmp_path):
    with sharing.measuring(tmp_path) as shared:
        found = shared()
    assert found is not None and found["other_runs"] == []
    [left] = os.listdir(tmp_path)
    pid, start, end = map(int, left.split("-"))
    assert pid == os.getpid() and start < end


def test_an_unusable_directory_leaves_the_run_unmarked(tmp_path):
    (tmp_path / "file").touch()
    with sharing.measuring(tmp_path / "file") as shared:
        assert shared() is None
