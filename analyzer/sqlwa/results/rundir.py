"""The files of one run directory, and the one place that knows them.

A lab run writes, beside ``summary.json`` and ``commits.parquet``:

- ``trace.txt`` — the raw capture, kept so the run can be re-analysed;
- ``events.parquet`` — that trace parsed once (every event, every layer);
- ``writes.parquet`` — the block write requests with their attribution (``category``,
  ``commit``, ``file``, ``submitter``), the table the report's timeline and the Python
  API colour by;
- ``layout.json`` — where the filesystem keeps its own journal and metadata;
- ``console.log`` — a ``--vm`` run's guest console, line by line as it came.

Readers (report, store, Python API) go through :func:`events` and
:func:`attributed_writes`, so the trace is parsed and attributed once, at run time; for
run directories made before these files existed they are derived on the fly.

A directory says whether it holds a complete run: a run starts by writing ``RUNNING``
and removing the files an earlier run left there (:func:`begin`, ``summary.json``
first), and ends by renaming ``summary.json`` into place, the last file it writes, and
removing ``RUNNING`` (:func:`finish`). Readers refuse a directory with ``RUNNING`` in it
(:func:`require_complete`): an interrupted re-run never passes for the run before it.

Every read of a result file goes through :func:`reading`, which turns what a truncated,
garbled or foreign file raises (JSON, UTF-8, Parquet, SQLite errors) into one
:class:`~sqlwa.errors.UsageError` naming the file; what is read is checked for the shape
readers rely on (:func:`check_summary`, :func:`check_commits`) before anyone uses it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import polars as pl

from sqlwa import _system, inputs
from sqlwa.analysis import attribution, traceparse, windows
from sqlwa.analysis.schema import Summary
from sqlwa.capture import drain
from sqlwa.errors import UsageError
from sqlwa.outputs import (  # what a run directory looks like: outputs refuses to write into one
    COMMITS_FILE,
    CONSOLE_FILE,
    EVENTS_FILE,
    LAYOUT_FILE,
    RUN_FILES,
    RUN_MARK_KIND,
    RUNNING_FILE,
    SUMMARY_FILE,
    SUMMARY_PART,
    TRACE_FILE,
    WRITES_FILE,
    holds_a_run,
    run_mark,
)

# Polars reports a failed write as a ComputeError ending in Rust's "(os error N)".
_OS_ERROR_RE = re.compile(r"\(os error (\d+)\)")


def polars_can_name(path: Path) -> bool:
    """Whether Polars can open ``path`` by name: it takes UTF-8 paths only, while a user's
    directory may be named with any bytes (Python holds those as surrogates)."""
    try:
        os.fspath(path).encode()
    except UnicodeEncodeError:
        return False
    return True


def read_parquet(path: Path) -> pl.DataFrame:
    """``pl.read_parquet(path)``, through a file Python opens where Polars cannot name it;
    anything but a regular file refused (:func:`sqlwa.inputs.check_input`)."""
    inputs.check_input(path, "Parquet table")
    if polars_can_name(path):
        return pl.read_parquet(path)
    with open(path, "rb") as f:
        return pl.read_parquet(f)


#: The first (and last) four bytes of every Parquet file.
PARQUET_MAGIC = b"PAR1"


def is_parquet(path: Path) -> bool:
    with inputs.open_input(path, "Parquet table") as f:
        return f.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC


def scan_parquet(path: Path) -> pl.LazyFrame:
    """``pl.scan_parquet(path)``: a lazy frame that reads nothing but the file's footer
    now (the schema, so a damaged file fails here rather than at ``collect()``), and at
    ``collect()`` only the columns and row groups the query needs. The path is taken as
    it is, never as a glob; where Polars cannot name it, through a file Python opens
    (which the frame keeps open). Anything but a regular file is refused first."""
    inputs.check_input(path, "Parquet table")
    source = path if polars_can_name(path) else open(path, "rb")
    frame = pl.scan_parquet(source, glob=False)
    frame.collect_schema()
    return frame


def write_parquet(table: pl.DataFrame, path: Path) -> None:
    """``table.write_parquet(path)`` (through a file Python opens where Polars cannot name
    it), with a failed write raised as the OSError it is (a full disk: ENOSPC), so
    :func:`sqlwa.errors.writing` can say so in one line."""
    try:
        if polars_can_name(path):
            table.write_parquet(path)
        else:
            with open(path, "wb") as f:
                table.write_parquet(f)
    except pl.exceptions.PolarsError as exc:
        code = os_error_of(exc, path, table)
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from exc


def os_error_of(exc: pl.exceptions.PolarsError, path: Path, table: pl.DataFrame) -> int | None:
    """The errno behind Polars' failed write of ``table`` to ``path``: the "(os error N)" its
    message ends in, or ENOSPC where the message has none (a write that ran out of room
    while writing the footer says "Invalid thrift: transport error") and the filesystem
    has less room left than the table takes in memory."""
    found = _OS_ERROR_RE.search(str(exc))
    if found is not None:
        return int(found.group(1))
    try:
        free, _ = _system.mounts.free_space(os.fspath(path.parent))
    except OSError:
        return None
    return errno.ENOSPC if free < table.estimated_size() else None


def begin(run_dir: Path) -> None:
    """Mark ``run_dir`` as holding an unfinished run and remove what an earlier sqlwa run
    wrote there (the files its mark lists, or a finished run's), so no file of it stands
    beside the new run's; nothing else is removed."""
    run_dir = Path(run_dir)
    refuse_foreign_files(run_dir)
    earlier = files_of_earlier_run(run_dir)
    mark = {
        "sqlwa": RUN_MARK_KIND,
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "state": "unfinished",
        "files": list(RUN_FILES),
    }
    part = run_dir / f".{RUNNING_FILE}.part"
    part.write_text(json.dumps(mark) + "\n")
    os.replace(part, run_dir / RUNNING_FILE)
    if TRACE_FILE in earlier:  # and the parts of its capture (a long run's, unfinished)
        earlier += [name for name in os.listdir(run_dir) if drain.PART_RE.fullmatch(name)]
    for name in earlier:
        (run_dir / name).unlink(missing_ok=True)


def refuse_foreign_files(run_dir: Path) -> None:
    """A directory may be re-used only if the files a run writes there are a sqlwa run's:
    a user's own trace.txt or events.parquet (or a file named RUNNING) in a chosen --out
    is never deleted."""
    present = [name for name in (RUNNING_FILE, *RUN_FILES) if os.path.lexists(run_dir / name)]
    if present and not holds_a_run(run_dir):
        raise UsageError(
            f"{run_dir} holds {present[0]}, which no sqlwa run wrote; sqlwa replaces only its own results",
            "choose a new or empty --out directory",
        )


#: What the RUNNING mark says it is: ``{"sqlwa": "run", "pid": …, "started": …, "files": […]}``.
def files_of_earlier_run(run_dir: Path) -> list[str]:
    """The files a new run may remove from ``run_dir``: those a sqlwa RUNNING mark lists
    (only names a run writes), or a finished sqlwa run's; none else."""
    mark = run_mark(run_dir)
    if mark is not None:
        return [name for name in RUN_FILES if name in mark["files"]]
    return list(RUN_FILES) if holds_a_run(run_dir) else []


def finish(run_dir: Path, summary: Summary) -> None:
    """Write summary.json atomically (the run's last file) and clear the RUNNING mark."""
    run_dir = Path(run_dir)
    part = run_dir / SUMMARY_PART
    with open(part, "w") as f:
        f.write(json.dumps(summary, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, run_dir / SUMMARY_FILE)
    (run_dir / RUNNING_FILE).unlink(missing_ok=True)


def discard_unstarted(run_dir: Path) -> None:
    """Remove ``run_dir`` if it holds nothing but the RUNNING mark: a run refused before it
    measured anything (a sweep's skipped cell) leaves no directory that looks interrupted.
    A --vm cell's guest console goes with it: it holds the refusal, which the store keeps."""
    run_dir = Path(run_dir)
    names = {entry.name for entry in run_dir.iterdir()} if run_dir.is_dir() else set()
    if RUNNING_FILE in names and names <= {RUNNING_FILE, CONSOLE_FILE}:
        for name in (CONSOLE_FILE, RUNNING_FILE):
            (run_dir / name).unlink(missing_ok=True)
        run_dir.rmdir()


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


# What reading a damaged file raises: OSError (a missing or unreadable file), ValueError
# (JSONDecodeError, UnicodeDecodeError, an embedded NUL), Polars' errors and panics
# (truncated or garbled Parquet), sqlite3.DatabaseError (a store that is no database).
READ_ERRORS = (OSError, ValueError, pl.exceptions.PolarsError, pl.exceptions.PanicException, sqlite3.DatabaseError)


class Damaged(Exception):
    """A file read whole but not of the shape sqlwa wrote (raised inside :func:`reading`)."""


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Read ``path`` inside this block: any sign of damage becomes one UsageError naming it."""
    try:
        yield
    except FileNotFoundError:
        raise UsageError(f"{path} is missing", "re-run the measurement that writes it") from None
    except (*READ_ERRORS, Damaged) as exc:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UsageError(
            f"{path} is damaged or not sqlwa's: {detail}", "re-run the measurement that writes it"
        ) from None


def _number(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


# summary.json: what each top-level key must be (required ones first), and the sections
# whose values readers do arithmetic on.
SUMMARY_REQUIRED: dict[str, tuple[type, ...]] = {
    "config": (dict,),
    "levels": (list,),
    "commits": (int,),
    "per_commit": (dict,),
}
SUMMARY_OPTIONAL: dict[str, tuple[type, ...]] = {
    "latency_ms": (dict,),
    "trace": (dict, type(None)),
    "frame_budget_misses": (dict,),
    "amortized": (dict,),
}
CONFIG_TEXT = ("scenario", "fs", "journal", "sync", "kernel", "machine", "sqlite_version", "fs_source")


def check_summary(data: object) -> Summary:
    """``data`` (a parsed summary.json) if it has the shape readers use, else :class:`Damaged`.
    Readers take a summary from elsewhere (an older sqlwa's, a CI artifact's): this checks
    what they rely on, not every key of :class:`~sqlwa.analysis.schema.Summary`, which
    :func:`sqlwa.analysis.schema.check_summary` does for what this sqlwa writes."""
    if not isinstance(data, dict):
        raise Damaged(f"a JSON {type(data).__name__}, not an object")
    for key, kind in (*SUMMARY_REQUIRED.items(), *SUMMARY_OPTIONAL.items()):
        if key in data and not isinstance(data[key], kind):
            raise Damaged(f"{key!r} is a {type(data[key]).__name__}")
        if key in SUMMARY_REQUIRED and key not in data:
            raise Damaged(f"no {key!r}")
    if not all(isinstance(level, str) for level in data["levels"]):
        raise Damaged("'levels' is not a list of names")
    for section in ("per_commit", "latency_ms"):
        if not all(_number(v) for v in data.get(section, {}).values()):
            raise Damaged(f"{section!r} holds a value that is not a number")
    budget = data.get("frame_budget_misses", {}).get("budget_ms")
    if not _number(budget) or not _number((data.get("trace") or {}).get("lost_events")):
        raise Damaged("'frame_budget_misses' or 'trace' holds a value that is not a number")
    check_config(data["config"])
    return cast(Summary, data)


def check_config(config: dict) -> None:
    if not all(isinstance(config.get(key), (str, type(None))) for key in CONFIG_TEXT):
        raise Damaged(f"'config' holds a non-text {', '.join(CONFIG_TEXT)}")
    if not _number(config.get("txns")):
        raise Damaged("'config'.'txns' is not a number")
    lab = config.get("lab")
    if lab is None:
        return
    if not isinstance(lab, dict) or not isinstance(lab.get("dev", ""), (str, type(None))):
        raise Damaged("'config'.'lab' is not a lab description")
    dev = lab.get("dev")
    if dev and not (dev.count(":") == 1 and all(part.isdigit() for part in dev.split(":"))):
        raise Damaged(f"'config'.'lab'.'dev' is {dev!r}, not MAJOR:MINOR")


def check_commits(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (a read commits.parquet) if readers can use it, else :class:`Damaged`."""
    schema = frame.schema
    if "index" not in schema or not schema["index"].is_integer() or schema.get("warmup") != pl.Boolean:
        raise Damaged("no integer 'index' and boolean 'warmup' columns")
    # every column is a number, but ``phase`` (analysis.phases: an Enum of names)
    odd = [
        name
        for name, kind in frame.schema.items()
        if not (kind.is_numeric() or kind == pl.Boolean or (name == "phase" and isinstance(kind, pl.Enum)))
    ]
    if odd:
        raise Damaged(f"column {odd[0]!r} is {frame.schema[odd[0]]}, not a number")
    return frame


def summary(run_dir: Path) -> Summary:
    """The run's summary.json, checked; refuses an unfinished run."""
    require_complete(run_dir)
    path = Path(run_dir) / SUMMARY_FILE
    with reading(path):
        return check_summary(read_json(path))


def read_json(path: Path) -> object:
    """A JSON result file (summary.json, layout.json), read through :mod:`sqlwa.inputs`."""
    return inputs.parse_json(inputs.read_input(path, "result file", inputs.SUMMARY_LIMIT))


def commits(run_dir: Path) -> pl.DataFrame:
    """The per-commit table (commits.parquet), checked."""
    path = Path(run_dir) / COMMITS_FILE
    with reading(path):
        return check_commits(read_parquet(path))


def has_trace(run_dir: Path) -> bool:
    run_dir = Path(run_dir)
    return (run_dir / EVENTS_FILE).is_file() or (run_dir / TRACE_FILE).is_file()


def events(run_dir: Path) -> pl.DataFrame:
    """Every traced event of the run, from events.parquet (or its trace.txt)."""
    run_dir = Path(run_dir)
    if (run_dir / EVENTS_FILE).is_file():
        with reading(run_dir / EVENTS_FILE):
            return read_parquet(run_dir / EVENTS_FILE)
    with reading(run_dir / TRACE_FILE):
        parsed, _ = traceparse.parse(run_dir / TRACE_FILE, format="ftrace", lenient=True)
    return parsed


def commit_windows(commits: pl.DataFrame, events: Callable[[], pl.DataFrame]) -> pl.DataFrame:
    """``index``, ``warmup``, ``win_start_ns``, ``win_end_ns`` of every transaction with a
    window: as commits.parquet recorded them (lab runs), else cut from the run's events
    (``events()`` is called only then)."""
    if "win_start_ns" in commits.columns:
        return commits.select("index", "warmup", "win_start_ns", "win_end_ns").drop_nulls()
    return windows.commit_windows(events())


def lab_device(config: Mapping[str, Any]) -> tuple[int, int] | None:
    dev = (config.get("lab") or {}).get("dev")
    if not dev:
        return None
    major, minor = dev.split(":")
    return int(major), int(minor)


def attribute_events(all_events: pl.DataFrame, config: Mapping[str, Any], layout: dict) -> pl.DataFrame | None:
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
        with reading(run_dir / WRITES_FILE):
            return read_parquet(run_dir / WRITES_FILE)
    if not has_trace(run_dir) or not (run_dir / LAYOUT_FILE).is_file():
        return None
    with reading(run_dir / LAYOUT_FILE):
        layout = read_json(run_dir / LAYOUT_FILE)
        if not isinstance(layout, dict):
            raise Damaged(f"a JSON {type(layout).__name__}, not an object")
    return attribute_events(events(run_dir), summary(run_dir)["config"], layout)
