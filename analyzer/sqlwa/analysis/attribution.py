"""Every block write byte to one cause: which file, or which part of the filesystem.

Each write request issued to the lab device (action D) gets exactly one category, from
the first rule that matches:

1. ``fs_journal``: its sector lies in the filesystem's own journal (ext4: the journal
   inode's extents; xfs: the internal log), or, on btrfs, it is a metadata write the SQL
   thread (or, under a FUSE layer, the daemon syncing for it) submitted inside an fsync
   (btrfs writes its log tree from the fsync itself).
2. A range of one of the run's files, from the engine's ``extents`` markers (FIEMAP after
   every sync and before every truncate/unlink, so short-lived journals are mapped while
   they exist; the marker closest in time wins when a block changed owner; under a FUSE
   layer, FIEMAP of the lower files the daemon serves them from):
   ``writeback`` when issued outside every commit window and outside every sync (deferred
   writeback, the final syncfs); ``checkpoint`` for database pages in WAL mode (only a
   checkpoint writes the database there); else the file's kind (``db``, ``journal``,
   ``wal``, ``shm``).
3. ``fs_metadata``: flagged META, or in the filesystem's static metadata (ext4 bitmaps,
   inode tables, group descriptors; btrfs metadata/system chunks and superblocks; f2fs,
   which has no journal, its checkpoint/SIT/NAT/SSA areas and its node and hot-data
   segments, where its fsync writes the file's nodes for roll-forward recovery).
4. ``unattributed``: none of the above (reported, never hidden).

The submitter of a request (the thread that queued its first bio, from
``block_bio_queue``) is used instead of the dispatching thread, which is often a kblockd
worker. Joins are Polars joins (as-of and inequality joins); nothing loops over events.
"""

from __future__ import annotations

import polars as pl

from sqlwa.analysis import remap, syncowner, windows
from sqlwa.catalogue import DATABASE_FILE_KINDS

CATEGORIES = (*DATABASE_FILE_KINDS, "checkpoint", "fs_journal", "fs_metadata", "writeback", "unattributed")


# ------------------------------------------------------------------ the files' ranges


