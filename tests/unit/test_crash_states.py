"""The crash-state generator (sqlwa.durability) on write logs built here in the format
of drivers/md/dm-log-writes.c (a super sector, then per entry a sector with
``struct log_write_entry`` and the data), independently of sqlwa's reader.

What must hold (CrashMonkey's model of a volatile write cache):

- a commit whose writes a flush made durable before its acknowledgement (its mark) is in
  every state that counts it as acknowledged;
- a commit acknowledged before a flush covered its writes (WAL/NORMAL, synchronous=OFF,
  ``nobarrier``) has a state that counts it as acknowledged and lacks one of its writes:
  a broken configuration cannot look durable because the generator never tried the state;
- replaying a state gives the bytes of the writes it includes, applied in log order on
  zeros, as a reconstruction of the test's own computes them.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sqlwa.durability import reference, replay, states, verdict, writelog

SECTOR = 512
FLUSH, FUA, DISCARD, MARK = 1, 2, 4, 8
MAGIC = 0x6A736677736872


def write_log(path: Path, entries: list[tuple]) -> None:
    """entries: ("write", sector, data) | ("flush",) | ("fua", sector, data) | ("mark", text) | ("discard", sector, n)."""
    body = bytearray()
    for entry in entries:
        kind = entry[0]
        if kind in ("write", "fua"):
            _, sector, data = entry
            header = struct.pack("<QQQQ", sector, len(data) // SECTOR, FUA if kind == "fua" else 0, 0)
            body += header.ljust(SECTOR, b"\0") + data
        elif kind == "flush":
            body += struct.pack("<QQQQ", 0, 0, FLUSH, 0).ljust(SECTOR, b"\0")
        elif kind == "discard":
            _, sector, count = entry
            body += struct.pack("<QQQQ", sector, count, DISCARD, 0).ljust(SECTOR, b"\0")
        else:
            text = entry[1].encode()
            body += (struct.pack("<QQQQ", 0, 0, MARK, len(text)) + text).ljust(SECTOR, b"\0")
    superblock = struct.pack("<QQQI", MAGIC, 1, len(entries), SECTOR).ljust(SECTOR, b"\0")
    path.write_bytes(superblock + bytes(body))


def block(value: int, sectors: int = 8) -> bytes:
    return bytes([value]) * (sectors * SECTOR)


def test_reader_reads_what_the_format_says(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_log(
        path,
        [("write", 16, block(1)), ("flush",), ("mark", "sqlwa-txn-0"), ("fua", 8, block(2, 16)), ("discard", 64, 8)],
    )
    log = writelog.read(path)
    assert log.sectorsize == SECTOR
    kinds = [(e.sector, e.sectors, e.is_write, e.is_flush, e.is_fua, e.is_discard, e.mark) for e in log.entries]
    assert kinds == [
        (16, 8, True, False, False, False, None),
        (0, 0, False, True, False, False, None),
        (0, 0, False, False, False, False, "sqlwa-txn-0"),
        (8, 16, True, False, True, False, None),
        (64, 8, False, False, False, True, None),
    ]
    assert log.data(log.entries[0]) == block(1)
    assert log.data(log.entries[3]) == block(2, 16)


def test_a_cut_log_and_a_foreign_file_are_refused(tmp_path: Path) -> None:
    import pytest

    from sqlwa.errors import LabError

    path = tmp_path / "log"
    write_log(path, [("write", 16, block(1))] * 3)
    path.write_bytes(path.read_bytes()[: 3 * SECTOR])
    with pytest.raises(LabError, match="cut short"):
        writelog.read(path)
    path.write_bytes(b"\x7fELF" + b"\0" * 4096)
    with pytest.raises(LabError, match="not a dm-log-writes log"):
        writelog.read(path)


# A run as the target logs it: per transaction, its writes (each to its own block) and the
# flush that covered them, the mark after them (durable, then acknowledged) or before
# them (acknowledged while the writes were in the cache).
transactions = st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=6)


def run_log(txns: list[tuple[int, bool]]) -> tuple[list[tuple], dict[int, list[int]]]:
    entries: list[tuple] = [("mark", "sqlwa-lab-ready"), ("mark", "sqlwa-setup")]
    writes_of: dict[int, list[int]] = {}
    next_block = 0
    for index, (count, flushed_first) in enumerate(txns):
        mark = ("mark", f"sqlwa-txn-{index}")
        if not flushed_first:
            entries.append(mark)  # acknowledged while its writes were still in the cache
        writes_of[index] = []
        for _ in range(count):  # the target logs writes only in front of the flush that covered them
            writes_of[index].append(len(entries))
            entries.append(("write", next_block * 8, block(next_block % 250 + 1)))
            next_block += 1
        entries.append(("flush",))
        if flushed_first:
            entries.append(mark)
    entries.append(("mark", writelog.END_MARK))  # the target's own, when it is removed
    return entries, writes_of


def includes(state: states.CrashState, index: int) -> bool:
    return index < state.durable or index in state.extra


@settings(max_examples=200, deadline=None)
@given(transactions, st.integers(0, 3))
def test_acknowledged_after_a_flush_is_in_every_state(txns: list[tuple[int, bool]], seed: int) -> None:
    txns = [(count, True) for count, _ in txns]
    entries, writes_of = run_log(txns)
    log = parsed(entries)
    for state in states.crash_states(log.entries, samples=8, seed=seed, torn=False, sectorsize=SECTOR):
        for txn in range(state.acked.commits):
            assert all(includes(state, w) for w in writes_of[txn]), (state, txn)


@settings(max_examples=200, deadline=None)
@given(transactions, st.integers(0, 3))
def test_acknowledged_before_its_flush_has_a_state_that_loses_it(txns: list[tuple[int, bool]], seed: int) -> None:
    entries, writes_of = run_log(txns)
    log = parsed(entries)
    drawn = list(states.crash_states(log.entries, samples=8, seed=seed, torn=False, sectorsize=SECTOR))
    for txn, (_, flushed_first) in enumerate(txns):
        if flushed_first:
            continue
        losing = [s for s in drawn if s.acked.commits > txn and not all(includes(s, w) for w in writes_of[txn])]
        assert losing, f"transaction {txn} was acknowledged before its flush, yet no state lacks its writes"


def test_every_subset_when_few_and_distinct_seeded_samples_when_many(tmp_path: Path) -> None:
    entries, _ = run_log([(3, True)])
    small = [s.extra for s in states.crash_states(parsed(entries).entries, 8, 0, False, SECTOR) if s.kind == "subset"]
    assert len(small) == 2**3 - 2 == len(set(small))
    entries, _ = run_log([(12, True)])
    log = parsed(entries)
    first = [s.extra for s in states.crash_states(log.entries, 20, 7, False, SECTOR) if s.kind == "subset"]
    again = [s.extra for s in states.crash_states(log.entries, 20, 7, False, SECTOR) if s.kind == "subset"]
    assert first == again and len(first) == len(set(first)) == 20


def test_nothing_before_the_lab_was_ready_is_a_state() -> None:
    entries: list[tuple] = [("write", 0, block(9)), ("flush",), *run_log([(1, True)])[0]]
    log = parsed(entries)
    assert all(s.point > 2 for s in states.crash_states(log.entries, 4, 0, False, SECTOR))


@settings(max_examples=50, deadline=None)
@given(transactions, st.integers(0, 3), st.booleans())
def test_replay_gives_the_bytes_of_the_writes_a_state_includes(
    tmp_path_factory, txns: list[tuple[int, bool]], seed: int, torn: bool
) -> None:
    workdir = tmp_path_factory.mktemp("replay")
    entries, _ = run_log(txns)
    entries.insert(3, ("write", 0, block(0xAB, 24)))  # a three-block write that can be torn
    entries.insert(4, ("flush",))
    path = workdir / "log"
    write_log(path, entries)
    log = writelog.read(path)
    size = 64 * 4096
    replayer = replay.Replayer(log, size, workdir)
    image = workdir / "state.img"
    image.write_bytes(b"\xff" * size)  # stale content: the replay must overwrite all of it
    try:
        for state in states.crash_states(log.entries, 3, seed, torn, SECTOR):
            replayer.image(state, image)
            assert image.read_bytes() == expected_image(entries, state, size)
    finally:
        replayer.close()


def expected_image(entries: list[tuple], state: states.CrashState, size: int) -> bytes:
    disk = bytearray(size)
    for index, entry in enumerate(entries):
        if entry[0] in ("write", "fua") and includes(state, index):
            disk[entry[1] * SECTOR : entry[1] * SECTOR + len(entry[2])] = entry[2]
    if state.torn is not None:
        victim, kept = state.torn
        _, sector, data = entries[victim]
        for b in kept:
            disk[sector * SECTOR + b * 4096 : sector * SECTOR + (b + 1) * 4096] = data[b * 4096 : (b + 1) * 4096]
    return bytes(disk)


def parsed(entries: list[tuple]) -> writelog.WriteLog:
    import tempfile

    with tempfile.NamedTemporaryFile(delete=False) as f:
        path = Path(f.name)
    write_log(path, entries)
    try:
        return writelog.read(path)
    finally:
        path.unlink()


def test_a_database_the_filesystem_or_sqlite_refuses_is_corrupt(tmp_path: Path) -> None:
    """The judge of one state's database, against files made with the system's SQLite: a
    committed copy is that commit; a page overwritten with garbage is corrupt, and so is
    a file the filesystem itself will not read (here ENAMETOOLONG stands in for ext4's
    EBADMSG on a bad checksum: both are OSErrors from the file's first stat)."""
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.executemany("INSERT INTO t VALUES (?)", [(str(i) * 200,) for i in range(200)])
    conn.close()
    ref = reference.Reference({reference.digest_of_file(db): 0}, transactions=1)
    assert verdict.inspect_database(db, ref) == verdict.Inspection(None, 0, "")
    with open(db, "r+b") as f:
        f.seek(4096)  # the table's root page: its header says no page type
        f.write(b"\xff" * 4096)
    assert verdict.inspect_database(db, ref).problem == verdict.CORRUPT
    refused = verdict.inspect_database(tmp_path / ("x" * 300), ref)
    assert refused.problem == verdict.CORRUPT and "File name too long" in refused.detail
