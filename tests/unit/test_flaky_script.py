"""scripts/flaky, the flake finder: it runs the given tests N times, counts each test's
passes from pytest's own JUnit report, names a test that failed in some run, and leaves no
load behind. The tests it runs here are made for it: one that passes every time, one that
fails every second run (it counts its runs in a file), one skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import REPO
from sqlwa import _system

FLAKY = REPO / "scripts" / "flaky"

TESTS = """
import pathlib, pytest

def test_steady():
    assert True

def test_every_second_run_fails():
    counter = pathlib.Path(__file__).with_name("runs")
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    assert runs % 2 == 1, f"run {runs}"

@pytest.mark.skip(reason="never here")
def test_skipped():
    pass
"""


def made_tests(directory: Path, tests: str = TESTS) -> Path:
    """The made tests in `directory`, with a pytest.ini of their own: pytest looks for its
    ini file upward from the paths it is given, so without one a pytest.ini, tox.ini,
    setup.cfg or pyproject.toml that another program put in /tmp meanwhile becomes the
    rootdir, and the tests' names start with "pytest-of-root.pytest-0…" (seen in a full
    run beside other work)."""
    (directory / "pytest.ini").write_text("[pytest]\n")
    (directory / "test_made.py").write_text(tests)
    return directory


def flaky(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLAKY), *args], capture_output=True, text=True, timeout=300)


def stress_processes() -> list[str]:
    return [f"{p.pid} {p.comm}" for p in _system.processes.processes() if p.comm.startswith("stress-ng")]


def test_a_test_failing_in_one_run_of_two_is_named_with_its_count(tmp_path: Path) -> None:
    made_tests(tmp_path)
    proc = flaky("-n", "2", "--workers", "0", "--cpu-load", "0", "--no-disk-load", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "flaky: 3 tests, 2 runs each" in out, out
    assert "1/2  test_made::test_every_second_run_fails" in out, out
    assert "run 2: failed: AssertionError: run 2" in out, out
    assert "2/2  every other test (2; 1 of them skipped every run)" in out, out
    assert "the 10 slowest runs" in out


def test_steady_tests_pass_and_the_load_is_gone_after(tmp_path: Path) -> None:
    if shutil.which("stress-ng") is None:
        pytest.skip("needs stress-ng (./scripts/system-deps installs it)")
    made_tests(tmp_path, TESTS.split("def test_every")[0])
    before = stress_processes(), set(Path(tempfile.gettempdir()).glob("sqlwa-flaky-*"))  # an outer flaky's
    proc = flaky("-n", "2", "--workers", "0", "--cpu-load", "10", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2/2  every other test (1; 0 of them skipped every run)" in proc.stdout
    assert (stress_processes(), set(Path(tempfile.gettempdir()).glob("sqlwa-flaky-*"))) == before


@pytest.mark.parametrize(
    "args, said",
    [
        (["-n", "0", "tests/unit"], "-n 0: give at least one run"),
        (["tests/no_such_dir"], "tests/no_such_dir: no such test file or directory"),
        (["--cpu-load", "150", "tests/unit"], "--cpu-load 150: give a percentage from 0 to 100"),
    ],
)
def test_a_mistake_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    proc = flaky(*args)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"flaky: {said}"], proc.stderr


def test_a_bad_worker_count_from_the_environment_is_one_line() -> None:
    proc = subprocess.run(
        [str(FLAKY), "tests/unit"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SQLWA_TEST_WORKERS": "two"},
    )
    said = "--workers (or SQLWA_TEST_WORKERS) 'two': give a whole number"
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"flaky: {said}"], proc.stderr
