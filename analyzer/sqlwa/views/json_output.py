"""What ``--json`` prints: one JSON document on stdout, the same way for every command.

The shapes of the documents are described in the README ("Machine-readable output").
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa.catalogue import CONFIG_KEYS, METRICS, config_label
from sqlwa.measure import matrix
from sqlwa.results import compare as comparing
from sqlwa.results import store


def dumps(document: Any) -> str:
    """``document`` as strict JSON, indented. JSON has no inf or nan (Python's json module
    would write ``Infinity``, which other parsers refuse), so a value that is not a
    finite number, such as a change in percent from 0, is written as null."""
    return json.dumps(finite(document), indent=2, allow_nan=False)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float inside it replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


#: Bumped when a document's shape changes (a key renamed, removed or given another meaning);
#: keys may be added without.
SCHEMA_VERSION = 1


# --------------------------------------------------------------------------- sqlwa compare


def compare_document(a: Path, b: Path, rows: pl.DataFrame, durability: pl.DataFrame) -> dict:
    """``sqlwa compare --json``: per configuration, each metric's A, B, change and verdict,
    and durability where either side looked for it — what the table shows."""
    configurations: dict[str, dict] = {}
    for row in rows.iter_rows(named=True):
        entry = configurations.setdefault(row["config"], {"label": row["config"], "metrics": {}, "durability": None})
        entry["metrics"][row["metric"]] = compared_metric(row)
    for row in durability.iter_rows(named=True):
        if row["config"] in configurations and (row["a"] or row["b"]):
            configurations[row["config"]]["durability"] = {key: row[key] for key in ("a", "b", "change")}
    return {"schema_version": SCHEMA_VERSION, "a": str(a), "b": str(b), "configurations": [*configurations.values()]}


def compared_metric(row: dict) -> dict:
    metric = METRICS[row["metric"]]
    return {
        "unit": metric.unit,
        "a": row["a"],
        "b": row["b"],
        "change": row["delta"],
        "change_pct": row["pct"],
        "verdict": comparing.verdict(metric, row["delta"], row["durability_lost"]),
    }


# --------------------------------------------------------------------------- sqlwa matrix


def matrix_document(outcome: matrix.MatrixOutcome, runs: pl.DataFrame, latencies: pl.DataFrame) -> dict:
    """``sqlwa matrix --json``: the plan, every cell of this sweep with what became of it
    and its run's figures (from the store), and the means per configuration the table
    shows."""
    stored = {row["run_key"]: row for row in runs.iter_rows(named=True)} if runs.height else {}
    statuses = [result.status for result in outcome.results]
    return {
        "schema_version": SCHEMA_VERSION,
        "out": str(outcome.plan.out_dir),
        "plan": matrix.plan_record(outcome.plan),
        "counts": {"cells": len(statuses), **{status: statuses.count(status) for status in CELL_STATUSES}},
        "cells": [cell_entry(result, stored.get(result.cell.key, {})) for result in outcome.results],
        "configurations": [
            configuration_entry(row) for row in store.config_means(runs, latencies).iter_rows(named=True)
        ],
        "units": {name: metric.unit for name, metric in METRICS.items()},
    }


CELL_STATUSES = ("ok", "done-earlier", "skipped", "failed")


def cell_entry(result: matrix.CellResult, row: dict) -> dict:
    """One cell: what happened to it in this sweep (``seconds`` measuring it now, 0 for
    one done earlier), and its run as the store holds it."""
    cell = result.cell
    return {
        "label": cell.label,
        "key": cell.key,
        **{key: getattr(cell, key) for key in CONFIG_KEYS},
        "repeat": cell.repeat,
        "status": result.status,
        "reason": result.reason,
        "seconds": result.seconds,
        "run_dir": row.get("run_dir"),
        "levels": json.loads(row.get("levels") or "[]"),
        "commits": row.get("commits"),
        "lost_events": row.get("lost_events") or 0,  # none without a trace, as in the configurations' sums
        "metrics": {name: row.get(name) for name in METRICS},
    }


def configuration_entry(row: dict) -> dict:
    """A configuration's means over its successful repeats (latency quantiles over their
    commits pooled), as in the matrix table."""
    return {
        "label": config_label(row),
        **{key: row[key] for key in CONFIG_KEYS},
        "repeats": row["repeats"],
        "commits": row["commits"],
        "lost_events": row["lost_events"],
        "metrics": {name: row.get(name) for name in METRICS},
    }
