"""The plotly figures the Python API (:mod:`sqlwa.api`) and the HTML report
(:mod:`sqlwa.views.report`) share, so a figure in a notebook is the same figure as in the
report: the device-level figures over frames of block requests, a run's commit
timeline, bytes per commit by category, and commit-latency CDFs.

The binning and counting happen in Polars, never in a Python loop over events. Colours
and layout live here.

The input of the request figures is a frame of block requests as :mod:`sqlwa.analysis.traceparse`
produces them (``time_ns``, ``sector``, ``bytes``, ``operation``, ``preflush``, ``fua``)
plus ``ms`` (time since the start of the view) and, for the timeline, ``key`` (what
colours the marker: a category, or the operation). The run-level figures read run
directories through :mod:`sqlwa.results.rundir`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from sqlwa.analysis import metrics
from sqlwa.analysis.windows import block_issues
from sqlwa.catalogue import CONFIG_KEYS, METRICS, config_key, config_label, has_layers, is_flush, stack_label
from sqlwa.errors import UsageError
from sqlwa.results import rundir

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

WINDOW_COLOURS = ("#ffd54f", "#90caf9")  # neighbouring commit windows alternate
TIMELINE_COMMITS = 12  # commit windows a timeline shows: enough to see the rhythm, few enough to read
PER_COMMIT_BARS = 40  # commits per configuration in the per-commit bars
CDF_POINTS = 1000  # most corners a CDF curve draws; a longer run's curve takes every k-th rank
# Latency curves: enough colours that a 12-configuration matrix needs no repeat (the
# default template cycles 10), and a dash per filesystem.
CURVE_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a",
    "#637939", "#7b4173", "#e7ba52", "#843c39",
)  # fmt: skip
CURVE_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


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
    top = int(cast(int, data["sector"].max()) or 0) if data.height else 0
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
    fig.update_yaxes(tickformat=",d")  # plain sector numbers: plotly's SI suffix writes a billion as "1B"
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


def timeline_windows(
    commit_windows: pl.DataFrame, first: int | None = None, count: int | None = TIMELINE_COMMITS
) -> pl.DataFrame:
    """The commit windows a timeline shows: ``count`` of them (None: all) from transaction
    ``first``, by default from the first measured (non-warm-up) one."""
    shown = (
        commit_windows.filter(~pl.col("warmup")) if first is None else commit_windows.filter(pl.col("index") >= first)
    )
    shown = shown.sort("win_start_ns")
    return shown.head(count) if count is not None else shown


def request_categories(attributed: pl.DataFrame) -> pl.DataFrame:
    """``time_ns``, ``sector``, ``category`` of every attributed write, one row per request
    position: what a request on the timeline is joined with to take its colour."""
    return attributed.select("time_ns", "sector", pl.col("category").cast(pl.String)).unique(
        ["time_ns", "sector"], keep="first", maintain_order=True
    )


def commit_timeline(
    events: pl.DataFrame,
    device: tuple[int, int],
    commit_windows: pl.DataFrame,
    label: str,
    categories: pl.DataFrame | None = None,
    first: int | None = None,
    count: int | None = TIMELINE_COMMITS,
) -> go.Figure:
    """A run's timeline, the one the report and :meth:`sqlwa.Run.timeline` draw: the block
    requests on ``device`` during the commit windows :func:`timeline_windows` picks, by
    sector over time, coloured by ``categories`` (:func:`request_categories`; by operation
    without them), cache flushes marked, the windows shaded."""
    shown = timeline_windows(commit_windows, first, count)
    if shown.height == 0:
        raise UsageError(f"{label}: no commit windows to draw", "choose `first` within the run's commits")
    t0, t1 = int(cast(int, shown["win_start_ns"].min())), int(cast(int, shown["win_end_ns"].max()))
    # Block requests as the device saw them: issued (action D), never queued (Q). A
    # request is queued bio by bio and may be merged, split or requeued before the driver
    # takes it; issue is the one moment each request reaches the device, and it is what
    # the per-commit block figures and the attribution count, so the timeline agrees
    # with them request for request.
    issued = with_ms(block_issues(events, device).filter(pl.col("time_ns").is_between(t0, t1)), t0)
    key, coloured_by = operation_key(), "operation"
    if categories is not None:
        issued = issued.join(categories, on=["time_ns", "sector"], how="left")
        key, coloured_by = pl.coalesce("category", operation_key()), "category"
    first_shown, last_shown = cast(int, shown["index"].min()), cast(int, shown["index"].max())
    title = f"timeline: {label}, commits {first_shown}–{last_shown} (shaded)"
    fig = timeline_figure(issued.with_columns(key.alias("key")), title, shown, t0, coloured_by)
    fig.update_layout(xaxis_title="ms since the first commit shown")
    return fig


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


def uniform_bins(values: pl.Series, bins: int, finest: float) -> tuple[float, float, int]:
    """(start, width, count) of equal bins covering ``values``: ``bins`` of them, fewer
    where the values span less than ``bins`` × ``finest``."""
    low, high = cast(float, values.min()), cast(float, values.max())
    width = max((high - low) / bins, finest)
    return low, width, min(bins, int((high - low) / width) + 1)


def bin_index(column: str, start: float, width: float, count: int) -> pl.Expr:
    return ((pl.col(column) - start) / width).floor().clip(0, count - 1).cast(pl.Int64)


def sector_heatmap(
    requests: pl.DataFrame, time_bins: int = 80, sector_bins: int = 64, title: str = "bytes written by time and sector"
) -> go.Figure:
    """KiB written per (time, sector) bin: where on the device the writes land, and when.
    The bins are explicit and equal, an empty one left empty: given only the non-empty
    cells, plotly stretches each to its next neighbour (a bin at 148 M sectors painted up
    to 543 M)."""
    writes = requests.filter(pl.col("operation") == "write").select("ms", pl.col("sector").cast(pl.Float64), "bytes")
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title="ms", yaxis_title="sector (512 B)", height=460, **LAYOUT)
    fig.update_yaxes(tickformat=",d")  # plain sector numbers: plotly's SI suffix writes a billion as "1B"
    if writes.height == 0:
        return fig
    (t0, dt, nt), (s0, ds, ns) = (
        uniform_bins(writes["ms"], time_bins, 1e-3),
        uniform_bins(writes["sector"], sector_bins, 1),
    )
    cells = writes.group_by(bin_index("ms", t0, dt, nt).alias("t"), bin_index("sector", s0, ds, ns).alias("s")).agg(
        (pl.col("bytes").sum() / 1024).alias("kib")
    )
    grid: list[list[float | None]] = [[None] * nt for _ in range(ns)]
    for t, sector, kib in cells.iter_rows():  # one row per non-empty cell, not per write
        grid[sector][t] = kib
    fig.add_heatmap(
        z=grid,
        x=[t0 + dt * (i + 0.5) for i in range(nt)],
        y=[s0 + ds * (i + 0.5) for i in range(ns)],
        colorscale="Viridis",
        colorbar=dict(title="KiB"),
        hovertemplate=f"%{{x:.1f}} ± {dt / 2:.1f} ms, sector %{{y:,.0f}} ± {ds / 2:,.0f}: %{{z:.1f}} KiB<extra></extra>",
    )
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


# ------------------------------------------------------------------ runs and configurations


def category_bytes(summary: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """Bytes per commit by category from a run's summary.json, and where they come from:
    attribution categories when the run has them, else SQLite's VFS bytes by file kind."""
    by_cat = summary.get("bytes_by_category")
    commits = max(summary.get("commits") or 1, 1)
    if isinstance(by_cat, dict) and by_cat:
        # amortized (writeback and checkpoints included) matches the KiB heatmap; else in-window
        for key, source in (
            ("amortized_per_commit", "block bytes by attribution category, amortized"),
            ("per_commit", "block bytes by attribution category, inside commit windows"),
        ):
            if isinstance(by_cat.get(key), dict):
                return {k: float(v) for k, v in by_cat[key].items()}, source
        numeric = {k: float(v) for k, v in by_cat.items() if isinstance(v, (int, float))}
        if numeric:
            return {k: v / commits for k, v in numeric.items()}, "block bytes by attribution category"
    vfs = summary.get("vfs_by_file", {})
    return {kind: counters.get("write_bytes", 0.0) for kind, counters in vfs.items()}, "SQLite VFS bytes by file kind"


