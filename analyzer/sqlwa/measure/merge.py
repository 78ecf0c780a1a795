"""``sqlwa merge OUT SHARD…``: the shards of one sweep (``sqlwa matrix --shard K/N``, run on
any machines) brought into one new matrix directory, which report, check, compare and
predict then read as if the sweep had run in one place.

Everything is checked before anything is written, and each refusal is one line:

* OUT is new or empty (the output-path rules of :mod:`sqlwa.outputs`: never a directory
  of someone else's files, never an existing matrix to mix into);
* every shard holds a matrix store of this sqlwa's schema version, all of them the same
  (a store of another version has other columns and meanings);
* every shard is a part of the same plan (the sweep's options, the shard aside);
* a cell present in two shards is taken once if both hold the same result (status and
  every count: per-run figures and per-commit counts; timings differ between any two
  runs), and refused otherwise;
* every run directory a kept row names is there and complete;
* a shard is read as a foreign file (:func:`sqlwa.results.store.connect_readonly`: no
  views or triggers, bounded values and query time), every row checked as readers check
  it, and every path a row names (its run directory, its event table) must lie inside
  the shard, the event table inside the run's directory; a run directory may hold only
  regular files and directories (a symlink or a device node is refused: copying it
  would read what it leads to). A shard from a CI artifact can so name nothing of the
  machine that merges it.

Each run keeps its own row, environment included: the host it ran on (``hostname``), its
kernel and the sqlwa version that measured it (``tool_version``), its timings and its
per-commit rows; its directory is copied to ``OUT/runs/<name>/`` (a failed cell that
left none keeps no path in OUT). The merged store keeps
the plan without the shard, listing every cell of the matrix: a merge that lacks a shard
is a partial matrix, as readers then say (and ``check`` fails it unless
``--allow-partial``).
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path

from sqlwa import _system, outputs
from sqlwa.catalogue import METRICS
from sqlwa.errors import UsageError, writing
from sqlwa.measure import matrix
from sqlwa.results import rundir, store

OUT_OPTION = "OUT"
# The per-commit columns that are counts (the same in two runs of one cell): not the
# commit's timings, nor its CPU time.
COMMIT_TIMINGS = ("start_ns", "latency_ns", "cpu_user_ns", "cpu_sys_ns")
COMMIT_COUNTS = tuple(column for column in store.COMMIT_COLUMNS if column not in COMMIT_TIMINGS)
# The per-run columns that are counts, beside every metric that is not a timing.
RUN_COUNTS = ("status", "levels", "commits", "txns", "lost_events")
# What a shard's plan may have of its own: which part it is and which cells that holds.
SHARD_PLAN_KEYS = ("shard", "cell_keys", "matrix_cell_keys")


@dataclass
class ShardStore:
    """One shard as read: its directory, schema version, plan, runs and their commits."""

    path: Path
    version: int
    plan: dict | None
    runs: list[dict] = field(default_factory=list)
    commits: dict[int, list[dict]] = field(default_factory=dict)


@dataclass
class Merged:
    """What a merge wrote: the runs by host, and the shards they came from."""

    out: Path
    runs: int
    duplicates: int
    hosts: dict[str, int]
    shards: int


SHARD_HINT = "give the --out directories of `sqlwa matrix --shard`"


def read_shard(path: Path) -> ShardStore:
    """A shard's store, read whole (read-only, as a foreign file); one line for anything
    that is not one."""
    database = Path(path) / store.STORE_FILE
    refuse_loop(path, "shard")
    if not Path(path).is_dir():
        what = "is not a directory" if Path(path).exists() else "does not exist"
        raise UsageError(f"shard {path} {what}", SHARD_HINT)
    if not outputs.holds_a_matrix(Path(path)) or database.stat().st_size == 0:
        raise UsageError(
            f"shard {path} holds no sqlwa matrix ({store.STORE_FILE})",
            SHARD_HINT,
        )
    with rundir.reading(database), store.connect_readonly(database) as conn:
        version = store.schema_version(conn)
        if version == 0:
            raise UsageError(f"shard {path} holds no sqlwa results (schema version 0)", "give a sqlwa matrix's --out")
        if version != store.STORE_SCHEMA_VERSION:
            return ShardStore(Path(path), version, None)  # refused by check_versions, with the others in view
        store.check_readable(conn)
        shard = ShardStore(Path(path), version, store.recorded_plan(conn))
        declared = {r["name"]: r["type"] for r in conn.execute("PRAGMA table_info(runs)")}
        shard.runs = [dict(row) for row in conn.execute("SELECT * FROM runs ORDER BY id")]
        for row in shard.runs:
            store.check_row(row, declared)
        for row in conn.execute("SELECT * FROM commits ORDER BY run_id, idx"):
            shard.commits.setdefault(row["run_id"], []).append(dict(row))
    return shard


def refuse_loop(path: Path, what: str) -> None:
    """A path that is a symlink loop (or leads into one) is one line, not a traceback."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{what} {path} is a symlink loop", SHARD_HINT) from None


