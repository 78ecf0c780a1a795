"""The published claims about SQLite commit cost, checked as measured on this machine.

- On ext4, a rollback-journal (DELETE) commit with synchronous=FULL costs about four
  fsyncs and tens of KiB of block writes for one 100-byte row.
- WAL mode needs less than half the block write requests of DELETE mode per commit.
  Measured on ext4 this holds only part of the time: WAL takes 3 requests per commit
  (the WAL frame, jbd2's descriptor+metadata, jbd2's commit block); DELETE takes 5 while
  the database's pages are contiguous (one merged db write) and 7 once the table's new
  leaf pages are not (three db writes). The ratio is 0.6 on a short run and falls below
  0.5 on longer ones. Bytes halve (33 vs 66 KiB per commit), except in runs where ext4's
  journal carries one more metadata block in every commit (37 KiB: 0.56 of DELETE's; seen
  in a loaded CI run and in the first of three runs in a row, timing-dependent). The test
  checks what holds throughout: WAL needs at most 3 requests, and at most 60% of DELETE's
  requests and bytes (see docs/findings.md, Where the bytes go).
- Attribution: on every built-in scenario on ext4, xfs and btrfs the bytes left
  unattributed stay at or below 5%, and the categories add up to the block bytes.
- In every sync mode (OFF and NORMAL too, where SQLite leaves the writing to writeback)
  no byte is left unattributed on ext4, xfs and btrfs, counted independently from the
  raw trace (tests/trace_truth.py) and by the analyzer alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from sqlwa.analysis import attribution
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine, runner
from sqlwa.measure.request import Output
from trace_truth import unattributed_write_bytes

pytestmark = pytest.mark.root

KIB = 1024


def lab_run(
    tmp_path: Path, fs: str, journal: str, scenario: str = "mobibench-insert-2013", txns: int = 30, sync: str = "full"
):
    request = runner.RunRequest(
        scenario=scenario,
        settings=engine.RunSettings(journal=journal, sync=sync, length=engine.Length(txns=txns, warmup=3)),
        output=Output(out_dir=tmp_path / f"{fs}-{journal}-{sync}-{scenario}"),
        stack=StackSpec.from_flat(fs=fs),
    )
    outcome = runner.execute(request)
    return outcome.summary, outcome.commits


def test_ext4_delete_full_costs_four_fsyncs_and_tens_of_kib(tmp_path):
    summary, _ = lab_run(tmp_path, "ext4", "delete")
    pc = summary["per_commit"]
    assert pc["logical_bytes"] == 100
    assert pc["fsync_calls"] == pytest.approx(4, abs=0.1)
    assert 10 * KIB <= pc["write_bytes"] <= 100 * KIB, pc
    by_cat = summary["bytes_by_category"]["per_commit"]
    # the journal's content and header, the database's pages, and ext4's own journal
    assert by_cat["journal"] > 0 and by_cat["db"] > 0 and by_cat["fs_journal"] > 0


def test_wal_needs_fewer_write_requests_than_delete(tmp_path):
    delete, _ = lab_run(tmp_path, "ext4", "delete", txns=100)
    wal, _ = lab_run(tmp_path, "ext4", "wal", txns=100)
    ratio = wal["per_commit"]["write_requests"] / delete["per_commit"]["write_requests"]
    assert wal["per_commit"]["write_requests"] <= 3.05, wal["per_commit"]
    assert ratio <= 0.6, (wal["per_commit"], delete["per_commit"])
    assert wal["per_commit"]["write_bytes"] <= 0.6 * delete["per_commit"]["write_bytes"], (
        wal["per_commit"],
        delete["per_commit"],
    )


SCENARIOS = [name for name, _ in engine.builtin_scenarios()]


@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_unattributed_share_stays_small(tmp_path, fs, journal, scenario):
    summary, commits = lab_run(tmp_path, fs, journal, scenario, txns=8)
    cats = summary["bytes_by_category"]
    assert cats["unattributed_share"] <= 0.05, cats
    assert sum(cats["amortized_total"].values()) == summary["amortized"]["write_bytes"]
    columns = attribution.category_columns()
    assert commits.filter(pl.sum_horizontal(columns) != pl.col("write_bytes")).height == 0


@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize("sync", ["off", "normal", "full"])
def test_nothing_is_unattributed_in_any_sync_mode(tmp_path, fs, journal, sync):
    # synchronous=OFF leaves the database's data to writeback: in delayed allocation at
    # the engine's last mapping, it reaches the device only at the final syncfs
    summary, _ = lab_run(tmp_path, fs, journal, "mobibench-insert", txns=20, sync=sync)
    run_dir = tmp_path / f"{fs}-{journal}-{sync}-mobibench-insert"
    layout = json.loads((run_dir / "layout.json").read_text())
    dev = summary["config"]["lab"]["dev"].replace(":", ",")
    truth = unattributed_write_bytes(run_dir / "trace.txt", dev, layout)
    cats = summary["bytes_by_category"]
    assert cats["amortized_total"]["unattributed"] == truth, cats
    assert truth == 0, (truth, cats)
