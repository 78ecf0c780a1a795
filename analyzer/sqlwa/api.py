"""The Python API: sqlwa's results as Polars frames and plotly figures, for notebooks::

    import sqlwa
    run = sqlwa.load("traces/samples/sqlwa-runs/ext4-wal")  # a run directory
    run.summary["per_commit"]["fsync_calls"]                # summary.json, a typed dict
    run.commits                                             # one row per transaction
    run.commit(5)                                           # every event of commit 5, in order
    run.timeline()                                          # a plotly figure
    trace = sqlwa.parse("traces/samples/blktrace-keks/keks")  # any block trace, no markers needed
    trace.request_mix()
    sqlwa.predict("sqlwa-out/…", device="pixel-2016")      # the commits on another device
    sqlwa.scan("events.parquet")                            # a LazyFrame: read at collect()

:func:`load` reads what ``sqlwa run`` or ``sqlwa matrix`` wrote: a :class:`Run` (a
directory with ``summary.json``) or a :class:`Matrix` (a directory with
``results.sqlite``, or with run directories below it). :func:`parse` reads an external
trace (blktrace, blkparse or ftrace) into a :class:`Trace`. Both kinds share the
device-level helpers of :class:`DeviceTrace`. Everything is a thin layer over Polars:
the events are filtered and joined as frames, never looped over in Python. Both hold
their events in memory; :func:`scan` (and :meth:`Run.scan_events`) give a lazy frame
over an event table on disk instead, for traces too large to load.

Errors are :class:`sqlwa.errors.SqlwaError` subclasses: a path that is not a run or a
matrix raises :class:`~sqlwa.errors.UsageError`, an unparsable trace raises
:class:`~sqlwa.errors.TraceParseError` (from the Rust parser).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar, cast

import plotly.graph_objects as go
import polars as pl

from sqlwa import device as devices
from sqlwa import outputs
from sqlwa.analysis import perfetto, prediction, traceformat, traceparse
from sqlwa.analysis.schema import Config, Summary
from sqlwa.catalogue import CONFIG_KEYS, config_label, config_values, is_flush
from sqlwa.device import predict as predicting
from sqlwa.device.profile import Profile
from sqlwa.errors import UsageError
from sqlwa.results import rundir, store
from sqlwa.views import figures

PathArg = str | PathLike
MARKER_EVENTS = (  # the rest are VFS-call markers
    "run_begin",
    "run_end",
    "txn_begin",
    "txn_end",
    "txn_void",
    "close_begin",
    "close_end",
)
#: Where requests are counted, in order of preference: issued to the device, queued, completed.
REQUEST_ACTIONS = {"D": "issue", "Q": "queue", "C": "completion"}


# ------------------------------------------------------------------ entry points


def load(path: PathArg) -> Run | Matrix:
    """Open what ``sqlwa run --out`` or ``sqlwa matrix --out`` wrote.

    ``path``: a run directory (``summary.json``, ``commits.parquet``, maybe ``trace.txt``)
    → :class:`Run`; a matrix directory (``results.sqlite``, or run directories below it)
    or its ``results.sqlite`` → :class:`Matrix`. Anything else raises
    :class:`~sqlwa.errors.UsageError` saying what was expected.
    """
    path = Path(path)
    if path.is_file() and path.name == store.STORE_FILE:
        return Matrix(path.parent)
    if not path.exists():
        raise UsageError(f"{path} does not exist", "pass a directory written by `sqlwa run` or `sqlwa matrix`")
    if not path.is_dir():
        raise UsageError(
            f"{path} is a file, not a run or matrix directory",
            "pass the directory that holds summary.json (a run) or results.sqlite (a matrix)",
        )
    if (path / rundir.SUMMARY_FILE).is_file() or (path / rundir.RUNNING_FILE).is_file():
        return Run(path)
    if (path / store.STORE_FILE).is_file() or run_dirs_below(path):
        return Matrix(path)
    raise UsageError(
        f"{path} is not a sqlwa run or matrix: it holds neither summary.json nor results.sqlite",
        "pass a directory written by `sqlwa run --out` or `sqlwa matrix --out`",
    )


def parse(paths: PathArg | Iterable[PathArg], format: str = "auto", lenient: bool = False) -> Trace:
    """Load an external block trace (blktrace binary files or base name, blkparse text,
    ftrace text, a Perfetto trace) into a :class:`Trace`. ``format``: one of
    :data:`sqlwa.analysis.traceparse.FORMATS`; ``lenient`` counts unparsable records instead of
    raising :class:`~sqlwa.errors.TraceParseError`."""
    if format not in traceparse.FORMATS:
        raise UsageError(f"unknown trace format {format!r}", f"choose from: {', '.join(traceparse.FORMATS)}")
    events, parse_report = traceparse.parse(paths, format=format, lenient=lenient)
    label = str(paths) if isinstance(paths, (str, PathLike)) else ", ".join(map(str, paths))
    return Trace(sector_or_null(events), parse_report, label)


#: The sector the kernel's block tracepoints print for a request that has none (a cache
#: flush completing): (u64)-1; issued, the same flush shows sector 0. The event tables keep
#: what the kernel printed (their column is not nullable); every frame this API hands out
#: shows a flush's sector, and the sentinel anywhere, as null: never 18446744073709551615.
NO_SECTOR = 2**64 - 1
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def sector_or_null(events: Frame) -> Frame:
    """``events`` with no sector where a request has none (a table without ``sector`` as is)."""
    names = events.collect_schema().names()
    if "sector" not in names:
        return events
    sector = pl.col("sector")
    none = sector == NO_SECTOR
    if "operation" in names:
        none = none | (pl.col("operation") == "flush").fill_null(False)
    return events.with_columns(pl.when(none).then(None).otherwise(sector).alias("sector"))


def parse_to_parquet(
    paths: PathArg | Iterable[PathArg], output: PathArg, format: str = "auto", lenient: bool = False
) -> dict:
    """Parse an external trace straight into the Parquet file ``output`` (what ``sqlwa
    parse TRACE -o FILE`` does) and return the parser's report; then explore it with
    :func:`scan`. A blktrace capture or a text trace (ftrace, blkparse) of any length is
    parsed and written row group by row group, in the memory of a few row groups (about
    200 MB here), where :func:`parse` holds the whole table; a Perfetto trace is put in
    time order by an external sort (temporary files beside ``output``), then written the
    same way. Blktrace and text files given together are read whole."""
    if format not in traceparse.FORMATS:
        raise UsageError(f"unknown trace format {format!r}", f"choose from: {', '.join(traceparse.FORMATS)}")
    paths = traceformat.as_list(paths)
    target = outputs.check_file(Path(output), "output", reads=paths, what_read="the capture")
    if traceformat.is_perfetto(paths, format):
        return perfetto.parse_to_parquet(paths[0], target, lenient=lenient)
    return traceformat.parse_to_parquet(paths, target, format=format, lenient=lenient)


def scan(source: PathArg) -> pl.LazyFrame:
    """A Polars LazyFrame over an event table on disk, for traces too large to load:
    nothing is read but the file's footer until ``.collect()``, and then only the columns
    and row groups the query needs (Polars pushes ``select`` and ``filter`` into the scan).

    ``source``: a Parquet file — the event table ``sqlwa parse TRACE -o FILE`` writes, or
    a run's ``events.parquet`` or ``commits.parquet`` — or a run directory, whose event
    table it scans (:meth:`Run.scan_events`). Anything else raises
    :class:`~sqlwa.errors.UsageError` saying what was expected.
    """
    path = Path(source)
    if path.is_dir():
        opened = load(path)
        if isinstance(opened, Matrix):
            raise UsageError(
                f"{path} is a matrix: it holds many runs, each with its own tables",
                "scan one run's directory (sqlwa.load(DIR).runs lists them), or use sqlwa.load(DIR).commits",
            )
        return opened.scan_events()
    return scan_parquet(path)


def scan_parquet(path: Path) -> pl.LazyFrame:
    """The lazy frame over one Parquet file, or the UsageError that says what is wrong with it."""
    if not path.exists():
        raise UsageError(
            f"{path} does not exist", "pass a Parquet file (sqlwa parse TRACE -o FILE writes one) or a run directory"
        )
    with rundir.reading(path):
        if not rundir.is_parquet(path):
            raise UsageError(
                f"{path} is not a Parquet file",
                f"if it is a trace, parse it into one first (sqlwa parse {path} -o events.parquet) and scan that",
            )
        return sector_or_null(rundir.scan_parquet(path))


DeviceArg = str | PathLike | Profile


def predict(
    results: PathArg,
    device: DeviceArg | Iterable[DeviceArg],
    fill: float | None = None,
    draws: int = prediction.DEFAULT_DRAWS,
    seed: int = prediction.DEFAULT_SEED,
    base: str = "auto",
    budget_ms: float = predicting.FRAME_BUDGET_MS,
    per_commit: bool = False,
) -> pl.DataFrame:
    """What the measured commits of ``results`` (a lab run or a matrix) would cost on
    ``device`` — a shipped profile's name, a profile file, a
    :class:`~sqlwa.device.profile.Profile`, or several of them — as ``sqlwa predict``
    computes it. One row per configuration and device (:func:`sqlwa.device.predict.
    configurations_frame`: measured and predicted p50/p99, frame-budget misses, the shares
    by request kind); with ``per_commit`` one row per commit and run instead, with the
    predicted mean, p50 and p99 over the draws beside the measured latency."""
    if base not in predicting.BASE_CHOICES:
        raise UsageError(f"base {base!r} is not one of {', '.join(predicting.BASE_CHOICES)}", 'e.g. base="auto"')
    specs = [device] if isinstance(device, (str, PathLike, Profile)) else list(device)
    frames = []
    for spec in specs:
        profile = spec if isinstance(spec, Profile) else devices.resolve(str(spec))
        result = predicting.predict_results(Path(results), profile, fill, draws, seed, base, budget_ms)
        frames.append(predicting.per_commit_frame(result) if per_commit else predicting.configurations_frame(result))
    return pl.concat(frames, how="diagonal_relaxed")


def run_dirs_below(path: Path) -> list[Path]:
    """Run directories of a matrix without a store: ``runs/*/`` or ``*/`` holding summary.json."""
    found = sorted(path.glob("runs/*/summary.json")) or sorted(path.glob("*/summary.json"))
    return [p.parent for p in found]


def pandas_frame(frame: pl.DataFrame) -> Any:
    """``frame`` as a pandas DataFrame; says how to get pandas when it is missing."""
    try:
        return frame.to_pandas()
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"to_pandas() needs {exc.name}, which is not installed",
            "pip install pandas (or stay in Polars: every frame here is a polars.DataFrame)",
        ) from None


# ------------------------------------------------------------------ device level


class DeviceTrace:
    """Block requests of one trace and the device-level views of them.

    Subclasses provide :attr:`events` (the parsed event table, columns in
    :data:`sqlwa.analysis.traceparse.COLUMNS`) and :attr:`device`.
    """

    label: str = ""

    @property
    def events(self) -> pl.DataFrame:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    @property
    def device(self) -> tuple[int, int]:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def devices(self) -> pl.DataFrame:
        """Block devices in the trace: ``dev_major``, ``dev_minor``, ``events``, ``issued``
        (requests at action D), busiest first."""
        return (
            self.events.filter(pl.col("kind") == "block")
            .group_by("dev_major", "dev_minor")
            .agg(pl.len().alias("events"), (pl.col("action") == "D").sum().alias("issued"))
            .sort("issued", "events", descending=True)
        )

    def block_events(self, device: tuple[int, int] | None = None) -> pl.DataFrame:
        """The block events of ``device`` (default :attr:`device`)."""
        major, minor = device or self.device
        return self.events.filter(
            (pl.col("kind") == "block") & (pl.col("dev_major") == major) & (pl.col("dev_minor") == minor)
        )

    def request_action(self, device: tuple[int, int] | None = None) -> str:
        """The action :meth:`requests` counts ``device``'s requests at: ``D`` (issued to
        the device) when the trace has it, else ``Q`` (queued), else ``C`` (completed: a
        ``blktrace -a complete`` capture has nothing else); ``""`` when it has none."""
        return request_action_of(self.block_events(device))

    def requests(self, device: tuple[int, int] | None = None) -> pl.DataFrame:
        """Requests of ``device`` (default :attr:`device`) at the point the device saw them:
        action D (issue) when the trace has it, else Q (queued), else C (completed) — see
        :meth:`request_action`. Adds ``ms`` since the first of them and ``is_flush`` (flush
        request or preflush flag)."""
        block = self.block_events(device)
        issued = block.filter(pl.col("action") == request_action_of(block))
        t0 = int(cast(int, issued["time_ns"].min()) or 0)
        return figures.with_ms(issued, t0).with_columns(is_flush().alias("is_flush"))

    def request_mix(self, device: tuple[int, int] | None = None) -> pl.DataFrame:
        """What the device was asked to do: requests and bytes per kind (write, read,
        discard, flush — standalone or preflush —, FUA write), each one's share of all
        requests, and the ``action`` the figures were counted at (:meth:`request_action`)."""
        reqs = self.requests(device)
        kinds = {
            "write": pl.col("operation") == "write",
            "read": pl.col("operation") == "read",
            "discard": pl.col("operation") == "discard",
            "flush": pl.col("is_flush"),
            "FUA write": (pl.col("operation") == "write") & pl.col("fua"),
        }
        rows = reqs.select(
            *[cond.sum().alias(f"{name}|requests") for name, cond in kinds.items()],
            *[pl.col("bytes").filter(cond).sum().alias(f"{name}|bytes") for name, cond in kinds.items()],
        )
        long = rows.unpivot().with_columns(pl.col("variable").str.split_exact("|", 1).alias("parts")).unnest("parts")
        table = long.pivot(on="field_1", index="field_0", values="value").rename({"field_0": "kind"})
        total = max(reqs.height, 1)
        return table.with_columns(
            (pl.col("requests") / total).alias("share_of_requests"),
            pl.lit(self.request_action(device)).alias("action"),
        )

    def by_process(self, device: tuple[int, int] | None = None) -> pl.DataFrame:
        """Requests per process name (``comm``): processes (distinct pids), requests, write
        bytes, flushes, FUA writes, most bytes first. At action D the process is the one
        that dispatched the request (often a kworker or the flusher), not always the one
        that caused it; filter :attr:`events` at action Q for the submitters. A trace of
        completions only names whoever ran when each request completed."""
        return (
            self.requests(device)
            .group_by(pl.col("comm").cast(pl.String))
            .agg(
                pl.col("pid").n_unique().alias("pids"),
                pl.len().alias("requests"),
                pl.col("bytes").filter(pl.col("operation") == "write").sum().alias("write_bytes"),
                pl.col("is_flush").sum().alias("flushes"),
                ((pl.col("operation") == "write") & pl.col("fua")).sum().alias("fua_writes"),
            )
            .sort("write_bytes", "requests", "comm", descending=[True, True, False])
        )

    def size_histogram(self, device: tuple[int, int] | None = None) -> go.Figure:
        """Number of write requests per request size."""
        title = f"write request sizes: {self.label}{requests_label(self.request_action(device))}"
        return figures.size_histogram(self.requests(device), title)

    def sector_heatmap(
        self, device: tuple[int, int] | None = None, time_bins: int = 80, sector_bins: int = 64
    ) -> go.Figure:
        """KiB written per time × sector bin."""
        return figures.sector_heatmap(
            self.requests(device),
            time_bins,
            sector_bins,
            f"KiB written by time and sector: {self.label}{requests_label(self.request_action(device))}",
        )


class Trace(DeviceTrace):
    """An external block trace loaded by :func:`parse`: the events and the parser's report
    (``bad_records``, ``lost_events``, per-action counts …). No commit markers needed."""

    def __init__(self, events: pl.DataFrame, parse_report: dict, label: str) -> None:
        self._events = events
        self.report = parse_report
        self.label = label

    def __repr__(self) -> str:
        return f"<sqlwa.Trace {self.label}: {self._events.height} events>"

    @property
    def events(self) -> pl.DataFrame:
        """Every event of the trace, one row each (columns: :data:`sqlwa.analysis.traceparse.COLUMNS`)."""
        return self._events

    @cached_property
    def device(self) -> tuple[int, int]:
        """The busiest block device (most issued requests)."""
        devs = self.devices()
        if devs.height == 0:
            raise UsageError(f"{self.label} holds no block events", "parse a trace with block requests")
        return int(devs["dev_major"][0]), int(devs["dev_minor"][0])

    def to_pandas(self) -> Any:
        """The events as a pandas DataFrame (needs pandas)."""
        return pandas_frame(self._events)

    # Not on DeviceTrace: a Run's timeline is its commit timeline (Run.timeline).
    def timeline(self, device: tuple[int, int] | None = None) -> go.Figure:
        """Block requests by sector over time, coloured by operation, flushes marked."""
        reqs = self.requests(device).with_columns(figures.operation_key().alias("key"))
        major, minor = device or self.device
        at = requests_label(self.request_action(device))
        return figures.timeline_figure(reqs, f"timeline: {self.label} (device {major}:{minor}){at}")


# ------------------------------------------------------------------ one run


class Run(DeviceTrace):
    """One measurement run: ``summary.json``, ``commits.parquet`` and, for a lab run, the
    trace (``events.parquet`` when present, else ``trace.txt``, parsed on first use)."""

    def __init__(self, path: PathArg) -> None:
        self.dir = Path(path)
        rundir.require_complete(self.dir)
        if not (self.dir / rundir.SUMMARY_FILE).is_file():
            raise UsageError(
                f"{self.dir} is not a run directory: no summary.json", "pass a directory written by `sqlwa run --out`"
            )
        #: summary.json, of :class:`sqlwa.analysis.schema.Summary`'s keys and types
        self.summary: Summary = rundir.summary(self.dir)
        self.label = config_label(config_values(self.config))

    def __repr__(self) -> str:
        return f"<sqlwa.Run {self.label} ({self.summary.get('commits')} commits, levels {self.levels}) at {self.dir}>"

    # --- what summary.json says

    @property
    def config(self) -> Config:
        """The run's configuration (``summary['config']``)."""
        return self.summary["config"]

    @property
    def levels(self) -> list[str]:
        """The measured layers: ``vfs`` always, ``syscall`` and ``block`` for lab runs."""
        return list(self.summary["levels"])

    @cached_property
    def commits(self) -> pl.DataFrame:
        """One row per transaction (warm-up ones flagged): VFS counters, latency and, for
        lab runs, the commit window and per-commit syscall, block and category figures."""
        if not (self.dir / rundir.COMMITS_FILE).is_file():
            raise UsageError(f"{self.dir} has no commits.parquet", "re-run the measurement")
        return rundir.commits(self.dir)

    def to_pandas(self) -> Any:
        """The commits as a pandas DataFrame (needs pandas)."""
        return pandas_frame(self.commits)

    def scan_commits(self) -> pl.LazyFrame:
        """:attr:`commits` as a lazy frame over ``commits.parquet`` (see :func:`scan`)."""
        return scan_parquet(self.dir / rundir.COMMITS_FILE)

    def predict(self, device: DeviceArg | Iterable[DeviceArg], **options: Any) -> pl.DataFrame:
        """This run's commits on another device: :func:`predict`."""
        return predict(self.dir, device, **options)

    # --- the trace

    @property
    def has_trace(self) -> bool:
        """True when the run kept a trace (lab runs): events, commit drill-down, timeline."""
        return rundir.has_trace(self.dir)

    def require_trace(self, what: str) -> None:
        if not self.has_trace:
            raise UsageError(
                f"{what} needs the run's trace, and {self.dir} has none: it measured the VFS level only",
                "measure on a lab filesystem (sudo sqlwa run --fs ext4 …) to trace syscalls and block requests",
            )

    @cached_property
    def events(self) -> pl.DataFrame:
        """Every traced event of the run (markers, syscalls, block events), from
        ``events.parquet`` or, when that is absent, parsed from ``trace.txt``."""
        self.require_trace("events")
        return sector_or_null(rundir.events(self.dir))

    def scan_events(self) -> pl.LazyFrame:
        """:attr:`events` as a lazy frame over ``events.parquet`` (see :func:`scan`): the
        run's trace explored without loading it. A run made before sqlwa kept that file
        has only its raw ``trace.txt``, which :attr:`events` parses into memory."""
        self.require_trace("scan_events()")
        if not (self.dir / rundir.EVENTS_FILE).is_file():
            raise UsageError(
                f"{self.dir} has no {rundir.EVENTS_FILE}, only its raw {rundir.TRACE_FILE} (a run made before "
                f"sqlwa kept the parsed trace)",
                f"use .events (parses it into memory), or sqlwa parse {self.dir / rundir.TRACE_FILE} -o "
                "events.parquet and scan that file",
            )
        return scan_parquet(self.dir / rundir.EVENTS_FILE)

    @property
    def device(self) -> tuple[int, int]:
        """The lab device (major, minor) the run's block requests went to."""
        dev = rundir.lab_device(self.config)
        if dev is None:
            self.require_trace("the block device")
            raise UsageError(f"{self.dir}: summary.json names no lab device", "re-run with --fs")
        return dev

    @cached_property
    def windows(self) -> pl.DataFrame:
        """The commit windows: ``index``, ``warmup``, ``win_start_ns``, ``win_end_ns``."""
        return rundir.commit_windows(self.commits, lambda: self.events)

    # --- attribution (optional stage)

    @property
    def attribution_note(self) -> str | None:
        """Why block writes carry no ``category`` here, or None when they do."""
        return self._attribution[1]

    @property
    def attributed_writes(self) -> pl.DataFrame | None:
        """The issued write requests with ``category`` (and ``commit``, ``file``,
        ``submitter``) from :mod:`sqlwa.analysis.attribution`; None when unavailable (see
        :attr:`attribution_note`)."""
        return self._attribution[0]

    @cached_property
    def _attribution(self) -> tuple[pl.DataFrame | None, str | None]:
        if "block" not in self.levels:
            return None, "the block level was not measured"
        attributed = rundir.attributed_writes(self.dir)
        if attributed is None:
            return None, "the run has no layout.json (recorded by lab runs with attribution)"
        return attributed, None

    def categories(self) -> pl.DataFrame | None:
        """``time_ns``, ``sector``, ``category`` of every issued write (one row per
        request position), or None without attribution."""
        attributed = self.attributed_writes
        return None if attributed is None else figures.request_categories(attributed)

    def requests(self, device: tuple[int, int] | None = None) -> pl.DataFrame:
        """As :meth:`DeviceTrace.requests`, plus ``category`` for writes when attribution exists."""
        reqs = super().requests(device)
        cats = self.categories() if device in (None, self.device) else None
        if cats is None:
            return reqs
        return reqs.join(cats, on=["time_ns", "sector"], how="left")

    # --- one commit

    def commit(self, index: int) -> pl.DataFrame:
        """Every traced event inside commit ``index``'s window (``txn_begin`` to
        ``txn_end`` inclusive), in time order (trace order for equal times), with
        ``layer`` (marker, vfs, syscall, block, other), ``since_start_us`` and — when
        attribution exists — ``category`` on the issued write requests."""
        self.require_trace(f"commit({index})")
        window = self.windows.filter(pl.col("index") == index)
        if window.height == 0:
            first, last = cast(int, self.windows["index"].min()), cast(int, self.windows["index"].max())
            raise UsageError(f"{self.label}: no commit {index}", f"choose a transaction index from {first} to {last}")
        start, end = window.row(0, named=True)["win_start_ns"], window.row(0, named=True)["win_end_ns"]
        inside = self.events.filter(pl.col("time_ns").is_between(start, end)).sort("time_ns", maintain_order=True)
        events = inside.with_columns(
            layer_expr().alias("layer"),
            ((pl.col("time_ns").cast(pl.Int64) - start) / 1e3).alias("since_start_us"),
        )
        return self.with_category(events).select("layer", "since_start_us", pl.exclude("layer", "since_start_us"))

    def with_category(self, events: pl.DataFrame) -> pl.DataFrame:
        """Add ``category`` to the issued writes on the lab device among ``events``."""
        cats = self.categories()
        if cats is None:
            return events
        major, minor = self.device
        issued_write = (
            (pl.col("kind") == "block")
            & (pl.col("action") == "D")
            & (pl.col("operation") == "write")
            & (pl.col("dev_major") == major)
            & (pl.col("dev_minor") == minor)
        )
        joined = events.join(cats, on=["time_ns", "sector"], how="left", maintain_order="left")
        return joined.with_columns(pl.when(issued_write).then(pl.col("category")).alias("category"))

    # --- figures

    def timeline(self, first: int | None = None, count: int | None = figures.TIMELINE_COMMITS) -> go.Figure:
        """Block requests by sector over time for ``count`` commit windows from
        transaction ``first`` (default: the first measured one; ``count=None``: all),
        coloured by category (by operation without attribution), flushes marked, commit
        windows shaded: the report's timeline figure."""
        self.require_trace("timeline()")
        return figures.commit_timeline(
            self.events, self.device, self.windows, self.label, self.categories(), first, count
        )

    def stacked_categories(self) -> go.Figure:
        """KiB of each of the first measured commits stacked by category: block bytes by
        attribution category, or SQLite's VFS bytes by file kind when the run has no
        categories (the title says which)."""
        frame, source = figures.per_commit_bytes(self.dir)
        return figures.stacked_bars(
            frame.rename({"index": "commit"}), "commit", f"{self.label}: KiB per commit — {source}"
        )

    def latency_cdf(self) -> go.Figure:
        """The commit-latency CDF with the 60 Hz frame budget marked."""
        return figures.latency_cdfs(runs_frame([self]))


