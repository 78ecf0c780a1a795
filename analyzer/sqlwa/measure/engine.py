"""Running SQLite workloads through the Rust engine (``sqlwa._native``).

This module only resolves scenarios, turns the engine's column-wise commit records
into a Polars frame and validates settings early; the SQL, the counting VFS shim and
the markers live in the Rust crate ``workloads/``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlwa import _native, record
from sqlwa._native import Scenario
from sqlwa.errors import ScenarioError, hint_of

if TYPE_CHECKING:
    import polars as pl

# The values the engine accepts, from its Rust enums (one list, there).
JOURNAL_MODES = _native.JOURNAL_MODES
SYNC_MODES = _native.SYNC_MODES
LOCKING_MODES = _native.LOCKING_MODES
MAX_DURATION_S = _native.MAX_DURATION_S  # the longest --duration (a year)


@dataclass(frozen=True)
class Option:
    """How ``sqlwa run`` offers a setting: its help, a short flag, a lower bound or the
    values it takes. The option's name is the field's (``page_size`` → ``--page-size``)."""

    help: str
    short: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    flag: str | None = None  # the long option, when not the field's name
    metavar: str | None = None  # a value the CLI parses itself (sqlwa.cli.run): DURATION


def _setting(default: Any, option: Option) -> Any:
    return field(default=default, metadata={"option": option})


def option_of(setting: Field[Any]) -> Option | None:
    """The command-line option of a setting's field (:func:`setting_fields`), or None for an internal one."""
    return setting.metadata.get("option")


@dataclass(frozen=True)
class Length:
    """How much of the scenario a run executes: its measured transactions, the time it
    may take, the warm-up before them and the seed of their generated values. They
    travel together because together they say which transactions a run is made of (the
    stop section and the progress line read the first two, the engine all four)."""

    txns: int | None = _setting(None, Option("Measured transactions [default: the scenario's].", "-n", minimum=1))
    duration_s: float | None = _setting(
        None,
        Option(
            "Run for this long (30s, 10m, 24h, 2d; warm-up included); with -n, until either "
            "is reached; alone, as many transactions as fit.",
            flag="--duration",
            metavar="DURATION",
        ),
    )
    warmup: int | None = _setting(
        None, Option("Warm-up transactions, run but not measured [default: the scenario's].", minimum=0)
    )
    seed: int | None = _setting(None, Option("Seed for generated values [default: the scenario's]."))


@dataclass(frozen=True)
class Pager:
    """The PRAGMAs of SQLite's pager besides the journal mode and synchronous: page and
    cache size, when WAL checkpoints, how large a journal may stay, locking and mmap.
    Each is ``None`` for SQLite's (or the scenario's) own value; they travel together
    because the engine sets them together at set-up, over the scenario's ``[pragmas]``,
    and reads each back (summary.json's ``pragmas``)."""

    page_size: int | None = _setting(None, Option("PRAGMA page_size."))
    cache_size: int | None = _setting(None, Option("PRAGMA cache_size."))
    wal_autocheckpoint: int | None = _setting(None, Option("PRAGMA wal_autocheckpoint (pages)."))
    journal_size_limit: int | None = _setting(None, Option("PRAGMA journal_size_limit (bytes)."))
    locking_mode: str | None = _setting(None, Option("PRAGMA locking_mode.", choices=LOCKING_MODES))
    mmap_size: int | None = _setting(None, Option("PRAGMA mmap_size (bytes)."))


@dataclass(frozen=True)
class Instruments:
    """What the engine records beside the run, none of it a ``sqlwa run`` option: the
    VFS counts, extents markers and the crash command's device marks and snapshots. They
    travel together because the lab capture and ``sqlwa crash`` set them, not the user
    (``--no-vfs-count`` apart), and they change what is measured, never what SQLite does."""

    # `--no-vfs-count` (hidden) in `sqlwa run`
    count_vfs: bool = True
    # extents markers (FIEMAP of the run's files) for block attribution; lab runs turn it on
    map_extents: bool = False
    # with a FUSE layer: the lower directory it mirrors, whose files the extents are taken
    # from (FUSE answers no FIEMAP); lab runs with --fuse set it
    extents_from: str | None = None
    # `sqlwa crash`: the device-mapper log-writes target under the lab filesystem, whose
    # log the engine marks after the schema and after every commit (sqlwa.durability)
    dm_mark: str | None = None
    # `sqlwa crash`'s untraced reference run: a copy of the database after the schema and
    # after every commit goes to this directory (what crash states are compared with)
    snapshot_dir: str | None = None


