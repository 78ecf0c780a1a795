"""``sqlwa report``: one self-contained HTML page for a matrix (or one run).

The page carries plotly.js inline (no CDN, works offline): plotly.js's cartesian partial
bundle (``vendor/``, 1.5 MB instead of the full bundle's 4.8 MB), which has every trace type
the report draws (bar, heatmap, scatter: the timeline's WebGL markers are drawn as SVG
here). These charts:

1. heatmaps of fsyncs, device cache flushes and KiB per commit across the matrix (not for
   a single configuration, where each would be one cell), a row per scenario and stack
   (the filesystem and its layers);
   with layers (encryption, FUSE, a profile), what each stack costs beside its plain
   filesystem: a table of figures, plain figures and ratios, and the ratios as bars
   (:mod:`sqlwa.results.layers`);
2. bytes per commit stacked by category for each configuration, a panel per filesystem
   on its own scale (attribution categories when the runs have ``bytes_by_category``,
   else SQLite's VFS bytes by file kind — the chart says which);
3. the timeline of one run: block requests by sector over time, coloured by category (or
   by operation when the run has no categories), cache flushes marked, commit windows
   shaded — the seekwatcher view with commits;
4. commit-latency CDFs per configuration (step curves) with the 60 Hz frame budget marked;

and a table with every number, sortable by any column. A layer that was not measured is shown as absent (—),
never as 0, and the page says what measuring it needs. The figures the Python API draws
too (bytes by category, the timeline, the latency CDFs) come from :mod:`.figures`; the
metric names, units and descriptions from :mod:`sqlwa.catalogue`.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.offline import get_plotlyjs, get_plotlyjs_version
from plotly.subplots import make_subplots

from sqlwa import outputs
from sqlwa.analysis.phases import PHASE_FIGURES, PHASE_SHORT
from sqlwa.catalogue import (
    CONFIG_KEYS,
    DURABILITY_FINDINGS,
    FINDINGS,
    METRICS,
    Metric,
    config_key,
    config_label,
    stack_label,
)
from sqlwa.device.predict import DevicePrediction, predict_runs
from sqlwa.device.profile import Profile
from sqlwa.errors import UsageError
from sqlwa.results import emulated, layers, phasematch, rundir, store
from sqlwa.results.findings import ConfigFindings, config_findings
from sqlwa.views import figures, replayed
from sqlwa.views.figures import CATEGORY_COLOURS, LAYOUT, PER_COMMIT_BARS


@dataclass
class Section:
    title: str
    html: str  # a plot div or a table
    note: str = ""


# --------------------------------------------------------------------------- data


def measured_anywhere(means: pl.DataFrame, metric: str) -> bool:
    return metric in means.columns and means[metric].is_not_null().any()


def heatmap_row(row: dict) -> str:
    """A configuration's heatmap row: its scenario and its stack (the fs and its layers)."""
    return f"{row['scenario']} · {stack_label(row)}"


def config_axes(means: pl.DataFrame) -> tuple[list[str], list[str]]:
    """Heatmap rows (scenario · stack) and columns (journal/sync), in matrix order."""
    rows = list(dict.fromkeys(heatmap_row(row) for row in means.iter_rows(named=True)))
    cols = means.select(pl.concat_str("journal", pl.lit("/"), "sync").alias("c"))["c"].unique(maintain_order=True)
    return rows, cols.to_list()


def heatmap_grid(means: pl.DataFrame, metric: str) -> tuple[list[str], list[str], list[list[float | None]]]:
    rows, cols = config_axes(means)
    grid: list[list[float | None]] = [[None] * len(cols) for _ in rows]
    for row in means.iter_rows(named=True):
        r = rows.index(heatmap_row(row))
        c = cols.index(f"{row['journal']}/{row['sync']}")
        grid[r][c] = row[metric]
    return rows, cols, grid


# --------------------------------------------------------------------------- charts


def heatmap(means: pl.DataFrame, metric: Metric, title: str, colourscale: str) -> go.Figure:
    rows, cols, grid = heatmap_grid(means, metric.name)
    fig = go.Figure(
        go.Heatmap(
            z=grid,
            x=cols,
            y=rows,
            colorscale=colourscale,
            texttemplate=f"%{{z:.{metric.digits}f}}",
            hovertemplate="%{y} %{x}: %{z:.3f}<extra></extra>",
            colorbar=dict(title=f"{metric.unit} per commit"),
        )
    )
    fig.update_layout(title=title, height=180 + 50 * len(rows), xaxis_title="journal/sync", **LAYOUT)
    fig.update_yaxes(automargin=True)
    return fig


def fsync_heatmap(means: pl.DataFrame) -> tuple[go.Figure, str]:
    if measured_anywhere(means, "fsync_calls_per_commit"):
        return heatmap(means, METRICS["fsync_calls_per_commit"], "fsync + fdatasync syscalls per commit", "Reds"), ""
    note = (
        "The syscall level was not measured (it needs root and tracefs: run the matrix with sudo); "
        "this shows SQLite's own xSync calls, counted by the VFS shim."
    )
    fig = heatmap(means, METRICS["vfs_sync_calls_per_commit"], "SQLite xSync calls per commit (VFS level)", "Reds")
    return fig, note


def kib_heatmap(means: pl.DataFrame) -> tuple[go.Figure, str]:
    if measured_anywhere(means, "write_kib_per_commit"):
        note = "Block KiB written from the first measured commit to the end of the run (writeback included) / commits."
        fig = heatmap(means, METRICS["write_kib_per_commit"], "block KiB written per commit (amortized)", "Blues")
        return fig, note
    note = (
        "The block level was not measured (it needs root, a lab filesystem and tracefs); "
        "this shows the KiB SQLite handed to the VFS."
    )
    return heatmap(means, METRICS["vfs_write_kib_per_commit"], "SQLite VFS KiB written per commit", "Blues"), note


