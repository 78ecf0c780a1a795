"""Device-level figures over frames of block requests, shared by the Python API
(:mod:`sqlwa.api`) and usable from notebooks.

Every function takes Polars frames and returns a plotly figure; the binning and counting
happen in Polars, never in a Python loop over events. Colours and layout live here and
:mod:`sqlwa.report` builds its timeline here too, so a figure in a notebook looks like the
same figure in the report.

The input of the request figures is a frame of block requests as :mod:`sqlwa.traceparse`
produces them (``time_ns``, ``sector``, ``bytes``, ``operation``, ``preflush``, ``fua``)
plus ``ms`` (time since the start of the view) and, for the timeline, ``key`` (what
colours the marker: a category, or the operation).
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from sqlwa.catalogue import is_flush

CATEGORY_COLOURS = {
    "db": "#1f77b4",
    "journal": "#ff7f0e",
    "wal": "#2ca02c",
    "shm": "#9467bd",
    "checkpoint": "#17becf",
    "fs_journal": "#d62728",
    "fs_metadata": "#8c564b",
    "writeback": "#7f7f7f",
    "unattributed": "#bcbd22",
    "temp": "#e377c2",
    "other": "#c7c7c7",
    # operations, when there are no categories
    "write": "#1f77b4",
    "read": "#2ca02c",
    "discard": "#9467bd",
    "write (FUA)": "#d62728",
}
LAYOUT = dict(template="plotly_white", margin=dict(l=70, r=30, t=60, b=60), font=dict(size=13))

WINDOW_COLOURS = ("#ffd54f", "#90caf9")  # neighbouring commit windows alternate, as in the report


def with_ms(requests: pl.DataFrame, t0_ns: int) -> pl.DataFrame:
    """Add ``ms``: time since ``t0_ns`` in milliseconds."""
    return requests.with_columns(((pl.col("time_ns").cast(pl.Int64) - t0_ns) / 1e6).alias("ms"))


def operation_key() -> pl.Expr:
    """The colour key of a request without a category: its operation, FUA writes apart."""
    return pl.when(pl.col("fua")).then(pl.lit("write (FUA)")).otherwise(pl.col("operation").cast(pl.String))


def timeline_figure(
    requests: pl.DataFrame,
    title: str,
    windows: pl.DataFrame | None = None,
    t0_ns: int = 0,
    coloured_by: str = "operation",
) -> go.Figure:
    """Block requests by sector over time (marker area by size, colour by ``key``), cache
    flushes as ▼ above them, and — when ``windows`` (``index``, ``win_start_ns``,
    ``win_end_ns``) is given — the commit windows shaded and labelled."""
    fig = go.Figure()
    data = requests.filter(pl.col("operation") != "flush")
    for key in data["key"].unique(maintain_order=True).to_list():
        part = data.filter(pl.col("key") == key)
        fig.add_scattergl(
            x=part["ms"].to_list(),
            y=part["sector"].to_list(),
            mode="markers",
            name=str(key),
            marker=dict(
                color=CATEGORY_COLOURS.get(key), size=(4 + part["bytes"].cast(pl.Float64).sqrt() / 16).to_list()
            ),
            customdata=(part["bytes"] / 1024).to_list(),
            hovertemplate=f"{key}<br>%{{x:.3f}} ms, sector %{{y}}, %{{customdata:.1f}} KiB<extra></extra>",
        )
    flushes = requests.filter(is_flush())
    top = int(data["sector"].max() or 0) if data.height else 0
    fig.add_scattergl(
        x=flushes["ms"].to_list(),
        y=[top * 1.04] * flushes.height,
        mode="markers",
        name="cache flush",
        marker=dict(symbol="triangle-down", color="black", size=9),
        hovertemplate="cache flush at %{x:.3f} ms<extra></extra>",
    )
    if windows is not None:
        shade_windows(fig, windows, t0_ns)
    fig.update_layout(
        title=title, xaxis_title="ms", yaxis_title="sector (512 B)", height=520, legend_title_text=coloured_by, **LAYOUT
    )
    return fig


def shade_windows(fig: go.Figure, windows: pl.DataFrame, t0_ns: int) -> None:
    """Shade each commit window (one shape per commit, not per event)."""
    spans = windows.select("index", "win_start_ns", "win_end_ns").iter_rows()
    for n, (index, start, end) in enumerate(spans):
        fig.add_vrect(
            x0=(start - t0_ns) / 1e6,
            x1=(end - t0_ns) / 1e6,
            fillcolor=WINDOW_COLOURS[n % 2],
            opacity=0.3,
            line_width=0,
            layer="below",
            annotation_text=f"#{index}",
            annotation_position="bottom left",
            annotation_font_size=9,
        )


def size_histogram(requests: pl.DataFrame, title: str = "write request sizes") -> go.Figure:
    """How many write requests had each size (KiB), one bar per size that occurred."""
    sizes = (
        requests.filter(pl.col("operation") == "write")
        .group_by((pl.col("bytes") / 1024).alias("kib"))
        .agg(pl.len().alias("requests"))
        .sort("kib")
    )
    fig = go.Figure(
        go.Bar(
            x=sizes["kib"].cast(pl.String).to_list(),
            y=sizes["requests"].to_list(),
            hovertemplate="%{x} KiB: %{y} requests<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="request size, KiB",
        xaxis_type="category",
        yaxis_title="write requests",
        height=420,
        **LAYOUT,
    )
    return fig


def binned(column: str, bins: int) -> pl.Expr:
    """The bin (0 … bins-1) of ``column`` over its own range, as the bin's lower edge."""
    low, high = pl.col(column).min(), pl.col(column).max()
    width = pl.max_horizontal((high - low) / bins, pl.lit(1e-9))
    index = ((pl.col(column) - low) / width).floor().clip(0, bins - 1)
    return (low + index * width).alias(column)