@dataclass(frozen=True)
class Replay:
    """How a replayed SQL log runs (a --scenario FILE whose first line is a SQL log
    header): the database it starts from, its pacing and whether a failing statement
    stops it. They travel together because they mean something for a replay only."""

    from_db: str | None = _setting(
        None,
        Option(
            "Replay: start from this snapshot of the app's database (and its -wal) "
            "[default: the log's own CREATE statements].",
            flag="--from",
        ),
    )
    timing: str | None = _setting(
        None,
        Option(
            "Replay: recorded (the log's gaps between transactions), back-to-back, or a factor "
            "on the recorded gaps [default: recorded].",
        ),
    )
    strict: bool = _setting(False, Option("Replay: stop at the first statement that fails on replay."))


@dataclass
class RunSettings:
    """SQLite settings for one run; ``None`` keeps the scenario's (or SQLite's) default.

    The settings are the Rust engine's (``workloads/src/settings.rs``, deserialised with
    serde): its ``RunSettings::FIELDS`` is the one description of their names, types and
    defaults (``_native.settings_fields()``), which tests/unit/test_settings_description.py
    holds this class and the stub's TypedDicts to. Here they are grouped (:class:`Length`,
    :class:`Pager`, :class:`Instruments`, :class:`Replay`; journal, sync, think time and
    extra pragmas at the top), and flat everywhere outside Python objects: the engine,
    summary.json's ``config.settings`` and the VM lab's request take :meth:`as_dict` (in
    :func:`setting_fields`' order, the one summary.json has always had), and
    :meth:`from_flat` reads it back. Each setting with an :class:`Option` is a ``sqlwa
    run`` option of the same name.
    """

    journal: str = _setting("delete", Option("PRAGMA journal_mode.", short="-j", choices=JOURNAL_MODES))
    sync: str = _setting("full", Option("PRAGMA synchronous.", choices=SYNC_MODES))
    length: Length = field(default_factory=Length)
    pager: Pager = field(default_factory=Pager)
    think_time_ms: float | None = _setting(
        None, Option("Pause between transactions, ms (at most an hour).", minimum=0, maximum=_native.MAX_THINK_TIME_MS)
    )
    # `--pragma NAME[=VALUE]` (repeatable) in `sqlwa run`
    extra_pragmas: list[str] = field(default_factory=list)
    instruments: Instruments = field(default_factory=Instruments)
    replay: Replay = field(default_factory=Replay)

    @classmethod
    def from_flat(cls, flat: Mapping[str, Any]) -> RunSettings:
        """The settings of a flat mapping (:meth:`as_dict`'s keys, any left out at its
        default); a key that is no setting is a TypeError, as a constructor's would be."""
        _refuse_unknown(flat)
        groups = {
            name: group(**{f.name: flat[f.name] for f in fields(group) if f.name in flat})
            for name, group in _GROUPS.items()
        }
        top = {name: value for name, value in flat.items() if _GROUP_OF[name] is None}
        return cls(**top, **groups)

    def replace(self, **changes: Any) -> RunSettings:
        """A copy with the settings named (flat names: ``txns``, ``from_db``) changed, as
        :func:`dataclasses.replace` makes one: the values not changed are shared."""
        _refuse_unknown(changes)
        groups = {
            name: dataclasses.replace(getattr(self, name), **given)
            for name in _GROUPS
            if (given := {key: value for key, value in changes.items() if _GROUP_OF[key] == name})
        }
        top = {key: value for key, value in changes.items() if _GROUP_OF[key] is None}
        return dataclasses.replace(self, **top, **groups)

    def setting(self, name: str) -> Any:
        """One setting by its flat name (``txns``, ``from_db``)."""
        group = _GROUP_OF[name]
        return getattr(self if group is None else getattr(self, group), name)

    def as_dict(self) -> _native.SettingsInput:
        """The settings as the engine takes them: flat (the names are the same), in
        :func:`setting_fields`' order, which summary.json's ``config.settings`` keeps."""
        flat: dict[str, Any] = {}
        for name, value in asdict(self).items():
            if name in _GROUPS:
                flat.update(value)
            else:
                flat[name] = value
        return cast("_native.SettingsInput", flat)


# The groups of RunSettings by the field that holds each.
_GROUPS: dict[str, type[Any]] = {"length": Length, "pager": Pager, "instruments": Instruments, "replay": Replay}


def setting_fields() -> Iterator[tuple[str, Field[Any]]]:
    """Every setting of :class:`RunSettings`, flat, in :meth:`~RunSettings.as_dict`'s order:
    its name and its field (whose metadata holds its :class:`Option`, :func:`option_of`)."""
    for top in fields(RunSettings):
        group = _GROUPS.get(top.name)
        for leaf in fields(group) if group is not None else (top,):
            yield leaf.name, leaf


