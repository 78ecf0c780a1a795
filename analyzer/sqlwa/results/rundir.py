"""The files of one run directory, and the one place that knows them.

A lab run writes, beside ``summary.json`` and ``commits.parquet``:

- ``trace.txt`` — the raw capture, kept so the run can be re-analysed;
- ``events.parquet`` — that trace parsed once (every event, every layer);
- ``writes.parquet`` — the block write requests with their attribution (``category``,
  ``commit``, ``file``, ``submitter``), the table the report's timeline and the Python
  API colour by;
- ``layout.json`` — where the filesystem keeps its own journal and metadata.

Readers (report, store, Python API) go through :func:`events` and
:func:`attributed_writes`, so the trace is parsed and attributed once, at run time; for
run directories made before these files existed they are derived on the fly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl

from sqlwa.analysis import attribution, traceparse, windows

SUMMARY_FILE = "summary.json"
COMMITS_FILE = "commits.parquet"
TRACE_FILE = "trace.txt"
EVENTS_FILE = "events.parquet"
WRITES_FILE = "writes.parquet"
LAYOUT_FILE = "layout.json"


def summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / SUMMARY_FILE).read_text())


def commits(run_dir: Path) -> pl.DataFrame:
    """The per-commit table (commits.parquet)."""
    return pl.read_parquet(Path(run_dir) / COMMITS_FILE)


def has_trace(run_dir: Path) -> bool:
    run_dir = Path(run_dir)
    return (run_dir / EVENTS_FILE).is_file() or (run_dir / TRACE_FILE).is_file()


def events(run_dir: Path) -> pl.DataFrame:
    """Every traced event of the run, from events.parquet (or its trace.txt)."""
    run_dir = Path(run_dir)
    if (run_dir / EVENTS_FILE).is_file():
        return pl.read_parquet(run_dir / EVENTS_FILE)
    parsed, _ = traceparse.parse(run_dir / TRACE_FILE, format="ftrace", lenient=True)
    return parsed


def commit_windows(commits: pl.DataFrame, events: Callable[[], pl.DataFrame]) -> pl.DataFrame:
    """``index``, ``warmup``, ``win_start_ns``, ``win_end_ns`` of every transaction with a
    window: as commits.parquet recorded them (lab runs), else cut from the run's events
    (``events()`` is called only then)."""
    if "win_start_ns" in commits.columns:
        return commits.select("index", "warmup", "win_start_ns", "win_end_ns").drop_nulls()
    return windows.commit_windows(events())


def lab_device(config: dict) -> tuple[int, int] | None:
    dev = (config.get("lab") or {}).get("dev")
    if not dev:
        return None
    major, minor = dev.split(":")
    return int(major), int(minor)


def attribute_events(all_events: pl.DataFrame, config: dict, layout: dict) -> pl.DataFrame | None:
    """Attribute the run's block writes (None when the run has no block device)."""
    dev = lab_device(config)
    if dev is None:
        return None
    fs_type = (config.get("lab") or {}).get("fs_type", config.get("fs", ""))
    return attribution.attribute(
        all_events,
        windows.commit_windows(all_events),
        dev,
        windows.run_tid(all_events),
        config.get("journal", ""),
        fs_type,
        layout,
    )


def attributed_writes(run_dir: Path) -> pl.DataFrame | None:
    """The run's block writes with their category, or None when it has none to attribute
    (a VFS-only run, tmpfs, or a run without layout.json)."""
    run_dir = Path(run_dir)
    if (run_dir / WRITES_FILE).is_file():
        return pl.read_parquet(run_dir / WRITES_FILE)
    if not has_trace(run_dir) or not (run_dir / LAYOUT_FILE).is_file():
        return None
    layout = json.loads((run_dir / LAYOUT_FILE).read_text())
    return attribute_events(events(run_dir), summary(run_dir)["config"], layout)
