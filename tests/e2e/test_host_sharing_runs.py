"""Real `sqlwa run` processes side by side: each records the other in summary.json's
`config.host_sharing`, and none leaves its marker behind. The first test uses the
directory every run on this machine shares (/tmp/sqlwa-measuring, where other tests'
runs may measure meanwhile); the others a directory of their own (SQLWA_MEASURING_DIR).
The truth of "measured at the same time" is each run's commits' own clock spans and
the outer process still running when the inner one has ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from helpers import REPO, sqlwa
from sqlwa._system import settle, sharing


def slow_scenario(tmp_path: Path) -> Path:
    """mobibench-insert with a think time: a long run that keeps the CPUs mostly idle."""
    path = tmp_path / "slow-insert.toml"
    text = (REPO / "workloads" / "scenarios" / "mobibench-insert.toml").read_text()
    path.write_text(text.replace('name = "mobibench-insert"', 'name = "slow-insert"\nthink_time_ms = 2.0'))
    return path


def markers_of(place: Path, pid: int) -> list[str]:
    try:
        return [n for n in os.listdir(place) if n.lstrip(".").split("-")[0] == str(pid)]
    except OSError:
        return []


def start_run(out: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "sqlwa", "run", "--warmup", "0", *args, "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_marker(place: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not markers_of(place, proc.pid):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never began measuring"
        time.sleep(0.05)


def span_ns(out: Path) -> tuple[int, int]:
    commits = pl.read_parquet(out / "commits.parquet")
    return commits["start_ns"].min(), commits["end_ns"].max()


def host_sharing(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())["config"]["host_sharing"]


def test_a_run_inside_anothers_span_and_the_other_count_each_other(tmp_path):
    place = sharing.MARKER_DIR
    env = {k: v for k, v in os.environ.items() if k != sharing.DIR_ENV}
    scenario = slow_scenario(tmp_path)
    outer = start_run(tmp_path / "outer", "-s", str(scenario), "--duration", "10m", env=env)
    try:
        wait_for_marker(place, outer)
        inner = start_run(tmp_path / "inner", "-s", str(scenario), "-n", "50", env=env)
        _, inner_err = inner.communicate(timeout=300)
        assert inner.returncode == 0, inner_err
        assert outer.poll() is None and markers_of(place, outer.pid), "the outer run measures on"
        assert markers_of(place, inner.pid) == []
        outer.send_signal(signal.SIGINT)  # the end of its workload: it keeps what it measured
        _, outer_err = outer.communicate(timeout=300)
    finally:
        outer.kill()
        outer.wait()
    assert outer.returncode == 130 and "holds what was measured" in outer_err, outer_err
    (a0, a1), (b0, b1) = span_ns(tmp_path / "outer"), span_ns(tmp_path / "inner")
    assert a0 < b0 and b1 < a1, "the inner run measured inside the outer one's span"
    assert inner.pid in host_sharing(tmp_path / "outer")["other_runs"]
    assert outer.pid in host_sharing(tmp_path / "inner")["other_runs"]
    assert markers_of(place, outer.pid) == [] and markers_of(place, inner.pid) == []
    # gone, unless a run of another test measures right now (its marker is its own)
    left = settle.polled(lambda: place.exists() and not os.listdir(place), lambda empty: not empty)
    assert not left, f"{place} is left, empty"


@pytest.mark.parametrize("then", ["the next run", "lab cleanup"])
def test_a_killed_runs_marker_is_removed_by_the_next_run_or_lab_cleanup(tmp_path, then):
    place = tmp_path / "measuring"
    env = {**os.environ, sharing.DIR_ENV: str(place)}
    killed = start_run(tmp_path / "killed", "-s", str(slow_scenario(tmp_path)), "--duration", "10m", env=env)
    try:
        wait_for_marker(place, killed)
    finally:
        killed.kill()
        killed.communicate()
    [marker] = markers_of(place, killed.pid)
    try:
        if then == "the next run":
            sqlwa("run", "-n", "3", "--warmup", "0", "-o", str(tmp_path / "next"), env=env)
            assert host_sharing(tmp_path / "next")["other_runs"] == []  # killed before it began
        else:
            said = sqlwa("lab", "cleanup", env=env).stdout.splitlines()
            assert f"removed {place / marker} (the host-sharing marker of a killed run)" in said, said
            assert f"removed {place} (empty)" in said, said
        assert not place.exists()
    finally:
        sqlwa("lab", "cleanup", env=env)  # the killed run's scratch directory


def test_a_file_where_the_directory_would_be_leaves_runs_unmarked(tmp_path):
    place = tmp_path / "measuring"
    place.write_bytes(b"a user's file\n")
    env = {**os.environ, sharing.DIR_ENV: str(place)}
    proc = sqlwa("run", "-n", "3", "--warmup", "0", "-o", str(tmp_path / "out"), env=env)
    assert "Traceback" not in proc.stderr and "shared host" not in proc.stdout, proc.stderr
    assert host_sharing(tmp_path / "out") is None
    assert place.read_bytes() == b"a user's file\n"