# The group of every setting by its flat name (None: a field of RunSettings itself).
_GROUP_OF: dict[str, str | None] = {
    **{top.name: None for top in fields(RunSettings) if top.name not in _GROUPS},
    **{leaf.name: group for group, cls in _GROUPS.items() for leaf in fields(cls)},
}


def _refuse_unknown(flat: Mapping[str, Any]) -> None:
    unknown = [name for name in flat if name not in _GROUP_OF]
    if unknown:
        raise TypeError(f"RunSettings has no setting {unknown[0]!r}")


@dataclass
class WorkloadResult:
    """What the engine measured: run information and one row per transaction."""

    info: dict
    commits: pl.DataFrame

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> WorkloadResult:
        """From :func:`run_workload_raw`'s ``{"info", "commits"}``, commits as a table."""
        # Imported here, not at the top: the VM lab's guest runs the engine through
        # run_workload_raw, and importing polars takes it tens of seconds under TCG.
        import polars as pl

        commits = pl.DataFrame(raw["commits"]).with_columns(derived_columns())
        return cls(info=raw["info"], commits=commits)

    @property
    def measured(self) -> pl.DataFrame:
        """The commits that count: warm-up transactions removed."""
        return self.commits.filter(~self.commits["warmup"])


def derived_columns() -> list[pl.Expr]:
    """The columns a run's table adds to the engine's own: latency and CPU time."""
    import polars as pl  # here: see WorkloadResult.from_raw

    return [
        (pl.col("end_ns") - pl.col("start_ns")).alias("latency_ns"),
        (pl.col("cpu_user_ns") + pl.col("cpu_sys_ns")).alias("cpu_ns"),
    ]


def looks_like_path(name_or_path: str) -> bool:
    """A scenario file or a SQL log, not a built-in scenario's name."""
    return "/" in name_or_path or name_or_path.endswith(".toml") or Path(name_or_path).is_file()


