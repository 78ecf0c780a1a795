"""Inputs a hostile user hands sqlwa (#32, points 2, 4 and 5): `/dev/zero` and FIFOs in
place of result files, policies, profiles, scenarios and traces; JSON and TOML nested
hundreds of thousands deep; an integer of 401 digits; a truncated events.parquet.

Each must end in one `sqlwa: error:` line and exit 2, never a traceback, a hang or memory
exhaustion: every command runs as a subprocess under a 1 GiB address-space limit
(``prlimit --as``) and a timeout well below the 90 s a FIFO used to hang for.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from helpers import REPO, assert_one_line_error
from helpers import sqlwa as sqlwa_cli

ONE_GIB = 1 << 30
POLICY = REPO / "examples" / "policy.toml"
PROFILE = REPO / "analyzer" / "sqlwa" / "device" / "published" / "moto-z-2016.toml"


def bounded_sqlwa(*args: str | os.PathLike[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """``sqlwa ARGS`` under a 1 GiB address-space limit, stdin closed."""
    argv = ["prlimit", f"--as={ONE_GIB}", sys.executable, "-m", "sqlwa", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("hostile") / "run"
    sqlwa_cli("run", "-n", "20", "--warmup", "2", "--out", str(run))
    return run


@pytest.fixture
def run(pristine_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(pristine_run, copy)
    return copy


def dev_zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


SPECIALS = {"dev-zero": (dev_zero, "character device"), "fifo": (fifo, "FIFO")}

# (command line, with RUN and FILE filled in; the file of the run replaced, or None for FILE)
RESULT_COMMANDS = {
    "report": ["report", "RUN", "-o", "OUT/report.html"],
    "check": ["check", "RUN", "--policy", str(POLICY)],
    "compare": ["compare", "RUN", "RUN"],
    "predict": ["predict", "RUN", "-d", str(PROFILE)],
}


def command_line(template: list[str], run: Path, out: Path) -> list[str]:
    return [arg.replace("RUN", str(run)).replace("OUT", str(out)) for arg in template]


@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("name", ["summary.json", "commits.parquet"])
@pytest.mark.parametrize("command", RESULT_COMMANDS)
def test_a_result_file_that_is_no_regular_file_is_refused(run, tmp_path, special, name, command):
    make, kind = SPECIALS[special]
    make(run / name)
    proc = bounded_sqlwa(*command_line(RESULT_COMMANDS[command], run, tmp_path))
    if name == "commits.parquet" and command == "predict":
        # predict refuses a run that is no lab run once summary.json says so, before the table.
        assert_one_line_error(proc, str(run))
        return
    assert_one_line_error(proc, str(run / name), kind)


@pytest.mark.parametrize("special", SPECIALS)
def test_export_refuses_a_commits_table_that_is_no_regular_file(run, tmp_path, special):
    pl.DataFrame({"ts_ns": [0]}).write_parquet(run / "events.parquet")  # export reads runs with a trace
    make, kind = SPECIALS[special]
    make(run / "commits.parquet")
    proc = bounded_sqlwa("export", run, "-o", tmp_path / "trace.perfetto-trace")
    assert_one_line_error(proc, str(run / "commits.parquet"), kind)


@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize(
    ("what", "template"),
    [
        ("policy", ["check", "RUN", "--policy", "FILE"]),
        ("profile", ["device", "show", "FILE"]),
        ("profile", ["predict", "RUN", "-d", "FILE"]),
        ("scenario", ["run", "-n", "3", "--scenario", "FILE", "--out", "OUT/new"]),
        ("trace", ["parse", "FILE"]),
        ("trace", ["parse", "FILE", "-o", "OUT/events.parquet"]),
        ("trace", ["parse", "FILE", "--format", "perfetto"]),
    ],
)
def test_an_input_file_that_is_no_regular_file_is_refused(run, tmp_path, special, what, template):
    make, kind = SPECIALS[special]
    target = tmp_path / f"{what}.input"
    make(target)
    argv = [arg.replace("FILE", str(target)) for arg in command_line(template, run, tmp_path)]
    assert_one_line_error(bounded_sqlwa(*argv), str(target), kind)


def test_a_fifo_given_to_parse_is_refused_before_it_is_opened(tmp_path):
    """Opening a FIFO for reading waits for a writer; a refusal that opened it first would
    hang here (the test's timeout), and a writer opening it would find no reader."""
    target = tmp_path / "trace.txt"
    os.mkfifo(target)
    assert_one_line_error(bounded_sqlwa("parse", target, timeout=20), "FIFO")
    with pytest.raises(OSError):  # ENXIO: no process has it open for reading
        os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("what", ["policy", "profile", "scenario"])
def test_an_oversized_input_says_its_size_and_the_limit(run, tmp_path, what):
    target = tmp_path / f"{what}.toml"
    with open(target, "wb") as f:
        f.truncate(20 << 20)  # sparse: 20 MiB of NULs, above every TOML limit
    template = {
        "policy": ["check", "RUN", "--policy", "FILE"],
        "profile": ["device", "show", "FILE"],
        "scenario": ["run", "-n", "3", "--scenario", "FILE", "--out", "OUT/new"],
    }[what]
    argv = [arg.replace("FILE", str(target)) for arg in command_line(template, run, tmp_path)]
    proc = bounded_sqlwa(*argv)
    assert_one_line_error(proc, str(target))
    assert "20" in proc.stderr and "larger than" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- tracebacks


def set_commits(run: Path, raw: str) -> None:
    text = (run / "summary.json").read_text()
    summary = json.loads(text)
    summary["commits"] = 0
    (run / "summary.json").write_text(json.dumps(summary).replace('"commits": 0', f'"commits": {raw}', 1))


@pytest.mark.parametrize("command", RESULT_COMMANDS)
def test_a_summary_with_a_401_digit_integer_is_damaged(run, tmp_path, command):
    set_commits(run, "1" + "0" * 400)
    proc = bounded_sqlwa(*command_line(RESULT_COMMANDS[command], run, tmp_path))
    assert_one_line_error(proc, str(run / "summary.json"), "401 digits")


@pytest.mark.parametrize("command", RESULT_COMMANDS)
def test_a_summary_nested_200000_deep_is_damaged(run, tmp_path, command):
    (run / "summary.json").write_text("[" * 200_000)
    proc = bounded_sqlwa(*command_line(RESULT_COMMANDS[command], run, tmp_path))
    assert_one_line_error(proc, str(run / "summary.json"), "nested too deeply")


DEEP_TOML = "x = " + "[" * 50_000 + "]" * 50_000 + "\n"


@pytest.mark.parametrize(
    ("what", "template"),
    [
        ("policy", ["check", "RUN", "--policy", "FILE"]),
        ("profile", ["device", "show", "FILE"]),
        ("profile", ["predict", "RUN", "-d", "FILE"]),
        ("scenario", ["run", "-n", "3", "--scenario", "FILE", "--out", "OUT/new"]),
    ],
)
def test_toml_nested_50000_deep_is_one_error(run, tmp_path, what, template):
    target = tmp_path / f"{what}.toml"
    target.write_text(DEEP_TOML)
    argv = [arg.replace("FILE", str(target)) for arg in command_line(template, run, tmp_path)]
    assert_one_line_error(bounded_sqlwa(*argv), str(target))


def test_report_says_a_truncated_events_table_is_damaged(run, tmp_path):
    """A run whose events.parquet was cut short (a full disk, a copy interrupted)."""
    summary = json.loads((run / "summary.json").read_text())
    summary["levels"] = [*summary["levels"], "block"]  # report reads the events of block-level runs
    (run / "summary.json").write_text(json.dumps(summary))
    events = pl.DataFrame({"ts_ns": list(range(10_000)), "bytes": [4096] * 10_000})
    events.write_parquet(run / "events.parquet")
    data = (run / "events.parquet").read_bytes()
    (run / "events.parquet").write_bytes(data[: len(data) // 2])
    proc = bounded_sqlwa("report", run, "-o", tmp_path / "report.html")
    assert_one_line_error(proc, str(run / "events.parquet"), "damaged")


# --------------------------------------------------------------------------- a full disk


@pytest.fixture
def tiny_tmpfs(tmp_path) -> Iterator[Path]:
    """A 64 KiB tmpfs of this test's own, unmounted however the test ends."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = tmp_path / f"tmpfs-{os.getpid()}"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


def test_a_run_on_a_full_disk_says_so_in_one_line(tiny_tmpfs):
    """3000 commits' table does not fit in 64 KiB; where Polars runs out of room while
    writing the footer its error names no OS error ("Invalid thrift: transport error"),
    elsewhere it does: either way one line saying the disk is full. Runs a few times, as
    which of the two happens varies. (synchronous=OFF: the workload's database is not on
    the tmpfs, and its 3000 commits' fsyncs took 48 s an attempt on CI's disk.)"""
    for attempt in range(3):
        argv = ["run", "-n", "3000", "--sync", "off", "--out", tiny_tmpfs / f"run{attempt}"]
        proc = bounded_sqlwa(*argv, timeout=300)
        assert_one_line_error(proc, str(tiny_tmpfs / f"run{attempt}"), "No space left on device")
        shutil.rmtree(tiny_tmpfs / f"run{attempt}")


def test_a_parquet_write_failing_without_an_os_error_on_a_full_disk_is_enospc(tiny_tmpfs, monkeypatch):
    from sqlwa.results import rundir

    fd = os.open(tiny_tmpfs / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError):
            while True:  # fill the tmpfs to the last block, as statvfs will say
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    assert os.statvfs(tiny_tmpfs).f_bavail == 0
    table = pl.DataFrame({"a": list(range(1000))})

    def footer_failure(self, target):
        raise pl.exceptions.ComputeError("parquet: File out of specification: Invalid thrift: transport error")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", footer_failure)
    with pytest.raises(OSError) as raised:
        rundir.write_parquet(table, tiny_tmpfs / "t.parquet")
    assert raised.value.errno == errno.ENOSPC
