"""Commit windows cut from the engine's markers, and what each layer did inside them.

A commit window is ``[txn_begin.t, txn_end.t]`` of one transaction, taken from the
trace's own timestamps of the two marker events (the same timeline as the block and
syscall events; the capture uses the ``mono`` clock, the engine's clock). Events are
assigned to windows with an as-of join; nothing here loops over events in Python.
"""

from __future__ import annotations

import polars as pl

from sqlwa.analysis import android
from sqlwa.analysis.schema import Amortized
from sqlwa.catalogue import BLOCK_COMMIT_COLUMNS, SYSCALL_COMMIT_COLUMNS, is_flush
from sqlwa.errors import UsageError

SYNC_SYSCALLS = ("fsync", "fdatasync", "sync_file_range")
WRITE_SYSCALLS = ("pwrite64", "write")
UNLINK_SYSCALLS = ("unlink", "unlinkat")
#: The markers that delimit transactions: ``txn_void`` ends one that wrote no database
#: file (workloads/MARKERS.md), which is no commit window.
TXN_MARKERS = ("txn_begin", "txn_end", "txn_void")

#: An event table in memory, or a lazy frame over one (a Parquet scan: each filter below
#: then reads only its rows' columns from the file).
Events = pl.DataFrame | pl.LazyFrame


def marker_field(key: str) -> pl.Expr:
    """An integer ``key=value`` field of a marker line's text."""
    return pl.col("text").str.extract(rf"\b{key}=(-?\d+)").cast(pl.Int64)


def markers(events: Events) -> pl.DataFrame:
    """The sqlwa marker rows: time, event word and raw text. (Lazy, so that only these
    three columns of the marker rows are gathered: an eager filter copies all thirty.)"""
    return (
        events.lazy()
        .filter(pl.col("kind") == "marker")
        .select("time_ns", pl.col("name").cast(pl.String).alias("event"), "text")
        .collect()
    )


def commit_windows(events: Events, lenient: bool = False) -> pl.DataFrame:
    """One row per transaction: ``index``, ``warmup``, ``win_start_ns``, ``win_end_ns``.
    Markers out of order are an error (:func:`checked_windows`); ``lenient`` skips them."""
    return checked_windows(markers(events), lenient)[0]


def checked_windows(marks: pl.DataFrame, lenient: bool) -> tuple[pl.DataFrame, int]:
    """The commit windows of the marker rows and how many ``txn_begin``/``txn_end``
    markers fit none. The engine writes, in time order, ``txn_begin i=N`` then
    ``txn_end i=N`` with N rising: a window is such a pair with an index above every
    earlier window's. Markers that repeat or run backwards (two runs' traces joined into
    one) fit none; they are an error, or with ``lenient`` skipped and counted. A
    transaction that wrote no database file ends with ``txn_void i=N`` instead, and is no
    window (the next transaction takes its index). (Joining
    begins to ends on the index instead made repeated indices a many-to-many join: four
    copies of a 32-commit trace gave 819,200 windows and eight exhausted the memory.)"""
    txn = (
        marks.with_row_index("row")
        .filter(pl.col("event").is_in(TXN_MARKERS))
        .with_columns(marker_field("i").alias("index"))
        .sort("time_ns", "row")
    )
    followed = txn.with_columns(
        pl.col("event").shift(-1).alias("next_event"),
        pl.col("index").shift(-1).alias("next_index"),
        pl.col("time_ns").shift(-1).alias("win_end_ns"),
        pl.col("row").shift(-1).alias("end_row"),
    )
    begun = (pl.col("event") == "txn_begin") & (pl.col("index") == pl.col("next_index"))
    pairs = followed.filter(begun & (pl.col("next_event") == "txn_end"))
    voids = followed.filter(begun & (pl.col("next_event") == "txn_void")).height
    rising = pl.col("index") > pl.col("index").cum_max().shift(1).fill_null(-1)
    kept = pairs.filter(rising)
    skipped = txn.height - 2 * kept.height - 2 * voids
    if skipped and not lenient:
        raise out_of_order(txn, kept, skipped)
    windows = kept.select(
        "index",
        (marker_field("warmup") == 1).alias("warmup"),
        pl.col("time_ns").alias("win_start_ns"),
        "win_end_ns",
    )
    return windows, skipped


