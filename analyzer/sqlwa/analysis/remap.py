"""Following block writes through device-mapper, from the disk back to the filesystem.

Under dm-crypt (``--crypt``) the filesystem writes to the dm device and the disk (the
lab's loop device) gets the encrypted copies: dm-crypt's writer thread
(``dmcrypt_write/N``, or a ``kcryptd`` worker) submits them, at the dm sector plus the
table's offset (0 for plain dm-crypt, the header's size under LUKS2). The requests that
count are the disk's, and every one of them must keep the cause it had above: which
file, which part of the filesystem, which thread.

The kernel says where each disk bio came from: dm core records ``block_bio_remap`` (on
the disk, naming the dm device and its sector) as it submits the clone. A write request
on the disk lies inside a remapped bio: at its start, or further in where the disk's
queue split a large bio into several requests (a 548 KiB WAL checkpoint write becomes
512 KiB + 36 KiB). The latest remap before the request whose range holds the request's
first sector gives its dm sector (the same distance into the bio); the dm device's own
``block_bio_queue`` whose range holds that dm sector names the thread that submitted it
there (the SQL thread, jbd2, a writeback worker), where the disk's names only dm-crypt's
writer. No offset is assumed: a write inside no remapped bio keeps no filesystem sector
(and so no file, and is unattributed: reported, never guessed).

dm-delay (``--device-delay``) is the exception: it hands a delayed bio to a worker that
submits it to the disk later, and the kernel records no remap for it; its table maps
every sector linearly (offset 0), so writes are followed by the table's offset
(:func:`by_table_offset`), and their submitters still by the dm device's queue events.
"""

from __future__ import annotations

import polars as pl


def _block_events(events: pl.DataFrame | pl.LazyFrame, action: str, dev: tuple[int, int]) -> pl.DataFrame:
    return (
        events.lazy()
        .filter(
            (pl.col("kind") == "block")
            & (pl.col("action") == action)
            & (pl.col("dev_major") == dev[0])
            & (pl.col("dev_minor") == dev[1])
            & (pl.col("sectors") > 0)  # not a cache flush's empty bio
        )
        .collect()
    )


def remaps(events: pl.DataFrame | pl.LazyFrame, disk: tuple[int, int], mapped: tuple[int, int]) -> pl.DataFrame:
    """The write bios remapped from ``mapped`` onto ``disk``: ``at_ns``, ``start`` and
    ``end`` on the disk (sectors, end exclusive), ``mapped_start`` on the dm device."""
    return (
        _block_events(events, "A", disk)
        .filter(
            (pl.col("operation") == "write")
            & (pl.col("remap_dev_major") == mapped[0])
            & (pl.col("remap_dev_minor") == mapped[1])
        )
        .select(
            pl.col("time_ns").alias("at_ns"),
            pl.col("sector").cast(pl.Int64).alias("start"),
            (pl.col("sector").cast(pl.Int64) + pl.col("sectors")).alias("end"),
            pl.col("remap_sector").cast(pl.Int64).alias("mapped_start"),
        )
    )


def latest_holding(writes: pl.DataFrame, sector: pl.Expr, spans: pl.DataFrame) -> pl.DataFrame:
    """``row``, ``at_sector`` and the columns of the latest of ``spans`` (``at_ns``,
    ``start``, ``end`` …) recorded before each write whose range holds its ``sector``."""
    hits = writes.select("row", "time_ns", sector.alias("at_sector")).join_where(
        spans,
        pl.col("at_sector") >= pl.col("start"),
        pl.col("at_sector") < pl.col("end"),
        pl.col("at_ns") <= pl.col("time_ns"),
    )
    return hits.sort("row", "at_ns").group_by("row", maintain_order=True).last()


def onto_mapped_device(
    writes: pl.DataFrame, events: pl.DataFrame | pl.LazyFrame, disk: tuple[int, int], mapped: tuple[int, int]
) -> pl.DataFrame:
    """``writes`` (requests issued on ``disk``, with ``row``) with ``sector`` the
    filesystem's: the dm sector they came from (null where no remapped bio holds them),
    and ``disk_sector`` where they landed."""
    disk_sector = pl.col("sector").cast(pl.Int64, strict=False)
    found = latest_holding(writes, disk_sector, remaps(events, disk, mapped))
    origin = found.select("row", (pl.col("mapped_start") + pl.col("at_sector") - pl.col("start")).alias("fs_sector"))
    joined = writes.join(origin, on="row", how="left")
    return joined.rename({"sector": "disk_sector"}).rename({"fs_sector": "sector"})


def by_table_offset(writes: pl.DataFrame, offset: int) -> pl.DataFrame:
    """``writes`` with ``sector`` the dm device's: the disk sector less the table's
    ``offset``, and ``disk_sector`` where they landed. For a linear target that resubmits
    a bio later instead of remapping it in place (dm-delay: its map hands a delayed bio to
    a worker, so the kernel records no ``block_bio_remap`` for it); the table says where
    every sector goes."""
    return writes.rename({"sector": "disk_sector"}).with_columns(
        (pl.col("disk_sector").cast(pl.Int64, strict=False) - offset).alias("sector")
    )


def with_mapped_submitter(
    writes: pl.DataFrame, events: pl.DataFrame | pl.LazyFrame, mapped: tuple[int, int]
) -> pl.DataFrame:
    """``submitter_pid`` / ``submitter``: who queued the bio on the dm device that holds
    each write's (filesystem) ``sector``; the disk's issuing thread where none does."""
    queued = _block_events(events, "Q", mapped).select(
        pl.col("time_ns").alias("at_ns"),
        pl.col("sector").cast(pl.Int64).alias("start"),
        (pl.col("sector").cast(pl.Int64) + pl.col("sectors")).alias("end"),
        pl.col("pid").alias("q_pid"),
        pl.col("comm").cast(pl.String).alias("q_comm"),
    )
    found = latest_holding(writes, pl.col("sector"), queued).select("row", "q_pid", "q_comm")
    joined = writes.join(found, on="row", how="left")
    return joined.with_columns(
        pl.coalesce("q_pid", "pid").alias("submitter_pid"),
        pl.coalesce("q_comm", pl.col("comm").cast(pl.String)).alias("submitter"),
    ).drop("q_pid", "q_comm")


def disk_offsets(events: pl.DataFrame | pl.LazyFrame, disk: tuple[int, int], mapped: tuple[int, int]) -> list[int]:
    """Every distinct (disk sector − dm sector) of the run's remapped writes: one value
    for a linear table such as dm-crypt's (its offset), as the table says."""
    found = remaps(events, disk, mapped).select((pl.col("start") - pl.col("mapped_start")).alias("d"))
    return sorted(found["d"].unique().to_list())
