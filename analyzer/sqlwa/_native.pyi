"""Type stub of ``sqlwa._native``, the PyO3 module built from ``analyzer/native/``.

``mypy.stubtest sqlwa._native`` checks this file against the built module
(tests/unit/test_native_contract.py runs it). The values of the constants come from the
Rust definitions at run time; this file only gives their types.
"""

import os
from collections.abc import Callable, Sequence
from typing import Final, Literal, NotRequired, TypedDict, final, overload, type_check_only

import pyarrow  # no type information published (pyproject: ignore_missing_imports); Table reads as Any

_Path = str | os.PathLike[str]

# The dicts the functions return, as TypedDicts: only for the type checker
# (@type_check_only; the module has no such classes). Their keys are those the bindings in
# analyzer/native/src set.

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
    "MAX_DURATION_S",
    "MAX_THINK_TIME_MS",
    "default_settings",
    "settings_fields",
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
__git_commit__: Final[str]  # the commit the module was built from (or "unknown")
__sqlite_version__: Final[str]  # sqlite3_libversion() of the bundled SQLite

# ----------------------------------------------------------------- the settings contract

# The closed sets of values (the Rust enums' as_str(); the constants below list them).
_JournalMode = Literal["delete", "truncate", "persist", "memory", "wal", "off"]
_SyncMode = Literal["off", "normal", "full", "extra"]
_LockingMode = Literal["normal", "exclusive"]
_FileKind = Literal["db", "journal", "wal", "shm", "temp", "other"]
_VfsCounter = Literal[
    "write_calls",
    "write_bytes",
    "read_calls",
    "read_bytes",
    "sync_calls",
    "sync_full",
    "sync_dataonly",
    "truncate_calls",
    "delete_calls",
    "open_calls",
]

#: The values each enum setting accepts (``RunSettings.journal``, ``.sync``, ``.locking_mode``).
JOURNAL_MODES: Final[tuple[_JournalMode, ...]]
SYNC_MODES: Final[tuple[_SyncMode, ...]]
LOCKING_MODES: Final[tuple[_LockingMode, ...]]
#: The file kinds the VFS counts, in commit-column order.
FILE_KINDS: Final[tuple[_FileKind, ...]]
#: The counters of one file kind: commit columns are ``vfs_<kind>_<counter>``.
VFS_COUNTERS: Final[tuple[_VfsCounter, ...]]
#: The longest ``think_time_ms`` a run or a scenario may ask for (an hour).
MAX_THINK_TIME_MS: Final[float]
#: The longest ``duration_s`` a run may ask for (a year).
MAX_DURATION_S: Final[float]

@type_check_only
class Settings(TypedDict):
    """Every setting of a run (workloads' ``RunSettings``), as :func:`default_settings`
    gives them: None keeps the scenario's or SQLite's own value."""

    journal: _JournalMode
    sync: _SyncMode
    txns: int | None
    #: the transactions run for at most this many seconds (None: no time bound)
    duration_s: float | None
    warmup: int | None
    seed: int | None
    page_size: int | None
    cache_size: int | None
    wal_autocheckpoint: int | None
    journal_size_limit: int | None
    locking_mode: _LockingMode | None
    mmap_size: int | None
    extra_pragmas: list[str]
    count_vfs: bool
    think_time_ms: float | None
    map_extents: bool
    extents_from: str | None
    dm_mark: str | None
    snapshot_dir: str | None
    #: a replay only: the snapshot of the app's database it starts from
    from_db: str | None
    #: a replay only: "recorded", "back-to-back" or a factor on the recorded gaps
    timing: str | None
    #: a replay only
    strict: bool

@type_check_only
class SettingsInput(TypedDict, total=False):
    """The settings :func:`run_workload` and :func:`check_settings` take: the keys of
    :class:`Settings`, any left out or None keeping the default. The enum settings are
    read case-insensitively, so they are ``str`` here: the engine checks them
    (:class:`ConfigError` lists the values allowed)."""

    journal: str | None
    sync: str | None
    txns: int | None
    #: the transactions run for at most this many seconds (None: no time bound)
    duration_s: float | None
    warmup: int | None
    seed: int | None
    page_size: int | None
    cache_size: int | None
    wal_autocheckpoint: int | None
    journal_size_limit: int | None
    locking_mode: str | None
    mmap_size: int | None
    extra_pragmas: list[str] | None
    count_vfs: bool | None
    think_time_ms: float | None
    map_extents: bool | None
    extents_from: str | None
    dm_mark: str | None
    snapshot_dir: str | None
    from_db: str | None
    timing: str | None
    strict: bool | None