def sector_heatmap(
    requests: pl.DataFrame, time_bins: int = 80, sector_bins: int = 64, title: str = "bytes written by time and sector"
) -> go.Figure:
    """Bytes written per (time, sector) bin: where on the device the writes land, and when."""
    writes = requests.filter(pl.col("operation") == "write").select(
        "ms", pl.col("sector").cast(pl.Float64), pl.col("bytes")
    )
    cells = (
        writes.with_columns(binned("ms", time_bins), binned("sector", sector_bins))
        .group_by("ms", "sector")
        .agg((pl.col("bytes").sum() / 1024).alias("kib"))
    )
    fig = go.Figure(
        go.Heatmap(
            x=cells["ms"].to_list(),
            y=cells["sector"].to_list(),
            z=cells["kib"].to_list(),
            colorscale="Viridis",
            colorbar=dict(title="KiB"),
            hovertemplate="from %{x:.1f} ms, sector ≥ %{y:.0f}: %{z:.1f} KiB<extra></extra>",
        )
    )
    fig.update_layout(title=title, xaxis_title="ms (bin start)", yaxis_title="sector (bin start)", height=460, **LAYOUT)
    return fig


def stacked_bars(frame: pl.DataFrame, x: str, title: str, yaxis_title: str = "KiB") -> go.Figure:
    """One stacked bar per row of ``frame`` at ``x``; every other non-zero column a layer."""
    fig = go.Figure()
    for name in frame.columns:
        if name == x or not (frame[name].fill_null(0) != 0).any():
            continue
        fig.add_bar(
            x=frame[x].to_list(),
            y=frame[name].to_list(),
            name=name,
            marker_color=CATEGORY_COLOURS.get(name),
            hovertemplate=f"{x} %{{x}} {name}: %{{y:.2f}}<extra></extra>",
        )
    fig.update_layout(barmode="stack", title=title, xaxis_title=x, yaxis_title=yaxis_title, height=460, **LAYOUT)
    return fig