def out_of_order(txn: pl.DataFrame, kept: pl.DataFrame, skipped: int) -> UsageError:
    """The error naming the first marker that fits no commit window."""
    paired = pl.concat([kept["row"], kept["end_row"]])
    # a txn_void and the begin before it fit no window, and are in order
    void = pl.col("event") == "txn_void"
    voided = void | (void.shift(-1).fill_null(False) & (pl.col("index") == pl.col("index").shift(-1)))
    first = txn.filter(~pl.col("row").is_in(paired.implode()) & ~voided).row(0, named=True)
    return UsageError(
        f"{skipped:,} of the trace's {txn.height:,} transaction markers repeat or run backwards, the first "
        f"at {first['time_ns'] / 1e9:.6f} s: {first['text']!r} (are two runs' traces joined into one?)",
        "parse each run's trace on its own, or add --lenient to skip such markers and count them",
    )


def run_tid(events: Events) -> int | None:
    """The SQL thread's id from the ``run_begin`` marker."""
    begin = markers(events).filter(pl.col("event") == "run_begin")
    if begin.height == 0:
        return None
    return begin.select(marker_field("tid")).item(0, 0)


def assign_windows(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Add ``commit`` (the transaction index, null outside every window) to each event."""
    spans = windows.select("index", "win_start_ns", "win_end_ns").sort("win_start_ns")
    joined = events.sort("time_ns").join_asof(spans, left_on="time_ns", right_on="win_start_ns", strategy="backward")
    inside = pl.col("time_ns") <= pl.col("win_end_ns")
    return joined.with_columns(pl.when(inside).then(pl.col("index")).otherwise(None).alias("commit")).drop(
        "index", "win_start_ns", "win_end_ns"
    )


def block_issues(events: Events, dev: tuple[int, int], columns: list[str] | None = None) -> pl.DataFrame:
    """Requests issued to the device (action D), the point the device sees them: every
    column, or only ``columns``."""
    return block_rows(events, dev, "D", columns)


def block_rows(events: Events, dev: tuple[int, int], action: str, columns: list[str] | None = None) -> pl.DataFrame:
    """The device's block events of one action: every column, or only ``columns``
    (gathered alone: an eager filter would copy all thirty columns of the rows)."""
    major, minor = dev
    rows = events.lazy().filter(
        (pl.col("kind") == "block")
        & (pl.col("action") == action)
        & (pl.col("dev_major") == major)
        & (pl.col("dev_minor") == minor)
    )
    return (rows if columns is None else rows.select(columns)).collect()


#: What the block tallies read of a request.
TALLIED = ["time_ns", "operation", "bytes", "fua", "preflush"]


def block_tallies() -> list[pl.Expr]:
    """Per-group block figures (:data:`sqlwa.catalogue.BLOCK_COMMIT_COLUMNS`); a flush is
    what :func:`sqlwa.catalogue.is_flush` says."""
    is_write = pl.col("operation") == "write"
    return [
        is_write.sum().alias("write_requests"),
        pl.when(is_write).then(pl.col("bytes")).otherwise(0).sum().alias("write_bytes"),
        is_flush().sum().alias("flush_requests"),
        (is_write & pl.col("fua")).sum().alias("fua_writes"),
        (pl.col("operation") == "read").sum().alias("read_requests"),
        pl.when(pl.col("operation") == "read").then(pl.col("bytes")).otherwise(0).sum().alias("read_bytes"),
        (pl.col("operation") == "discard").sum().alias("discard_requests"),
    ]


def syscall_entries(events: Events, tid: int | None) -> pl.DataFrame:
    """The SQL thread's syscalls: time, name and count argument (``aux``), the columns the
    tallies read (gathered alone, not the rows' raw argument text)."""
    return (
        events.lazy()
        .filter((pl.col("kind") == "syscall_enter") & (pl.col("pid") == tid))
        .select("time_ns", pl.col("name").cast(pl.String), "aux")
        .collect()
    )


def syscall_tallies() -> list[pl.Expr]:
    name = pl.col("name")
    return [
        name.is_in(SYNC_SYSCALLS).sum().alias("fsync_calls"),
        (name == "fdatasync").sum().alias("fdatasync_calls"),
        (name == "pwrite64").sum().alias("pwrite_calls"),
        pl.when(name == "pwrite64").then(pl.col("aux")).otherwise(0).sum().alias("pwrite_bytes"),
        (name == "ftruncate").sum().alias("ftruncate_calls"),
        name.is_in(UNLINK_SYSCALLS).sum().alias("unlink_calls"),
    ]


def per_window(rows: pl.DataFrame, windows: pl.DataFrame, tallies: list[pl.Expr], columns) -> pl.DataFrame:
    """Tally ``rows`` per commit window; windows without events get zeros."""
    return tally_by_commit(assign_windows(rows, windows), windows, tallies, columns)


def tally_by_commit(rows: pl.DataFrame, windows: pl.DataFrame, tallies: list[pl.Expr], columns) -> pl.DataFrame:
    """Tally ``rows`` that already carry ``commit`` per window (``index`` + ``columns``);
    rows outside every window are left out, windows without rows get zeros."""
    counted = rows.filter(pl.col("commit").is_not_null())
    grouped = counted.group_by("commit").agg(tallies).rename({"commit": "index"})
    out = windows.select("index").join(grouped, on="index", how="left")
    return out.with_columns([pl.col(c).fill_null(0).cast(pl.Int64) for c in columns])


def block_per_commit(events: Events, windows: pl.DataFrame, dev: tuple[int, int]) -> pl.DataFrame:
    return per_window(block_issues(events, dev, TALLIED), windows, block_tallies(), BLOCK_COMMIT_COLUMNS)


def syscalls_per_commit(events: Events, windows: pl.DataFrame, tid: int | None) -> pl.DataFrame:
    return per_window(syscall_entries(events, tid), windows, syscall_tallies(), SYSCALL_COMMIT_COLUMNS)


def amortized_write_bytes(events: Events, windows: pl.DataFrame, dev: tuple[int, int]) -> Amortized:
    """Every block byte written from the first measured commit to the end of the trace
    (final syncfs included), so deferred writeback and checkpoints are counted."""
    measured = windows.filter(~pl.col("warmup"))
    if measured.height == 0:
        return {"write_bytes": 0, "write_requests": 0, "flush_requests": 0, "commits": 0}
    first = measured["win_start_ns"].min()
    issued = block_issues(events, dev, TALLIED).filter(pl.col("time_ns") >= first)
    totals = issued.select(block_tallies()).row(0, named=True)
    return {
        "write_bytes": int(totals["write_bytes"] or 0),
        "write_requests": int(totals["write_requests"] or 0),
        "flush_requests": int(totals["flush_requests"] or 0),
        "commits": measured.height,
    }


# ------------------------------------------------------------------ traces captured elsewhere


def busiest_device(events: Events) -> tuple[int, int] | None:
    """The device with the most issued requests (action D), or None without any."""
    issued = events.lazy().filter((pl.col("kind") == "block") & (pl.col("action") == "D"))
    counts = issued.group_by("dev_major", "dev_minor").len().collect()
    if counts.height == 0:
        return None
    busiest = counts.sort("len", "dev_major", "dev_minor", descending=True)
    return int(busiest["dev_major"][0]), int(busiest["dev_minor"][0])


def thread_syscalls_per_commit(events: Events, windows: pl.DataFrame) -> pl.DataFrame:
    """As :func:`syscalls_per_commit`, each window counting the syscalls of its own thread
    (``windows.tid``): an app's commits run on whichever thread opened the transaction."""
    tids = windows["tid"].unique().to_list()
    rows = (
        events.lazy()
        .filter((pl.col("kind") == "syscall_enter") & pl.col("pid").is_in(tids))
        .with_columns(pl.col("name").cast(pl.String))
        .collect()
    )
    placed = assign_windows(rows, windows)
    own = placed.join(windows.select(pl.col("index").alias("commit"), pl.col("tid")), on="commit", how="left")
    own = own.filter(pl.col("pid") == pl.col("tid"))
    return tally_by_commit(own, windows, syscall_tallies(), SYSCALL_COMMIT_COLUMNS)


def trace_commits(events: Events, lenient: bool = False) -> tuple[pl.DataFrame, str, int] | None:
    """Per-commit syscall and block figures of a trace that marks its commits: sqlwa's own
    markers, else Android's SQLite slices (:mod:`sqlwa.analysis.android`). Returns the
    table (``index``, ``warmup``, ``win_start_ns``, ``win_end_ns``, the syscall and block
    columns; block figures of the busiest device), where the windows came from and how
    many out-of-order markers ``lenient`` skipped (:func:`checked_windows`), or None when
    the trace marks no commit."""
    windows, skipped = checked_windows(markers(events), lenient)
    if windows.height:
        source = "sqlwa markers"
        syscall_figures = syscalls_per_commit(events, windows, run_tid(events))
    else:
        windows = android.commit_windows(events)
        if windows.height == 0:
            return None
        source = "Android SQLite slices (atrace database)"
        syscall_figures = thread_syscalls_per_commit(events, windows)
    table = windows.join(syscall_figures, on="index", how="left")
    dev = busiest_device(events)
    if dev is not None:
        table = table.join(block_per_commit(events, windows, dev), on="index", how="left")
    return table, source, skipped
