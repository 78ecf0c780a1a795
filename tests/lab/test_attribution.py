"""Block attribution against the filesystem's own account of where the files live.

Truth is built here, independently of the engine's extents markers: the test runs the
engine inside a lab filesystem and a capture with journal_mode=PERSIST (so the journal
file survives the commit) and asks ``filefrag -e -v`` (e2fsprogs, FIEMAP from another
program) where the database and the journal are, before the filesystem is unmounted.
Every write inside a commit window that lands in the database's blocks must be
categorised ``db``, in the journal's blocks ``journal``. The pure rules are checked on a
synthetic event table without root.
"""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

import polars as pl
import pytest

from helpers import filefrag_sectors
from sqlwa import _system
from sqlwa.analysis import attribution, traceparse, windows
from sqlwa.capture import tracing
from sqlwa.lab import filesystem, fslayout
from sqlwa.lab.layers import FillLayer
from sqlwa.measure import engine


def btrfs_device_ranges(ranges: list[tuple[int, int]], device: str) -> list[tuple[int, int]]:
    """filefrag on btrfs prints btrfs logical addresses; btrfs-map-logical (btrfs-progs,
    reading the chunk tree itself) says where each one is on the device."""
    out = []
    for start, end in ranges:
        text = subprocess.run(
            ["btrfs-map-logical", "-l", str(start * 512), device], capture_output=True, text=True, check=True
        ).stdout
        physical = int(re.search(r"physical (\d+)", text).group(1)) // 512
        out.append((physical, physical + end - start))
    return out


def lab_truth_run(fs_name: str, out: Path, journal: str = "persist"):
    """Run 12 commits; return (events, layout, {file: ranges from filefrag}, tid, dev).
    btrfs is filled to 10% first so the files land in a data chunk that does not map
    1:1 (the first one, on a fresh filesystem, happens to)."""
    fill = 10 if fs_name == "btrfs" else 0
    with filesystem.LabFilesystem(fs_name, filesystem.LabOptions(image_size="1G"), [FillLayer(fill)]) as fs:
        dev = fs.dev
        cap = tracing.TraceCapture(out, dev=dev, pid=threading.get_native_id())
        settings = engine.RunSettings(
            journal=journal,
            sync="full",
            length=engine.Length(txns=10, warmup=2),
            instruments=engine.Instruments(map_extents=True),
        )
        with cap:
            result = engine.run_workload(
                engine.load_scenario("mobibench-insert"),
                settings,
                Path(fs.mountpoint),
                marker_path=Path(cap.marker_path),
            )
            _system.mounts.syncfs(fs.mountpoint)
        db = Path(result.info["db_path"])
        truth = {"db": filefrag_sectors(db), "journal": filefrag_sectors(Path(f"{db}-journal"))}
        if fs_name == "btrfs":
            logical = truth
            truth = {file: btrfs_device_ranges(r, fs.loop_device) for file, r in logical.items()}
            assert truth != logical, "the fill should have put the files in a chunk that is not 1:1"
        layout = fslayout.probe(fs.spec.kernel_type, fs.loop_device)
    events, _ = traceparse.parse(cap.trace_path, format="ftrace")
    return events, layout, truth, windows.run_tid(events), dev


def in_ranges(ranges: list[tuple[int, int]]) -> pl.Expr:
    return pl.any_horizontal([(pl.col("sector") >= a) & (pl.col("sector") < b) for a, b in ranges])


@pytest.mark.root
@pytest.mark.root
@pytest.mark.parametrize("fs_name", ["ext4", "xfs", "btrfs"], ids=lambda f: f)
def test_commit_writes_to_file_blocks_get_the_files_category(fs_name, tmp_path):
    events, layout, truth, tid, dev = lab_truth_run(fs_name, tmp_path)
    wins = windows.commit_windows(events)
    attributed = attribution.attribute(events, wins, dev, tid, "persist", fs_name, layout)
    in_commits = attributed.filter(pl.col("commit").is_not_null() & (pl.col("commit") >= 2))
    # btrfs copies on write: the blocks filefrag finds at the end are only the last
    # commit's; ext4 and xfs overwrite in place, so every measured commit writes there
    least = 1 if fs_name == "btrfs" else 10
    for file, ranges in truth.items():
        hits = in_commits.filter(in_ranges(ranges))
        assert hits.height >= least, f"{file}: expected writes to its blocks"
        assert hits["category"].cast(pl.String).unique().to_list() == [file], hits
    # in place (ext4, xfs): nothing else is called db or journal (on btrfs the earlier
    # commits' copies lie elsewhere and are rightly db/journal too)
    if fs_name != "btrfs":
        others = in_commits.filter(~in_ranges(truth["db"] + truth["journal"]))
        assert not others["category"].cast(pl.String).is_in(["db", "journal"]).any(), others
    # every byte has exactly one category
    total = int(attributed["bytes"].sum())
    assert sum(attribution.totals(attributed).values()) == total
    assert attribution.totals(attributed)["unattributed"] <= 0.05 * total


# ----------------------------------------------------------------------------- rules, no root


