"""Exact quantiles of an integer column in memory that does not grow with its length.

A run's request phases (Q2D, D2C) are a few rows a commit: at 10^6 commits a column
whole is tens of MB, and sorting it twice that. The order statistics a quantile needs
are found instead by counting: the column's values are bucketed (at most
:data:`BUCKETS` buckets over its range), the buckets counted in one streamed pass, and
only the bucket holding a wanted rank is read, or counted again more finely when it is
itself too large. The figures equal the whole column's: the same order statistics, and
Polars' linear interpolation between them.
"""

from __future__ import annotations

import math

import polars as pl

#: Buckets per counting pass; the values of one are read only if at most :data:`READ_AT_ONCE`.
BUCKETS = 1 << 16
READ_AT_ONCE = 1 << 16


def order_statistic(frame: pl.LazyFrame, column: str, rank: int, low: int, high: int) -> int:
    """The ``rank``-th smallest (0-based) non-null value of the integer ``column``, all of
    whose values lie in [``low``, ``high``]."""
    value = pl.col(column).cast(pl.Int64)
    while True:
        inside = frame.filter(value.is_between(low, high))
        width = max(math.ceil((high - low + 1) / BUCKETS), 1)
        counts = (
            inside.select(((value - low) // width).alias("bucket"))
            .group_by("bucket")
            .len()
            .sort("bucket")
            .with_columns(pl.col("len").cum_sum().alias("through"))
            .collect(engine="streaming")
        )
        bucket, count, through = counts.filter(pl.col("through") > rank).row(0)
        rank -= through - count
        low, high = low + bucket * width, min(low + (bucket + 1) * width - 1, high)
        if width == 1:
            return low
        if count <= READ_AT_ONCE:
            values = frame.filter(value.is_between(low, high)).select(value).collect()[column].sort()
            return int(values[rank])


def ns_figures_ms(frame: pl.LazyFrame, column: str, quantiles: dict[str, float]) -> dict[str, float | None]:
    """Mean, the named quantiles (linear interpolation, as Polars') and maximum of the ns
    column, in ms; None for no values."""
    value = pl.col(column).cast(pl.Int64)
    n, total, low, high = (
        frame.select(value.count(), value.sum().alias("sum"), value.min().alias("min"), value.max().alias("max"))
        .collect(engine="streaming")
        .row(0)
    )
    if not n:
        return {"mean": None, **dict.fromkeys(quantiles), "max": None}
    found: dict[int, float] = {}

    def ms_at(rank: int) -> float:
        if rank not in found:
            found[rank] = order_statistic(frame, column, rank, low, high) / 1e6
        return found[rank]

    figures: dict[str, float | None] = {"mean": total / n / 1e6}
    for name, q in quantiles.items():
        position = (n - 1) * q
        below, above = math.floor(position), math.ceil(position)
        lower = ms_at(below)
        figures[name] = lower if below == above else lower + (ms_at(above) - lower) * (position - below)
    figures["max"] = high / 1e6
    return figures
