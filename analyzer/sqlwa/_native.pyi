"""Type stub of ``sqlwa._native``, the PyO3 module built from ``analyzer/native/``.

``mypy.stubtest sqlwa._native`` checks this file against the built module
(tests/unit/test_native_contract.py runs it). The values of the constants come from the
Rust definitions at run time; this file only gives their types.
"""

import os
from collections.abc import Callable, Sequence
from typing import Any, Final, final

import pyarrow  # no type information published (pyproject: ignore_missing_imports); Table reads as Any

_Path = str | os.PathLike[str]

# The module's own __all__: what it adds, in that order.
__all__ = [
    "SqlwaError",
    "ScenarioError",
    "ConfigError",
    "WorkloadError",
    "TraceParseError",
    "Interrupted",
    "TraceFileNotFoundError",
    "TracePermissionError",
    "TraceIsADirectoryError",
    "TraceOSError",
    "JOURNAL_MODES",
    "SYNC_MODES",
    "LOCKING_MODES",
    "FILE_KINDS",
    "VFS_COUNTERS",
    "MAX_THINK_TIME_MS",
    "default_settings",
    "check_settings",
    "Scenario",
    "builtin_scenario",
    "scenario_from_file",
    "builtin_scenarios",
    "run_workload",
    "map_database_files",
    "parse_trace",
    "parse_trace_to_parquet",
    "render_perfetto",
    "PERFETTO_UNNAMED",
]

__version__: Final[str]

# ----------------------------------------------------------------- the settings contract

#: The values each enum setting accepts (``RunSettings.journal``, ``.sync``, ``.locking_mode``).
JOURNAL_MODES: Final[tuple[str, ...]]
SYNC_MODES: Final[tuple[str, ...]]
LOCKING_MODES: Final[tuple[str, ...]]
#: The file kinds the VFS counts, in commit-column order.
FILE_KINDS: Final[tuple[str, ...]]
#: The counters of one file kind: commit columns are ``vfs_<kind>_<counter>``.
VFS_COUNTERS: Final[tuple[str, ...]]
#: The longest ``think_time_ms`` a run or a scenario may ask for (an hour).
MAX_THINK_TIME_MS: Final[float]

def default_settings() -> dict[str, Any]:
    """Every setting ``run_workload`` takes, with its default (None: the scenario's or SQLite's)."""

def check_settings(settings: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` for what ``run_workload`` would refuse in ``settings``
    before it opens a database (names, types, values, the extra pragmas' form)."""

# ----------------------------------------------------------------- workloads

@final
class Scenario:
    """A loaded, validated scenario, or a checked SQL log (a recorded workload, replayed)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def is_replay(self) -> bool: ...
    @property
    def database_files(self) -> list[str]:
        """The database files a run makes in its directory, by name."""

def builtin_scenario(name: str) -> Scenario: ...
def scenario_from_file(path: _Path) -> Scenario: ...
def builtin_scenarios() -> list[tuple[str, str]]:
    """(name, description) of every built-in scenario."""

def run_workload(
    scenario: Scenario,
    settings: dict[str, Any],
    dir: _Path,
    marker_path: _Path | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> dict[str, Any]:
    """Run ``scenario`` in ``dir``: ``{"info": {...}, "commits": {column: [values]}}``.

    The commit columns: ``index``, ``warmup``, ``start_ns``, ``end_ns``, ``logical_bytes``,
    ``statements``, ``cpu_user_ns`` and ``cpu_sys_ns`` (the SQL thread's CPU time inside
    the window), and ``vfs_<kind>_<counter>`` for every :data:`FILE_KINDS` ×
    :data:`VFS_COUNTERS`.

    ``settings`` has the keys of :func:`default_settings`; an absent or None one keeps the
    default, an unknown key or a bad value raises :class:`ConfigError` naming it.
    """

def map_database_files(marker_path: _Path, db_path: _Path, at: str) -> None:
    """Append ``extents`` markers (``at=<at>``, one lower-case word) for the database at
    ``db_path`` and its journal, WAL and -shm files that exist to ``marker_path``."""

# ----------------------------------------------------------------- traces

def parse_trace(
    paths: Sequence[_Path],
    format: str = "auto",
    lenient: bool = False,
    task_names: tuple[str, dict[int, str]] | None = None,
) -> tuple[pyarrow.Table, dict[str, Any]]:
    """Parse block traces into one Arrow table; returns (table, report dict).
    ``task_names=(placeholder, {pid: name})``: rows whose process name is the placeholder
    get their pid's name (empty where it has none)."""

def parse_trace_to_parquet(
    paths: Sequence[_Path],
    output: _Path,
    format: str = "auto",
    lenient: bool = False,
    task_names: tuple[str, dict[int, str]] | None = None,
) -> dict[str, Any]:
    """Parse block traces into a Parquet file of the event table, row group by row group;
    returns the report dict. ``task_names`` as for :func:`parse_trace`."""

#: The task name each line render_perfetto prints carries, for task_names to replace.
PERFETTO_UNNAMED: Final[str]

def render_perfetto(
    path: _Path,
    text: _Path,
    origins: _Path,
    sort_dir: _Path,
    syscalls: tuple[dict[str, dict[int, str]], dict[str, list[str]], str],
    lenient: bool = False,
    progress: Callable[[str], object] | None = None,
    run_rows: int | None = None,
    lines_per_report: int | None = None,
) -> dict[str, Any]:
    """Print a Perfetto trace's events as ftrace lines in time order into ``text``, each
    line's packet byte offset (8 bytes, little-endian) into ``origins``; the sort's runs
    go to a directory in ``sort_dir`` meanwhile. ``syscalls`` is (numbers by machine,
    argument names by call, the machine assumed without system_info). Returns what the
    packets said: machine, names, sched_names, lost_events, bundles, cpus, ftrace_events,
    block_events, packets, rows, bad_records, bad_messages, syscall_machine, unknown_syscalls.
    ``run_rows`` (rows per sorted run) and ``lines_per_report`` are for tests."""

# ----------------------------------------------------------------- errors
# Each carries (message, hint) in ``args`` where it has a hint.

class SqlwaError(Exception): ...
class ScenarioError(SqlwaError): ...
class ConfigError(SqlwaError): ...
class WorkloadError(SqlwaError): ...
class Interrupted(SqlwaError): ...

class TraceParseError(SqlwaError):
    """A trace could not be parsed; ``args[0]`` is the message."""

    #: the file (None for an error not about one file, e.g. an unknown format)
    path: str | None
    #: the line of a text trace
    line: int | None
    #: the byte offset in a binary trace
    byte_offset: int | None

# A trace file that cannot be read: a TraceParseError and the built-in OSError subclass,
# with errno, strerror and filename set.
class TraceFileNotFoundError(TraceParseError, FileNotFoundError): ...
class TracePermissionError(TraceParseError, PermissionError): ...
class TraceIsADirectoryError(TraceParseError, IsADirectoryError): ...
class TraceOSError(TraceParseError, OSError): ...
