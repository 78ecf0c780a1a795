"""``sqlwa crash``'s default run is short (30 commits): in WAL mode it reaches no
checkpoint, and under synchronous=NORMAL SQLite syncs the WAL only at one
(https://www.sqlite.org/pragma.html#pragma_synchronous), so a power cut may lose every
commit. The output says so, and how long a run would reach one (#44, item 7); the
figures are checked against Python's sqlite3 in tests/e2e/test_wal_checkpoint_reach.py."""

from __future__ import annotations

import json

import pytest

from helpers import sqlwa

pytestmark = [pytest.mark.vm, pytest.mark.slow]


def test_a_wal_normal_crash_run_says_no_commit_ran_a_checkpoint(tmp_path):
    out = tmp_path / "c"
    proc = sqlwa("crash", "--vm", "-j", "wal", "--sync", "normal", "-o", str(out), timeout=900)
    durability = json.loads((out / "summary.json").read_text())["durability"]
    reach = durability["wal_checkpoint"]
    assert reach["reached"] is False and reach["sync"] == "normal"
    # what the states show agrees: some lost every commit SQLite had acknowledged
    assert durability["lost_commits"]["max"] == durability["acknowledged"]["commits"]
    said = " ".join(proc.stdout.split())
    assert "no commit ran a WAL checkpoint" in said
    assert "synchronous=NORMAL SQLite syncs the WAL only at a checkpoint" in said
    assert f"about -n {reach['txns_to_first']:,} reaches one" in said