def check_versions(shards: list[ShardStore]) -> None:
    """Every shard of one schema version, this sqlwa's."""
    versions = {shard.version for shard in shards}
    if len(versions) > 1:
        first = shards[0]
        other = next(shard for shard in shards if shard.version != first.version)
        raise UsageError(
            f"shards of different store schema versions: {first.path} has {first.version}, {other.path} has "
            f"{other.version}",
            "run every shard with one sqlwa version",
        )
    (version,) = versions
    if version != store.STORE_SCHEMA_VERSION:
        raise UsageError(
            f"shard {shards[0].path} has store schema version {version}, this sqlwa's is {store.STORE_SCHEMA_VERSION}",
            "merge with the sqlwa version that ran the shards",
        )


def sweep_options(plan: dict) -> dict:
    """A plan's options, without what a shard has of its own."""

    options = {**matrix.PLAN_BEFORE_LAYERS, **plan}
    return {
        key: options.get(key, matrix.PLAN_DEFAULTS.get(key))
        for key in matrix.PLAN_OPTIONS
        if key not in SHARD_PLAN_KEYS
    }


def check_plans(shards: list[ShardStore]) -> dict:
    """Every shard a part of one sweep; the merged store's plan (no shard, every cell)."""

    for shard in shards:
        if not isinstance(shard.plan, dict):
            raise UsageError(
                f"shard {shard.path} has no sweep plan in its store (not made by `sqlwa matrix`)",
                SHARD_HINT,
            )
    first = shards[0]
    ours = sweep_options(first.plan or {})
    for shard in shards[1:]:
        theirs = sweep_options(shard.plan or {})
        differences = [
            f"{matrix.PLAN_OPTIONS[key]} {matrix.plan_text(key, theirs[key])} against "
            f"{matrix.plan_text(key, ours[key])}"
            for key in ours
            if theirs[key] != ours[key]
        ]
        if differences:
            raise UsageError(
                f"shard {shard.path} is part of another sweep than {first.path}: {'; '.join(differences)}",
                "merge the shards of one `sqlwa matrix` command",
            )
    cells: list[str] = []
    for shard in shards:
        plan = shard.plan or {}
        keys = plan.get("matrix_cell_keys", plan.get("cell_keys")) or []
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise UsageError(
                f"shard {shard.path}'s stored plan is damaged: its cell keys are not a list of names",
                "re-run that shard with its sqlwa matrix command into a new --out",
            )
        cells.extend(keys)
    merged = {key: value for key, value in (first.plan or {}).items() if key not in SHARD_PLAN_KEYS}
    merged["shard"] = None
    merged["cell_keys"] = list(dict.fromkeys(cells))
    return merged


def differences(a: dict, a_commits: list[dict], b: dict, b_commits: list[dict]) -> list[str]:
    """What two results of one cell count differently ('fsync_calls_per_commit 3 against 4')."""
    counts = [*RUN_COUNTS, *(name for name, metric in METRICS.items() if not metric.timing)]
    found = [f"{name} {a.get(name)} against {b.get(name)}" for name in counts if a.get(name) != b.get(name)]
    if len(a_commits) != len(b_commits):
        found.append(f"{len(a_commits)} commit rows against {len(b_commits)}")
    else:
        for mine, theirs in zip(a_commits, b_commits, strict=True):
            changed = [name for name in COMMIT_COUNTS if mine.get(name) != theirs.get(name)]
            if changed:
                name = changed[0]
                found.append(f"commit {mine['idx']}'s {name} {mine.get(name)} against {theirs.get(name)}")
                break
    return found


