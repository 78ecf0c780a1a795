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

A directory says whether it holds a complete run: a run starts by writing ``RUNNING``
and removing the files an earlier run left there (:func:`begin`, ``summary.json``
first), and ends by renaming ``summary.json`` into place, the last file it writes, and
removing ``RUNNING`` (:func:`finish`). Readers refuse a directory with ``RUNNING`` in it
(:func:`require_complete`): an interrupted re-run never passes for the run before it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from sqlwa.analysis import attribution, traceparse, windows
from sqlwa.errors import UsageError

SUMMARY_FILE = "summary.json"
COMMITS_FILE = "commits.parquet"
TRACE_FILE = "trace.txt"
EVENTS_FILE = "events.parquet"
WRITES_FILE = "writes.parquet"
LAYOUT_FILE = "layout.json"
RUNNING_FILE = "RUNNING"  # a run is being written here, or was and did not finish
SUMMARY_PART = ".summary.json.part"  # summary.json before its atomic rename into place
#: Every file a run writes into its directory, summary.json first: what a new run into the
#: same directory removes before it starts (nothing else there is sqlwa's to touch).
RUN_FILES = (SUMMARY_FILE, SUMMARY_PART, COMMITS_FILE, TRACE_FILE, EVENTS_FILE, WRITES_FILE, LAYOUT_FILE)


def begin(run_dir: Path) -> None:
    """Mark ``run_dir`` as holding an unfinished run and remove what an earlier run wrote,
    so no file of it stands beside the new run's."""
    run_dir = Path(run_dir)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    (run_dir / RUNNING_FILE).write_text(f"sqlwa run (pid {os.getpid()}) started {started} and has not finished\n")
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)


def finish(run_dir: Path, summary: dict) -> None:
    """Write summary.json atomically (the run's last file) and clear the RUNNING mark."""
    run_dir = Path(run_dir)
    part = run_dir / SUMMARY_PART
    with open(part, "w") as f:
        f.write(json.dumps(summary, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, run_dir / SUMMARY_FILE)
    (run_dir / RUNNING_FILE).unlink(missing_ok=True)


def is_complete(run_dir: Path) -> bool:
    """True when ``run_dir`` holds a finished run: summary.json and no RUNNING mark."""
    run_dir = Path(run_dir)
    return (run_dir / SUMMARY_FILE).is_file() and not (run_dir / RUNNING_FILE).exists()


def require_complete(run_dir: Path) -> None:
    """Refuse a directory whose run did not finish (or is still being written)."""
    if (Path(run_dir) / RUNNING_FILE).exists():
        raise UsageError(
            f"{run_dir} holds an unfinished run (interrupted, failed, or still running): it has a {RUNNING_FILE} mark",
            "re-run the measurement into it, or pass a directory with a complete run",
        )


def summary(run_dir: Path) -> dict:
    require_complete(run_dir)
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
