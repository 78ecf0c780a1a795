"""Which file a write belongs to when FIEMAP cannot say: eCryptfs.

eCryptfs has no FIEMAP, so the engine's ``extents`` markers for its files say
EOPNOTSUPP; its lower files on ext4 are mapped once, after the run's final syncfs (the
runner maps them by their lower names), which covers the files that still exist then but
not a rollback journal that lived for one commit. For those writes the trace itself says
whose they are: an xSync of a file on eCryptfs writes the file's dirty pages into the
lower file and fsyncs the lower file, in the SQL thread, so ext4 writes that lower file's
data from the SQL thread inside the xSync's ``sync_begin``/``sync_end`` markers (the
engine's, which name the file's kind). ext4's own writes in that time come from jbd2
(its journal) or are metadata (flagged META, or in its static metadata regions).

So a write that no extents marker owns, submitted by the SQL thread inside one of its
xSyncs, neither META nor in the filesystem's journal or metadata regions, is the synced
file's. Anything else stays without a file (and is unattributed if nothing else claims it).
"""

from __future__ import annotations

import polars as pl

from sqlwa.analysis import windows
from sqlwa.catalogue import DATABASE_FILE_KINDS


def sync_spans(events: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """``span_start``, ``span_end`` and the synced file's ``sync_kind`` of every xSync."""
    marks = windows.markers(events).filter(pl.col("event").is_in(["sync_begin", "sync_end"])).sort("time_ns")
    pairs = marks.with_columns(pl.col("time_ns").shift(-1).alias("span_end"), pl.col("event").shift(-1).alias("next"))
    return pairs.filter((pl.col("event") == "sync_begin") & (pl.col("next") == "sync_end")).select(
        pl.col("time_ns").alias("span_start"),
        "span_end",
        pl.col("text").str.extract(r"\bkind=(\w+)").alias("sync_kind"),
    )


def files_by_sync(
    writes: pl.DataFrame, events: pl.DataFrame | pl.LazyFrame, tid: int | None, fs_own: pl.Expr
) -> pl.DataFrame:
    """``writes`` (with ``file``, ``meta``, ``submitter_pid``) where a write without a file
    that the SQL thread ``tid`` submitted inside an xSync, neither META nor ``fs_own``
    (in the filesystem's journal or metadata regions), gets the synced file's kind."""
    spans = sync_spans(events)
    if spans.height == 0 or tid is None:
        return writes
    joined = writes.sort("time_ns").join_asof(spans, left_on="time_ns", right_on="span_start", strategy="backward")
    inside = (pl.col("time_ns") <= pl.col("span_end")).fill_null(False)
    ours = (pl.col("submitter_pid") == tid) & pl.col("sync_kind").is_in(DATABASE_FILE_KINDS)
    claimable = pl.col("file").is_null() & inside & ours & ~pl.col("meta") & ~fs_own
    synced = pl.when(claimable).then(pl.col("sync_kind")).otherwise(pl.col("file"))
    return joined.with_columns(synced.alias("file")).drop("span_start", "span_end", "sync_kind")