@dataclass
class Kept:
    """A run to write: its row, its commits and the directory to copy (if it has one)."""

    shard: ShardStore
    row: dict
    commits: list[dict]
    source: Path | None


def run_directory(shard: ShardStore, row: dict) -> Path | None:
    """The run directory a shard's row names, checked to lie inside the shard, to hold
    only regular files and directories, and (for a successful run) to be complete; None
    if there is none to copy (a failed cell may have left none)."""
    if row.get("run_dir") is None:
        inside_run(shard, row, None)
        return None
    source = store.contained(shard.path, row["run_dir"])
    if source is None:
        raise outside_the_shard(shard, row, "run_dir")
    if row["status"] == "ok" and not rundir.is_complete(source):
        raise UsageError(
            f"shard {shard.path}: run {row['run_key']} has no complete directory {source}",
            "re-run that shard with its sqlwa matrix command plus --resume",
        )
    if not source.is_dir():
        inside_run(shard, row, None)
        return None
    refuse_odd_files(shard, row, source)
    inside_run(shard, row, source)
    return source


def outside_the_shard(shard: ShardStore, row: dict, column: str) -> UsageError:
    return UsageError(
        f"shard {shard.path}: run {row['run_key']} names {column} {row[column]}, outside the shard: sqlwa reads a "
        "shard only inside its directory",
        SHARD_HINT,
    )


def inside_run(shard: ShardStore, row: dict, source: Path | None) -> None:
    """A row's event table lies in its run's directory, the only one copied."""
    if row.get("events_path") is None:
        return
    found = store.contained(shard.path, row["events_path"])
    if found is None or source is None or source not in found.parents:
        raise outside_the_shard(shard, row, "events_path")


