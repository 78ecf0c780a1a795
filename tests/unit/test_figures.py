"""The device-level figures over frames of block requests made here (no trace files): the
figure objects sqlwa.views.figures returns, checked cell by cell."""

from __future__ import annotations

import polars as pl
import pytest

from sqlwa.views import figures

GIB = 2**30 // 512  # sectors in a GiB


def requests(*writes: tuple[float, int, int]) -> pl.DataFrame:
    """Issued write requests (ms, sector, bytes), in the columns the figures read."""
    ms, sectors, sizes = zip(*writes)
    return pl.DataFrame(
        {
            "time_ns": [int(t * 1e6) for t in ms],
            "ms": list(ms),
            "sector": list(sectors),
            "bytes": list(sizes),
            "operation": ["write"] * len(writes),
            "preflush": [False] * len(writes),
            "fua": [False] * len(writes),
        },
        schema_overrides={"sector": pl.UInt64, "bytes": pl.UInt32},
    )


# Writes near the start of a device, at 148 M sectors and at 543 M sectors, over 10 ms.
SPREAD = requests((0.0, 0, 4096), (2.0, 8, 4096), (5.0, 148_000_000, 8192), (10.0, 543_000_000, 4096))


def painted(heatmap) -> dict[tuple[int, int], float]:
    """(time bin, sector bin) → KiB of every non-empty cell of a heatmap trace."""
    return {(t, s): kib for s, row in enumerate(heatmap.z) for t, kib in enumerate(row) if kib is not None}


def test_sector_heatmap_bins_are_equal_and_empty_bins_stay_empty():
    fig = figures.sector_heatmap(SPREAD, time_bins=10, sector_bins=64)
    (heatmap,) = fig.data
    # one row per sector bin, one column per time bin, centres equally spaced: plotly paints
    # each cell its own bin, where a list of non-empty cells alone is stretched to the next
    assert len(heatmap.z) == len(heatmap.y) == 64 and {len(row) for row in heatmap.z} == {len(heatmap.x)} == {10}
    steps = {round(b - a, 3) for a, b in zip(heatmap.y, heatmap.y[1:])}
    assert steps == {round(543_000_000 / 64, 3)}
    sector_bin = lambda sector: min(int(sector / (543_000_000 / 64)), 63)  # noqa: E731
    time_bin = lambda ms: min(int(ms / 1.0), 9)  # noqa: E731
    assert painted(heatmap) == {
        (time_bin(0.0), sector_bin(0)): 4.0,
        (time_bin(2.0), sector_bin(8)): 4.0,
        (time_bin(5.0), sector_bin(148_000_000)): 8.0,
        (time_bin(10.0), sector_bin(543_000_000)): 4.0,
    }
    # nothing between 148 M and 543 M sectors
    assert all(v is None for row in heatmap.z[sector_bin(148_000_000) + 1 : 63] for v in row)


def test_sector_heatmap_of_a_narrow_span_uses_fewer_bins():
    fig = figures.sector_heatmap(requests((0.0, 100, 4096), (1.0, 110, 4096)), time_bins=80, sector_bins=64)
    (heatmap,) = fig.data
    assert len(heatmap.z) == 11 and painted(heatmap) == {(0, 0): 4.0, (79, 10): 4.0}


def test_sector_heatmap_without_writes_is_an_empty_figure():
    fig = figures.sector_heatmap(SPREAD.filter(pl.col("operation") == "read"))
    assert fig.data == () and fig.layout.title.text


@pytest.mark.parametrize(
    "figure",
    [
        lambda: figures.sector_heatmap(SPREAD),
        lambda: figures.timeline_figure(SPREAD.with_columns(pl.lit("write").alias("key")), "t"),
    ],
    ids=["sector_heatmap", "timeline"],
)
def test_sector_axes_are_plain_numbers(figure):
    # plotly's default tick format writes sector 1,000,000,000 as "1B" (SI: billion, not bytes)
    yaxis = figure().layout.yaxis
    assert yaxis.tickformat == ",d" and "sector" in yaxis.title.text