def category_bars(means: pl.DataFrame) -> tuple[go.Figure, str]:
    """KiB per commit by category, one stacked bar per configuration of ``means`` (a
    :func:`sqlwa.results.store.config_means` frame) in a panel per filesystem, each on
    its own scale: on one linear axis btrfs's bars flatten ext4's and xfs's. And a note
    when the bars show VFS bytes because the runs carry no attribution categories."""
    rows = list(means.iter_rows(named=True))
    measured = [category_bytes(rundir.summary(row["run_dir"])) for row in rows]
    categories = list(dict.fromkeys(cat for by_cat, _ in measured for cat in by_cat))
    filesystems = list(dict.fromkeys(row["fs"] for row in rows))
    fig = make_subplots(rows=1, cols=len(filesystems), subplot_titles=[f"fs: {fs}" for fs in filesystems])
    names, shown = bar_names(rows), set()
    for panel, fs in enumerate(filesystems, start=1):
        mine = [n for n, row in enumerate(rows) if row["fs"] == fs]
        for cat in categories:
            values = [measured[n][0].get(cat, 0.0) / 1024 for n in mine]
            if any(values):
                fig.add_bar(
                    name=cat,
                    legendgroup=cat,
                    showlegend=cat not in shown,
                    x=[names[n] for n in mine],
                    y=values,
                    marker_color=CATEGORY_COLOURS.get(cat),
                    hovertemplate=f"{fs} %{{x}} {cat}: %{{y:.2f}} KiB<extra></extra>",
                    row=1,
                    col=panel,
                )
                shown.add(cat)
    sources = {source for _, source in measured}
    fig.update_layout(barmode="stack", title="KiB per commit by category: " + " / ".join(sorted(sources)), height=460)
    fig.update_layout(**LAYOUT)
    fig.update_yaxes(title_text="KiB per commit", row=1, col=1)
    return fig, vfs_bytes_note(sources)