def request_action_of(block: pl.DataFrame) -> str:
    """The first of :data:`REQUEST_ACTIONS` among ``block``'s actions, ``""`` if none."""
    return next((action for action in REQUEST_ACTIONS if (block["action"] == action).any()), "")


def requests_label(action: str) -> str:
    """How a figure's title says where its requests were counted, when not at issue."""
    return "" if action in ("D", "") else f" (requests at {REQUEST_ACTIONS[action]}, {action})"


def layer_expr() -> pl.Expr:
    """The layer of an event row: marker (transaction/run markers), vfs (the VFS-call
    markers: sync, truncate, delete, extents), syscall, block, other."""
    kind = pl.col("kind").cast(pl.String)
    return (
        pl.when((kind == "marker") & pl.col("name").cast(pl.String).is_in(MARKER_EVENTS))
        .then(pl.lit("marker"))
        .when(kind == "marker")
        .then(pl.lit("vfs"))
        .when(kind.str.starts_with("syscall"))
        .then(pl.lit("syscall"))
        .when(kind == "block")
        .then(pl.lit("block"))
        .otherwise(pl.lit("other"))
    )


def runs_frame(runs: list[Run]) -> pl.DataFrame:
    """The minimal runs frame :mod:`sqlwa.views.figures`' run figures take, read from the
    runs already loaded."""
    return pl.DataFrame(
        [
            {
                "status": "ok",
                "run_dir": str(run.dir.resolve()),
                **config_values(run.config),
            }
            for run in runs
        ]
    )


