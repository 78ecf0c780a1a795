"""Outputs named over sqlwa's own results (#43, point 4): `report m -o m/results.sqlite`
used to replace a sweep's store with the HTML page, and `check --junit`, `export -o`,
`export --format csv -o`, `parse --commits` and `report -o` each replaced a file of a run
directory. An output may be none of the inputs the command reads, nor any path inside a
run directory or a matrix's store directory, however it is spelled (a symlink to one
too).

Each case checksums its victim (SHA-256 of the bytes, and the directory's listing)
before and after, and asks for exit 2 with one `sqlwa: error:` line: the kernel's view
of the files is the truth, never sqlwa's own output.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from helpers import REPO, sqlwa, sqlwa_in_process

SAMPLE_RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"  # a lab run, with its trace
TRACE = SAMPLE_RUN / "trace.txt"
POLICY = REPO / "examples" / "policy.toml"
MATRIX = ("--vfs-only", "-j", "wal", "--sync", "full", "-n", "5", "--warmup", "0")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A matrix (m) and a lab run (r), made once; each test works on a copy."""
    base = tmp_path_factory.mktemp("own")
    sqlwa("matrix", *MATRIX, "--out", str(base / "m"))
    shutil.copytree(SAMPLE_RUN, base / "r")
    return base


@pytest.fixture
def world(pristine, tmp_path) -> Path:
    for name in ("m", "r"):
        shutil.copytree(pristine / name, tmp_path / name)
    shutil.copy(POLICY, tmp_path / "policy.toml")
    return tmp_path


def state(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` by its path, with the SHA-256 of its bytes."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def assert_refused(proc, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0], errors[0]


# (command line with W for the test's directory; the directory whose files must stay)
CASES = {
    "report over the sweep's store": (["report", "W/m", "-o", "W/m/results.sqlite"], "m"),
    "junit over the sweep's store": (["check", "-p", "W/policy.toml", "W/m", "--junit", "W/m/results.sqlite"], "m"),
    "export over summary.json": (["export", "W/r", "-o", "W/r/summary.json"], "r"),
    "csv over commits.parquet": (["export", "--format", "csv", "W/r", "-o", "W/r/commits.parquet"], "r"),
    "parse over commits.parquet": (["parse", str(TRACE), "--commits", "W/r/commits.parquet"], "r"),
    "report over summary.json": (["report", "W/r", "-o", "W/r/summary.json"], "r"),
    # A new file inside a run's or a sweep's directory is as much in its place.
    "report beside the run's files": (["report", "W/r", "-o", "W/r/page.html"], "r"),
    "report into a cell of the sweep": (["report", "W/m", "-o", "W/m/runs/page.html"], "m"),
    "junit over the policy it reads": (["check", "-p", "W/policy.toml", "W/m", "--junit", "W/policy.toml"], "."),
    "parse over the trace it reads": (["parse", "W/r/trace.txt", "-o", "W/r/trace.txt"], "r"),
}


@pytest.mark.parametrize("case", CASES)
def test_an_output_over_the_commands_own_results_is_refused(world, case):
    template, victim = CASES[case]
    before = state(world / victim)
    proc = sqlwa_in_process(*[arg.replace("W", str(world), 1) if arg.startswith("W") else arg for arg in template])
    assert_refused(proc)
    assert state(world / victim) == before


def test_a_symlink_to_a_runs_file_is_refused_as_the_file(world):
    """The path is judged once its symlinks are followed: a link elsewhere is the run's file."""
    link = world / "elsewhere.html"
    link.symlink_to(world / "r" / "summary.json")
    before = state(world / "r")
    assert_refused(sqlwa_in_process("report", str(world / "m"), "-o", str(link)), str(world / "r"))
    assert state(world / "r") == before and link.is_symlink()


def test_a_symlinked_directory_into_the_sweep_is_refused(world):
    (world / "view").symlink_to(world / "m", target_is_directory=True)
    before = state(world / "m")
    proc = sqlwa_in_process(
        "check", "-p", str(world / "policy.toml"), str(world / "r"), "--junit", str(world / "view" / "x.xml")
    )
    assert_refused(proc)
    proc = sqlwa_in_process("export", "--format", "csv", str(world / "m"), "-o", str(world / "view" / "m.csv"))
    assert_refused(proc, str(world / "m"))
    assert state(world / "m") == before


@pytest.mark.parametrize("where", ["a cell of the sweep", "inside the run"])
def test_a_run_into_a_directory_inside_results_is_refused(world, where):
    """`run --out m/runs/CELL` would replace a cell of the sweep behind its store's back."""
    cell = next((world / "m" / "runs").iterdir())
    out, victim = (cell, world / "m") if where == "a cell of the sweep" else (world / "r" / "again", world / "r")
    before = state(victim)
    proc = sqlwa("run", "-n", "3", "--warmup", "0", "--out", str(out), check=False)
    assert_refused(proc, str(victim))
    assert state(victim) == before and (where == "a cell of the sweep" or not out.exists())


def test_outputs_beside_the_results_are_written(world):
    """The rule is about where the results are, not about writing near them."""
    page = world / "page.html"
    assert sqlwa_in_process("report", str(world / "m"), "-o", str(page)).returncode == 0
    table = world / "commits.csv"
    assert sqlwa_in_process("export", "--format", "csv", str(world / "r"), "-o", str(table)).returncode == 0
    assert page.stat().st_size > 0 and table.read_text().startswith("index,")


@pytest.mark.parametrize("spelling", ["the same name", "a hard link"])
def test_parse_with_its_two_outputs_on_one_file_is_refused(tmp_path, spelling):
    """`parse -o X --commits X` wrote the event table, then the commit table over it."""
    events = tmp_path / "x.parquet"
    commits = events
    if spelling == "a hard link":
        events.write_bytes(b"mine")
        commits = tmp_path / "link.parquet"
        commits.hardlink_to(events)
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = sqlwa_in_process("parse", str(TRACE), "-o", str(events), "--commits", str(commits))
    assert_refused(proc, "--commits")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert spelling == "the same name" or events.read_bytes() == b"mine"
