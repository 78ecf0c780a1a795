"""Tables as CSV (``sqlwa export --format csv``): the columns of the JSON and Parquet
outputs, flat, for a spreadsheet."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from sqlwa.catalogue import CONFIG_KEYS, METRICS, config_label
from sqlwa.results import rundir, store


def configurations(runs: pl.DataFrame, latencies: pl.DataFrame) -> pl.DataFrame:
    """One row per configuration: its label and keys, runs (repeats), commits, lost events,
    each metric's mean (latency quantiles over the runs' commits pooled, as the matrix
    table) and ``<metric>_sd``, the sample standard deviation of the runs' own values."""
    means = store.config_means(runs, latencies)
    if means.height == 0:
        return pl.DataFrame()
    rows = list(means.iter_rows(named=True))
    sd_names = [store.sd_column(name) for name in METRICS]
    columns = ["label", *CONFIG_KEYS, "repeats", "commits", "lost_events", *METRICS, *sd_names]
    return pl.DataFrame(
        [{"label": config_label(row), **{name: row.get(name) for name in columns[1:]}} for row in rows],
        schema={
            "label": pl.String,
            **dict.fromkeys(CONFIG_KEYS, pl.String),
            "repeats": pl.Int64,
            "commits": pl.Int64,
            "lost_events": pl.Int64,
            **dict.fromkeys([*METRICS, *sd_names], pl.Float64),
        },
    )


def commits(run_dir: Path) -> pl.DataFrame:
    """A run's commits.parquet, its nested columns (if any) left out: CSV holds scalars."""
    frame = rundir.commits(run_dir)
    flat = [name for name, dtype in frame.schema.items() if not dtype.is_nested()]
    return frame.select(flat)
