"""Where a commit's time goes on the device, as btt splits a request's life: Q2D (the
bio queued → the request dispatched to the device) and D2C (dispatched → completed), per
request, and the share of each commit's latency during which the device had a request
in flight.

The trace holds ``block_bio_queue`` (Q), ``block_rq_issue`` (D) and ``block_rq_complete``
(C). A request's D is matched to the first C after it with the same operation, sector
and length (a flush: the next flush completion; the kernel reports a flush's sector as
0 at issue and as -1 at completion). Its Q is the latest bio queued at the request's
first sector, with the same operation, at or before its D: the bio the request starts
with (bios merged behind it queued later, so Q2D is the longest wait of its data). A
flush the block layer made from a bio's preflush flag has no Q of its own: no Q2D.

The device's share of a commit's latency is the union of the in-flight intervals
[D, C] of every request on the device, clipped to the commit's window, over the window's
length (the commit's latency on the trace's clock): parallel requests count once, and a
request issued before the commit (writeback) counts for the part it overlapped.
"""

from __future__ import annotations

from typing import cast

import polars as pl

from sqlwa.analysis import quantiles, windows
from sqlwa.analysis.windows import Events

#: btt's names for the two phases, as summary.json's keys use them.
PHASES = ("q2d", "d2c")
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
FLUSH_SECTOR = 0  # a flush's sector as matched (the kernel shows 0 at issue, -1 at completion)
REQUEST_COLUMNS = ["time_ns", "operation", "sector", "sectors"]


def _keyed(rows: pl.DataFrame, time_name: str) -> pl.DataFrame:
    """Block rows with the key a request's events share: operation, sector, length."""
    is_flush = pl.col("operation") == "flush"
    return rows.select(
        pl.col("time_ns").cast(pl.Int64).alias(time_name),
        pl.col("operation").cast(pl.String),
        pl.when(is_flush).then(pl.lit(FLUSH_SECTOR, pl.UInt64)).otherwise(pl.col("sector")).alias("sector"),
        pl.col("sectors").cast(pl.Int64),
    ).sort(time_name)


def requests(events: Events, dev: tuple[int, int]) -> pl.DataFrame:
    """One row per request dispatched to ``dev``: ``operation``, ``sector``, ``sectors``,
    ``queue_ns`` (null without a Q), ``issue_ns``, ``complete_ns`` (null when the trace
    ended first), ``q2d_ns`` and ``d2c_ns``."""
    issued = keyed_rows(events, dev, "D")
    completed = keyed_rows(events, dev, "C")
    queued = keyed_rows(events, dev, "Q")
    return matched_requests(issued, completed, queued)


#: The time column each action's keyed rows carry (:func:`keyed_rows`).
TIME_NAMES = {"D": "issue_ns", "C": "complete_ns", "Q": "queue_ns"}


def keyed_rows(events: Events, dev: tuple[int, int], action: str) -> pl.DataFrame:
    """The device's block rows of one action (D, C or Q), keyed and sorted by time."""
    rows = _keyed(windows.block_rows(events, dev, action, REQUEST_COLUMNS), TIME_NAMES[action])
    return rows.drop("sectors") if action == "Q" else rows


def matched_requests(issued: pl.DataFrame, completed: pl.DataFrame, queued: pl.DataFrame) -> pl.DataFrame:
    """:func:`requests` of the keyed D, C and Q rows (:func:`keyed_rows`): each D with the
    first C after it and the latest Q at or before it."""
    out = issued.join_asof(
        completed,
        left_on="issue_ns",
        right_on="complete_ns",
        by=["operation", "sector", "sectors"],
        strategy="forward",
        check_sortedness=False,  # sorted by time above; polars cannot check it within groups
    )
    out = out.join_asof(
        queued,
        left_on="issue_ns",
        right_on="queue_ns",
        by=["operation", "sector"],
        strategy="backward",
        check_sortedness=False,
    )
    no_queue = pl.col("operation") == "flush"
    return out.with_columns(
        pl.when(no_queue).then(None).otherwise(pl.col("queue_ns")).alias("queue_ns"),
    ).with_columns(
        (pl.col("issue_ns") - pl.col("queue_ns")).alias("q2d_ns"),
        (pl.col("complete_ns") - pl.col("issue_ns")).alias("d2c_ns"),
    )


