"""sqlwa: what one SQLite commit really costs the storage device.

The Python API (see :mod:`sqlwa.api`)::

    import sqlwa
    run = sqlwa.load("sqlwa-out/…")        # a Run, or a Matrix for `sqlwa matrix` output
    trace = sqlwa.parse("keks.blktrace.0")  # any blktrace / blkparse / ftrace trace
    sqlwa.parse_to_parquet("phone", "events.parquet")  # any size, in bounded memory
    events = sqlwa.scan("events.parquet")   # a Polars LazyFrame over `sqlwa parse -o`'s table
    sqlwa.predict("sqlwa-out/…", device="pixel-2016")  # predicted latency, a frame

Every error sqlwa raises is a :class:`sqlwa.SqlwaError` (see :mod:`sqlwa.errors`).
Names are imported on first use, so ``import sqlwa`` (and the CLI) stays fast.
"""

from __future__ import annotations

import importlib
import os

# Polars' allocator (its own jemalloc, configured once, when Polars loads; Polars puts
# its defaults in front of this) returns freed pages only when it next allocates, having
# no background thread: a lab run's analysis, query after query, held the garbage of
# each, its peak growing with the run. A background thread returns them within a second
# (measured: a 10^5-commit run's peak 388 -> 330 MB, its analysis faster). The user's
# own setting wins.
os.environ.setdefault("_RJEM_MALLOC_CONF", "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0")

# typing.TYPE_CHECKING without importing typing (most of what `import sqlwa` took, by
# python -X importtime); type checkers take any name TYPE_CHECKING as true.
TYPE_CHECKING = False

_API = ("load", "parse", "parse_to_parquet", "predict", "scan", "Run", "Matrix", "Trace", "DeviceTrace")

__all__ = [
    "CaptureError",
    "ConfigError",
    "DeviceTrace",
    "Interrupted",
    "LabError",
    "Matrix",
    "NeedsRoot",
    "Run",
    "ScenarioError",
    "SqlwaError",
    "ToolError",
    "Trace",
    "TraceFileNotFoundError",
    "TraceIsADirectoryError",
    "TraceLossError",
    "TraceOSError",
    "TraceParseError",
    "TracePermissionError",
    "UnsupportedFilesystem",
    "UsageError",
    "WorkloadError",
    "__version__",
    "load",
    "parse",
    "parse_to_parquet",
    "predict",
    "scan",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily below
    from typing import Any

    from sqlwa.api import DeviceTrace, Matrix, Run, Trace, load, parse, parse_to_parquet, predict, scan
    from sqlwa.errors import (
        CaptureError,
        ConfigError,
        Interrupted,
        LabError,
        NeedsRoot,
        ScenarioError,
        SqlwaError,
        ToolError,
        TraceFileNotFoundError,
        TraceIsADirectoryError,
        TraceLossError,
        TraceOSError,
        TraceParseError,
        TracePermissionError,
        UnsupportedFilesystem,
        UsageError,
        WorkloadError,
    )

    __version__: str


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return importlib.import_module("sqlwa._native").__version__
    if name in _API:
        return getattr(importlib.import_module("sqlwa.api"), name)
    if name in __all__:
        return getattr(importlib.import_module("sqlwa.errors"), name)
    raise AttributeError(f"module 'sqlwa' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