def default_settings() -> Settings:
    """Every setting ``run_workload`` takes, with its default (None: the scenario's or SQLite's)."""

@type_check_only
class SettingField(TypedDict):
    """One setting as the engine describes it (:func:`settings_fields`)."""

    name: str
    #: "bool", "int", "float", "str", "path" (a path as text), "list[str]" or "choice"
    type: Literal["bool", "int", "float", "str", "path", "list[str]", "choice"]
    #: None is a value of it (the scenario's or SQLite's own)
    optional: bool
    #: as :func:`default_settings` gives it
    default: object
    #: a "choice"'s values (read case-insensitively), else None
    choices: list[str] | None

def settings_fields() -> list[SettingField]:
    """Every setting, in the engine's order: the one description (workloads'
    ``RunSettings::FIELDS``) that :class:`Settings`, :class:`SettingsInput` and
    ``sqlwa.measure.engine.RunSettings`` are checked against."""

def check_settings(settings: SettingsInput) -> None:
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

@type_check_only
class WorkloadInfo(TypedDict):
    """How the run went, as the engine saw it (``run_workload(...)["info"]``)."""

    scenario: str
    seed: int
    sqlite_version: str
    sqlite_source_id: str
    sqlite_compile_options: list[str]
    #: the effective values read back after setup: journal_mode, synchronous, page_size, …
    pragmas: dict[str, str]
    vfs_counting: bool
    db_path: str
    #: the process and thread that ran the SQL
    pid: int
    tid: int
    #: what ended the transactions: "txns", "duration", "interrupted" (keep_measured), or
    #: a replay's "log" (its end)
    stopped_by: str
    #: with stopped_by "interrupted": the signal's message ("interrupted" for Ctrl-C)
    interruption: NotRequired[str]
    #: the transactions that changed no database file: run, counted apart, no commits
    wrote_nothing: WroteNothing
    #: the closing of the run's connections (in WAL mode, the checkpoint at the last)
    close: Closing
    #: a replayed SQL log only: what was replayed, skipped, overridden and failed, per
    #: database file (workloads' ReplaySummary, as JSON)
    replay: NotRequired[ReplaySummary]

@type_check_only
class KindCounts(TypedDict):
    """The VFS calls to the files of one kind (workloads' ``KindCounts``)."""

    write_calls: int
    write_bytes: int
    read_calls: int
    read_bytes: int
    sync_calls: int
    sync_full: int
    sync_dataonly: int
    truncate_calls: int
    delete_calls: int
    open_calls: int

@type_check_only
class VfsCounts(TypedDict):
    """One :class:`KindCounts` per file kind."""

    db: KindCounts
    journal: KindCounts
    wal: KindCounts
    shm: KindCounts
    temp: KindCounts
    other: KindCounts

@type_check_only
class EmptyTransaction(TypedDict):
    """A transaction that wrote nothing, by its first statement."""

    #: a replay's: the log's line of its first statement (a scenario's: None)
    line: int | None
    statement: str
    statements: int

@type_check_only
class WroteNothing(TypedDict):
    """The transactions that changed no page of a database file (workloads' ``WroteNothing``)."""

    transactions: int
    statements: int
    time_ns: int
    vfs: VfsCounts
    #: the first five
    first: list[EmptyTransaction]

@type_check_only
class Closing(TypedDict):
    """The closing of a run's connections outside every transaction (workloads' ``Closing``)."""

    connections: int
    time_ns: int
    vfs: VfsCounts

@type_check_only
class ReadFigures(TypedDict):
    """A replay's statements that only read, outside any commit window."""

    statements: int
    time_ns: int
    vfs: VfsCounts

@type_check_only
class Skipped(TypedDict):
    """A replay's statements not replayed, by reason."""

    #: on a temporary (":memory:" or "") connection
    temporary: int
    #: run by a trigger (it runs again on replay)
    trigger: int
    #: a PRAGMA the run chooses
    overridden_pragmas: int

@type_check_only
class MissingFunction(TypedDict):
    """A function the replay's SQLite lacks, and the statements of the log calling it."""

    #: as SQLite's "no such function: X" spelt it (names match without ASCII case)
    name: str
    statements: int
    #: None: the program defined it; else the compile option that gives SQLite's own
    #: function of that name (SQLITE_ENABLE_MATH_FUNCTIONS), which this build lacks
    sqlite_option: str | None