def busy_per_commit(reqs: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """``index`` and ``device_busy_ns``: how long the device had at least one request in
    flight inside each commit window (the union of the requests' [D, C], clipped)."""
    spans = wins.select(
        "index", pl.col("win_start_ns").cast(pl.Int64).alias("w0"), pl.col("win_end_ns").cast(pl.Int64).alias("w1")
    )
    flights = reqs.filter(pl.col("complete_ns").is_not_null()).select("issue_ns", "complete_ns")
    overlapping = spans.join_where(
        flights, pl.col("issue_ns") < pl.col("w1"), pl.col("complete_ns") > pl.col("w0")
    ).select(
        "index",
        pl.max_horizontal("issue_ns", "w0").alias("start"),
        pl.min_horizontal("complete_ns", "w1").alias("end"),
    )
    # the union: each interval adds what lies beyond the furthest end of those started before it
    reach = pl.col("end").cum_max().shift(1).over("index", order_by=["start", "end"])
    union = (
        overlapping.sort("index", "start", "end")
        .with_columns(reach.alias("reach"))
        .select(
            "index", (pl.col("end") - pl.max_horizontal("start", pl.col("reach").fill_null(0))).clip(0).alias("add")
        )
        .group_by("index")
        .agg(pl.col("add").sum().alias("device_busy_ns"))
    )
    out = wins.select("index").join(union, on="index", how="left")
    return out.with_columns(pl.col("device_busy_ns").fill_null(0).cast(pl.Int64))


def section(reqs: pl.DataFrame, wins: pl.DataFrame, commits: pl.DataFrame) -> dict:
    """summary.json's ``device_time``: Q2D and D2C of the requests issued inside measured
    commits, all and by operation, and the device's share of the commits' latency."""
    measured = commits.filter(~pl.col("warmup"))
    spans = wins.filter(pl.col("index").is_in(measured["index"].implode()))
    inside = windows.assign_windows(reqs.rename({"issue_ns": "time_ns"}), spans).filter(pl.col("commit").is_not_null())
    by_operation = {op: phase_figures(rows) for (op,), rows in inside.group_by("operation", maintain_order=True)}
    length = (pl.col("win_end_ns").cast(pl.Int64) - pl.col("win_start_ns").cast(pl.Int64)).alias("length")
    shares = spans.select("index", length).join(measured.select("index", "device_busy_ns"), on="index")
    per_commit = shares.select(
        pl.when(pl.col("length") > 0).then(pl.col("device_busy_ns") / pl.col("length")).alias("share")
    )["share"]
    total = int(shares["length"].sum())
    return {
        "requests": inside.height,
        **phase_figures(inside),
        "by_operation": dict(sorted(by_operation.items())),
        "device_share": {
            "of_all_commits": int(shares["device_busy_ns"].sum()) / total if total else None,
            **{name: value for name, value in _share_quantiles(per_commit).items()},
        },
    }


def phase_figures(rows: pl.DataFrame | pl.LazyFrame) -> dict:
    """The requests counted and each phase's figures in ms (``q2d_ms``, ``d2c_ms``),
    each read by counting (:mod:`sqlwa.analysis.quantiles`): a streamed analysis gives
    the same figures from its requests on disk."""
    rows = rows.lazy()
    return {
        "count": rows.select(pl.len()).collect().item(),
        **{f"{phase}_ms": quantiles.ns_figures_ms(rows, f"{phase}_ns", QUANTILES) for phase in PHASES},
    }


def _share_quantiles(shares: pl.Series) -> dict[str, float | None]:
    values = shares.drop_nulls()
    if values.len() == 0:
        return {"p50": None, "p90": None, "max": None}
    return {
        "p50": float(cast(float, values.quantile(0.5, interpolation="linear"))),
        "p90": float(cast(float, values.quantile(0.9, interpolation="linear"))),
        "max": float(cast(float, values.max())),
    }
