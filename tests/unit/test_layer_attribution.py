"""Attribution through the VM lab's layers, on small hand-written ftrace captures (lines
as the guest's 6.1 kernel prints them) whose right answers are worked out here:

- dm-crypt: a write on the disk (the loop device) is followed back through its
  ``block_bio_remap`` to the dm sector the filesystem wrote, where the extents and the
  layout are, and to the thread that queued it on the dm device (not dm-crypt's writer);
- eCryptfs: a write no extents marker owns is the file the SQL thread was syncing, when
  the SQL thread submitted it inside that xSync and it is not the filesystem's own.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from sqlwa.analysis import attribution, remap, traceparse, windows

TID = 121
DISK, MAPPED = (7, 0), (254, 0)
LUKS_OFFSET = 32768  # sectors: LUKS2's 16 MiB header


def line(task: str, pid: int, ts: float, body: str) -> str:
    return f"{task:>16}-{pid:<6} [000] ..... {ts:12.6f}: {body}"


def mark(ts: float, text: str) -> str:
    return line("python", TID, ts, f"tracing_mark_write: sqlwa {text} t={int(ts * 1e9)}")


def queue(task: str, pid: int, ts: float, dev: str, rwbs: str, sector: int, sectors: int) -> str:
    return line(task, pid, ts, f"block_bio_queue: {dev} {rwbs} {sector} + {sectors} [{task}]")


def issue(task: str, pid: int, ts: float, rwbs: str, sector: int, sectors: int) -> str:
    return line(task, pid, ts, f"block_rq_issue: 7,0 {rwbs} {sectors * 512} () {sector} + {sectors} [{task}]")


def through_dm_crypt(task: str, pid: int, ts: float, rwbs: str, dm_sector: int, sectors: int) -> list[str]:
    """A bio queued on the dm device by ``task``, re-submitted on the disk by dm-crypt's writer."""
    disk = dm_sector + LUKS_OFFSET
    writer = ("dmcrypt_write/2", 196)
    return [
        queue(task, pid, ts, "254,0", rwbs, dm_sector, sectors),
        line(*writer, ts + 0.0001, f"block_bio_remap: 7,0 {rwbs} {disk} + {sectors} <- (254,0) {dm_sector}"),
        queue(*writer, ts + 0.0002, "7,0", rwbs, disk, sectors),
        issue(*writer, ts + 0.0003, rwbs, disk, sectors),
    ]


def analyse(tmp_path: Path, lines: list[str], layout: dict, **layers) -> pl.DataFrame:
    trace = tmp_path / "trace.txt"
    trace.write_text("\n".join(lines) + "\n")
    events, report = traceparse.parse(trace, format="ftrace")
    assert report["bad_records"] == 0
    wins = windows.commit_windows(events)
    return attribution.attribute(events, wins, DISK, TID, "wal", "ext4", layout, **layers)


def dm_crypt_trace() -> list[str]:
    return [
        mark(1.0, f"run_begin pid={TID} tid={TID}"),
        mark(1.1, "txn_begin i=0 warmup=0"),
        mark(1.2, "sync_begin i=0 kind=wal flags=normal"),
        *through_dm_crypt("python", TID, 1.3, "WS", 31424, 8),  # the WAL's data
        *through_dm_crypt("jbd2/dm-0-8", 202, 1.4, "WSM", 15968, 8),  # ext4's journal
        issue("kworker/0:1", 40, 1.45, "WS", 900_000, 8),  # on the disk, but never remapped from the dm device
        mark(1.5, "sync_end i=0 kind=wal rc=0"),
        mark(1.51, "extents i=0 kind=wal at=sync ranges=31424+32"),
        mark(1.6, "txn_end i=0"),
    ]


def test_a_dm_crypt_write_keeps_its_file_journal_and_submitter_on_the_disk(tmp_path):
    layout = {"fs_journal": [[15968, 64]], "fs_metadata": []}
    writes = analyse(tmp_path, dm_crypt_trace(), layout, mapped=MAPPED)
    rows = {row["disk_sector"]: row for row in writes.iter_rows(named=True)}
    wal, journal, stray = rows[31424 + LUKS_OFFSET], rows[15968 + LUKS_OFFSET], rows[900_000]
    assert (wal["sector"], wal["file"], wal["category"], wal["submitter"]) == (31424, "wal", "wal", "python")
    assert (journal["sector"], journal["category"], journal["submitter"]) == (15968, "fs_journal", "jbd2/dm-0-8")
    assert stray["sector"] is None and stray["category"] == "unattributed"  # no offset is assumed


def test_without_following_the_remap_the_same_writes_lose_their_cause(tmp_path):
    """The check above can fail: read in disk sectors, the dm sectors of the extents and
    the layout match nothing (ext4's journal is left with its META flag), and dm-crypt's
    writer is all one sees."""
    layout = {"fs_journal": [[15968, 64]], "fs_metadata": []}
    writes = analyse(tmp_path, dm_crypt_trace(), layout)
    category = dict(zip(writes["sector"], writes["category"].cast(pl.String)))
    assert category == {
        31424 + LUKS_OFFSET: "unattributed",
        15968 + LUKS_OFFSET: "fs_metadata",
        900_000: "unattributed",
    }
    assert set(writes["submitter"]) <= {"dmcrypt_write/2", "kworker/0:1"}


