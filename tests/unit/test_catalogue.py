"""The catalogue is the one source of sqlwa's vocabulary: every metric the store keeps,
the report shows, check caps and compare lists is a catalogue metric with a unit, a
label and a direction; no other module spells the catalogue's lists again; and the one
definition of a cache flush gives the same count in the per-commit tallies, the API's
request mix and the timeline's flush marks."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import polars as pl
import pytest

from helpers import REPO
from sqlwa import catalogue
from sqlwa.analysis import summary, windows
from sqlwa.api import Trace
from sqlwa.catalogue import METRICS
from sqlwa.cli import matrix as matrix_cli
from sqlwa.results import check, compare, rundir, store
from sqlwa.views import figures

PACKAGE = REPO / "analyzer" / "sqlwa"
SAMPLE_RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-delete"


# ------------------------------------------------------------------ metrics


@pytest.mark.parametrize("metric", METRICS.values(), ids=list(METRICS))
def test_every_metric_has_a_level_unit_label_and_direction(metric):
    assert metric.level in catalogue.LEVELS
    assert metric.unit and metric.label and metric.description
    assert metric.better in ("lower", "higher", None)
    assert metric.direction.endswith("better") or metric.direction == "neither better nor worse"


def test_metric_labels_are_unique():
    labels = [m.label for m in METRICS.values()]
    assert len(labels) == len(set(labels))


def test_direction_decides_worse_and_better():
    cost = METRICS["fsync_calls_per_commit"]
    assert cost.better == "lower" and cost.worse(1.0) and cost.improved(-1.0) and not cost.worse(0.0)
    assert not METRICS["logical_bytes_per_commit"].worse(100.0)  # the payload is neither
    gain = catalogue.Metric("x", "vfs", "ops/s", "x", "a throughput", better="higher")
    assert gain.worse(-1.0) and gain.improved(1.0) and gain.direction == "higher is better"


def runs_columns(tmp_path: Path, table: str) -> list[str]:
    conn = store.connect(tmp_path / store.STORE_FILE)
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def sample_row() -> dict:
    record = store.run_dir_record(SAMPLE_RUN, rundir.summary(SAMPLE_RUN)["config"])
    return store.record_row(record, rundir.summary(SAMPLE_RUN), rundir.commits(SAMPLE_RUN), SAMPLE_RUN.parent)


def test_the_store_keeps_exactly_the_catalogue_metrics(tmp_path):
    columns = runs_columns(tmp_path, "runs")
    figures_computed = store.run_metrics(rundir.summary(SAMPLE_RUN), rundir.commits(SAMPLE_RUN))
    assert list(figures_computed) == list(METRICS)  # one figure per catalogue metric, in its order
    assert set(METRICS) <= set(columns)  # a metric added to the catalogue needs a migration
    # and the table has no column that is neither a run field nor a catalogue metric
    assert set(columns) == {"id", *sample_row()}


def test_the_store_keeps_catalogue_per_commit_columns(tmp_path):
    vocabulary = {
        *catalogue.COMMIT_TIMING_COLUMNS,
        *catalogue.CPU_COMMIT_COLUMNS,
        *catalogue.VFS_COMMIT_COLUMNS,
        *catalogue.SYSCALL_COMMIT_COLUMNS,
        *catalogue.BLOCK_COMMIT_COLUMNS,
    }
    assert set(store.COMMIT_COLUMNS) <= vocabulary
    assert runs_columns(tmp_path, "commits") == ["run_id", "idx", *store.COMMIT_COLUMNS]


def test_check_compare_and_tables_name_catalogue_metrics():
    assert set(check.LIMITS.values()) <= set(METRICS)
    # a limit is a maximum: it caps only a metric where lower is better
    assert {METRICS[m].better for m in check.LIMITS.values()} == {"lower"}
    assert all(key == f"max_{metric}" for key, metric in check.LIMITS.items())
    assert set(check.DEFAULT_REGRESSION_METRICS) <= set(METRICS)
    assert set(compare.COMPARED_METRICS) <= set(METRICS)
    assert set(matrix_cli.TABLE_METRICS) <= set(METRICS)


def test_check_refuses_a_metric_without_direction_as_a_regression():
    with pytest.raises(check.UsageError, match="cannot regress"):
        check.parse_rule({"max_regression_pct": 5, "metrics": ["logical_bytes_per_commit"]}, 1)
    with pytest.raises(check.UsageError, match="unknown metric"):
        check.parse_rule({"max_regression_pct": 5, "metrics": ["fsyncs"]}, 1)


# ------------------------------------------------------------------ no second list


def literal_tuples(path: Path) -> list[tuple[int, tuple]]:
    """(line, value) of every tuple or list of constants written in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, (ast.Tuple, ast.List))
            and node.elts
            and all(isinstance(e, ast.Constant) for e in node.elts)
        ):
            found.append((node.lineno, tuple(e.value for e in node.elts)))
    return found


