"""``sqlwa compare``: two results (matrices or single runs) side by side, with deltas.

Matrices are matched configuration by configuration (scenario, fs, journal, sync; means
over repeats); a configuration present on one side only is shown with the other side
empty. Two single runs are compared with each other whatever their configurations.
"""

from __future__ import annotations

import polars as pl

from sqlwa.catalogue import config_label
from sqlwa.results import store

# The catalogue metrics a reader compares first, in this order.
COMPARED_METRICS = (
    "fsync_calls_per_commit",
    "vfs_sync_calls_per_commit",
    "flushes_per_commit",
    "fua_per_commit",
    "write_kib_per_commit",
    "block_write_kib_per_commit",
    "vfs_write_kib_per_commit",
    "block_over_logical",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "frame_budget_misses",
)


def is_single_run(runs: pl.DataFrame) -> bool:
    return runs.height == 1 and ("cell" not in runs.columns or runs["cell"].is_null().all())


def long_means(runs: pl.DataFrame, side: str, label: str | None = None) -> pl.DataFrame:
    """config, metric, value (one row per configuration and metric) for one side."""
    means = store.config_means(runs)
    if means.height == 0:
        return pl.DataFrame(schema={"config": pl.String, "metric": pl.String, side: pl.Float64})
    metrics = [m for m in COMPARED_METRICS if m in means.columns]
    configs = [label or config_label(row) for row in means.iter_rows(named=True)]
    return means.select(
        pl.Series("config", configs, dtype=pl.String), *[pl.col(m).cast(pl.Float64) for m in metrics]
    ).unpivot(index="config", variable_name="metric", value_name=side)


def single_label(runs: pl.DataFrame) -> str:
    return config_label(runs.row(0, named=True))


def compare(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """config, metric, a, b, delta, pct — rows where neither side measured the metric dropped."""
    label = None
    if is_single_run(a) and is_single_run(b):
        label_a, label_b = single_label(a), single_label(b)
        label = label_a if label_a == label_b else f"{label_a} → {label_b}"
    joined = long_means(a, "a", label).join(
        long_means(b, "b", label), on=["config", "metric"], how="full", coalesce=True
    )
    order = {name: i for i, name in enumerate(COMPARED_METRICS)}
    return (
        joined.filter(pl.col("a").is_not_null() | pl.col("b").is_not_null())
        .with_columns(
            (pl.col("b") - pl.col("a")).alias("delta"),
            pl.when(pl.col("a") != 0).then((pl.col("b") - pl.col("a")) / pl.col("a") * 100).alias("pct"),
            pl.col("metric").replace_strict(order, default=len(order)).alias("_order"),
        )
        .sort("config", "_order")
        .drop("_order")
    )