def bar_names(rows: list[dict]) -> list[str]:
    """A configuration's name inside its filesystem's panel: journal/sync, after the
    scenario when there are several and after the layers when any configuration has some."""
    several = len({row["scenario"] for row in rows}) > 1
    layered = any(has_layers(row) for row in rows)
    return [
        f"{row['scenario'] + ' ' if several else ''}{stack_label(row) + ' ' if layered else ''}"
        f"{row['journal']}/{row['sync']}"
        for row in rows
    ]


def layer_cost_bars(costs: pl.DataFrame) -> go.Figure:
    """Each layered configuration's figures as a ratio to its plain filesystem's (a
    :func:`sqlwa.results.layers.layer_costs` frame): a group of bars per metric, a bar per
    configuration, the plain filesystem at 1. A figure without a ratio has no bar."""
    fig = go.Figure()
    metrics = list(dict.fromkeys(costs["metric"]))
    labels = [METRICS[m].label for m in metrics]
    scenarios = {str(config).split(" ", 1)[0] for config in costs["config"]}
    for config, rows in costs.group_by("config", maintain_order=True):
        by_metric = {row["metric"]: row for row in rows.iter_rows(named=True)}
        name = str(config[0]).split(" ", 1)[1] if len(scenarios) == 1 else str(config[0])
        fig.add_bar(
            name=name,
            x=labels,
            y=[by_metric[m]["ratio"] for m in metrics],
            customdata=[[by_metric[m]["layered"], by_metric[m]["plain"]] for m in metrics],
            hovertemplate=f"{config[0]}<br>%{{x}}: %{{customdata[0]:.3f}} vs %{{customdata[1]:.3f}} plain "
            "= ×%{y:.2f}<extra></extra>",
        )
    fig.add_hline(y=1, line_dash="dash", line_color="black", line_width=1)
    fig.update_layout(
        barmode="group",
        title="each stack's cost per commit as a multiple of its plain filesystem's (1 = the same)",
        yaxis_title="× plain filesystem",
        height=460,
        **LAYOUT,
    )
    return fig


def vfs_bytes_note(sources: set[str]) -> str:
    if all(src.startswith("block") for src in sources):
        return ""
    return (
        "These runs carry no attribution categories (bytes_by_category); the bars show SQLite's VFS bytes by "
        "file kind, what SQLite wrote before the filesystem added its own."
    )


