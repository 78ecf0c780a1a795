"""Traces made to exhaust memory (issue #32): runs joined into one trace, whose commit
markers repeat or run backwards. Each is parsed by ``sqlwa parse`` in a subprocess under
a 1 GB address-space limit (``prlimit --as``): it must refuse in one line (+ hint, exit 2)
or, with --lenient, count what it skipped, never grow until the kernel kills it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, sqlwa_in_process
from sqlwa.results import rundir

RUNS = REPO / "traces" / "samples" / "sqlwa-runs"
ADDRESS_SPACE = 1 << 30
COPIES = 40


def txn_markers(trace_txt: Path) -> int:
    """The run's txn_begin/txn_end marker lines, counted in its raw ftrace text."""
    return len(re.findall(rb"tracing_mark_write: sqlwa txn_(?:begin|end) ", trace_txt.read_bytes()))


def parse_limited(*args: str) -> subprocess.CompletedProcess:
    """``sqlwa parse ARGS`` with its address space limited to 1 GB."""
    argv = ["prlimit", f"--as={ADDRESS_SPACE}", sys.executable, "-m", "sqlwa", "parse", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def joined(path: Path, parts: list[Path]) -> Path:
    path.write_bytes(b"".join(p.read_bytes() for p in parts))
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "wal.perfetto-trace"
    proc = sqlwa_in_process("export", str(RUNS / "ext4-wal"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def joined_traces(name: str, tmp_path: Path, exported: Path) -> tuple[Path, int, int]:
    """The hostile trace, its transaction markers and the commits its first run made
    (independent counts: the runs' own trace.txt and commits.parquet)."""
    wal, delete = RUNS / "ext4-wal", RUNS / "ext4-delete"
    commits = rundir.commits(wal).height
    if name == "perfetto copies":
        return (
            joined(tmp_path / "x.perfetto-trace", [exported] * COPIES),
            COPIES * txn_markers(wal / "trace.txt"),
            commits,
        )
    if name == "ftrace copies":
        return (
            joined(tmp_path / "x.txt", [wal / "trace.txt"] * COPIES),
            COPIES * txn_markers(wal / "trace.txt"),
            commits,
        )
    parts = [wal / "trace.txt", delete / "trace.txt"]
    return joined(tmp_path / "two.txt", parts), sum(txn_markers(p) for p in parts), commits


HOSTILE = ["perfetto copies", "ftrace copies", "two runs' trace.txt"]


@pytest.mark.parametrize("name", HOSTILE)
def test_joined_runs_are_refused_in_one_line(name, tmp_path, exported):
    path, markers, commits = joined_traces(name, tmp_path, exported)
    proc = parse_limited(str(path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    message, hint = proc.stderr.strip().splitlines()
    skipped = markers - 2 * commits
    assert message.startswith(f"sqlwa: error: {skipped:,} of the trace's {markers:,} transaction markers repeat or run")
    assert "--lenient" in hint


@pytest.mark.parametrize("name", HOSTILE)
def test_lenient_keeps_one_run_s_commits_and_counts_the_rest(name, tmp_path, exported):
    path, markers, commits = joined_traces(name, tmp_path, exported)
    proc = parse_limited(str(path), "--lenient", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    found = json.loads(proc.stdout)["commits"]
    assert found["count"] == commits
    assert found["skipped_markers"] == markers - 2 * commits