def synthetic_events(rows: list[dict]) -> pl.DataFrame:
    """A minimal event table in traceparse's column layout (only what attribution reads)."""
    base = {
        "kind": "block",
        "dev_major": 7,
        "dev_minor": 0,
        "pid": 100,
        "comm": "python",
        "action": "D",
        "operation": "write",
        "sector": 0,
        "sectors": 8,
        "bytes": 4096,
        "meta": False,
        "preflush": False,
        "fua": False,
        "name": "",
        "text": "",
    }
    frame = pl.DataFrame([{**base, **r} for r in rows])
    return frame.with_columns(pl.col("time_ns").cast(pl.UInt64), pl.col("sector").cast(pl.UInt64))


def marker(t: int, text: str) -> dict:
    return {
        "kind": "marker",
        "time_ns": t,
        "name": text.split()[1],
        "text": text,
        "dev_major": 0,
        "action": "",
        "operation": "none",
    }


def test_rules_on_synthetic_trace():
    events = synthetic_events(
        [
            marker(1, "sqlwa run_begin pid=100 tid=100 t=1"),
            marker(10, "sqlwa txn_begin i=0 warmup=0 t=10"),
            marker(11, "sqlwa sync_begin i=0 kind=journal flags=normal t=11"),
            {"time_ns": 12, "sector": 1000},  # journal block
            {"time_ns": 13, "sector": 5000, "pid": 7, "comm": "jbd2/loop0-8", "meta": True},  # fs journal region
            marker(14, "sqlwa sync_end i=0 kind=journal rc=0 t=14"),
            marker(15, "sqlwa extents i=0 kind=journal at=sync ranges=1000+16 t=15"),
            marker(16, "sqlwa sync_begin i=0 kind=db flags=normal t=16"),
            {"time_ns": 17, "sector": 2000},  # db block
            {"time_ns": 18, "sector": 9000, "meta": True},  # other metadata
            {"time_ns": 19, "sector": 7000},  # nobody's block
            marker(20, "sqlwa sync_end i=0 kind=db rc=0 t=20"),
            marker(21, "sqlwa extents i=0 kind=db at=sync ranges=2000+8 t=21"),
            marker(22, "sqlwa txn_end i=0 t=22"),
            {"time_ns": 30, "sector": 2000, "pid": 9, "comm": "kworker/u8:1"},  # db, deferred
            # later the journal's freed block belongs to the db: nearest marker in time wins
            marker(40, "sqlwa txn_begin i=1 warmup=0 t=40"),
            marker(41, "sqlwa sync_begin i=1 kind=db flags=normal t=41"),
            {"time_ns": 42, "sector": 1000},
            marker(43, "sqlwa sync_end i=1 kind=db rc=0 t=43"),
            marker(44, "sqlwa extents i=1 kind=db at=sync ranges=1000+8,2000+8 t=44"),
            marker(45, "sqlwa txn_end i=1 t=45"),
        ]
    )
    wins = windows.commit_windows(events)
    layout = {"fs_journal": [[5000, 100]], "fs_metadata": [], "chunks": []}
    got = attribution.attribute(events, wins, (7, 0), 100, "delete", "ext4", layout)
    assert got.select("time_ns", pl.col("category").cast(pl.String)).rows() == [
        (12, "journal"),
        (13, "fs_journal"),
        (17, "db"),
        (18, "fs_metadata"),
        (19, "unattributed"),
        (30, "writeback"),
        (42, "db"),
    ]
    per_commit = attribution.bytes_per_commit(got, wins)
    assert per_commit.filter(pl.col("index") == 0)["bytes_unattributed"].item() == 4096
    # WAL mode: database pages are checkpoint writes
    wal = attribution.attribute(events, wins, (7, 0), 100, "wal", "ext4", layout)
    assert wal.filter(pl.col("time_ns") == 17)["category"].cast(pl.String).item() == "checkpoint"


def test_a_sector_past_the_signed_range_lies_in_no_range():
    # The kernel gives (sector_t)-1 to requests without a position; as a write's sector it
    # failed the Int64 cast the ranges are compared in, and so the whole attribution.
    events = synthetic_events(
        [
            marker(10, "sqlwa txn_begin i=0 warmup=0 t=10"),
            {"time_ns": 12, "sector": 2**64 - 1},
            {"time_ns": 13, "sector": 1000},
            marker(15, "sqlwa extents i=0 kind=journal at=sync ranges=1000+16 t=15"),
            marker(22, "sqlwa txn_end i=0 t=22"),
        ]
    )
    layout = {"fs_journal": [[5000, 100]], "fs_metadata": [[0, 64]], "chunks": []}
    got = attribution.attribute(events, windows.commit_windows(events), (7, 0), 100, "delete", "ext4", layout)
    assert got.select("time_ns", pl.col("category").cast(pl.String)).rows() == [(12, "unattributed"), (13, "journal")]


def test_btrfs_extents_are_translated_through_the_chunk_map():
    ranges = pl.DataFrame(
        {"mark_ns": [1, 2], "file": ["db", "wal"], "start": [26624 + 8, 90000], "end": [26624 + 16, 90008]}
    )
    chunks = [
        [26624, 16384, "DATA|single", [26624]],
        [86016, 16384, "DATA|single", [300000]],
        [59392, 104832, "METADATA|DUP", [75776, 180608]],
    ]
    moved = attribution.translate_chunks(ranges, chunks).sort("mark_ns")
    assert moved["start"].to_list() == [26632, 90000 - 86016 + 300000]
    assert moved["end"].to_list() == [26640, 90008 - 86016 + 300000]