@type_check_only
class MissingFunctions(TypedDict):
    """Statements that call a function the replay's SQLite lacks: the program's own
    (sqlite3_create_function, or an extension it loaded; counted in ``failed`` as
    "app-defined function") or one of SQLite's this build left out ("function not in
    this SQLite build"). SQLite's prepare refused them, "no such function: X"
    (SQLITE_ERROR), and they never ran."""

    #: the first 100 distinct functions
    functions: list[MissingFunction]
    #: those that failed inside a transaction, which went on (and committed) without them
    in_transaction: int
    #: commit records of transactions that ran without one of them
    commits_without_them: int

@type_check_only
class Failure(TypedDict):
    """A statement that failed on replay."""

    #: its line in the log, 1-based
    line: int
    #: the kind it is counted as ("no such table", "constraint", "refused", ...)
    kind: str
    message: str
    statement: str

@type_check_only
class LoggedPragma(TypedDict):
    """A distinct PRAGMA statement of the log, and what the replay did with it."""

    #: the database file (the run's name)
    database: str
    statement: str
    #: "overridden": the run chooses it; "refused": the confinement's
    action: Literal["kept", "overridden", "refused"]
    count: int

@type_check_only
class DatabaseFigures(TypedDict):
    """A replay's figures for one database file."""

    #: the path as the program named it, and the file's name in the run's directory
    recorded: str
    file_name: str
    commits: int
    #: transactions on it that changed no database file (not commits)
    wrote_nothing: int
    #: the closing of its connections (in WAL mode, the checkpoint at the last close)
    close: Closing
    statements: int
    logical_bytes: int
    vfs: VfsCounts

@type_check_only
class ReplaySummary(TypedDict):
    """What a replay did with the log (workloads' ``ReplaySummary``)."""

    log: str
    #: the log header's ``source`` ("record", "android-logcat", "sql-file" from sqlwa's
    #: writers; a log written elsewhere may say another)
    source: str
    program: list[str] | None
    #: the SQLite the program ran (``sqlite3_libversion()`` of the library it loaded);
    #: None: unknown (a .sql file or a logcat names none)
    recorded_sqlite_version: str | None
    #: the SQLite that ran the replay (the bundled one)
    replayed_sqlite_version: str
    #: what another SQLite, or an unknown one, means for the figures; None: the same
    sqlite_note: str | None
    redacted: bool
    timed: bool
    #: the pacing used: "recorded", "recorded x<factor>", "back-to-back"
    timing: str
    from_db: str | None
    #: what the run did about warm-up, in words
    warmup: str
    #: ``sql`` events in the log; statements run to completion
    statements: int
    replayed: int
    reads: ReadFigures
    skipped: Skipped
    #: failed statements by kind
    failed: dict[str, int]
    first_failures: list[Failure]
    missing_functions: MissingFunctions
    pragmas: list[LoggedPragma]
    databases: list[DatabaseFigures]
    #: per commit, the index into ``databases`` of the database it wrote (empty: the
    #: engine hands the records out in chunks, ``run_workload(commits=…)``)
    commit_database: list[int]
    #: the run stopped after ``txns`` transactions before the log's end
    truncated: bool

@type_check_only
class WorkloadRun(TypedDict):
    """What :func:`run_workload` returns."""

    info: WorkloadInfo
    #: commit column → one value per transaction (``warmup``: bools; the rest: ints)
    commits: dict[str, list[int]]

@type_check_only
class WorkloadRunChunked(TypedDict):
    """What :func:`run_workload` returns when its ``commits`` callable took the records."""

    info: WorkloadInfo
    commits: None