def flush_heatmap(means: pl.DataFrame) -> tuple[go.Figure | None, str]:
    """Device cache flushes per commit, or None (and why) where no run measured them."""
    if not measured_anywhere(means, "flushes_per_commit"):
        return None, (
            "The block level was not measured (it needs root, a lab filesystem and tracefs), and only the device "
            "sees cache flushes: there is nothing to show here."
        )
    note = (
        "Flush requests and writes with the preflush flag: the waits for the device's cache that make a sync "
        "durable. Compare with the fsyncs: a filesystem may flush more (or less) than once per fsync."
    )
    return heatmap(means, METRICS["flushes_per_commit"], "device cache flushes per commit", "Purples"), note


HEATMAPS = (
    ("fsyncs per commit", "plot-fsync-heatmap", fsync_heatmap),
    ("cache flushes per commit", "plot-flush-heatmap", flush_heatmap),
    ("KiB written per commit", "plot-kib-heatmap", kib_heatmap),
)


def heatmap_sections(means: pl.DataFrame) -> list[Section]:
    """The heatmaps across the matrix, or one note where they would each be one cell."""
    rows, cols = config_axes(means)
    if len(rows) == len(cols) == 1:
        note = (
            "One configuration: heatmaps across the matrix (fsyncs, cache flushes and KiB per commit) would be "
            "a single cell each, so none is drawn; the numbers are in the table below."
        )
        return [Section("fsyncs, flushes and KiB per commit", "", note)]
    sections = []
    for title, plot_id, draw in HEATMAPS:
        fig, note = draw(means)
        sections.append(Section(title, "" if fig is None else plot_div(fig, plot_id), note))
    return sections


def per_commit_bars(means: pl.DataFrame) -> tuple[go.Figure, str]:
    rows = list(means.iter_rows(named=True))
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=False,
        vertical_spacing=0.35 / max(len(rows), 1),
        subplot_titles=[config_label(r) for r in rows],
    )
    sources, shown = set(), set()
    for n, row in enumerate(rows, start=1):
        frame, source = figures.per_commit_bytes(row["run_dir"])
        sources.add(source)
        for cat in frame.columns[1:]:
            if not (frame[cat].fill_null(0) != 0).any():
                continue
            fig.add_bar(
                x=frame["index"].to_list(),
                y=frame[cat].to_list(),
                name=cat,
                legendgroup=cat,
                showlegend=cat not in shown,
                marker_color=CATEGORY_COLOURS.get(cat),
                row=n,
                col=1,
                hovertemplate=f"commit %{{x}} {cat}: %{{y:.2f}} KiB<extra></extra>",
            )
            shown.add(cat)
    fig.update_layout(
        barmode="stack",
        height=120 + 170 * len(rows),
        **LAYOUT,
        title=f"KiB of each commit by category, first {PER_COMMIT_BARS} measured commits per configuration",
    )
    fig.update_yaxes(title_text="KiB", title_font_size=11)
    note = (
        "Source: " + "; ".join(sorted(sources)) + ". Spikes are the commits that paid for more (checkpoints, "
        "journal commits); the x axis is the transaction number. An empty panel: nothing reached the device "
        "inside that configuration's commit windows (its writes were deferred to writeback)."
    )
    return fig, note


def timeline_run(runs: pl.DataFrame) -> dict | None:
    """The run to draw: a measured run with an event table, DELETE/FULL when there is one
    (the busiest commit), else the first."""
    candidates = [
        r
        for r in runs.filter(pl.col("status") == "ok").iter_rows(named=True)
        if "block" in json.loads(r["levels"] or "[]") and has_events(r)
    ]
    if not candidates:
        return None
    preferred = [r for r in candidates if r["journal"] == "delete" and r["sync"] == "full"]
    return (preferred or candidates)[0]


def has_events(run: dict) -> bool:
    return bool(run.get("events_path")) or rundir.has_trace(Path(run["run_dir"]))


def read_events(run: dict) -> pl.DataFrame:
    """The run's event table (events.parquet, or its trace.txt parsed in memory —
    reading a run never writes into it)."""
    if run.get("events_path"):
        with rundir.reading(Path(run["events_path"])):
            return rundir.read_parquet(Path(run["events_path"]))
    return rundir.events(Path(run["run_dir"]))


def timeline(run: dict) -> tuple[go.Figure, str]:
    """The run's timeline, the same figure :meth:`sqlwa.Run.timeline` draws."""
    run_dir = Path(run["run_dir"])
    events = read_events(run)
    device = rundir.lab_device(rundir.summary(run_dir)["config"])
    assert device is not None, "a run that measured the block level ran on a lab device"
    attributed = rundir.attributed_writes(run_dir)
    categories = None if attributed is None else figures.request_categories(attributed)
    commit_windows = rundir.commit_windows(rundir.commits(run_dir), lambda: events)
    fig = figures.commit_timeline(events, device, commit_windows, config_label(run), categories)
    coloured_by = "operation" if categories is None else "category"
    note = (
        f"Block requests as issued to the device, marker area by size, coloured by {coloured_by}; "
        "▼ = cache flush (flush request or preflush flag); shaded bands (alternating yellow/blue, "
        "labelled with the transaction number) = the first measured commits' windows; unshaded gaps = I/O "
        "between commits."
    )
    if coloured_by == "operation":
        note += " This run has no attribution categories, so colours show the operation instead."
    return fig, note


