"""``--device-delay MS`` in the VM lab: dm-delay between the loop device and ext4 holds
every write and cache flush MS ms. Against independent truth:

- the kernel's own table (``dmsetup table`` in the guest, recorded as it printed it) is a
  delay target over the run's loop device, reads undelayed, writes and flushes MS ms;
- the commits' latency, read from the engine's markers in the raw trace (tests/trace_truth.py,
  no sqlwa code), rises by about MS ms per cache flush a commit waits for: at least that
  per flush (each waits for the one before it), at most MS ms per request of the commit,
  with room for TCG's noise;
- what the disk is sent is unchanged: the same per-commit fsyncs, bytes and flushes as a
  run through the same dm layer without delay (``--device-delay 0``); block writes, bytes
  and flushes each equal to a tally of its own raw trace; and attribution keeps every
  byte's cause though the kernel records no remap for a delayed bio.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import polars as pl
import pytest

from helpers import DIRECTORY_SYNCS, VFS_SYNCS
from sqlwa.analysis import schema
from trace_truth import marker_times_ns, tally_block_per_commit
from vm_guest import vm_runs

pytestmark = [pytest.mark.vm, pytest.mark.slow]

DELAY_MS = 10
COMMITS = 20


@pytest.fixture(scope="module")
def delay_runs(tmp_path_factory) -> dict[int, Path]:
    """WAL/FULL on ext4 over dm-delay, with no delay and with DELAY_MS, in one guest (a
    fresh lab each: tests/vm_guest.py)."""
    args = ["--vm", "--image-size", "64M", "-j", "wal", "--sync", "full", "-n", str(COMMITS)]
    runs = {delay: ("run", [*args, "--device-delay", str(delay)]) for delay in (0, DELAY_MS)}
    return vm_runs(tmp_path_factory.mktemp("vm-delay"), runs)


def config_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())["config"]


def disk_of(out: Path) -> str:
    return config_of(out)["lab"]["dev"].replace(":", ",")


def measured(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "commits.parquet").filter(~pl.col("warmup"))


def latencies_ms(out: Path) -> list[float]:
    """Each measured commit's latency from its txn_begin/txn_end markers in the raw trace."""
    marks = marker_times_ns(out / "trace.txt")
    return [(marks["txn_end", i] - marks["txn_begin", i]) / 1e6 for i in measured(out)["index"]]


@pytest.mark.parametrize("delay", [0, DELAY_MS])
def test_the_kernels_table_is_a_delay_target_over_the_runs_loop_device(delay_runs, delay):
    config = config_of(delay_runs[delay])
    assert config["device_delay_ms"] == delay
    fields = config["lab"]["delay"]["table"].split()
    loop = config["lab"]["dev"]
    # <start> <length> delay  <read dev> <offset> <ms>  <write dev> <offset> <ms>  <flush dev> <offset> <ms>
    assert fields[2] == "delay" and int(fields[1]) == 64 << 11  # the whole 64 MiB image, in sectors
    assert fields[3:] == [loop, "0", "0", loop, "0", str(delay), loop, "0", str(delay)]
    assert config["lab"]["fs_device"].startswith("/dev/mapper/sqlwa-lab-")


def test_the_disk_is_sent_the_same_whatever_the_delay(delay_runs):
    """Each run's figures equal a tally of its own raw trace; between the two, SQLite's
    WAL bytes and the flushes are the same commit by commit. ext4's journal may log a
    block more or less per commit (jbd2 closes a transaction with whatever metadata is
    dirty by then, and a slower device changes when that is), and the requests may be
    more: dm-delay's worker submits the bios it held one by one, and the disk's queue no
    longer merges them (as under dm-crypt)."""
    per_run = {}
    for delay, out in delay_runs.items():
        commits = measured(out)
        truth = tally_block_per_commit(out / "trace.txt", disk_of(out))
        got = [(r["write_requests"], r["write_bytes"], r["flush_requests"]) for r in commits.iter_rows(named=True)]
        assert got == [(truth[i]["writes"], truth[i]["bytes"], truth[i]["flush"]) for i in commits["index"]]
        assert commits["fsync_calls"].to_list() == [VFS_SYNCS["wal"] + DIRECTORY_SYNCS["wal"]] * COMMITS
        per_run[delay] = commits.select("bytes_wal", "flush_requests", "bytes_fs_journal").rows()
    for (wal, flushes, journal), (wal_slow, flushes_slow, journal_slow) in zip(per_run[0], per_run[DELAY_MS]):
        assert (wal, flushes) == (wal_slow, flushes_slow)
        assert abs(journal - journal_slow) <= 2 * 4096


def test_each_commit_waits_about_the_delay_per_flush(delay_runs):
    fast, slow = (statistics.median(latencies_ms(delay_runs[d])) for d in (0, DELAY_MS))
    commits = measured(delay_runs[DELAY_MS])
    flushes = commits["flush_requests"].mean()
    requests = flushes + commits["write_requests"].mean()
    rise = slow - fast
    assert flushes >= 1
    assert 0.9 * flushes * DELAY_MS <= rise <= 1.5 * requests * DELAY_MS + 10, (fast, slow, flushes, requests)


def test_attribution_follows_delayed_writes_by_the_tables_offset(delay_runs):
    """dm-delay hands a delayed bio to a worker and the kernel records no remap for it:
    writes are followed by the table's offset (0), their submitters are still the threads
    that wrote to the filesystem, and almost no byte is left without a cause."""
    summary = json.loads((delay_runs[DELAY_MS] / "summary.json").read_text())
    assert summary["remap"]["followed_by"] == "table offset" and summary["remap"]["table_offset_sectors"] == 0
    assert summary["bytes_by_category"]["unattributed_share"] <= 0.05, summary["bytes_by_category"]
    writes = pl.read_parquet(delay_runs[DELAY_MS] / "writes.parquet")
    assert (writes["disk_sector"] == writes["sector"]).all()
    assert any(s.startswith("jbd2/dm-") for s in writes["submitter"].to_list())


def test_both_runs_are_of_the_summary_schema(delay_runs) -> None:
    """dm-delay's config.lab.delay and remap, config.vm."""
    for delay, out in delay_runs.items():
        assert schema.check_summary(json.loads((out / "summary.json").read_text())) == [], delay
