"""Write amplification, frame-budget misses, checkpoint charging and the cross-layer
findings, on small hand-made tables whose right answers are worked out here."""

from __future__ import annotations

import polars as pl
import pytest

from sqlwa.analysis import metrics
from sqlwa.catalogue import DURABILITY_FINDINGS, FINDINGS


def commits(**cols) -> pl.DataFrame:
    n = len(next(iter(cols.values())))
    base = {
        "index": list(range(n)),
        "warmup": [False] * n,
        "start_ns": [i * 100 for i in range(n)],
        "logical_bytes": [100] * n,
        "vfs_write_bytes": [8000] * n,
        "write_bytes": [32000] * n,
        "latency_ns": [1_000_000] * n,
        "vfs_sync_calls": [1] * n,
        "fsync_calls": [1] * n,
        "flush_requests": [2] * n,
        "vfs_journal_open_calls": [0] * n,
        "vfs_wal_open_calls": [0] * n,
        "vfs_journal_delete_calls": [0] * n,
    }
    return pl.DataFrame({**base, **cols})


def test_waf_per_commit_and_per_run_are_ratios_of_sums():
    c = metrics.with_waf(commits(logical_bytes=[100, 0], vfs_write_bytes=[8000, 4000], write_bytes=[32000, 4000]))
    assert c["waf_vfs_over_logical"].to_list() == [80.0, None]  # no payload: no ratio, not infinity
    assert c["waf_block_over_vfs"].to_list() == [4.0, 1.0]
    run = metrics.run_waf(c, amortized_bytes=72000)
    # the block ratios are of the bytes the run reports (amortized), and say so
    assert run["block_bytes"] == "amortized"
    assert run["vfs_over_logical"] == 120.0 and run["block_over_vfs"] == 6.0 and run["block_over_logical"] == 720.0
    assert run["in_window_block_over_vfs"] == 3.0 and run["in_window_block_over_logical"] == 360.0
    assert run["amortized_block_over_logical"] == 720.0
    in_window_only = metrics.run_waf(c)  # a trace without the amortized tally: in-window, labelled
    assert in_window_only["block_bytes"] == "in_window" and in_window_only["block_over_vfs"] == 3.0


def test_latency_quantiles_and_frame_budget():
    c = commits(latency_ns=[ms * 1_000_000 for ms in range(1, 101)])
    lat = metrics.latency_ms(c)
    assert lat["p50"] == pytest.approx(50.5) and lat["max"] == 100 and lat["p99.9"] == pytest.approx(99.901)
    misses = metrics.frame_budget_misses(c, 16.67)
    assert misses["commits"] == 84 and misses["share"] == pytest.approx(0.84)


def test_checkpoint_charged_to_its_commit_and_spread_over_the_covered_ones():
    c = commits(logical_bytes=[100] * 6)  # commits start at 0, 100, ..., 500
    found = pl.DataFrame({"time_ns": [250, 10_000], "commit": [2, -1], "bytes": [3000, 600]})
    out = metrics.with_checkpoint_columns(c, found).sort("index")
    assert out["checkpoint_bytes"].to_list() == [0, 0, 3000, 0, 0, 0]
    # commits 0-2 started before the first checkpoint; 3-5 are covered by the one at close
    assert out["checkpoint_spread_bytes"].to_list() == [1000.0, 1000.0, 1000.0, 200.0, 200.0, 200.0]
    summary = metrics.checkpoint_summary(found, out, "wal")
    assert summary["count"] == 2 and summary["in_commits"] == 1 and summary["commits_that_ran_one"] == [2]


def test_findings_list_disagreements_between_layers():
    c = commits(
        vfs_sync_calls=[3, 3, 3, 1, 0],
        fsync_calls=[4, 2, 4, 1, 0],
        flush_requests=[4, 4, 0, 2, 1],
        vfs_journal_open_calls=[1, 1, 1, 0, 0],
    )
    found = {f["check"]: f["examples"] for f in metrics.consistency_findings(c, "full")}
    assert found == {
        "xsync_without_fsync": [1],
        "fsync_flushed_nothing": [2],
        "flush_without_fsync": [4],
    }
    extra = commits(vfs_sync_calls=[2], fsync_calls=[4], flush_requests=[4], vfs_journal_open_calls=[1])
    assert [f["check"] for f in metrics.consistency_findings(extra, "full")] == ["fsync_without_xsync"]


def test_findings_are_named_in_the_catalogue_with_the_level_they_compare():
    # every check fires in one of these commits; without the block columns only the
    # syscall-level ones can
    c = commits(
        vfs_sync_calls=[3, 3, 1, 1, 0],
        fsync_calls=[2, 9, 1, 2, 0],
        flush_requests=[2, 2, 0, 1, 1],
    )
    names = {f["check"] for f in metrics.consistency_findings(c, "full")}
    assert names == set(FINDINGS)
    syscall_only = metrics.consistency_findings(c.drop("flush_requests", "write_bytes"), "full")
    assert {f["check"] for f in syscall_only} == {n for n, level in FINDINGS.items() if level == "syscall"}
    assert set(DURABILITY_FINDINGS) <= set(FINDINGS)
