"""One measurement run, from request to the files in the output directory.

A run without ``--fs`` measures the VFS level only, in a scratch directory (a fresh
temporary one, or one made inside ``--dir``) that is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import polars as pl

from sqlwa import engine, environment
from sqlwa.errors import UsageError
from sqlwa.summary import build_summary, with_vfs_totals

ProgressFn = Callable[[int, int], None]


@dataclass
class RunRequest:
    scenario: str = "mobibench-insert"
    settings: engine.RunSettings = field(default_factory=engine.RunSettings)
    out_dir: Path = Path("sqlwa-out")
    dir: Path | None = None
    keep_db: bool = False


@dataclass
class RunOutcome:
    summary: dict
    commits: pl.DataFrame
    out_dir: Path


def ensure_writable_dir(path: Path, what: str) -> Path:
    """Create ``path`` if needed and prove we can write there, or explain why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{what} {path} cannot be created: {exc.strerror}",
            f"choose a writable {what}",
        ) from None
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path} is not a writable directory", f"choose a writable {what}")
    return path


@contextmanager
def scratch_dir(parent: Path | None, keep: bool) -> Iterator[Path]:
    """A fresh directory for the database, removed afterwards unless ``keep``."""
    if parent is not None:
        ensure_writable_dir(parent, "--dir")
    path = Path(tempfile.mkdtemp(prefix="sqlwa-run-", dir=parent))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def run_config(request: RunRequest, info: dict, work_dir: Path, measured: int) -> dict:
    fs = environment.filesystem_of(work_dir)
    s = request.settings
    return {
        "scenario": info["scenario"],
        "scenario_source": request.scenario,
        "fs": fs["type"],
        "fs_source": "existing directory (no lab filesystem)",
        "mount_options": fs["options"],
        "journal": s.journal,
        "sync": s.sync,
        "txns": measured,
        "warmup": s.warmup,
        "seed": info["seed"],
        "settings": s.as_dict(),
        "pragmas": info["pragmas"],
        "sqlite_version": info["sqlite_version"],
        "sqlite_source_id": info["sqlite_source_id"],
        "sqlite_compile_options": info["sqlite_compile_options"],
        "vfs_counting": info["vfs_counting"],
        **environment.machine_facts(),
    }


def write_outputs(out_dir: Path, summary: dict, commits: pl.DataFrame) -> None:
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    commits.write_parquet(out_dir / "commits.parquet")


def execute(request: RunRequest, progress: ProgressFn | None = None) -> RunOutcome:
    """Run the request's workload and write summary.json and commits.parquet."""
    scenario = engine.load_scenario(request.scenario)
    out_dir = ensure_writable_dir(request.out_dir, "output directory")
    with scratch_dir(request.dir, request.keep_db) as work_dir:
        result = engine.run_workload(scenario, request.settings, work_dir, progress=progress)
        commits = with_vfs_totals(result.commits)
        measured = commits.filter(~pl.col("warmup")).height
        config = run_config(request, result.info, work_dir, measured)
    summary = build_summary(config, commits, levels=["vfs"])
    write_outputs(out_dir, summary, commits)
    return RunOutcome(summary=summary, commits=commits, out_dir=out_dir)
