"""A real `sqlwa crash` of WAL/NORMAL (30 commits, MobiBench's 10 warm-up) says what its
first losing state lost in the user's terms, and its counts are the database's.

Independent truth: the first losing state's disk image rebuilt here from the kept write
log (every write before that state's flush interval, applied in log order on zeros: the
test's own replay), mounted (ext4 recovers its journal) and its database read with the
sqlite3 module: MobiBench inserts one row per table per commit, ids 0, 1, 2 ..., so the
commits it holds are its rows of tblMyList0 (and the schema's, when the table is there).
What had been acknowledged is counted from the log's marks (``sqlwa-setup``,
``sqlwa-txn-<i>``) before the state's flush.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from helpers import numbers_in, sqlwa
from sqlwa.durability import writelog

pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.root]

WARMUP, COMMITS = 10, 30  # mobibench-insert's warm-up, the measured commits asked for


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("crash-counts") / "wal-normal"
    args = ["crash", "--vm", "-j", "wal", "--sync", "normal", "-n", str(COMMITS), "--image-size", "64M"]
    printed = sqlwa(*args, "--keep-write-log", "--out", str(out), timeout=1800).stdout
    return out, printed


def in_interval(entry: writelog.Entry) -> bool:
    """A write a flush still has to make durable: plain writes and discards (a FUA write
    is durable where it stands; a flush or a mark ends the interval)."""
    return (entry.is_write or entry.is_discard) and not (entry.is_fua or entry.is_flush)


def durable_before(log: writelog.WriteLog, point: int) -> int:
    """The first entry of the flush interval ending at ``point``: everything earlier had
    reached the disk."""
    start = point
    while start > 0 and in_interval(log.entries[start - 1]):
        start -= 1
    return start


def image_before(log: writelog.WriteLog, start: int, size: int, image: Path) -> None:
    with open(image, "wb") as disk:
        disk.truncate(size)
        for entry in log.entries[:start]:
            if entry.is_write:
                disk.seek(entry.sector * log.sectorsize)
                disk.write(log.data(entry))
            elif entry.is_discard:
                disk.seek(entry.sector * log.sectorsize)
                disk.write(bytes(entry.sectors * log.sectorsize))


def commits_held(image: Path, scratch: Path) -> int:
    """Mount the image, copy the database files out, count what sqlite3 finds."""
    mnt, copy = scratch / "mnt", scratch / "copy"
    mnt.mkdir()
    copy.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        for path in mnt.rglob("*.db*"):
            shutil.copyfile(path, copy / path.name)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    dbs = [p for p in copy.glob("*.db")]
    if not dbs:
        return 0
    conn = sqlite3.connect(dbs[0])
    try:
        if not conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'tblMyList0'").fetchone()[0]:
            return 0
        return 1 + conn.execute("SELECT count(*) FROM tblMyList0").fetchone()[0]
    finally:
        conn.close()


def acknowledged_before(log: writelog.WriteLog, point: int) -> tuple[int, int]:
    """(the schema's commit: 0 or 1, transactions) whose marks precede ``point``."""
    marks = [e.mark for e in log.entries[:point] if e.mark]
    txns = [int(m.group(1)) for mark in marks if (m := re.fullmatch(r"sqlwa-txn-(\d+)", mark))]
    return int("sqlwa-setup" in marks), max(txns, default=-1) + 1


def test_no_count_is_negative_or_more_lost_than_acknowledged(crash_run):
    durability = json.loads((crash_run[0] / "summary.json").read_text())["durability"]
    assert all(n >= 0 for n in numbers_in(durability)), durability
    assert durability["acknowledged"] == {"commits": 41, "schema": 1, "warmup": WARMUP, "measured": COMMITS}
    assert durability["lost_commits"]["max"] <= durability["acknowledged"]["commits"]
    for first in durability["first"].values():
        assert 0 <= first["lost"] <= first["acknowledged_commits"] == sum(first["acknowledged"].values())


def test_the_first_loss_is_the_databases_own_count(crash_run, tmp_path):
    out, printed = crash_run
    summary = json.loads((out / "summary.json").read_text())
    first = summary["durability"]["first"].get("lost")
    assert first is not None, "WAL/NORMAL without a checkpoint loses commits (SQLite's documented behaviour)"
    log = writelog.read(out / "writes.log")
    point = first["before_entry"]
    assert first["kind"] == "none", first
    image_before(log, durable_before(log, point), summary["config"]["lab"]["image_size"], tmp_path / "state.img")
    held = commits_held(tmp_path / "state.img", tmp_path)
    schema, txns = acknowledged_before(log, point)
    warm = min(txns, WARMUP)
    assert first["acknowledged"] == {"schema": schema, "warmup": warm, "measured": txns - warm}
    assert (first["held"], first["lost"]) == (min(held, schema + txns), schema + txns - min(held, schema + txns))
    said = "held none of" if held == 0 else f"held {held} of"
    assert f"{said} the {schema + txns} acknowledged commits" in printed, printed
    assert f"{warm} warm-up" in printed
    assert not re.search(r"(?<![\w.])-\d", printed.split("durability (what a power cut would leave)")[1])
