"""What each stack of layers costs beside its plain filesystem: for every configuration
with layers (``--encrypt``, ``--fuse``, ``--profile``), its figures next to those of the
same scenario, filesystem, journal and sync without any layer, and their ratio.

Both sides are :func:`sqlwa.results.store.config_means` rows (means over repeats,
latency quantiles over the repeats' commits pooled), so a ratio compares like with like.
A figure either side did not measure has no ratio; neither has one whose plain value is
0. A profile's plain counterpart has the profile's filesystem but not its mount options,
so its ratio includes what those cost.
"""

from __future__ import annotations

import polars as pl

from sqlwa.catalogue import CONFIG_KEYS, LAYER_KEYS, METRICS, NO_LAYER, config_label, has_layers

#: The figures set side by side, in column order: latency, the syncs SQLite's thread made,
#: and what the device saw.
LAYER_COST_METRICS = (
    "p50_ms",
    "p99_ms",
    "fsync_calls_per_commit",
    "flushes_per_commit",
    "block_write_requests_per_commit",
    "write_kib_per_commit",
)
#: CPU time per commit (the SQL thread's user + system, mean): encryption costs CPU more
#: than I/O, so it belongs beside these. Runs stored before sqlwa measured it have none:
#: their column shows absent (—), not 0.
CPU_METRIC: str | None = "cpu_ms_per_commit"
CPU_LABEL = "CPU per commit"

COST_SCHEMA = {
    "config": pl.String,
    "plain_config": pl.String,
    "metric": pl.String,
    "layered": pl.Float64,
    "plain": pl.Float64,
    "ratio": pl.Float64,
    "runs": pl.Int64,  # the repeats behind each side: a ratio of single runs is one sample
    "plain_runs": pl.Int64,
}


def cost_metrics() -> tuple[str, ...]:
    """The metrics compared: :data:`LAYER_COST_METRICS`, and CPU time once it is measured."""
    cpu = (CPU_METRIC,) if CPU_METRIC is not None and CPU_METRIC in METRICS else ()
    return LAYER_COST_METRICS + cpu


def plain_counterpart(row: dict) -> tuple:
    """The configuration key (:data:`CONFIG_KEYS` values) ``row`` would have without its layers."""
    return tuple(NO_LAYER if key in LAYER_KEYS else row[key] for key in CONFIG_KEYS)


def ratio(layered: float | None, plain: float | None) -> float | None:
    if layered is None or plain is None or plain == 0:
        return None
    return layered / plain


def layer_costs(means: pl.DataFrame) -> pl.DataFrame:
    """One row per layered configuration and metric: ``config``, ``plain_config`` (its
    label; null when the results hold no plain run of it), ``metric``, the ``layered`` and
    ``plain`` values and their ``ratio``, and the ``runs`` and ``plain_runs`` each side's
    means are over, in the order of ``means``."""
    rows = list(means.iter_rows(named=True)) if means.height else []
    plain = {tuple(row[k] for k in CONFIG_KEYS): row for row in rows if not has_layers(row)}
    found = []
    for row in filter(has_layers, rows):
        counterpart = plain.get(plain_counterpart(row))
        for metric in cost_metrics():
            value = row.get(metric)
            base = counterpart.get(metric) if counterpart else None
            found.append(
                {
                    "config": config_label(row),
                    "plain_config": config_label(counterpart) if counterpart else None,
                    "metric": metric,
                    "layered": value,
                    "plain": base,
                    "ratio": ratio(value, base),
                    "runs": row.get("repeats"),
                    "plain_runs": counterpart.get("repeats") if counterpart else None,
                }
            )
    return pl.DataFrame(found, schema=COST_SCHEMA)