def per_commit_bytes(run_dir: str | Path) -> tuple[pl.DataFrame, str]:
    """The first measured commits of a run with one column per category (KiB), and the
    source: attribution categories when commits.parquet has them, else VFS file kinds."""
    commits = rundir.commits(Path(run_dir)).filter(~pl.col("warmup")).head(PER_COMMIT_BARS)
    by_category = [c for c in commits.columns if c.startswith("bytes_")]
    if by_category:
        columns = {c.removeprefix("bytes_"): c for c in by_category}
        source = "block bytes by attribution category (inside the commit window)"
    else:
        columns = {
            c.removeprefix("vfs_").removesuffix("_write_bytes"): c
            for c in commits.columns
            if c.startswith("vfs_") and c.endswith("_write_bytes") and c != "vfs_write_bytes"
        }
        source = "SQLite VFS bytes by file kind"
    return commits.select("index", *[(pl.col(c) / 1024).alias(name) for name, c in columns.items()]), source


def ecdf(ms: pl.Series) -> tuple[list[float], list[float]]:
    """The corners of the empirical CDF of ``ms``: (v_k, k/n) for the sorted values v,
    after (v_1, 0). Drawn with ``line_shape="hv"`` they are its steps. Past
    :data:`CDF_POINTS` values, every ⌈n/CDF_POINTS⌉-th rank (and the last) — each corner
    still a value and the exact share of commits at or below it."""
    values = ms.sort().to_list()
    n = len(values)
    ranks = list(range(1, n + 1, max(1, math.ceil(n / CDF_POINTS))))
    ranks += [n] if ranks[-1] != n else []
    return [values[0], *(values[k - 1] for k in ranks)], [0.0, *(k / n for k in ranks)]


