"""The report's section of what is no commit (transactions that wrote nothing, the close
checkpoint): repeats added per configuration, absent for runs analysed before those
were reported, and a level a run did not measure shown as not measured."""

from __future__ import annotations

import json

import polars as pl

from sqlwa.views.report import OUTSIDE_COLUMNS, outside_commits, outside_table


def run(summary: dict, journal: str = "wal", status: str = "ok") -> dict:
    return {
        "scenario": "app",
        "fs": "ext4",
        "encrypt": "none",
        "fuse": "none",
        "profile": "none",
        "crypt": "none",
        "journal": journal,
        "sync": "full",
        "status": status,
        "summary_json": json.dumps(summary),
    }


def test_repeats_are_added_and_old_runs_left_out():
    vfs_only = {"wrote_nothing": {"transactions": 2}, "close": {"connections": 1, "vfs_sync_calls": 2}}
    lab = {
        **vfs_only,
        "close": {
            **vfs_only["close"],
            "syscalls": {"fsync_calls": 2},
            "block": {"write_requests": 3, "flush_requests": 2},
        },
    }
    runs = pl.DataFrame([run(vfs_only), run(lab), run(lab, status="failed"), run({"commits": 5}, journal="delete")])
    found = outside_commits(runs)
    assert list(found.values()) == [[4, 2, 4, 2, 3, 2]]  # the delete run predates them: left out
    assert [heading for heading, _, _ in OUTSIDE_COLUMNS][0] == "wrote nothing"
    only_vfs = outside_commits(pl.DataFrame([run(vfs_only)]))
    assert list(only_vfs.values()) == [[2, 1, 2, None, None, None]]
    html = outside_table(only_vfs)
    assert "app ext4 wal/full" in html and html.count('data-sort=""') == 3
