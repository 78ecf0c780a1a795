"""What ``--json`` prints: one JSON document on stdout, the same way for every command.

The shapes of the documents are described in docs/reference/outputs.md ("Machine-readable output").
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from sqlwa.catalogue import CONFIG_KEYS, METRICS, config_key, config_label
from sqlwa.measure import matrix
from sqlwa.results import check as checking
from sqlwa.results import compare as comparing
from sqlwa.results import emulated, store


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


def compare_document(a: str | Path, b: str | Path, rows: pl.DataFrame, durability: pl.DataFrame) -> dict:
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
        "verdict": "not_compared"
        if row.get("refused")
        else comparing.verdict(metric, row["delta"], row["durability_lost"], row["timings_emulated"]),
        "timings_emulated": row["timings_emulated"],
        # runs of other lengths: the phase both values are of, or why they were not compared
        "phase": row.get("phase"),
        "not_compared_because": row.get("why") or None,
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
            configuration_entry(row, emulated.emulated_configs(runs))
            for row in store.config_means(runs, latencies).iter_rows(named=True)
        ],
        "units": {name: metric.unit for name, metric in METRICS.items()},
    }


CELL_STATUSES = ("ok", "done-earlier", "skipped", "failed")


def cell_entry(result: matrix.CellResult, row: dict) -> dict:
    """One cell: what happened to it in this sweep (``seconds`` measuring it now, 0 for
    one done earlier), and its run as the store holds it."""
    from sqlwa.measure import shard

    cell = result.cell
    return {
        "label": cell.label,
        "id": shard.cell_id(cell),  # as `sqlwa matrix --plan` lists it
        "key": cell.key,
        **cell.config.columns(),
        "repeat": cell.repeat,
        "status": result.status,
        "reason": result.reason,
        "seconds": result.seconds,
        "run_dir": row.get("run_dir"),
        "levels": json.loads(row.get("levels") or "[]"),
        "commits": row.get("commits"),
        "lost_events": row.get("lost_events") or 0,  # none without a trace, as in the configurations' sums
        "metrics": {name: row.get(name) for name in METRICS},
        # its timings (latencies, CPU, frame misses) are an emulated CPU's (a --vm run under TCG)
        "timings_emulated": emulated.run_emulated(row),
    }


def configuration_entry(row: dict, emulated_keys: set[tuple] | None = None) -> dict:
    """A configuration's means over its successful repeats (latency quantiles over their
    commits pooled), as in the matrix table, and ``sd``: each metric's sample standard
    deviation over the repeats' own values (null for one run), as hyperfine gives it."""
    return {
        "label": config_label(row),
        **{key: row[key] for key in CONFIG_KEYS},
        "repeats": row["repeats"],
        "commits": row["commits"],
        "lost_events": row["lost_events"],
        "metrics": {name: row.get(name) for name in METRICS},
        "timings_emulated": config_key(row) in (emulated_keys or set()),
        "sd": {name: row.get(store.sd_column(name)) for name in METRICS},
    }


# --------------------------------------------------------------------------- sqlwa check


def partial_entry(partial: store.Partial | store.PartialRun | None) -> dict | None:
    """A partial matrix's cells run and planned, or what interrupted a partial run (None:
    the results are whole)."""
    return None if partial is None else partial.as_json()


def check_document(
    result: checking.CheckResult,
    policy: checking.Policy,
    runs: pl.DataFrame,
    sources: dict[str, Path | None],
) -> dict:
    """``sqlwa check --json``: the overall result, the policy's rules and options, every
    check (passed ones too) and the notes. ``sources``: the policy, results and baseline
    paths as given."""
    failing = {id(finding) for finding in result.failing(policy)}
    configurations = configurations_by_label(runs)
    return {
        "schema_version": SCHEMA_VERSION,
        **{name: None if path is None else str(path) for name, path in sources.items()},
        "passed": not failing,
        "counts": {
            "checks": len(result.findings),
            **{outcome: result.count(outcome) for outcome in ("pass", "violation", "unmeasured", "not_checked")},
            "failing": len(failing),
        },
        "options": {
            "allow_lossy_trace": policy.allow_lossy_trace,
            "allow_unmeasured": policy.allow_unmeasured,
            "significance_level": policy.significance_level,
            "use_emulated_timings": policy.use_emulated_timings,
        },
        "rules": [rule_entry(rule) for rule in policy.rules],
        "checks": [check_entry(f, id(f) in failing, configurations) for f in result.findings],
        "notes": result.notes,
    }


def configurations_by_label(runs: pl.DataFrame) -> dict[str, dict]:
    """The configuration keys of each label a check names (a run's check names its
    configuration as its suite)."""
    rows = runs.iter_rows(named=True) if runs.height else []
    return {config_label(row): {key: row[key] for key in CONFIG_KEYS} for row in rows}


def rule_entry(rule: checking.Rule) -> dict:
    """A rule as the policy states it; a scope key of null matches every value."""
    return {
        "name": rule.name,
        "scope": {key: list(values) or None for key, values in rule.scope.items()},
        "limits": {**rule.limits, **(rule.predicted.limits if rule.predicted is not None else {})},
        "device": None if rule.predicted is None else rule.predicted.device.name,
        "device_fill": None if rule.predicted is None else rule.predicted.device_fill,
        "max_regression_pct": rule.max_regression_pct,
        "metrics": list(rule.metrics) if rule.max_regression_pct is not None else [],
        "forbid_findings": list(rule.forbid_findings),
    }


def check_entry(finding: checking.Finding, fails: bool, configurations: dict[str, dict]) -> dict:
    """One check: what it held against what, its outcome and whether that fails the gate
    (an unmeasured check fails unless the policy allows it), and its line of text."""
    what = checking.checked(finding.check)
    return {
        "label": finding.config,
        "configuration": configurations.get(finding.suite or finding.config),
        "rule": finding.rule,
        "check": finding.check,
        "kind": what.kind,
        "metric": what.name,
        "unit": what.unit,
        "measured": finding.figures.measured,
        "limit": finding.figures.limit,
        "baseline": finding.figures.baseline,
        "current": finding.figures.current,
        "p_value": finding.figures.p_value,
        "outcome": finding.outcome,
        "fails": fails,
        "line": finding.line(),
    }
