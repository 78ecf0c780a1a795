"""What ``--json`` prints: one JSON document on stdout, the same way for every command.

The shapes of the documents are described in the README ("Machine-readable output").
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa.catalogue import METRICS
from sqlwa.results import compare as comparing


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