# --------------------------------------------------------------------------- layers


def cost_cell(row: dict | None, digits: int) -> str:
    """The layered figure, the plain one and their ratio, sorted by the ratio."""
    if row is None or row["layered"] is None:
        return number_cell(None)
    plain = "no plain run" if row["plain"] is None else f"{row['plain']:,.{digits}f}"
    times = "" if row["ratio"] is None else f" <b>×{row['ratio']:.2f}</b>"
    key = "" if row["ratio"] is None else row["ratio"]
    return f'<td data-sort="{key}">{row["layered"]:,.{digits}f} <span class="unit">vs {plain}</span>{times}</td>'


CPU_ABSENT = (
    '<td data-sort=""><span class="absent" title="not measured: this sqlwa does not record CPU time per commit">'
    "—</span></td>"
)


def layer_cost_table(costs: pl.DataFrame) -> str:
    """A row per layered configuration: each figure beside its plain filesystem's and the
    ratio; CPU per commit absent (—) until runs record it."""
    metrics = list(dict.fromkeys(costs["metric"]))
    head = "".join(metric_head(METRICS[m]) for m in metrics)
    # CPU time is a metric like the others once runs record it; until then its column is absent, not 0
    cpu_measured = layers.CPU_METRIC in metrics
    cpu_head, cpu_cell = ("", "") if cpu_measured else (f"<th>{layers.CPU_LABEL}</th>", CPU_ABSENT)
    body = []
    for config, rows in costs.group_by("config", maintain_order=True):
        by_metric = {row["metric"]: row for row in rows.iter_rows(named=True)}
        plain = rows["plain_config"][0]
        stack = f"{config[0]} ({runs_text(rows['runs'][0])})"
        plain_text = None if plain is None else f"{plain} ({runs_text(rows['plain_runs'][0])})"
        cells = "".join(cost_cell(by_metric.get(m), METRICS[m].digits) for m in metrics)
        body.append(
            f'<tr><th>{html.escape(stack)}</th><td class="what">{fmt_cell(plain_text)}</td>{cells}{cpu_cell}</tr>'
        )
    return (
        '<div class="scroll"><table class="sortable" id="layer-costs"><thead><tr><th>stack</th>'
        f"<th>plain filesystem</th>{head}{cpu_head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def runs_text(runs: int | None) -> str:
    """How many runs a side's means are over: '1 run' says a ratio is one sample."""
    return "1 run" if runs in (None, 1) else f"mean of {runs} runs"


def layer_sections(means: pl.DataFrame) -> list[Section]:
    """What each layer costs beside the plain filesystem; nothing for results without layers."""
    costs = layers.layer_costs(means)
    if costs.height == 0:
        return []
    note = (
        "Each stack (encryption, FUSE layer, profile) beside the same scenario, filesystem, journal and sync "
        "without layers: its figure vs the plain one, and the ratio (×1.00 = the same). Means per commit; "
        "latency quantiles over the repeats' commits pooled. fsyncs are SQLite's thread's, so a FUSE daemon's "
        "own syncs show in the flushes and requests the device saw. A profile's ratio includes its mount "
        "options. Latency varies from run to run (counts do not): measure with --repeat before reading a "
        "latency ratio. A stack without a plain run in these results has no ratio: add none to its axis. "
        "Each side says how many runs its figures are over."
    )
    single = costs.filter((pl.col("runs").fill_null(1) < 2) | (pl.col("plain_runs").fill_null(1) < 2))
    if single.height:
        note += " Ratios from a single run on either side are one sample each, not a mean over repeats."
    missing = costs.filter(pl.col("plain_config").is_null())["config"].unique(maintain_order=True).to_list()
    if missing:
        note += f" No plain run of: {', '.join(missing)}."
    figure = plot_div(figures.layer_cost_bars(costs), "plot-layer-costs")
    return [Section("what each layer costs", layer_cost_table(costs) + figure, note)]


# --------------------------------------------------------------------------- tables


def fmt_cell(value) -> str:
    if value is None:
        return '<span class="absent" title="not measured">—</span>'
    if isinstance(value, float):
        return f"{value:,.3f}"
    return html.escape(str(value))


def metric_help(metric: Metric) -> str:
    """What a metric is, in one line: its description, unit, level and direction."""
    return f"{metric.description} [{metric.unit}; {metric.level} level; {metric.direction}]"


def metric_head(metric: Metric) -> str:
    """A column head: the metric's label, its unit under it unless the label says it, and
    its name and meaning on hover."""
    unit = "" if metric.unit in metric.label.split() else f'<br><span class="unit">{html.escape(metric.unit)}</span>'
    hover = html.escape(f"{metric.name}: {metric_help(metric)}")
    return f'<th title="{hover}">{html.escape(metric.label)}{unit}</th>'


def number_cell(value: float | int | None, digits: int = 0) -> str:
    """A cell with a number, and the number again as the key the table sorts by ("" sorts
    absent values last)."""
    shown = fmt_cell(value) if value is None else f"{value:,.{digits}f}"
    return f'<td data-sort="{"" if value is None else value}">{shown}</td>'


PHASES_NOTE = (
    "A WAL run's commits go through phases: WAL growth until the first checkpoint, the commits that ran a "
    "checkpoint, then steady state (the WAL written again from its start). Whole-run means mix them in "
    "proportion to the run's length; these are each phase's own means over its commits (repeats pooled), "
    "of what happened inside the commit windows. Rollback journals: every measured commit is steady state."
)


def phases_table(runs: pl.DataFrame) -> str:
    """Per configuration and phase: commits and the per-commit means of each figure the
    runs measured (:mod:`sqlwa.analysis.phases`); warm-up is left out."""
    mixes = phasematch.config_mixes(runs)
    shown = [f for f in PHASE_FIGURES if any(m.mean(p, f) is not None for m in mixes.values() for p in m.commits)]
    head = "<tr><th>configuration</th><th>phase</th><th>commits</th>" + "".join(
        f"<th>{html.escape(METRICS[f].label)}</th>" for f in shown
    )
    rows = []
    for key, mix in mixes.items():
        label = html.escape(config_label(dict(zip(CONFIG_KEYS, key))))
        for phase, commits in mix.commits.items():
            cells = "".join(number_cell(mix.mean(phase, f), METRICS[f].digits) for f in shown)
            rows.append(f"<tr><th>{label}</th><td>{PHASE_SHORT[phase]}</td>{number_cell(commits)}{cells}</tr>")
    return f'<table class="sortable"><thead>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


OUTSIDE_NOTE = (
    "What the runs did that is no commit, totals per configuration (repeats added): transactions that changed "
    "no database file (an UPDATE or DELETE matching no row, a write only to a TEMP table: no journal, no WAL "
    "frame), left out of every per-commit figure; and the closing of the connections, where in WAL mode the "
    "last to close checkpoints the WAL into the database (its syncs, and in a lab run its fsyncs and block "
    "requests, between the engine's close markers). — = level not measured."
)
#: (heading, section of summary.json, path to the figure inside it)
OUTSIDE_COLUMNS = (
    ("wrote nothing", "wrote_nothing", ("transactions",)),
    ("connections closed", "close", ("connections",)),
    ("close: VFS xSync", "close", ("vfs_sync_calls",)),
    ("close: fsync/fdatasync", "close", ("syscalls", "fsync_calls")),
    ("close: block writes", "close", ("block", "write_requests")),
    ("close: cache flushes", "close", ("block", "flush_requests")),
)


def outside_figure(summary: Mapping[str, Any], section: str, path: tuple[str, ...]) -> int | None:
    value = summary.get(section)
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return None if value is None else int(value)


def outside_commits(runs: pl.DataFrame) -> dict[tuple, list[int | None]]:
    """Per configuration, :data:`OUTSIDE_COLUMNS` summed over its successful runs (None:
    no run measured it); only configurations whose runs reported them."""
    if runs.height == 0 or "summary_json" not in runs.columns:
        return {}
    found: dict[tuple, list[int | None]] = {}
    for row in runs.filter(pl.col("status") == "ok").iter_rows(named=True):
        summary = json.loads(row["summary_json"] or "{}")
        if "close" not in summary and "wrote_nothing" not in summary:
            continue  # analysed before they were reported
        sums = found.setdefault(config_key(row), [None] * len(OUTSIDE_COLUMNS))
        for i, (_, section, path) in enumerate(OUTSIDE_COLUMNS):
            value = outside_figure(summary, section, path)
            if value is not None:
                sums[i] = (sums[i] or 0) + value
    return found


def outside_table(found: dict[tuple, list[int | None]]) -> str:
    head = "<tr><th>configuration</th>" + "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in OUTSIDE_COLUMNS)
    rows = [
        f"<tr><th>{html.escape(config_label(dict(zip(CONFIG_KEYS, key))))}</th>"
        + "".join(number_cell(v) for v in sums)
        + "</tr>"
        for key, sums in found.items()
    ]
    return f'<table class="sortable"><thead>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


EMULATED_CELL_TITLE = f"{emulated.EMULATED_TEXT}: counts and bytes of the same runs are exact"


def emulated_cell(value: float | None, digits: int) -> str:
    """A timing an emulated CPU measured: the number, marked."""
    if value is None:
        return number_cell(None)
    return (
        f'<td data-sort="{value}" class="emulated" title="{html.escape(EMULATED_CELL_TITLE)}">{value:,.{digits}f} '
        f'<span class="unit">{emulated.EMULATED_MARK}</span></td>'
    )


def numbers_table(means: pl.DataFrame, emulated_keys: set[tuple] | None = None) -> str:
    """Every figure per configuration, one column per measured metric (its catalogue
    label and unit), sortable by any column (:data:`SORT_SCRIPT`); the timings of
    configurations in ``emulated_keys`` marked."""
    metrics = [METRICS[m] for m in METRICS if m in means.columns]
    head = "".join(metric_head(m) for m in metrics)
    body = []
    for row in means.iter_rows(named=True):
        levels = ", ".join(json.loads(row["levels"] or "[]"))
        marked = config_key(row) in (emulated_keys or set())
        cells = "".join(
            emulated_cell(row[m.name], m.digits) if marked and m.timing else number_cell(row[m.name], m.digits)
            for m in metrics
        )
        body.append(
            f"<tr><th>{html.escape(config_label(row))}</th>{number_cell(row['repeats'])}"
            f"{number_cell(row['commits'])}<td>{levels}</td>{number_cell(row['lost_events'])}{cells}</tr>"
        )
    return (
        f'<div class="scroll"><table class="sortable" id="every-number"><thead><tr><th>configuration</th>'
        f"<th>repeats</th><th>commits</th><th>levels</th><th>lost events</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


# Click a column head to sort its table by it (again: the other way); absent values last.
SORT_SCRIPT = """
function sortKey(cell) {
  var key = cell.getAttribute("data-sort");
  return key === null ? cell.textContent : key === "" ? null : Number(key);
}
document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = Array.from(table.tHead.rows[0].cells);
  heads.forEach(function (head, column) {
    head.addEventListener("click", function () {
      var up = head.getAttribute("aria-sort") !== "ascending";
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      head.setAttribute("aria-sort", up ? "ascending" : "descending");
      var body = table.tBodies[0];
      Array.from(body.rows).map(function (row) { return [sortKey(row.cells[column]), row]; })
        .sort(function (a, b) {
          if (a[0] === null || b[0] === null) return (a[0] === null) - (b[0] === null);
          return (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0) * (up ? 1 : -1);
        })
        .forEach(function (pair) { body.appendChild(pair[1]); });
    });
  });
});
"""


def runs_table(runs: pl.DataFrame) -> str:
    rows = []
    for row in runs.iter_rows(named=True):
        reason = html.escape(" ".join((row.get("reason") or "").split())[:300])
        rows.append(
            f'<tr><td>{html.escape(str(row.get("run_key")))}</td><td class="{row["status"]}">{row["status"]}</td>'
            f"<td>{fmt_cell(row.get('kernel'))}</td><td>{html.escape(sqlite_cell(row))}</td>"
            f"<td>{fmt_cell(row.get('fs_type'))}</td><td>{fmt_cell(row.get('mount_options'))}</td>"
            f"<td>{fmt_cell(row.get('tool_version'))}</td><td>{reason}</td></tr>"
        )
    return (
        '<div class="scroll"><table><thead><tr><th>run</th><th>status</th><th>kernel</th><th>SQLite</th>'
        "<th>filesystem</th><th>mount options</th><th>sqlwa</th><th>reason</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def replay_of(row: dict) -> dict | None:
    """A runs-frame row's replayed-log summary (config.replay), when it replayed one."""
    try:
        config = json.loads(row.get("config_json") or "{}")
    except ValueError:
        return None
    replay = config.get("replay") if isinstance(config, dict) else None
    return replay if isinstance(replay, dict) else None


def sqlite_cell(row: dict) -> str:
    """The SQLite that ran; for a replay, with the one that recorded the log."""
    ran = fmt_cell(row.get("sqlite_version"))
    replay = replay_of(row)
    return ran if replay is None else f"{ran} (recorded with {replayed.recorded_sqlite(replay)})"


def replay_banner(runs: pl.DataFrame) -> str:
    """Each replayed log's SQLite versions and note, failures and app-defined functions,
    runs saying the same said once."""
    said: dict[tuple[str, ...], list[str]] = {}
    for row in runs.filter(pl.col("status") == "ok").iter_rows(named=True):
        replay = replay_of(row)
        if replay is None:
            continue
        lines = [replayed.sqlite_versions(replay, fmt_cell(row.get("sqlite_version")))]
        said_too = (replay.get("sqlite_note"), replayed.failed_text(replay), replayed.missing_functions_text(replay))
        lines += [text for text in said_too if text]
        said.setdefault(tuple(lines), []).append(str(row.get("run_key")))
    return "".join(
        '<p class="banner"><strong>Replayed SQL log.</strong> '
        f"{html.escape(', '.join(keys))}: {'<br>'.join(html.escape(line) for line in lines)}</p>"
        for lines, keys in said.items()
    )


def findings_table(runs: pl.DataFrame) -> tuple[str, str]:
    """What a power cut would leave (crash states, where a `sqlwa crash` run measured it),
    then every consistency finding of every configuration, durability lost first; and a note."""
    found = config_findings(runs)
    crash_html, crash_note = crash_table(found)
    table, note = layer_findings(found)
    if not table and any(state.crash_lost() for state in found.values()):
        # the layers agreeing is no durability: a commit SQLite never synced is no finding
        note = "No layer disagreed: the layers did what SQLite asked, and a commit SQLite did not sync is lost all the same."
    return crash_html + table, " ".join(part for part in (crash_note, note) if part)


def crash_table(found: dict[tuple, ConfigFindings]) -> tuple[str, str]:
    """One row per configuration with crash states: how many lost acknowledged commits."""
    tallies = [(key, state.crash) for key, state in found.items() if state.crash is not None]
    if not tallies:
        return "", ""
    rows = [
        f'<tr class="{"lost" if crash.lost_any() else ""}"><th>{html.escape(label_of(key))}</th>'
        f"<td>{crash.states:,}</td><td>{crash.states_losing:,}</td><td>{crash.max_lost:,}</td>"
        f"<td>{crash.unreadable:,}</td></tr>"
        for key, crash in tallies
    ]
    table = (
        '<div class="scroll"><table><thead><tr><th>configuration</th><th>crash states</th>'
        "<th>states losing acknowledged commits</th><th>most commits one state lost</th>"
        f"<th>states without a readable database</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
    losing = [label_of(key) for key, crash in tallies if crash.lost_any()]
    note = (
        f"A power cut would lose acknowledged commits of {', '.join(losing)} (red): their crash states say so, "
        "whatever the layers' findings below."
        if losing
        else "No crash state lost an acknowledged commit or the database."
    )
    return table, note


def layer_findings(found: dict[tuple, ConfigFindings]) -> tuple[str, str]:
    """Every consistency finding of every configuration, durability lost first; and a note."""
    if not any("syscall" in state.levels for state in found.values()):
        return "", "Findings compare the syscall and block levels with SQLite's own calls: they need a lab run."
    order = [*DURABILITY_FINDINGS, *(name for name in FINDINGS if name not in DURABILITY_FINDINGS)]
    rows = [
        f'<tr class="{"lost" if name in DURABILITY_FINDINGS else ""}"><th>{html.escape(label_of(key))}</th>'
        f"<td>{html.escape(name)}</td><td>{state.hits[name]:,} of {state.commits:,}</td>"
        f'<td>{state.share(name):.0%}</td><td class="what">{html.escape(state.what[name])}</td></tr>'
        for name in order
        for key, state in found.items()
        if state.hits.get(name)
    ]
    if not rows:
        return "", "No layer disagreed in any measured commit: every fsync reached the device as a cache flush."
    table = (
        '<div class="scroll"><table><thead><tr><th>configuration</th><th>finding</th><th>commits</th><th>share</th>'
        f"<th>what it means</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
    return table, "Per-commit disagreements between layers, over all repeats. Red: the commits were not made durable."


def label_of(key: tuple) -> str:
    return config_label(dict(zip(CONFIG_KEYS, key)))


def durability_banner(runs: pl.DataFrame) -> str:
    """A configuration whose commits are cheap because they may be lost on power loss,
    said at the top of the page, with the mount options that did it."""
    items = []
    for key, state in config_findings(runs).items():
        if state.crash is not None and state.crash.lost_any():
            items.append(f"<li>{html.escape(label_of(key))}: {html.escape(state.crash.line())} (sqlwa crash)</li>")
        for name in state.durability_lost():
            options = {r["mount_options"] for r in runs.iter_rows(named=True) if config_key(r) == key}
            mounted = ", ".join(sorted(o for o in options if o))
            items.append(
                f"<li>{html.escape(label_of(key))}: <code>{name}</code> in {html.escape(state.line(name))}"
                + (f" (mounted {html.escape(mounted)})" if mounted else "")
                + "</li>"
            )
    if not items:
        return ""
    return (
        '<div class="banner lost"><strong>Durability lost.</strong> These configurations\' commits are cheap '
        f"because they may be lost on power loss; their figures are not a gain:<ul>{''.join(items)}</ul></div>"
    )


def partial_banner(partial: store.Partial | store.PartialRun | None) -> str:
    """A matrix whose sweep stopped before every cell ran, or a run a signal stopped, said
    before any of its figures."""
    if partial is None:
        return ""
    if isinstance(partial, store.PartialRun):
        why = "a signal stopped the run; its figures are those of the commits measured before it."
    else:
        why = (
            "the sweep stopped before every cell of its plan ran; finish it with the same "
            "<code>sqlwa matrix</code> command plus <code>--resume</code>."
        )
    said = str(partial)
    return f'<p class="banner lost"><strong>{html.escape(said[:1].upper() + said[1:])}</strong>: {why}</p>'


def metric_legend() -> str:
    items = "".join(
        f"<li><b>{html.escape(m.label)}</b> (<code>{name}</code>): {html.escape(metric_help(m))}</li>"
        for name, m in METRICS.items()
    )
    return f"<details><summary>what each column means</summary><ul>{items}</ul></details>"


# --------------------------------------------------------------------------- page


CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1280px; color: #222; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.note { color: #555; font-size: 0.92em; margin: 0.3em 0 0.8em; } .banner { background: #fff3cd; padding: 8px 12px; }
table { border-collapse: collapse; font-size: 0.85em; } th, td { border: 1px solid #ddd; padding: 3px 7px; }
td { text-align: right; } th { background: #f6f6f6; text-align: left; } .scroll { overflow-x: auto; }
.absent { color: #999; } .failed { color: #b00020; } .skipped { color: #a06000; } .ok { color: #1b7f3b; }
.banner.lost { background: #fde2e4; border-left: 4px solid #b00020; } tr.lost th, tr.lost td { color: #b00020; }
td.what { text-align: left; } #layer-costs td { white-space: nowrap; }
.unit { font-weight: normal; color: #666; } tbody th { white-space: nowrap; } table.sortable thead th { cursor: pointer; }
th[aria-sort=ascending]::after { content: " ▲"; } th[aria-sort=descending]::after { content: " ▼"; }
"""


# plotly.js's cartesian partial bundle, refreshed by scripts/vendor-plotly-js, and the trace
# types it registers (its README): the report draws bar, heatmap and scatter traces.
PARTIAL_BUNDLE = Path(__file__).with_name("vendor") / "plotly-cartesian.min.js"
BUNDLE_TRACES = frozenset(
    "bar box contour heatmap histogram histogram2d histogram2dcontour image pie scatter scatterternary violin".split()
)


def bundle_version(js: str) -> str | None:
    """The version a plotly.js bundle names in its header comment."""
    found = re.search(r"\* plotly\.js \(cartesian - minified\) v(\S+)", js[:400])
    return found.group(1) if found else None


def plotly_bundle() -> str:
    """The plotly.js the page inlines: the partial bundle when it is the version the
    installed plotly writes figures for (a figure may use attributes an older plotly.js
    lacks), else plotly's full bundle."""
    try:
        partial = PARTIAL_BUNDLE.read_text(encoding="utf-8")
    except OSError:
        return get_plotlyjs()
    return partial if bundle_version(partial) == get_plotlyjs_version() else get_plotlyjs()


def svg_traces(fig: go.Figure) -> go.Figure:
    """``fig`` with its WebGL scatter traces drawn as SVG scatter traces: the partial
    bundle has no WebGL, and a report's timeline (a dozen commits) is small enough."""
    spec = fig.to_dict()
    for trace in spec["data"]:
        if trace["type"] == "scattergl":
            trace["type"] = "scatter"
    return go.Figure(spec)


def plot_div(fig: go.Figure, div_id: str) -> str:
    return svg_traces(fig).to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False, "responsive": True}
    )


PREDICTION_NOTE = (
    "Each measured commit's block requests replayed on the device's profile (sqlwa predict): the same order "
    "and dependencies, service times drawn from the profile, plus the commit's base time. Measured: this "
    "machine. Shares: of the predicted latency, by what it was spent on."
)


def prediction_rows(result: DevicePrediction) -> str:
    rows = []
    for conf in result.configurations:
        s = conf.summary
        ahead, here = s.predicted, s.measured
        shares = " · ".join(f"{100 * ahead.shares[k]:.0f}%" for k in ("base", "write", "flush", "fua_write", "read"))
        measured = emulated_cell if s.timings_emulated else number_cell
        rows.append(
            f"<tr><th>{html.escape(conf.label)}</th><td>{html.escape(result.profile.name)}</td>"
            f"{number_cell(s.commits)}{measured(here.p50_ms, 2)}{number_cell(ahead.p50_ms, 2)}"
            f"{measured(here.p99_ms, 2)}{number_cell(ahead.p99_ms, 2)}"
            f"{measured(here.frame_budget_miss_pct, 1)}{number_cell(ahead.frame_budget_miss_pct, 1)}"
            f"<td>{shares}</td><td>{html.escape(base_label(s.base_source))}</td></tr>"
        )
    return "".join(rows)


def base_label(source: str) -> str:
    return "none: emulated CPU, device time alone" if source == "none" else source


def prediction_sections(predictions: list[DevicePrediction]) -> list[Section]:
    """The predicted-latency table (beside the measured) and CDFs, one row per
    configuration and device; the devices' sources and the model's notes under it."""
    head = (
        "<tr><th>configuration</th><th>device</th><th>commits</th><th>p50 ms measured</th><th>p50 ms predicted</th>"
        "<th>p99 ms measured</th><th>p99 ms predicted</th><th>% over 16.67 ms measured</th>"
        "<th>% over 16.67 ms predicted</th><th>share: base · write · flush · FUA · read</th><th>base</th></tr>"
    )
    body = "".join(prediction_rows(result) for result in predictions)
    sources = "".join(
        f"<li><b>{html.escape(r.profile.name)}</b> ({html.escape(r.profile.kind)}): "
        f"{html.escape(r.profile.provenance.source)}"
        + "".join(f"<br>note: {html.escape(n)}" for n in r.notes)
        + "</li>"
        for r in predictions
    )
    table = f'<table class="sortable"><thead>{head}</thead><tbody>{body}</tbody></table><ul>{sources}</ul>'
    by_config: dict[tuple, tuple[dict, pl.Series, dict[str, pl.Series]]] = {}
    marked: set[tuple] = set()
    for result in predictions:
        for conf in result.configurations:
            kept_out = conf.summary.measured.kept_out  # an emulated CPU's, not asked for
            measured = pl.Series(
                [] if kept_out else np.concatenate([p.per_commit.measured_ms for p in conf.predictions]),
                dtype=pl.Float64,
            )
            if conf.summary.timings_emulated:
                marked.add(config_key(conf.config))
            _, _, predicted = by_config.setdefault(config_key(conf.config), (conf.config, measured, {}))
            predicted[result.profile.name] = pl.Series(
                np.concatenate([p.per_commit.samples_ms.ravel() for p in conf.predictions])
            )
    figure = plot_div(figures.predicted_cdfs(list(by_config.values()), marked), "plot-predicted")
    note = PREDICTION_NOTE
    if marked:
        note += (
            " Configurations marked (emulated CPU) ran under TCG: their measured latencies are not shown and their "
            f"predictions are the device time alone, unless the report was made with {emulated.USE_FLAG}."
        )
    return [Section("predicted on other devices", table + figure, note)]


def build_sections(
    runs: pl.DataFrame,
    latencies: pl.DataFrame | None = None,
    predictions: list[DevicePrediction] | None = None,
    use_emulated_timings: bool = False,
) -> list[Section]:
    means = store.config_means(runs, latencies)
    emulated_keys = emulated.emulated_configs(runs)
    sections = heatmap_sections(means)
    sections += layer_sections(means if use_emulated_timings else without_timings(means, emulated_keys))
    fig, note = figures.category_bars(means)
    sections.append(Section("bytes per commit by category", plot_div(fig, "plot-categories"), note))
    fig, note = per_commit_bars(means)
    sections.append(Section("each commit's bytes by category", plot_div(fig, "plot-per-commit"), note))
    run = timeline_run(runs)
    if run is not None:
        fig, note = timeline(run)
        sections.append(Section("one run's timeline", plot_div(fig, "plot-timeline"), note))
    else:
        sections.append(
            Section(
                "one run's timeline",
                "",
                "No run measured the block level, so there is no timeline: it needs a lab run (root, --fs, tracefs).",
            )
        )
    sections.append(latency_section(runs, emulated_keys, use_emulated_timings))
    if predictions:
        sections += prediction_sections(predictions)
    table, note = findings_table(runs)
    sections.append(Section("durability and cross-layer findings", table, note))
    sections.append(
        Section(
            "every number",
            numbers_table(means, emulated_keys) + metric_legend(),
            "Means per commit over measured commits and repeats; latency quantiles over the repeats' commits "
            "pooled. — = level not measured.",
        )
    )
    if phasematch.config_mixes(runs):
        sections.append(Section("per commit, by phase", phases_table(runs), PHASES_NOTE))
    outside = outside_commits(runs)
    if any(any(sums) for sums in outside.values()):
        sections.append(
            Section("outside the commits: wrote nothing, close checkpoint", outside_table(outside), OUTSIDE_NOTE)
        )
    sections.append(Section("runs and environment", runs_table(runs)))
    return sections


def without_timings(means: pl.DataFrame, keys: set[tuple]) -> pl.DataFrame:
    """``means`` with the timing figures of the configurations ``keys`` taken out (null)."""
    if not keys or means.height == 0:
        return means
    hit = pl.Series([config_key(row) in keys for row in means.iter_rows(named=True)])
    timings = [m for m in METRICS if METRICS[m].timing and m in means.columns]
    return means.with_columns(pl.when(~hit).then(pl.col(m)).otherwise(None).alias(m) for m in timings)


LATENCY_NOTE = (
    "Each curve steps up at every measured commit: the share of commits at or below a latency. "
    "Right of the dashed line a commit on the UI thread drops a 60 Hz frame."
)


def latency_section(runs: pl.DataFrame, emulated_keys: set[tuple], use_emulated_timings: bool) -> Section:
    """The commit-latency CDFs: runs under TCG left out (or, asked for, marked)."""
    title = "commit latency"
    if not emulated_keys:
        return Section(title, plot_div(figures.latency_cdfs(runs), "plot-latency"), LATENCY_NOTE)
    names = ", ".join(sorted(label_of(key) for key in emulated_keys))
    if use_emulated_timings:
        note = f"{LATENCY_NOTE} Marked (emulated CPU): {names}, whose latencies are an {emulated.EMULATED_TEXT}."
        return Section(title, plot_div(figures.latency_cdfs(runs, emulated_keys), "plot-latency"), note)
    dirs = emulated.emulated_run_dirs(runs)
    kept = runs.filter(~pl.col("run_dir").cast(pl.String).is_in(list(dirs)))
    left_out = f"Left out: {names}, measured on an {emulated.EMULATED_TEXT} ({emulated.USE_FLAG} draws them, marked)."
    if kept.filter(pl.col("status") == "ok").height == 0:
        return Section(title, "", f"No latency to draw. {left_out}")
    return Section(title, plot_div(figures.latency_cdfs(kept), "plot-latency"), f"{LATENCY_NOTE} {left_out}")


def emulated_banner(runs: pl.DataFrame, use_emulated_timings: bool) -> str:
    """Runs under TCG: their counts and bytes are exact, their timings an emulated CPU's."""
    keys = emulated.emulated_configs(runs)
    if not keys:
        return ""
    shown = (
        f"shown because the report was made with {emulated.USE_FLAG}, marked"
        if use_emulated_timings
        else "left out of the latency chart, the layer costs and the predictions' base times, and marked where the "
        "tables show them"
    )
    return (
        '<p class="banner"><strong>Emulated timings.</strong> '
        f"{html.escape(', '.join(sorted(label_of(key) for key in keys)))} ran in a VM under TCG: counts and bytes "
        f"are exact; latencies and CPU times are an emulated CPU's, not a device's: {html.escape(shown)}.</p>"
    )


def level_banner(runs: pl.DataFrame) -> str:
    ok = runs.filter(pl.col("status") == "ok")
    levels = set().union(*(json.loads(text or "[]") for text in ok["levels"])) if ok.height else set()
    if "block" in levels:
        return ""
    return (
        '<p class="banner">Measured at the VFS level only: the syscall and block levels need root, a lab '
        "filesystem (<code>--fs</code>) and tracefs. They are absent here, not zero.</p>"
    )


def render(
    runs: pl.DataFrame,
    source: Path,
    latencies: pl.DataFrame | None = None,
    predictions: list[DevicePrediction] | None = None,
    partial: store.Partial | store.PartialRun | None = None,
    use_emulated_timings: bool = False,
) -> str:
    sections = build_sections(runs, latencies, predictions, use_emulated_timings)
    body = "".join(
        f"<section><h2>{html.escape(s.title)}</h2>"
        + (f'<p class="note">{html.escape(s.note)}</p>' if s.note else "")
        + s.html
        + "</section>"
        for s in sections
    )
    ok = runs.filter(pl.col("status") == "ok").height
    title = f"sqlwa report — {html.escape(str(source))}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{CSS}</style>
<script type="text/javascript">{plotly_bundle()}</script>
</head><body>
<h1>{title}</h1>
<p class="note">{ok} successful run(s) of {runs.height}; generated {time.strftime("%Y-%m-%d %H:%M:%S %Z")} by sqlwa.
What one SQLite commit costs the storage device, per layer.</p>
{partial_banner(partial)}
{durability_banner(runs)}
{level_banner(runs)}
{emulated_banner(runs, use_emulated_timings)}
{replay_banner(runs)}
{body}
<script>{SORT_SCRIPT}</script>
</body></html>
"""


def write_report(
    results: Path,
    out: Path,
    profiles: Sequence[Profile] = (),
    *,
    allow_system: bool = False,
    use_emulated_timings: bool = False,
) -> Path:
    """Render the results in ``results`` (matrix or run directory) to the HTML file ``out``,
    whole or not at all (:mod:`sqlwa.outputs`); with ``profiles``, the commits' latency
    predicted on each device beside the measured."""
    target = outputs.check_file(Path(out), "-o", allow_system=allow_system, make_parents=True)
    runs = store.load_results(results)
    if runs.height == 0 or runs.filter(pl.col("status") == "ok").height == 0:
        raise UsageError(f"{results} has no successful run to report", "run `sqlwa matrix` or `sqlwa run` first")
    out = Path(out)
    predictions = [predict_runs(runs, profile, use_emulated_timings=use_emulated_timings) for profile in profiles]
    if profiles and not any(p.configurations for p in predictions):
        reasons = "; ".join(predictions[0].skipped) or "no successful run"
        raise UsageError(f"nothing in {results} can be predicted: {reasons}", "measure with --fs (a lab run)")
    latencies = store.load_latencies(results)
    page = render(runs, Path(results), latencies, predictions, store.partial_of(results), use_emulated_timings)
    outputs.write_file(target, page, "the report")
    return out
