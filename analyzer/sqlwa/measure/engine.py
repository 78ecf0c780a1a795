"""Running SQLite workloads through the Rust engine (``sqlwa._native``).

This module only resolves scenarios, turns the engine's column-wise commit records
into a Polars frame and validates settings early; the SQL, the counting VFS shim and
the markers live in the Rust crate ``workloads/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from sqlwa import _native
from sqlwa._native import Scenario
from sqlwa.errors import ScenarioError

JOURNAL_MODES = ("delete", "truncate", "persist", "memory", "wal", "off")
SYNC_MODES = ("off", "normal", "full", "extra")
LOCKING_MODES = ("normal", "exclusive")


@dataclass
class RunSettings:
    """SQLite settings for one run; ``None`` keeps the scenario's (or SQLite's) default."""

    journal: str = "delete"
    sync: str = "full"
    txns: int | None = None
    warmup: int | None = None
    seed: int | None = None
    page_size: int | None = None
    cache_size: int | None = None
    wal_autocheckpoint: int | None = None
    journal_size_limit: int | None = None
    locking_mode: str | None = None
    mmap_size: int | None = None
    think_time_ms: float | None = None
    extra_pragmas: list[str] = field(default_factory=list)
    count_vfs: bool = True
    # extents markers (FIEMAP of the run's files) for block attribution; lab runs turn it on
    map_extents: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class WorkloadResult:
    """What the engine measured: run information and one row per transaction."""

    info: dict
    commits: pl.DataFrame

    @property
    def measured(self) -> pl.DataFrame:
        """The commits that count: warm-up transactions removed."""
        return self.commits.filter(~pl.col("warmup"))


def looks_like_path(name_or_path: str) -> bool:
    return "/" in name_or_path or name_or_path.endswith(".toml")


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario TOML file by path."""
    if looks_like_path(name_or_path):
        path = Path(name_or_path)
        if not path.is_file():
            raise ScenarioError(
                f"scenario file {name_or_path} does not exist",
                "pass an existing .toml file, or a built-in name (sqlwa scenarios lists them)",
            )
        return _native.scenario_from_file(str(path))
    return _native.builtin_scenario(name_or_path)


def builtin_scenarios() -> list[tuple[str, str]]:
    """(name, description) of every built-in scenario."""
    return _native.builtin_scenarios()


def run_workload(
    scenario: Scenario,
    settings: RunSettings,
    directory: Path,
    marker_path: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> WorkloadResult:
    """Run ``scenario`` in ``directory`` and return its per-commit records."""
    raw = _native.run_workload(
        scenario,
        settings.as_dict(),
        str(directory),
        str(marker_path) if marker_path else None,
        progress,
    )
    commits = pl.DataFrame(raw["commits"]).with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("latency_ns"))
    return WorkloadResult(info=raw["info"], commits=commits)
