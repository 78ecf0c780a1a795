"""Which other runs measured on the host during a run (sqlwa._system.sharing), each case
in a marker directory of its own: runs nested in this process, killed runs in child
processes, and what a user (or another user) may put in the directory. After every run
nothing of it is left: the directory is gone once no run measures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqlwa._system import sharing

HOLD = """
import sys, time
from pathlib import Path
from sqlwa._system import sharing
with sharing.measuring(Path(sys.argv[1])) as shared:
    print("measuring", flush=True)
    time.sleep(60)
"""


@pytest.fixture(autouse=True)
def no_wait_forever():
    """A FIFO opened without O_NONBLOCK waits for a reader: fail the test instead."""

    def stuck(signum, frame):
        raise AssertionError("blocked (on a FIFO?)")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def held_then_killed(directory: Path) -> int:
    """The pid of a process that made its marker in ``directory`` and was SIGKILLed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "measuring\n"
    proc.kill()
    proc.wait()
    return proc.pid


def shared_dir(place: Path) -> None:
    """The directory as a run makes it (sticky, writable by all), to plant things in."""
    place.mkdir()
    place.chmod(0o1777)


def measured_alone(place: Path) -> dict | None:
    """What a run that measures nothing else in between finds (``shared()`` at its end)."""
    with sharing.measuring(place) as shared:
        return shared()


def test_a_run_alone_counts_none_and_leaves_nothing(tmp_path):
    place = tmp_path / "measuring"
    with sharing.measuring(place) as shared:
        [marker] = os.listdir(place)
        assert marker == f"{os.getpid()}-{marker.split('-')[1]}"
        found = shared()
    assert found is not None and found["other_runs"] == [] and found["cpus"] == os.cpu_count()
    assert not place.exists()


def test_a_new_directory_is_shared_by_all_users(tmp_path):
    place = tmp_path / "measuring"
    old = os.umask(0o022)
    try:
        with sharing.measuring(place):
            assert place.stat().st_mode & 0o7777 == 0o1777
    finally:
        os.umask(old)


def test_runs_that_began_before_and_during_a_run_count_it_and_it_them(tmp_path):
    """Outer measures throughout; before ended inside it, inner began and ended inside it."""
    place = tmp_path / "measuring"
    with sharing.measuring(place) as outer:
        with sharing.measuring(place) as inner:
            inner_found = inner()
        outer_found = outer()
        assert len(os.listdir(place)) == 1  # the inner run's marker is gone at its end
    me = os.getpid()
    assert inner_found is not None and inner_found["other_runs"] == [me]  # outer began before it
    assert outer_found is not None and outer_found["other_runs"] == [me]  # inner began during it
    assert not place.exists()


def test_a_run_that_ended_before_this_one_began_is_not_counted(tmp_path):
    place = tmp_path / "measuring"
    measured_alone(place)
    found = measured_alone(place)
    assert found is not None and found["other_runs"] == []
    assert not place.exists()


def test_a_killed_runs_marker_is_removed_by_the_next_run_and_not_counted(tmp_path):
    place = tmp_path / "measuring"
    killed = held_then_killed(place)
    assert [name.split("-")[0] for name in os.listdir(place)] == [str(killed)]
    found = measured_alone(place)
    assert found is not None and found["other_runs"] == []
    assert not place.exists()


def test_a_run_killed_while_this_one_measured_is_counted(tmp_path):
    place = tmp_path / "measuring"
    with sharing.measuring(place) as shared:
        killed = held_then_killed(place)
        found = shared()
    assert found is not None and found["other_runs"] == [killed]
    [left] = os.listdir(place)  # for the next run, or the cleanup
    assert left.split("-")[0] == str(killed)
    assert sharing.remove_dead_markers(place) == [
        f"removed {place / left} (the host-sharing marker of a killed run)",
        f"removed {place} (empty)",
    ]
    assert not place.exists()


def test_cleanup_leaves_a_live_runs_marker(tmp_path):
    place = tmp_path / "measuring"
    with sharing.measuring(place) as shared:
        assert sharing.remove_dead_markers(place) == []
        assert len(os.listdir(place)) == 1
        shared()
    assert sharing.remove_dead_markers(place) == [] and not place.exists()