def extents_ranges(events: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """One row per range of every ``extents`` marker: ``mark_ns``, ``file``, ``start``,
    ``end`` (sectors, end exclusive)."""
    return ranges_of_marks(windows.markers(events))


def ranges_of_marks(marks: pl.DataFrame) -> pl.DataFrame:
    """:func:`extents_ranges` of marker rows (``time_ns``, ``event``, ``text``)."""
    marks = marks.filter(pl.col("event") == "extents")
    ranges = (
        marks.select(
            pl.col("time_ns").alias("mark_ns"),
            pl.col("text").str.extract(r"\bkind=(\w+)").alias("file"),
            pl.col("text").str.extract(r"\branges=(\S+)").str.split(",").alias("range"),
        )
        .explode("range")
        .filter(pl.col("range").str.contains(r"^\d+\+\d+$"))
    )
    parts = pl.col("range").str.split_exact("+", 1)
    return ranges.select(
        "mark_ns",
        "file",
        parts.struct.field("field_0").cast(pl.Int64).alias("start"),
        (parts.struct.field("field_0").cast(pl.Int64) + parts.struct.field("field_1").cast(pl.Int64)).alias("end"),
    ).filter(pl.col("file").is_in(DATABASE_FILE_KINDS))


def translate_chunks(ranges: pl.DataFrame, chunks: list) -> pl.DataFrame:
    """btrfs: FIEMAP gives btrfs logical sectors; map them onto the device through the
    chunk map (a range is assumed not to cross a chunk boundary: chunks are >= 8 MiB
    and SQLite's files here are far smaller than a chunk's remaining space)."""
    data = [c for c in chunks if c[3]]
    if not data or ranges.height == 0:
        return ranges
    chunk_map = pl.DataFrame(
        {
            "chunk_start": [c[0] for c in data],
            "chunk_end": [c[0] + c[1] for c in data],
            "device_start": [c[3][0] for c in data],
        },
        schema={"chunk_start": pl.Int64, "chunk_end": pl.Int64, "device_start": pl.Int64},
    ).sort("chunk_start")
    mapped = ranges.sort("start").join_asof(chunk_map, left_on="start", right_on="chunk_start", strategy="backward")
    shift = pl.when(pl.col("start") < pl.col("chunk_end")).then(pl.col("device_start") - pl.col("chunk_start"))
    return mapped.with_columns(shift.fill_null(0).alias("shift")).select(
        "mark_ns", "file", pl.col("start") + pl.col("shift"), pl.col("end") + pl.col("shift")
    )


def ownership_spans(ranges: pl.DataFrame) -> pl.DataFrame:
    """Consecutive markers that report the same range for the same file collapse into one
    span ``[first_ns, last_ns]`` (a database mapped after each of 10,000 syncs is one
    span, not 10,000 rows to join against); a change of owner starts a new span."""
    ordered = ranges.sort("start", "end", "mark_ns")
    new_span = (
        (pl.col("file") != pl.col("file").shift(1))
        | (pl.col("start") != pl.col("start").shift(1))
        | (pl.col("end") != pl.col("end").shift(1))
    ).fill_null(True)
    return (
        ordered.with_columns(new_span.cum_sum().alias("span"))
        .group_by("span")
        .agg(
            pl.col("file").first(),
            pl.col("start").first(),
            pl.col("end").first(),
            pl.col("mark_ns").min().alias("first_ns"),
            pl.col("mark_ns").max().alias("last_ns"),
        )
        .drop("span")
    )


def file_of_writes(writes: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """``row`` → ``file`` for writes whose first sector lies in a file range; of several
    matching owners the nearest in time wins, markers after the write first (extents are
    recorded right after the sync that wrote them). Matched a slice of writes at a time:
    a write's sector lies in every span of its file's range over the run (150 each in a
    20,000-commit WAL run), and the whole run's matches at once took 3 KB per trace event."""
    if ranges.height == 0:
        return pl.DataFrame(schema={"row": pl.UInt32, "file": pl.String})
    return files_of_owners(writes, ownership_spans(ranges))


def files_of_owners(writes: pl.DataFrame, owners: pl.DataFrame) -> pl.DataFrame:
    """:func:`file_of_writes` against the ownership spans (:func:`ownership_spans`)."""
    if owners.height == 0:
        return pl.DataFrame(schema={"row": pl.UInt32, "file": pl.String})
    located = writes.select("row", "time_ns", signed_sector())
    return pl.concat(
        [
            nearest_owner(located.slice(start, WRITES_PER_MATCH), owners)
            for start in range(0, max(writes.height, 1), WRITES_PER_MATCH)
        ]
    )


#: Writes matched against the ownership spans at a time (bounds the matches held at once).
WRITES_PER_MATCH = 1024


def nearest_owner(located: pl.DataFrame, owners: pl.DataFrame) -> pl.DataFrame:
    """``row`` → ``file`` of the owner span nearest in time among those holding the
    write's sector (see :func:`file_of_writes`)."""
    hits = located.join_where(owners, pl.col("sector") >= pl.col("start"), pl.col("sector") < pl.col("end"))
    t = pl.col("time_ns").cast(pl.Int64)
    before = pl.col("last_ns").cast(pl.Int64) < t  # the owner's last marker precedes the write
    distance = (
        pl.when(pl.col("first_ns").cast(pl.Int64) >= t)
        .then(pl.col("first_ns").cast(pl.Int64) - t)
        .when(before)
        .then(t - pl.col("last_ns").cast(pl.Int64))
        .otherwise(0)  # the write falls between two markers of the same owner
    )
    return (
        hits.with_columns(before.alias("before"), distance.alias("distance"))
        .sort("row", "before", "distance")
        .group_by("row", maintain_order=True)
        .first()
        .select("row", "file")
    )


# ------------------------------------------------------------------ context of a write


def signed_sector() -> pl.Expr:
    """``sector`` as an Int64 like the ranges', null where it does not fit: the kernel gives
    (sector_t)-1 to a request without a position, and such a sector lies in no range
    (a strict cast raised instead)."""
    return pl.col("sector").cast(pl.Int64, strict=False)


def in_regions(ranges: list) -> pl.Expr:
    """The write's first sector lies in one of ``[start, sectors]`` ranges."""
    sector = signed_sector()
    tests = [(sector >= start) & (sector < start + count) for start, count in ranges]
    return pl.any_horizontal(tests) if tests else pl.lit(False)


def spans(events: pl.DataFrame | pl.LazyFrame, begin: str, end: str) -> pl.DataFrame:
    """``[span_start, span_end]`` of every begin/end marker pair (they never nest)."""
    return spans_of(windows.markers(events), begin, end)


def spans_of(marks: pl.DataFrame, begin: str, end: str) -> pl.DataFrame:
    """:func:`spans` of marker rows (``time_ns``, ``event``)."""
    marks = marks.filter(pl.col("event").is_in([begin, end])).sort("time_ns")
    pairs = marks.with_columns(pl.col("time_ns").shift(-1).alias("span_end"), pl.col("event").shift(-1).alias("next"))
    return pairs.filter((pl.col("event") == begin) & (pl.col("next") == end)).select(
        pl.col("time_ns").alias("span_start"), "span_end"
    )


def flag_inside(rows: pl.DataFrame, intervals: pl.DataFrame, name: str) -> pl.DataFrame:
    """Add boolean ``name``: the row's time lies inside one of ``intervals``."""
    if intervals.height == 0:
        return rows.with_columns(pl.lit(False).alias(name))
    joined = rows.sort("time_ns").join_asof(
        intervals.sort("span_start"), left_on="time_ns", right_on="span_start", strategy="backward"
    )
    inside = (pl.col("time_ns") <= pl.col("span_end")).fill_null(False)
    return joined.with_columns(inside.alias(name)).drop("span_start", "span_end")


def with_submitter(writes: pl.DataFrame, events: pl.DataFrame | pl.LazyFrame, dev: tuple[int, int]) -> pl.DataFrame:
    """``submitter_pid`` / ``submitter``: who queued the request's first bio (the latest
    Q event on the same sector before the issue); the issuing thread when not traced."""
    return with_queued_submitter(writes, queued_bios(events, dev))


def queued_bios(events: pl.DataFrame | pl.LazyFrame, dev: tuple[int, int]) -> pl.DataFrame:
    """The device's Q events as :func:`with_queued_submitter` reads them."""
    return windows.block_rows(events, dev, "Q", ["time_ns", "sector", "pid", "comm"]).select(
        pl.col("time_ns").alias("q_ns"),
        "sector",
        pl.col("pid").alias("q_pid"),
        pl.col("comm").cast(pl.String).alias("q_comm"),
    )


def with_queued_submitter(writes: pl.DataFrame, queued: pl.DataFrame) -> pl.DataFrame:
    """:func:`with_submitter` from the device's Q events (:func:`queued_bios`)."""
    joined = writes.sort("time_ns").join_asof(
        queued.sort("q_ns"),
        left_on="time_ns",
        right_on="q_ns",
        by="sector",
        strategy="backward",
        check_sortedness=False,  # sorted by time above; polars cannot check within groups
    )
    return joined.with_columns(
        pl.coalesce("q_pid", "pid").alias("submitter_pid"),
        pl.coalesce("q_comm", pl.col("comm").cast(pl.String)).alias("submitter"),
    ).drop("q_ns", "q_pid", "q_comm")


# ------------------------------------------------------------------ the categories


def category_expr(journal_mode: str, fs_type: str, tid: int | None, layout: dict, daemon: str | None = None) -> pl.Expr:
    file, meta = pl.col("file"), pl.col("meta")
    foreground = pl.col("in_commit") | pl.col("in_sync")
    syncing = (pl.col("submitter_pid") == (tid or -1)) | (pl.col("submitter") == (daemon or "")).fill_null(False)
    btrfs_log = pl.lit(fs_type == "btrfs") & meta & pl.col("in_sync") & syncing
    file_category = (
        pl.when(~foreground)
        .then(pl.lit("writeback"))
        .when((file == "db") & pl.lit(journal_mode == "wal"))
        .then(pl.lit("checkpoint"))
        .otherwise(file)
    )
    return (
        pl.when(in_regions(layout.get("fs_journal", [])) | btrfs_log)
        .then(pl.lit("fs_journal"))
        .when(file.is_not_null())
        .then(file_category)
        .when(meta | in_regions(layout.get("fs_metadata", [])))
        .then(pl.lit("fs_metadata"))
        .otherwise(pl.lit("unattributed"))
    )


def attribute(
    events: pl.DataFrame | pl.LazyFrame,
    commit_windows: pl.DataFrame,
    dev: tuple[int, int],
    tid: int | None,
    journal_mode: str,
    fs_type: str,
    layout: dict,
    daemon: str | None = None,
    mapped: tuple[int, int] | None = None,
    files_by_sync: bool = False,
    mapped_offset: int | None = None,
) -> pl.DataFrame:
    """The write requests issued to ``dev``, one row each, with ``commit`` (null outside
    windows), ``file`` (null when in no file range), ``submitter`` and ``category``.

    ``daemon``: the comm of a FUSE daemon that syncs for the SQL thread.
    ``mapped``: the device-mapper device the filesystem is on (dm-crypt over ``dev``):
    each write is followed back to its sector there (``sector``; ``disk_sector`` is
    where it landed) and to its submitter there (:mod:`sqlwa.analysis.remap`);
    ``mapped_offset``: followed by this table offset instead of the kernel's remaps
    (dm-delay, which records none for the bios it delays).
    ``files_by_sync``: the files cannot all be mapped (eCryptfs): a write no extents
    marker owns may be the file the SQL thread was syncing (:mod:`sqlwa.analysis.syncowner`)."""
    kept = ["time_ns", "pid", "comm", "sector", "sectors", "bytes", "meta", "preflush", "fua"]
    writes = windows.block_issues(events, dev, [*kept, "operation"]).filter(pl.col("operation") == "write")
    writes = writes.select(kept)
    writes = writes.sort("time_ns").with_row_index("row")
    if mapped_offset is not None:  # extents and layout are in the filesystem's (the dm device's) sectors
        writes = remap.by_table_offset(writes, mapped_offset)
    elif mapped is not None:
        writes = remap.onto_mapped_device(writes, events, dev, mapped)
    ranges = extents_ranges(events)
    if fs_type == "btrfs":
        ranges = translate_chunks(ranges, layout.get("chunks", []))
    writes = writes.join(file_of_writes(writes, ranges), on="row", how="left")
    if mapped is None:
        writes = with_submitter(writes, events, dev)
    else:  # the disk's queue events name dm-crypt's writer; the dm device's the thread above
        writes = remap.with_mapped_submitter(writes, events, mapped)
    writes = flag_inside(writes, spans(events, "sync_begin", "sync_end"), "in_sync")
    commit_spans = commit_windows.select(
        pl.col("win_start_ns").alias("span_start"), pl.col("win_end_ns").alias("span_end")
    )
    writes = flag_inside(writes, commit_spans, "in_commit")
    writes = windows.assign_windows(writes, commit_windows)
    if files_by_sync:
        fs_own = in_regions([*layout.get("fs_journal", []), *layout.get("fs_metadata", [])])
        writes = syncowner.files_by_sync(writes, events, tid, fs_own)
    category = category_expr(journal_mode, fs_type, tid, layout, daemon)
    return writes.with_columns(category.cast(pl.Enum(CATEGORIES)).alias("category")).sort("row")


# ------------------------------------------------------------------ tallies


def category_columns() -> list[str]:
    return [f"bytes_{c}" for c in CATEGORIES]


def bytes_per_commit(attributed: pl.DataFrame, commit_windows: pl.DataFrame) -> pl.DataFrame:
    """``index`` + ``bytes_<category>`` for every commit window (zeros where nothing)."""
    tallies = [
        pl.when(pl.col("category") == c).then(pl.col("bytes")).otherwise(0).sum().alias(f"bytes_{c}")
        for c in CATEGORIES
    ]
    return windows.tally_by_commit(attributed, commit_windows, tallies, category_columns())


def totals(rows: pl.DataFrame) -> dict[str, int]:
    """Bytes per category (every category present, zeros included)."""
    grouped = rows.group_by(pl.col("category").cast(pl.String)).agg(pl.col("bytes").sum())
    found = dict(zip(grouped["category"].to_list(), grouped["bytes"].to_list()))
    return {c: int(found.get(c, 0) or 0) for c in CATEGORIES}


def summary_section(attributed: pl.DataFrame, commit_windows: pl.DataFrame, per_commit: pl.DataFrame) -> dict:
    """``bytes_by_category`` of summary.json: foreground (in-window) means per measured
    commit, and every byte from the first measured commit to the end (amortized), both
    adding up to their totals; plus the unattributed share and writeback by file."""
    measured = commit_windows.filter(~pl.col("warmup"))
    count = max(measured.height, 1)
    first = measured["win_start_ns"].min() if measured.height else None
    since_first = attributed.filter(pl.col("time_ns") >= first) if first is not None else attributed.clear()
    fg = per_commit.join(measured.select("index"), on="index", how="semi")
    foreground = {c: float(fg[f"bytes_{c}"].sum()) / count for c in CATEGORIES}
    amortized = totals(since_first)
    total = sum(amortized.values())
    writeback = (
        since_first.filter(pl.col("category") == "writeback")
        .group_by(pl.col("file").fill_null("other"))
        .agg(pl.col("bytes").sum())
    )
    return {
        "per_commit": foreground,
        "amortized_total": amortized,
        "amortized_per_commit": {c: v / count for c, v in amortized.items()},
        "total_bytes": total,
        "unattributed_share": amortized["unattributed"] / total if total else 0.0,
        "writeback_by_file": dict(zip(writeback["file"].to_list(), map(int, writeback["bytes"].to_list()))),
        "run_total": totals(attributed),
    }