def refuse_odd_files(shard: ShardStore, row: dict, source: Path) -> None:
    """A run's directory holds what a run writes: regular files and directories. A
    symlink, device node, FIFO or socket in it (a tarball unpacked as root makes any of
    them) would be copied as what it leads to, or hang the copy."""
    for parent, dirs, files in os.walk(source, onerror=_raise):
        for name in (*dirs, *files):
            mode = os.lstat(os.path.join(parent, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                odd = os.path.relpath(os.path.join(parent, name), shard.path)
                raise UsageError(
                    f"shard {shard.path}: run {row['run_key']}'s directory holds {odd}, which is no regular file: "
                    "sqlwa copies only the files a run writes",
                    SHARD_HINT,
                )


def _raise(exc: OSError) -> None:
    raise exc


def choose_runs(shards: list[ShardStore]) -> tuple[list[Kept], int]:
    """Every run once; a cell in two shards once if both count the same, else refused."""
    kept: dict[str, Kept] = {}
    duplicates = 0
    for shard in shards:
        for row in shard.runs:
            commits = shard.commits.get(row["id"], [])
            earlier = kept.get(row["run_key"])
            if earlier is None:
                kept[row["run_key"]] = Kept(shard, row, commits, run_directory(shard, row))
                continue
            found = differences(earlier.row, earlier.commits, row, commits)
            if found:
                raise UsageError(
                    f"cell {row['run_key']} is in {earlier.shard.path} and {shard.path} with different results: "
                    f"{found[0]}",
                    "leave one of the two out of the merge (or re-run that cell in one shard)",
                )
            duplicates += 1
    names: dict[str, str] = {}
    for key, run in kept.items():
        if run.source is not None:
            other = names.setdefault(run.source.name, key)
            if other != key:
                raise UsageError(
                    f"runs {other} and {key} both have a directory named {run.source.name}",
                    "merge the shards of one `sqlwa matrix` command",
                )
    return list(kept.values()), duplicates


def check_out(out: Path, shards: list[Path], allow_system: bool) -> None:
    """OUT new or empty (or sqlwa's own lock file alone), and none of the shards."""
    outputs.check_dir(out, OUT_OPTION, outputs.holds_a_matrix, "matrix", allow_system=allow_system, create=False)
    if outputs.holds_a_matrix(out):
        raise UsageError(f"{OUT_OPTION} {out} already holds a matrix", "merge into a new or empty directory")
    resolved = os.path.realpath(out)
    for shard in shards:
        refuse_loop(shard, "shard")
        if os.path.realpath(shard) == resolved:
            raise UsageError(f"{OUT_OPTION} {out} is one of the shards", "merge into a new or empty directory")


def merge(out: Path, shard_dirs: list[Path], allow_system: bool = False) -> Merged:
    """Merge ``shard_dirs`` into the new matrix directory ``out``."""
    out = Path(out)
    check_out(out, shard_dirs, allow_system)
    shards = [read_shard(Path(path)) for path in shard_dirs]
    check_versions(shards)
    plan = check_plans(shards)
    runs, duplicates = choose_runs(shards)
    # In the sweep's own order, as one machine would have stored them (readers list runs by id).
    order = {key: index for index, key in enumerate(plan["cell_keys"])}
    runs.sort(key=lambda run: order.get(run.row["run_key"], len(order)))
    outputs.check_dir(out, OUT_OPTION, outputs.holds_a_matrix, "matrix", allow_system=allow_system, create=True)
    with _system.locks.directory_lock(out, "sqlwa merge"):
        write(out, plan, runs)
    hosts: dict[str, int] = {}
    for run in runs:
        if run.row["status"] == "ok":
            host = run.row.get("hostname") or "unknown host"
            hosts[host] = hosts.get(host, 0) + 1
    return Merged(out, len(runs), duplicates, hosts, len(shards))


def write(out: Path, plan: dict, runs: list[Kept]) -> None:
    """The run directories copied, then the store written in one transaction; on any
    failure what was made here is removed again (OUT was new or empty)."""
    made: list[Path] = []
    try:
        for run in runs:
            if run.source is not None:
                target = out / "runs" / run.source.name
                made.append(target)
                with writing(target, "a shard's run into"):
                    shutil.copytree(run.source, target, symlinks=True)
        made.append(out / store.STORE_FILE)
        conn = store.connect(out / store.STORE_FILE)
        try:
            store.record_plan(conn, plan)
            columns = StoreColumns.of(conn)
            with store.write_transaction(conn):
                for run in runs:
                    insert(conn, columns, run)
        finally:
            store.close(conn)
    except BaseException:
        for path in made:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
        runs_dir = out / "runs"
        if runs_dir.is_dir() and not any(runs_dir.iterdir()):
            runs_dir.rmdir()
        raise


def relocated(run: Kept, name: str) -> str | None:
    """A path column of the run's row (run_dir, events_path) as it is in OUT: inside the
    copied run directory (:func:`run_directory` checked it lies there), or None for a run
    whose directory was not copied (nothing of it is in OUT)."""
    value = run.row.get(name)
    if value is None or run.source is None:
        return None
    found = store.contained(run.shard.path, value)
    assert found is not None, "run_directory checked every path of a kept row"
    return str(Path("runs") / run.source.name / found.relative_to(run.source))


@dataclass(frozen=True)
class StoreColumns:
    """The merged store's columns, read once: a run's (without its id) and a commit's."""

    runs: list[str]
    commits: list[str]

    @classmethod
    def of(cls, conn: sqlite3.Connection) -> StoreColumns:
        runs = [r["name"] for r in conn.execute("PRAGMA table_info(runs)") if r["name"] != "id"]
        return cls(runs, [r["name"] for r in conn.execute("PRAGMA table_info(commits)")])


def insert(conn: sqlite3.Connection, columns: StoreColumns, run: Kept) -> None:
    """The run's row (a new id, its paths in OUT) and its commits."""
    row = {name: run.row.get(name) for name in columns.runs}
    row["run_dir"], row["events_path"] = relocated(run, "run_dir"), relocated(run, "events_path")
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    run_id = conn.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", tuple(row.values())).lastrowid
    if not run.commits:
        return
    marks = ", ".join("?" for _ in columns.commits)
    conn.executemany(
        f"INSERT INTO commits ({', '.join(columns.commits)}) VALUES ({marks})",
        [tuple(run_id if name == "run_id" else commit.get(name) for name in columns.commits) for commit in run.commits],
    )


def describe(merged: Merged) -> str:
    """One line on what was merged, and where each run came from."""
    hosts = ", ".join(f"{host} ({count})" for host, count in sorted(merged.hosts.items()))
    same = f"; {merged.duplicates} cell(s) in two shards with the same result taken once" if merged.duplicates else ""
    return f"merged {merged.runs} run(s) of {merged.shards} shard(s) into {merged.out}; ok runs by host: {hosts or 'none'}{same}"
