"""``sqlwa compare --by kernel``: the runs of one or two results split into two sides by the
kernel they ran on. Pure functions over hand-made runs frames: nothing is measured."""

from __future__ import annotations

import polars as pl
import pytest

from sqlwa.catalogue import CONFIG_KEYS
from sqlwa.errors import UsageError
from sqlwa.results import compare

CONFIG = {key: "none" for key in CONFIG_KEYS} | {"scenario": "s", "fs": "ext4", "journal": "wal", "sync": "full"}


def side(label: str, runs: list[tuple[str, str, str, float]]) -> compare.Side:
    """runs: (run_key, status, kernel, fsyncs per commit); each run has one commit of 1 ms per fsync."""
    frame = pl.DataFrame(
        [
            {**CONFIG, "run_key": key, "status": status, "kernel": kernel, "cell": "c", "levels": '["vfs"]',
             "commits": 1, "lost_events": 0, "run_dir": None, "fsync_calls_per_commit": fsyncs}
            for key, status, kernel, fsyncs in runs
        ]
    )  # fmt: skip
    latencies = pl.DataFrame(
        [{**CONFIG, "run_key": key, "latency_ns": int(fsyncs * 1e6)} for key, _, _, fsyncs in runs]
    )
    return compare.Side(label, frame, latencies)


def test_releases_sort_as_versions_not_as_text():
    releases = ["6.12.0-1-amd64", "5.10.0-30-amd64", "6.1.0-56-amd64", "6.1.0-9-amd64"]
    assert sorted(releases, key=compare.version_key) == [
        "5.10.0-30-amd64", "6.1.0-9-amd64", "6.1.0-56-amd64", "6.12.0-1-amd64"
    ]  # fmt: skip


def test_one_store_of_two_kernels_splits_into_them_the_older_first():
    store = side("m", [("r1", "ok", "6.18.44", 2.0), ("r2", "ok", "6.1.0-56-amd64", 1.0), ("r3", "failed", "5.4", 9)])
    a, b = compare.split_by([store], "kernel", None)
    assert (a.label, b.label) == ("m [kernel 6.1.0-56-amd64]", "m [kernel 6.18.44]")
    assert a.runs["run_key"].to_list() == ["r2"] and b.runs["run_key"].to_list() == ["r1"]
    rows = compare.compare(a.runs, b.runs, a.latencies, b.latencies)
    fsyncs = rows.filter(pl.col("metric") == "fsync_calls_per_commit").row(0, named=True)
    assert (fsyncs["a"], fsyncs["b"], fsyncs["delta"]) == (1.0, 2.0, 1.0)
    p50 = rows.filter(pl.col("metric") == "p50_ms").row(0, named=True)
    assert (p50["a"], p50["b"]) == (1.0, 2.0)  # each side's own commits, not the other's


def test_two_results_are_pooled_and_their_run_keys_kept_apart():
    """Two matrices name their cells alike: a run's latencies are matched within its own store."""
    old = side("m-old", [("cell/r1", "ok", "5.10.0-30-amd64", 3.0)])
    new = side("m-new", [("cell/r1", "ok", "6.1.0-56-amd64", 1.0)])
    a, b = compare.split_by([new, old], "kernel", None)
    assert a.latencies["latency_ns"].to_list() == [3_000_000]
    assert b.latencies["latency_ns"].to_list() == [1_000_000]
    assert a.label == "m-new + m-old [kernel 5.10.0-30-amd64]"


def test_named_kernels_are_taken_in_the_order_given():
    store = side("m", [("r1", "ok", "5.10", 1.0), ("r2", "ok", "6.1", 2.0), ("r3", "ok", "6.12", 3.0)])
    a, b = compare.split_by([store], *compare.parse_split("kernel=6.12,5.10"))
    assert (a.runs["run_key"].to_list(), b.runs["run_key"].to_list()) == (["r3"], ["r1"])


@pytest.mark.parametrize(
    ("runs", "option", "message"),
    [
        ([("r1", "ok", "6.1", 1.0)], "kernel", "m holds runs of 1 kernel (6.1); --by kernel compares two"),
        (
            [("r1", "ok", "5.10", 1.0), ("r2", "ok", "6.1", 1.0), ("r3", "ok", "6.12", 1.0)],
            "kernel",
            "m holds runs of 3 kernels (5.10, 6.1, 6.12); --by kernel compares two",
        ),
        (
            [("r1", "ok", "5.10", 1.0), ("r2", "ok", "6.1", 1.0)],
            "kernel=5.10,4.19",
            "no successful run of m ran on 4.19",
        ),
        ([("r1", "ok", "5.10", 1.0)], "kernel=5.10", "--by kernel=5.10: name two different kernels"),
        ([("r1", "ok", "5.10", 1.0)], "hostname", "--by hostname: results split only by kernel"),
    ],
)
def test_what_cannot_be_split_in_two_is_one_usage_error(runs, option, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare.split_by([side("m", runs)], *compare.parse_split(option))