def test_the_disk_offset_is_read_from_the_remaps(tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text("\n".join(dm_crypt_trace()) + "\n")
    events, _ = traceparse.parse(trace, format="ftrace")
    assert remap.disk_offsets(events, DISK, MAPPED) == [LUKS_OFFSET]


def test_a_request_split_off_a_remapped_bio_keeps_its_cause(tmp_path):
    """The disk's queue splits a large remapped bio into requests (seen in a checkpoint:
    1096 sectors became 1024 + 72); the second starts where no remap does, 1024 sectors
    into the bio, and is followed back to the dm sector 1024 sectors into its origin."""
    dm_start, disk_start = 26800, 26800 + LUKS_OFFSET
    writer = ("dmcrypt_write/2", 196)
    lines = [
        mark(1.0, f"run_begin pid={TID} tid={TID}"),
        mark(1.1, "txn_begin i=0 warmup=0"),
        mark(1.2, "sync_begin i=0 kind=db flags=normal"),
        queue("python", TID, 1.3, "254,0", "WS", dm_start, 1096),
        line(*writer, 1.31, f"block_bio_remap: 7,0 WS {disk_start} + 1096 <- (254,0) {dm_start}"),
        queue(*writer, 1.32, "7,0", "WS", disk_start, 1096),
        issue(*writer, 1.33, "WS", disk_start, 1024),
        issue(*writer, 1.34, "WS", disk_start + 1024, 72),
        mark(1.5, "sync_end i=0 kind=db rc=0"),
        mark(1.51, f"extents i=0 kind=db at=sync ranges={dm_start}+2048"),
        mark(1.6, "txn_end i=0"),
    ]
    writes = analyse(tmp_path, lines, {"fs_journal": [], "fs_metadata": []}, mapped=MAPPED)
    assert writes.select("disk_sector", "sector", "submitter").rows() == [
        (disk_start, dm_start, "python"),
        (disk_start + 1024, dm_start + 1024, "python"),
    ]
    assert writes["category"].cast(pl.String).to_list() == ["checkpoint", "checkpoint"]  # WAL mode: db pages


def plain(task: str, pid: int, ts: float, rwbs: str, sector: int, sectors: int) -> list[str]:
    return [queue(task, pid, ts, "7,0", rwbs, sector, sectors), issue(task, pid, ts + 0.0001, rwbs, sector, sectors)]


def test_an_ecryptfs_write_belongs_to_the_file_the_sql_thread_was_syncing(tmp_path):
    lines = [
        mark(1.0, f"run_begin pid={TID} tid={TID}"),
        mark(1.1, "txn_begin i=0 warmup=0"),
        mark(1.2, "sync_begin i=0 kind=journal flags=normal"),
        *plain("python", TID, 1.21, "WS", 5000, 24),  # the lower journal's header and pages
        *plain("python", TID, 1.22, "WSM", 6000, 8),  # metadata, even from the SQL thread
        *plain("jbd2/loop0-8", 300, 1.23, "WS", 7000, 8),  # ext4's journal thread
        *plain("python", TID, 1.24, "WS", 64, 8),  # in the fs's metadata region
        mark(1.3, "sync_end i=0 kind=journal rc=0"),
        mark(1.31, "extents i=0 kind=journal at=sync ranges=error:95"),
        *plain("python", TID, 1.4, "WS", 8000, 8),  # outside every xSync
        mark(1.5, "txn_end i=0"),
    ]
    layout = {"fs_journal": [], "fs_metadata": [[0, 128]]}
    writes = analyse(tmp_path, lines, layout, files_by_sync=True)
    category = dict(zip(writes["sector"], writes["category"].cast(pl.String)))
    assert category == {
        5000: "journal",
        6000: "fs_metadata",
        7000: "unattributed",
        64: "fs_metadata",
        8000: "unattributed",
    }
    plain_run = analyse(tmp_path, lines, layout)
    assert plain_run.filter(pl.col("sector") == 5000)["category"].cast(pl.String).to_list() == ["unattributed"]


@pytest.mark.parametrize("run", ["ext4-wal", "ext4-delete"])
def test_writes_matched_to_files_in_slices_get_the_files_of_one_match(run, monkeypatch):
    # The recorded runs' writes matched to their files' extents a few at a time (slices
    # of 7) and all at once: the same file, submitter and category for every write.
    import json

    from polars.testing import assert_frame_equal

    run_dir = Path(__file__).resolve().parents[2] / "traces" / "samples" / "sqlwa-runs" / run
    summary = json.loads((run_dir / "summary.json").read_text())
    layout = json.loads((run_dir / "layout.json").read_text())
    events, _ = traceparse.parse(run_dir / "trace.txt", format="ftrace")
    wins = windows.commit_windows(events)
    args = (events, wins, windows.busiest_device(events), windows.run_tid(events))
    config = (summary["config"]["journal"], summary["config"]["fs"], layout)
    whole = attribution.attribute(*args, *config)
    monkeypatch.setattr(attribution, "WRITES_PER_MATCH", 7)
    sliced = attribution.attribute(*args, *config)
    assert whole["file"].is_not_null().sum() > 30
    assert_frame_equal(sliced, whole)
