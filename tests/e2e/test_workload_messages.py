"""Messages that blame the right thing (#15): a scenario file that is not a scenario says so
(with TOML's line and column), and a full or failing disk under the workload names the
directory instead of telling the user to fix the scenario. One line, exit 2."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import sqlwa


def one_error(proc: subprocess.CompletedProcess) -> tuple[str, str]:
    """The error line and the fix line of a refused command."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    fixes = [line for line in proc.stderr.splitlines() if line.startswith("  fix:")]
    assert len(errors) == 1 and len(fixes) == 1, proc.stderr
    return errors[0], fixes[0]


@pytest.mark.parametrize(
    "content,where",
    [
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "line 1, column 2"),  # gzip
        (b"hello world\n", "line 1, column 7"),
        (b"", "line 1, column 1"),
    ],
    ids=["binary", "text", "empty"],
)
def test_a_file_that_is_not_a_scenario_says_so(tmp_path, content, where):
    path = tmp_path / "garbage.toml"
    path.write_bytes(content)
    line, fix = one_error(sqlwa("run", "-s", str(path), "-n", "2", "--out", str(tmp_path / "o"), check=False))
    assert line.startswith(f"sqlwa: error: scenario file {path}, {where}: not a valid scenario: "), line
    assert "TOML" in fix and "writable directory" not in fix, fix
    assert not (tmp_path / "o").exists()


def assert_blames_the_disk(proc: subprocess.CompletedProcess, directory: Path) -> None:
    line, fix = one_error(proc)
    assert f" in {directory}/sqlwa-run-" in line, line
    assert any(problem in line for problem in ("no space left", "an I/O error")), line
    assert "statement" in line and "fix the statement" not in fix and "not the scenario" in fix, fix
    assert list(directory.iterdir()) == [], "the scratch directory was removed"


def limit_file_size() -> None:
    """In the child: files stop growing at 2 MB as on a full disk (writes beyond it fail
    with EFBIG instead of killing the process with SIGXFSZ)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))


def test_a_full_disk_names_the_directory_not_the_scenario(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    args = ["run", "-s", "feed-cache", "-n", "500", "--dir", str(work), "--out", str(tmp_path / "o")]
    proc = subprocess.run(
        [sys.executable, "-m", "sqlwa", *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit_file_size,
    )
    assert_blames_the_disk(proc, work)


@pytest.mark.root
def test_a_full_filesystem_names_the_directory_not_the_scenario(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "sqlwa-test-full", str(small)], check=True)
    try:
        proc = sqlwa(
            "run", "-s", "feed-cache", "-n", "500", "--dir", str(small), "--out", str(tmp_path / "o"), check=False
        )
        assert_blames_the_disk(proc, small)
    finally:
        subprocess.run(["umount", str(small)], check=True)
