"""Following block writes through device-mapper, from the disk back to the filesystem.

Under dm-crypt (``--crypt``) the filesystem writes to the dm device and the disk (the
lab's loop device) gets the encrypted copies: dm-crypt's writer thread
(``dmcrypt_write/N``, or a ``kcryptd`` worker) submits them, at the dm sector plus the
table's offset (0 for plain dm-crypt, the header's size under LUKS2). The requests that
count are the disk's, and every one of them must keep the cause it had above: which
file, which part of the filesystem, which thread.

The kernel says where each disk bio came from: dm core records ``block_bio_remap`` (on
the disk, naming the dm device and its sector) as it submits the clone. A write request
on the disk starts with a bio at its own first sector, so the latest remap to that sector
before the request was issued names the dm sector it came from; the dm device's own
``block_bio_queue`` at that sector names the thread that submitted it there (the SQL
thread, jbd2, a writeback worker), where the disk's names only dm-crypt's thread. No
offset is assumed: a write without a remap keeps no filesystem sector (and so no file,
and is unattributed: reported, never guessed).
"""

from __future__ import annotations

import polars as pl


def remaps(events: pl.DataFrame, disk: tuple[int, int], mapped: tuple[int, int]) -> pl.DataFrame:
    """The write bios remapped from ``mapped`` onto ``disk``: ``remap_ns``, ``sector`` (on
    the disk) and ``mapped_sector`` (on the dm device)."""
    return events.filter(
        (pl.col("kind") == "block")
        & (pl.col("action") == "A")
        & (pl.col("operation") == "write")
        & (pl.col("sectors") > 0)  # not a cache flush's empty bio, remapped from sector 0 to 0
        & (pl.col("dev_major") == disk[0])
        & (pl.col("dev_minor") == disk[1])
        & (pl.col("remap_dev_major") == mapped[0])
        & (pl.col("remap_dev_minor") == mapped[1])
    ).select(pl.col("time_ns").alias("remap_ns"), "sector", pl.col("remap_sector").alias("mapped_sector"))


def onto_mapped_device(
    writes: pl.DataFrame, events: pl.DataFrame, disk: tuple[int, int], mapped: tuple[int, int]
) -> pl.DataFrame:
    """``writes`` (requests issued on ``disk``) with ``sector`` the filesystem's: the dm
    sector their first bio was remapped from (null where no remap precedes them), and
    ``disk_sector`` where they landed."""
    joined = writes.sort("time_ns").join_asof(
        remaps(events, disk, mapped).sort("remap_ns"),
        left_on="time_ns",
        right_on="remap_ns",
        by="sector",
        strategy="backward",
        check_sortedness=False,  # sorted by time above; polars cannot check within groups
    )
    return joined.rename({"sector": "disk_sector"}).rename({"mapped_sector": "sector"}).drop("remap_ns")


def disk_offsets(events: pl.DataFrame, disk: tuple[int, int], mapped: tuple[int, int]) -> list[int]:
    """Every distinct (disk sector − dm sector) of the run's remapped writes: one value
    for a linear table such as dm-crypt's (its offset), as the table says."""
    found = remaps(events, disk, mapped).select((pl.col("sector").cast(pl.Int64) - pl.col("mapped_sector")).alias("d"))
    return sorted(found["d"].unique().to_list())