# ------------------------------------------------------------------ a matrix


SELECTORS = (*CONFIG_KEYS, "repeat")


class Matrix:
    """A sweep: every run of ``DIR/results.sqlite`` (or the run directories below DIR)."""

    def __init__(self, path: PathArg) -> None:
        self.dir = Path(path)
        if (self.dir / store.STORE_FILE).is_file():
            self.summary: pl.DataFrame = store.load_results(self.dir)
        else:
            dirs = run_dirs_below(self.dir)
            if not dirs:
                raise UsageError(
                    f"{self.dir} is not a matrix: no results.sqlite and no run directories below it",
                    "pass a directory written by `sqlwa matrix --out`",
                )
            self.summary = frame_of_runs([Run(d) for d in dirs])

    def __repr__(self) -> str:
        ok = self.summary.filter(pl.col("status") == "ok").height if self.summary.height else 0
        return f"<sqlwa.Matrix {ok} ok runs of {self.summary.height} at {self.dir}>"

    @cached_property
    def runs(self) -> list[Run]:
        """The successful runs, in the store's order."""
        return [Run(d) for d in self.ok()["run_dir"].to_list()]

    def ok(self) -> pl.DataFrame:
        """:attr:`summary`'s rows of successful runs that have a run directory."""
        if self.summary.height == 0:
            return self.summary
        return self.summary.filter((pl.col("status") == "ok") & pl.col("run_dir").is_not_null())

    def run(self, **selection: Any) -> Run:
        """The one successful run matching ``selection`` (any of scenario, fs, encrypt,
        fuse, profile, crypt, journal, sync, repeat), e.g. ``matrix.run(journal="wal", fuse="none")``."""
        unknown = set(selection) - set(SELECTORS)
        if unknown:
            raise UsageError(f"cannot select runs by {', '.join(sorted(unknown))}", f"select by {', '.join(SELECTORS)}")
        rows = self.ok()
        for key, value in selection.items():
            if key in rows.columns:
                rows = rows.filter(pl.col(key) == value)
        if rows.height != 1:
            choices = ", ".join(config_label(r) for r in self.ok().iter_rows(named=True))
            found = "no run" if rows.height == 0 else f"{rows.height} runs"
            raise UsageError(f"{found} of {self.dir} match {selection}", f"narrow the selection; runs: {choices}")
        return Run(rows["run_dir"][0])

    @cached_property
    def commits(self) -> pl.DataFrame:
        """Every successful run's commits in one frame, with the configuration keys
        (scenario, fs, encrypt, fuse, profile, crypt, journal, sync) and run_key in front (columns
        a run lacks are null)."""
        frames = [
            run.commits.select(*[pl.lit(row.get(k)).alias(k) for k in (*CONFIG_KEYS, "run_key")], pl.all())
            for run, row in zip(self.runs, self.ok().iter_rows(named=True))
        ]
        return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()

    def to_pandas(self) -> Any:
        """:attr:`summary` as a pandas DataFrame (needs pandas)."""
        return pandas_frame(self.summary)

    def predict(self, device: DeviceArg | Iterable[DeviceArg], **options: Any) -> pl.DataFrame:
        """Every configuration's commits on another device: :func:`predict`."""
        return predict(self.dir, device, **options)

    def stacked_categories(self) -> go.Figure:
        """KiB per commit by category for each configuration (means over repeats)."""
        return figures.category_bars(store.config_means(self.summary))[0]

    def latency_cdf(self) -> go.Figure:
        """Commit-latency CDFs, one curve per configuration, frame budget marked."""
        return figures.latency_cdfs(self.summary)


def frame_of_runs(runs: list[Run]) -> pl.DataFrame:
    """A store-like summary frame for run directories without a store (read-only)."""
    return pl.DataFrame(
        [store.run_dir_row(run.dir, run.summary, run.commits) for run in runs], infer_schema_length=None
    )