def test_garbage_in_a_marker_names_no_run(tmp_path):
    place = tmp_path / "measuring"
    with sharing.measuring(place) as shared:
        [marker] = os.listdir(place)
        with open(place / marker, "ab") as f:
            f.write(b"not a line\n\xff\xfe\n12 x\n" + b"7" * (2 * sharing.VISITS_READ) + b"\n99 1\n")
        found = shared()
    assert found is not None and found["other_runs"] == []  # 99 lies past what is read
    assert not place.exists()


def test_a_fifo_and_links_planted_there_are_neither_followed_nor_waited_on(tmp_path):
    place = tmp_path / "measuring"
    shared_dir(place)
    target = tmp_path / "someones-file"
    target.write_bytes(b"theirs\n")
    os.mkfifo(place / "4242-1")  # named like a live marker
    os.symlink(target, place / "4243-2")
    os.symlink(place / "4242-1", place / "4244-3")
    started = time.monotonic()
    found = measured_alone(place)
    assert time.monotonic() - started < 10
    assert found is not None and found["other_runs"] == []
    assert target.read_bytes() == b"theirs\n"
    assert sorted(os.listdir(place)) == ["4242-1", "4243-2", "4244-3"]  # not ours: left
    assert sharing.remove_dead_markers(place) == [] and target.exists()


@pytest.mark.parametrize("what", ["a file", "a link to a directory", "a dangling link"])
def test_no_directory_at_the_path_leaves_the_run_unmarked(tmp_path, what):
    place, elsewhere = tmp_path / "measuring", tmp_path / "elsewhere"
    if what == "a file":
        place.write_bytes(b"a user's\n")
    else:
        if what == "a link to a directory":
            elsewhere.mkdir()
        place.symlink_to(elsewhere)
    with sharing.measuring(place) as shared:
        assert shared() is None
    assert place.is_symlink() or place.read_bytes() == b"a user's\n"
    assert not elsewhere.exists() or list(elsewhere.iterdir()) == []
    assert sharing.remove_dead_markers(place) == []


def test_the_environment_names_another_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(sharing.DIR_ENV, str(tmp_path / "measuring"))
    with sharing.measuring() as shared:
        assert len(os.listdir(tmp_path / "measuring")) == 1
        shared()
    assert not (tmp_path / "measuring").exists()


def test_a_marker_left_half_made_goes_with_the_next_run(tmp_path):
    """A run killed between making its marker and renaming it: the temporary name, unlocked."""
    place = tmp_path / "measuring"
    shared_dir(place)
    (place / ".999999-1.new").touch()
    (place / "999999-1-2").touch()  # an earlier sqlwa's finished marker, kept a day
    found = measured_alone(place)
    assert found is not None and found["other_runs"] == []
    assert not place.exists()


def test_a_directory_removed_as_a_run_makes_its_marker_is_made_again(tmp_path, monkeypatch):
    """The last run ending removes the empty directory just after a starting run opened it."""
    place = tmp_path / "measuring"
    opened = sharing._open_dir
    removed = []

    def opened_then_removed(directory, create):
        fd = opened(directory, create)
        if not removed:
            os.rmdir(directory)
            removed.append(directory)
        return fd

    monkeypatch.setattr(sharing, "_open_dir", opened_then_removed)
    with sharing.measuring(place) as shared:
        assert removed == [place] and len(os.listdir(place)) == 1
        found = shared()
    assert found is not None and found["other_runs"] == []
    assert not place.exists()


def test_a_users_own_directory_of_that_name_is_not_written_in(tmp_path):
    """Only a directory made to be shared (sticky, writable by all, as sqlwa makes it)
    holds markers: a user's own directory of the name is left as it was."""
    place = tmp_path / "measuring"
    place.mkdir(mode=0o755)
    (place / "notes.txt").write_text("mine")
    assert measured_alone(place) is None
    assert sorted(os.listdir(place)) == ["notes.txt"]
