"""Durability reaches the gate: a run whose fsyncs flushed nothing to the device (ext4
mounted ``barrier=0``) is shown as such by the report, fails ``forbid_findings`` (and
the example policy), and ``sqlwa compare`` marks its fewer flushes as durability lost.

Independent truth: the kernel's own mount options (``nobarrier`` in /proc/mounts while
the run's filesystem was mounted, as ext4 reports ``barrier=0``) and a tally of the raw
trace.txt with regular expressions of the test's own (``trace_truth``): no cache flush
reached the device in any commit window of the barrier=0 run, at least one in every
commit of the default mount, while the SQL thread's fsync-family syscalls (counted in the
same text) ran in every one.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from helpers import REPO, sqlwa
from trace_truth import MARKER, TRACE_LINE, in_commit_windows, tally_block_per_commit

pytestmark = pytest.mark.root

RUN = ("run", "--fs", "ext4", "-j", "delete", "--sync", "full", "-n", "20", "--warmup", "2")
SYNC_ENTER = re.compile(
    r"^\s*.+?-(?P<pid>\d+)\s+\[\d+\]\s+\S+\s+\d+\.\d+: sys_(fsync|fdatasync|sync_file_range)\("
)  # the entry line of an fsync-family syscall (its exit line reads "sys_fsync -> 0x0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("durability")
    sqlwa(*RUN, "--out", str(base / "durable"))
    sqlwa(*RUN, "--mount-opts", "barrier=0", "--out", str(base / "nobarrier"))
    return {"durable": base / "durable", "nobarrier": base / "nobarrier"}


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def fsyncs_per_commit(trace: Path, tid: int) -> Counter:
    """fsync-family syscall entries of the SQL thread in each commit window."""

    def records():
        for line in trace.read_text(errors="replace").splitlines():
            sync = SYNC_ENTER.match(line)
            if sync and int(sync["pid"]) == tid:
                yield "sync", ""
            elif (record := TRACE_LINE.match(line)) and record["event"] == "tracing_mark_write":
                yield "marker", record["body"]

    marker_in = lambda kind, body: MARKER.match(body) if kind == "marker" else None  # noqa: E731
    return Counter(i for i, kind, _ in in_commit_windows(records(), marker_in) if kind == "sync")


def truth(run: Path) -> tuple[dict[int, Counter], Counter]:
    s = summary(run)
    trace = run / "trace.txt"
    return tally_block_per_commit(trace, s["config"]["lab"]["dev"].replace(":", ",")), fsyncs_per_commit(
        trace, s["config"]["tid"]
    )


def test_the_kernel_mounted_without_barriers_and_no_flush_reached_the_device(runs):
    assert "nobarrier" in summary(runs["nobarrier"])["config"]["mount_options"].split(",")
    assert "nobarrier" not in summary(runs["durable"])["config"]["mount_options"].split(",")
    for name, flushes_expected in (("durable", True), ("nobarrier", False)):
        block, fsyncs = truth(runs[name])
        measured = range(2, 22)  # after the 2 warm-up commits
        assert all(fsyncs[i] > 0 for i in measured), (name, fsyncs)
        assert all((block.get(i, Counter())["flush"] > 0) == flushes_expected for i in measured), (name, block)


def test_the_run_finds_it_for_every_commit(runs):
    found = {f["check"]: f for f in summary(runs["nobarrier"])["findings"]}
    assert found["fsync_flushed_nothing"]["commits"] == 20
    assert "fsync_flushed_nothing" not in {f["check"] for f in summary(runs["durable"])["findings"]}


def test_the_report_says_durability_was_lost(runs, tmp_path):
    pages = {}
    for name, run in runs.items():
        sqlwa("report", str(run), "-o", str(tmp_path / f"{name}.html"))
        pages[name] = (tmp_path / f"{name}.html").read_text()
    assert "Durability lost." in pages["nobarrier"] and "Durability lost." not in pages["durable"]
    assert "<code>fsync_flushed_nothing</code> in 20 of 20 commits (100%)" in pages["nobarrier"]
    assert "nobarrier" in pages["nobarrier"]
    assert "every fsync reached the device as a cache flush" in pages["durable"]


def test_the_example_policy_fails_the_run_without_barriers(runs):
    policy = str(REPO / "examples" / "policy.toml")
    assert sqlwa("check", "-p", policy, str(runs["durable"]), check=False).returncode == 0
    proc = sqlwa("check", "-p", policy, str(runs["nobarrier"]), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = proc.stdout.splitlines()
    assert line.startswith(
        "FAIL mobibench-insert ext4 delete/full: forbid_findings fsync_flushed_nothing: 20 of 20 commits (100%): "
        "fsync returned without any cache flush reaching the device"
    )
    assert line.endswith("[rule: durable commits]")


def test_compare_marks_fewer_flushes_as_durability_lost(runs):
    proc = sqlwa("compare", str(runs["durable"]), str(runs["nobarrier"]))
    flushes = next(line for line in proc.stdout.splitlines() if "flushes_per_commit" in line)
    assert "durability lost" in flushes
    durability = next(line for line in proc.stdout.splitlines() if re.search(r"│ durability +│", line))
    assert "kept" in durability and "lost: fsync_flushed_nothing 100%" in durability and "LOST" in durability
    back = sqlwa("compare", str(runs["nobarrier"]), str(runs["durable"]))
    assert "regained" in back.stdout and "durability lost" not in back.stdout