def database_paths(info: Mapping[str, Any]) -> list[Path]:
    """The database files a run made: the scenario's one, or each of a replayed log's."""
    db_path = Path(info["db_path"])
    replayed = info.get("replay")
    if replayed is None:
        return [db_path]
    return [db_path.parent / db["file_name"] for db in replayed["databases"]]


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario TOML file or a recorded SQL log (its first
    line the format-1 header: replayed) by path."""
    if looks_like_path(name_or_path):
        path = Path(name_or_path)
        # Anything but a regular file (a FIFO, /dev/zero) the engine refuses before opening it.
        if not path.exists():
            raise ScenarioError(
                f"scenario file {name_or_path} does not exist",
                "pass an existing .toml file or SQL log, or a built-in name (sqlwa scenarios lists them)",
            )
        refuse_unconverted_log(path)
        return _native.scenario_from_file(str(path))
    return _native.builtin_scenario(name_or_path)


def has_log_header(path: Path) -> bool:
    with open(path, "rb") as f:
        return b"sqlwa_sql_log" in f.readline(4096)


# Names a SQL log goes by (`sqlwa record --out`'s examples, the docs'): a file so named
# that is no format-1 log is told so, not read as a scenario's TOML.
LOG_SUFFIXES = (".jsonl", ".ndjson", ".json", ".sqllog")


def refuse_unconverted_log(path: Path) -> None:
    """An Android logcat or a .sql file given where a scenario or SQL log goes: said so,
    with the one command that makes it a SQL log (the engine replays format 1 only); a
    file named as a log (``LOG_SUFFIXES``) that is none: said so, with its first line."""
    if not path.is_file() or path.suffix == ".toml":
        return
    named_as_log = path.suffix.lower() in LOG_SUFFIXES
    try:
        kind = record.detect(path)
    except record.SqlLogError as exc:
        if named_as_log and not has_log_header(path):  # a log's own faults: the engine's reader says them
            line, _, what = str(exc).removeprefix(f"{path}:").partition(": ")
            raise ScenarioError(f"SQL log {path}, line {line}: {what}", hint_of(exc)) from None
        return  # not a log of any kind: the engine's own message about the scenario file
    if named_as_log and kind != "sql-log":
        raise ScenarioError(
            f'SQL log {path}, line 1: not a SQL log: its first line is not the {{"sqlwa_sql_log": 1, …}} header',
            "pass a log written by `sqlwa record` (docs/sql-log-format.md), or a scenario's .toml file",
        )
    if kind == "android-logcat" or (kind == "sql-file" and path.suffix == ".sql"):
        what = "an Android logcat" if kind == "android-logcat" else "a .sql file"
        raise ScenarioError(
            f"{path} is {what}, not a scenario or SQL log",
            f"convert it first: sqlwa record --from {path} --out app.jsonl, then -s app.jsonl",
        )


def builtin_scenarios() -> list[tuple[str, str]]:
    """(name, description) of every built-in scenario."""
    return _native.builtin_scenarios()


def check_settings(settings: RunSettings) -> None:
    """Raise :class:`~sqlwa.errors.ConfigError` for settings the engine would refuse, before
    a run makes anything (the engine reads them only once the database's directory exists)."""
    _native.check_settings(settings.as_dict())


#: ``progress(done, total)``: transactions done and in all (None: a duration alone bounds
#: the run). A callable with a ``figures`` dict attribute has it updated by the engine
#: first: ``measured``, ``syncs`` and ``write_bytes`` of the measured transactions so far.
ProgressFn = Callable[[int, "int | None"], None]


def run_workload(
    scenario: Scenario,
    settings: RunSettings,
    directory: Path,
    marker_path: Path | None = None,
    progress: ProgressFn | None = None,
    keep_measured: bool = False,
) -> WorkloadResult:
    """Run ``scenario`` in ``directory`` and return its per-commit records."""
    raw = run_workload_raw(scenario, settings, directory, marker_path, progress, keep_measured)
    raise_if_nothing_measured(raw["info"], sum(not warmup for warmup in raw["commits"]["warmup"]))
    return WorkloadResult.from_raw(raw)


def run_workload_raw(
    scenario: Scenario,
    settings: RunSettings,
    directory: Path,
    marker_path: Path | None = None,
    progress: ProgressFn | None = None,
    keep_measured: bool = False,
) -> _native.WorkloadRun:
    """:func:`run_workload` as the engine returns it: ``{"info": {…}, "commits": {column:
    [values]}}``, plain Python, JSON-able. With ``keep_measured`` a Ctrl-C or SIGTERM
    between measured transactions ends the run there and returns it, ``info["stopped_by"]``
    "interrupted" and ``info["interruption"]`` what the signal says; the caller raises it
    (:func:`interruption_of`) once it has kept what was measured."""
    return _native.run_workload(
        scenario,
        settings.as_dict(),
        str(directory),
        str(marker_path) if marker_path else None,
        progress,
        keep_measured,
    )


#: Commit records per chunk the engine hands over (~1 KB each while in Python).
CHUNK_COMMITS = 8192


def chunk_commits() -> int:
    """Commit records per chunk the engine hands over; ``SQLWA_CHUNK_COMMITS`` sets it
    (tests force tiny chunks)."""
    return int(os.environ.get("SQLWA_CHUNK_COMMITS", CHUNK_COMMITS))


def run_workload_chunked(
    scenario: Scenario,
    settings: RunSettings,
    directory: Path,
    commits: Callable[[dict[str, list[int]]], None],
    chunk_commits: int,
    marker_path: Path | None = None,
    progress: ProgressFn | None = None,
    keep_measured: bool = False,
) -> _native.WorkloadInfo:
    """:func:`run_workload_raw` whose commit records go to ``commits`` as the run goes,
    ``chunk_commits`` at a time (the engine's columns, as ``run_workload_raw``'s
    ``"commits"``), so the run's memory does not grow with its length; returns the run's
    ``info``. An exception ``commits`` raises ends the run and is raised; ``keep_measured``
    as for :func:`run_workload_raw`."""
    ran = _native.run_workload(
        scenario,
        settings.as_dict(),
        str(directory),
        str(marker_path) if marker_path else None,
        progress,
        keep_measured,
        commits=commits,
        chunk_commits=chunk_commits,
    )
    return ran["info"]


def raise_if_nothing_measured(info: Mapping[str, Any], measured: int) -> None:
    """A run a signal stopped (``keep_measured``) before its first measured commit (of
    ``measured``) has nothing to keep: the signal is raised now, as without ``keep_measured``."""
    interruption = interruption_of(info)
    if interruption is not None and measured == 0:
        raise KeyboardInterrupt() if interruption == "interrupted" else _native.Interrupted(interruption)


def interruption_of(info: Mapping[str, Any]) -> str | None:
    """What stopped a run kept with ``keep_measured`` between its commits ("interrupted"
    for Ctrl-C, "terminated by SIGTERM"), or None for a run that ran to its bound."""
    if info.get("stopped_by") != "interrupted":
        return None
    return str(info.get("interruption") or "interrupted")


def map_database_files(marker_path: Path, db_path: Path, at: str) -> None:
    """Append ``extents`` markers (``at=<at>``) for the database and the journal, WAL and
    -shm files beside it that exist to the marker file (``workloads/MARKERS.md``)."""
    _native.map_database_files(str(marker_path), str(db_path), at)