def curve_styles(configs: list[dict]) -> list[dict]:
    """A line style per configuration, no two alike (12 curves outnumber plotly's 10
    colours): the dash tells the filesystem, the colour the rest of the configuration;
    past the palette or the dashes, colour and dash by position."""
    filesystems = list(dict.fromkeys(c["fs"] for c in configs))
    rests = [tuple(c[k] for k in CONFIG_KEYS if k != "fs") for c in configs]
    distinct = list(dict.fromkeys(rests))
    if len(distinct) <= len(CURVE_COLOURS) and len(filesystems) <= len(CURVE_DASHES):
        picks = [(distinct.index(rest), filesystems.index(c["fs"])) for rest, c in zip(rests, configs)]
    else:
        picks = [(i % len(CURVE_COLOURS), i // len(CURVE_COLOURS) % len(CURVE_DASHES)) for i in range(len(configs))]
    return [dict(color=CURVE_COLOURS[colour], dash=CURVE_DASHES[dash], width=2) for colour, dash in picks]


def measured_latencies(runs: pl.DataFrame) -> list[tuple[dict, pl.Series]]:
    """Each configuration of ``runs`` with its successful runs' measured commit
    latencies (ms), in the frame's order; configurations without any are left out."""
    found = []
    for key, group in runs.filter(pl.col("status") == "ok").group_by(CONFIG_KEYS, maintain_order=True):
        frames = [rundir.commits(d).filter(~pl.col("warmup")) for d in group["run_dir"]]
        ms = pl.concat([f["latency_ns"].cast(pl.Float64) / 1e6 for f in frames])
        if ms.len():
            found.append((dict(zip(CONFIG_KEYS, key)), ms))
    return found


EMULATED_LABEL = " (emulated CPU)"


def latency_cdfs(runs: pl.DataFrame, emulated: set[tuple] | None = None) -> go.Figure:
    """Commit-latency CDFs, one step curve per configuration of ``runs`` (a runs frame:
    status, run_dir and the configuration keys), over its successful runs' measured
    commits, with the default frame budget marked and labelled. Configurations in
    ``emulated`` (keys) are labelled as an emulated CPU's."""
    budget_ms = metrics.DEFAULT_FRAME_BUDGET_MS
    fig = go.Figure()
    lowest, highest = budget_ms, budget_ms
    curves = measured_latencies(runs)
    one_scenario = len({config["scenario"] for config, _ in curves}) == 1
    for (config, ms), style in zip(curves, curve_styles([config for config, _ in curves])):
        xs, ys = ecdf(ms)
        lowest, highest = min(lowest, max(xs[0], 1e-3)), max(highest, xs[-1])
        label = config_label(config)
        label = label.removeprefix(f"{config['scenario']} ") if one_scenario else label
        label += EMULATED_LABEL if config_key(config) in (emulated or set()) else ""
        fig.add_scatter(
            x=xs,
            y=ys,
            mode="lines",
            line=style,
            line_shape="hv",  # an empirical CDF is a step function
            name=label,
            hovertemplate=f"{label}<br>%{{y:.1%}} of commits took ≤ %{{x:.3f}} ms<extra></extra>",
        )
    mark_budget(fig, budget_ms)
    # An explicit range: on a log axis the marker line would otherwise stretch autorange.
    fig.update_xaxes(range=[math.log10(lowest / 1.5), math.log10(highest * 1.5)])
    fig.update_layout(
        title="commit latency CDF per configuration",
        xaxis_type="log",
        xaxis_title="commit latency, ms (log)",
        yaxis_title="share of commits",
        yaxis_tickformat=".0%",
        height=480,
        **LAYOUT,
    )
    return fig


def mark_budget(fig: go.Figure, budget_ms: float) -> None:
    """The frame budget as a dashed line, labelled beside it. The label is an annotation of
    its own: on a log axis an annotation's x is the log of the value (add_vline's
    annotation takes the value itself and lands far off the plot)."""
    fig.add_vline(x=budget_ms, line_dash="dash", line_color="black", line_width=1)  # no curve is black
    fig.add_annotation(
        x=math.log10(budget_ms),
        xref="x",
        y=1,
        yref="y domain",
        text=f"frame budget {budget_ms:.2f} ms",
        showarrow=False,
        xanchor="right",
        yanchor="top",
    )


PREDICTED_DASHES = ("dot", "dash", "dashdot", "longdash", "longdashdot")


def predicted_cdfs(
    configurations: list[tuple[dict, pl.Series, dict[str, pl.Series]]], emulated: set[tuple] | None = None
) -> go.Figure:
    """Measured (solid) and predicted commit-latency CDFs: per configuration its keys, its
    measured latencies (none: no measured curve) and, by device, the predicted ones (ms).
    A colour per configuration, a dash per device; configurations in ``emulated`` (keys)
    are labelled as an emulated CPU's."""
    fig = go.Figure()
    budget_ms = metrics.DEFAULT_FRAME_BUDGET_MS
    lowest, highest = budget_ms, budget_ms
    devices = list(dict.fromkeys(name for _, _, predicted in configurations for name in predicted))
    for number, (config, measured, predicted) in enumerate(configurations):
        colour = CURVE_COLOURS[number % len(CURVE_COLOURS)]
        label = config_label(config) + (EMULATED_LABEL if config_key(config) in (emulated or set()) else "")
        curves = [(measured, f"{label}, measured here", "solid")] if measured.len() else []
        curves += [
            (ms, f"{label} on {device}", PREDICTED_DASHES[devices.index(device) % len(PREDICTED_DASHES)])
            for device, ms in predicted.items()
        ]
        for ms, name, dash in curves:
            xs, ys = ecdf(ms)
            lowest, highest = min(lowest, max(xs[0], 1e-3)), max(highest, xs[-1])
            fig.add_scatter(
                x=xs,
                y=ys,
                mode="lines",
                line=dict(color=colour, dash=dash, width=2),
                line_shape="hv",
                name=name,
                hovertemplate=f"{name}<br>%{{y:.1%}} of commits ≤ %{{x:.3f}} ms<extra></extra>",
            )
    mark_budget(fig, budget_ms)
    fig.update_xaxes(range=[math.log10(lowest / 1.5), math.log10(highest * 1.5)])
    fig.update_layout(
        title="commit latency: measured here (solid), and predicted on each device",
        xaxis_type="log",
        xaxis_title="commit latency, ms (log)",
        yaxis_title="share of commits",
        yaxis_tickformat=".0%",
        height=480,
        **LAYOUT,
    )
    return fig