@overload
def run_workload(
    scenario: Scenario,
    settings: SettingsInput,
    dir: _Path,
    marker_path: _Path | None = None,
    progress: Callable[[int, int | None], object] | None = None,
    keep_measured: bool = False,
    commits: None = None,
    chunk_commits: int = 8192,
) -> WorkloadRun: ...
@overload
def run_workload(
    scenario: Scenario,
    settings: SettingsInput,
    dir: _Path,
    marker_path: _Path | None = None,
    progress: Callable[[int, int | None], object] | None = None,
    keep_measured: bool = False,
    *,
    commits: Callable[[dict[str, list[int]]], object],
    chunk_commits: int = 8192,
) -> WorkloadRunChunked:
    """Run ``scenario`` in ``dir``: ``{"info": {...}, "commits": {column: [values]}}``.

    ``progress(done, total)`` from time to time (``total`` None when a duration alone
    bounds the run); a ``figures`` dict attribute of it is updated first (``measured``,
    ``syncs``, ``write_bytes`` of the measured transactions so far). With
    ``keep_measured`` a Ctrl-C or SIGTERM between measured transactions ends the run there
    and returns it (``info["stopped_by"]`` "interrupted", ``info["interruption"]``).

    With ``commits`` (a callable) the records go to it, ``chunk_commits`` at a time as
    the run goes (the last, shorter chunk once the run has ended: nothing of a run that
    fails), each chunk the same columns; ``"commits"`` is then None and the run's memory
    does not grow with its length. An exception it raises ends the run and is raised.

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

@type_check_only
class ParseReport(TypedDict):
    """What a parse saw besides the events (blktrace-parse's ``ParseReport``)."""

    #: per input file: (path, the format it was read as)
    files: list[tuple[str, Literal["blktrace", "blkparse", "ftrace"]]]
    #: rows in the table
    events: int
    #: records skipped as unparsable (lenient only), and the first 20 messages
    bad_records: int
    bad_messages: list[str]
    #: events the tracer says it lost
    lost_events: int
    #: header, comment and summary lines of text formats
    skipped_lines: int
    #: blktrace binary: process-notify records read, driver-data records skipped
    notify_records: int
    skipped_records: int
    #: blktrace binary: the earliest record time, which blkparse subtracts
    time_base_ns: int | None
    #: blkparse text: times unwrapped, and by how much every time was moved on
    unwrapped_times: int
    time_shift_ns: int
    #: blktrace binary: wall-clock time of the trace start, ns since the epoch
    wall_clock_start_ns: int | None
    #: block rows per action letter / operation, rows per record kind
    per_action: dict[str, int]
    per_operation: dict[str, int]
    per_kind: dict[str, int]
    #: bytes of the block rows per action letter / operation (every stage added)
    bytes_per_action: dict[str, int]
    bytes_per_operation: dict[str, int]
    #: per device ("major,minor"): the requests completed (action C) per operation,
    #: ``{"requests", "bytes"}`` each
    completed: dict[str, dict[str, CompletedTally]]
    #: per device: the events per action letter (stage), ``{"events", "bytes"}`` each;
    #: "0,0" holds block rows that name no device (ftrace's plugs and unplugs)
    stages: dict[str, dict[str, StageTally]]

@type_check_only
class CompletedTally(TypedDict):
    """Requests one device completed of one operation, and their bytes."""

    requests: int
    bytes: int

@type_check_only
class StageTally(TypedDict):
    """Events of one stage on one device, and their bytes."""

    events: int
    bytes: int

def parse_trace(
    paths: Sequence[_Path],
    format: str = "auto",
    lenient: bool = False,
    task_names: tuple[str, dict[int, str]] | None = None,
) -> tuple[pyarrow.Table, ParseReport]:
    """Parse block traces into one Arrow table; returns (table, report dict).
    ``format``: auto, blktrace (or binary), blkparse or ftrace; any other name raises
    :class:`TraceParseError` listing these (a str, not a Literal: callers pass on what
    the user typed, and this error is what checks it).
    ``task_names=(placeholder, {pid: name})``: rows whose process name is the placeholder
    get their pid's name (empty where it has none)."""

def parse_trace_to_parquet(
    paths: Sequence[_Path],
    output: _Path,
    format: str = "auto",
    lenient: bool = False,
    task_names: tuple[str, dict[int, str]] | None = None,
) -> ParseReport:
    """Parse block traces into a Parquet file of the event table, row group by row group;
    returns the report dict. ``task_names`` as for :func:`parse_trace`."""

#: The task name each line render_perfetto prints carries, for task_names to replace.
PERFETTO_UNNAMED: Final[str]

@type_check_only
class PerfettoReading(TypedDict):
    """What a Perfetto trace's packets said besides the events (:func:`render_perfetto`)."""

    #: the trace's machine (system_info), if it says
    machine: str | None
    #: pid → task name from the process tree and task events; from scheduling events
    names: dict[int, str]
    sched_names: dict[int, str]
    #: events the kernel's ring buffer lost
    lost_events: int
    #: per-CPU event bundles read, and the CPUs that had them
    bundles: int
    cpus: list[int]
    #: ftrace events read, of which block events
    ftrace_events: int
    block_events: int
    #: trace packets read; lines written
    packets: int
    rows: int
    #: packets that could not be read (lenient), and the first 20 messages
    bad_records: int
    bad_messages: list[str]
    #: the machine whose syscall table named the numbers, and the numbers it did not list
    syscall_machine: str
    unknown_syscalls: int

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
) -> PerfettoReading:
    """Print a Perfetto trace's events as ftrace lines in time order into ``text``, each
    line's packet byte offset (8 bytes, little-endian) into ``origins``; the sort's runs
    go to a directory in ``sort_dir`` meanwhile. ``syscalls`` is (numbers by machine,
    argument names by call, the machine assumed without system_info). Returns what the
    packets said.
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
