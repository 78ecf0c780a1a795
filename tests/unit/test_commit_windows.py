"""Commit windows and close windows cut from the engine's markers (workloads/MARKERS.md):
a transaction that wrote nothing ends with ``txn_void`` and is no window, the next one
taking its index; the syscalls between ``close_begin`` and ``close_end`` are the close's."""

from __future__ import annotations

import polars as pl
import pytest

from sqlwa.analysis import closing, stream, windows
from sqlwa.errors import UsageError

TID = 77


def marker(t: int, text: str) -> dict:
    return {"time_ns": t, "kind": "marker", "name": text.split()[1], "text": text, "pid": TID, "aux": 0}


def syscall(t: int, name: str, aux: int = 0) -> dict:
    return {"time_ns": t, "kind": "syscall_enter", "name": name, "text": "", "pid": TID, "aux": aux}


def events(rows: list[dict]) -> pl.DataFrame:
    schema = {"time_ns": pl.UInt64, "kind": pl.String, "name": pl.String, "text": pl.String, "pid": pl.Int64}
    return pl.DataFrame(rows, schema={**schema, "aux": pl.Int64})


RUN = [
    marker(1, f"sqlwa run_begin pid={TID} tid={TID} t=1"),
    marker(10, "sqlwa txn_begin i=0 warmup=0 t=10"),
    syscall(11, "fdatasync"),
    marker(12, "sqlwa txn_end i=0 t=12"),
    marker(20, "sqlwa txn_begin i=1 warmup=0 t=20"),
    marker(21, "sqlwa txn_void i=1 t=21"),
    marker(30, "sqlwa txn_begin i=1 warmup=0 t=30"),
    marker(31, "sqlwa txn_void i=1 t=31"),
    marker(40, "sqlwa txn_begin i=1 warmup=0 t=40"),
    syscall(41, "fdatasync"),
    syscall(42, "pwrite64", 4096),
    marker(43, "sqlwa txn_end i=1 t=43"),
    marker(50, "sqlwa close_begin t=50"),
    syscall(51, "pwrite64", 8192),
    syscall(52, "fdatasync"),
    syscall(53, "fdatasync"),
    syscall(54, "unlink"),
    marker(55, "sqlwa close_end t=55"),
    syscall(60, "fdatasync"),  # after the close: in neither
    marker(70, "sqlwa run_end t=70"),
]


def test_a_transaction_that_wrote_nothing_is_no_window():
    found, skipped = windows.checked_windows(windows.markers(events(RUN)), lenient=False)
    assert skipped == 0
    assert found.select("index", "win_start_ns", "win_end_ns").rows() == [(0, 10, 12), (1, 40, 43)]
    per = windows.syscalls_per_commit(events(RUN), found, TID)
    assert per.select("index", "fsync_calls", "pwrite_bytes").rows() == [(0, 1, 0), (1, 1, 4096)]


@pytest.mark.parametrize("rows", [3, 4, 7, 100])
def test_read_in_slices_the_same_windows(tmp_path, rows):
    frame = events(RUN)
    found = stream.windows_in_slices(frame.lazy(), rows, tmp_path / "windows.parquet").collect()
    assert found.select("index", "win_start_ns", "win_end_ns").rows() == [(0, 10, 12), (1, 40, 43)]


def test_a_txn_void_of_another_index_is_out_of_order():
    bad = [*RUN[:5], marker(21, "sqlwa txn_void i=7 t=21"), *RUN[6:]]
    with pytest.raises(UsageError, match="txn_begin i=1"):
        windows.checked_windows(windows.markers(events(bad)), lenient=False)


def test_the_close_window_holds_the_close_checkpoints_syscalls():
    assert closing.close_windows(events(RUN)).rows() == [(0, 50, 55)]
    found = closing.trace_figures(events(RUN), None, ["vfs", "syscall"])
    assert found == {
        "syscalls": {
            "fsync_calls": 2,
            "fdatasync_calls": 2,
            "pwrite_calls": 1,
            "pwrite_bytes": 8192,
            "ftruncate_calls": 0,
            "unlink_calls": 1,
        }
    }


def test_sections_read_an_engine_that_reported_neither_as_none():
    assert closing.wrote_nothing_section({})["transactions"] == 0
    assert closing.close_section({})["connections"] == 0
    info = {
        "close": {"connections": 1, "time_ns": 2_000_000, "vfs": {"wal": {"sync_calls": 1}, "db": {"sync_calls": 1}}}
    }
    section = closing.close_section(info, {"syscalls": {"fsync_calls": 2}})
    assert (section["vfs_sync_calls"], section["time_ms"], section["syscalls"]["fsync_calls"]) == (2, 2.0, 2)
    assert set(section["by_file"]) == {"wal", "db"}