def test_no_module_spells_a_catalogue_list_again():
    lists = {
        "CONFIG_KEYS": catalogue.CONFIG_KEYS,
        "LAYER_KEYS": catalogue.LAYER_KEYS,
        "FILE_KINDS": catalogue.FILE_KINDS,
        "DATABASE_FILE_KINDS": catalogue.DATABASE_FILE_KINDS,
        "VFS_COMMIT_COLUMNS": catalogue.VFS_COMMIT_COLUMNS,
        "SYSCALL_COMMIT_COLUMNS": catalogue.SYSCALL_COMMIT_COLUMNS,
        "BLOCK_COMMIT_COLUMNS": catalogue.BLOCK_COMMIT_COLUMNS,
        "CPU_COMMIT_COLUMNS": catalogue.CPU_COMMIT_COLUMNS,
        "METRICS": tuple(METRICS),
    }
    again = [
        f"{path.relative_to(PACKAGE)}:{line} spells {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "catalogue.py"
        for line, value in literal_tuples(path)
        for name, known in lists.items()
        if value == known
    ]
    assert again == []


def test_no_module_describes_a_metric_again():
    texts = {p: p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "catalogue.py"}
    again = [
        f"{p.relative_to(PACKAGE)}: {m.name}" for m in METRICS.values() for p, t in texts.items() if m.description in t
    ]
    assert again == []


def test_summary_and_store_schema_versions_are_told_apart():
    assert summary.SUMMARY_SCHEMA_VERSION == json.loads((SAMPLE_RUN / "summary.json").read_text())["schema_version"]
    assert store.STORE_SCHEMA_VERSION == len(store.MIGRATIONS)
    assert not hasattr(store, "SCHEMA_VERSION") and not hasattr(summary, "SCHEMA_VERSION")


# ------------------------------------------------------------------ one flush


DEV = (7, 1)


def block_event(t: int, action: str, operation: str, preflush: bool = False, fua: bool = False) -> dict:
    return {
        "kind": "block",
        "time_ns": t,
        "dev_major": DEV[0],
        "dev_minor": DEV[1],
        "action": action,
        "operation": operation,
        "preflush": preflush,
        "fua": fua,
        "sector": 100 * t,
        "bytes": 0 if operation == "flush" else 4096,
        "comm": "sqlwa",
        "pid": 1,
    }


# Issued: a standalone flush, a preflush write, a preflush + FUA write (3 flushes), and a
# plain write, a FUA-only write and a read (none). Queued flushes are not what the device saw.
EVENTS = pl.DataFrame(
    [
        block_event(1, "Q", "flush"),
        block_event(2, "D", "flush"),
        block_event(3, "D", "write", preflush=True),
        block_event(4, "D", "write", preflush=True, fua=True),
        block_event(5, "D", "write"),
        block_event(6, "Q", "write", preflush=True),
        block_event(7, "D", "write", fua=True),
        block_event(8, "D", "read"),
    ]
)


def test_one_flush_definition_counts_the_same_everywhere():
    tallied = windows.block_issues(EVENTS, DEV).select(windows.block_tallies())["flush_requests"].item()
    mix = dict(Trace(EVENTS, {}, "hand-made").request_mix().select("kind", "requests").iter_rows())
    commit_windows = pl.DataFrame({"index": [0], "warmup": [False], "win_start_ns": [0], "win_end_ns": [10]})
    fig = figures.commit_timeline(EVENTS, DEV, commit_windows, "hand-made")
    (marks,) = [trace for trace in fig.data if trace.name == "cache flush"]
    assert tallied == mix["flush"] == len(marks.x) == 3
