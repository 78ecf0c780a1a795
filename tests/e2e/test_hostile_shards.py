"""Shard stores nobody here wrote (#43, point 6). A shard is a file people pass around (a
CI artifact), and sqlwa runs as root: a results.sqlite that names `run_dir` `/path/secret`
or `../../../x` used to be merged with that directory's files (a private.key) copied into
the output; a failed row's run_dir of `/root` copied all of /root; a `runs` view with a
recursive CTE ran until the memory limit, deaf to SIGTERM; a symlink loop given as a
shard and a 200,000-deep plan_json were tracebacks, in merge, report and `matrix --resume`.

Each crafted store is made with Python's sqlite3 (not through sqlwa), each command runs
as a subprocess under a 1 GiB address-space limit and a timeout; it must end in one
`sqlwa: error:` line, exit 2, within :data:`BOUNDED_S`, and nothing of the secret
directory may be found under the merge's output: no file with private.key's bytes, no
symlink leading there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa.results import store

ONE_GIB = 1 << 30
BOUNDED_S = 30.0  # a refusal takes a start-up and a few queries: seconds, even on a loaded machine
SWEEP = ("--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "5", "--warmup", "0")
DEEP = 200_000


def sweep_in_two_shards(base: Path) -> Path:
    """The two shards of one small sweep, made by sqlwa, in ``base``: s1 and s2."""
    for k in (1, 2):
        sqlwa("matrix", *SWEEP, "--shard", f"{k}/2", "--out", str(base / f"s{k}"))
    return base


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return sweep_in_two_shards(tmp_path_factory.mktemp("shards"))


class World:
    """Two shards of one sweep (copies), and a secret directory beside them that holds a
    private key and, so a check for a complete run passes, a run's own files."""

    def __init__(self, pristine: Path, tmp: Path) -> None:
        self.tmp = tmp
        self.shards = [tmp / "s1", tmp / "s2"]
        for shard in self.shards:
            shutil.copytree(pristine / shard.name, shard, symlinks=True)
        self.secret = tmp / "secretdir"
        shutil.copytree(next((self.shards[0] / "runs").iterdir()), self.secret)
        self.key = self.secret / "private.key"
        self.key.write_bytes(os.urandom(4096))
        self.out = tmp / "merged"

    def change(self, shard: int, *statements: str, params: tuple = ()) -> None:
        """Run SQL on a shard's store straight through SQLite."""
        conn = sqlite3.connect(self.shards[shard] / store.STORE_FILE)
        try:
            for statement in statements:
                conn.execute(statement, params if "?" in statement else ())
            conn.commit()
        finally:
            conn.close()

    def first_run_dir(self, shard: int = 0) -> Path:
        return next((self.shards[shard] / "runs").iterdir())


@pytest.fixture
def world(pristine, tmp_path) -> World:
    return World(pristine, tmp_path)


def bounded(*args: str | os.PathLike[str]) -> tuple[subprocess.CompletedProcess, float]:
    argv = ["prlimit", f"--as={ONE_GIB}", sys.executable, "-m", "sqlwa", *map(str, args)]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BOUNDED_S * 2, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"sqlwa {' '.join(map(str, args))} still ran after {BOUNDED_S * 2:g} s")
    return proc, time.monotonic() - started


def assert_refused(proc: subprocess.CompletedProcess, took: float, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0], errors[0]
    assert took < BOUNDED_S, f"took {took:.1f} s"


def nothing_of_the_secret_in(world: World, directory: Path) -> None:
    """No file under ``directory`` holds private.key's bytes, none leads into the secret."""
    if not directory.exists():
        return
    key = hashlib.sha256(world.key.read_bytes()).hexdigest()
    secret = os.path.realpath(world.secret)
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            assert not os.path.realpath(path).startswith(secret), path
            if path.is_file() and not path.is_symlink():
                assert hashlib.sha256(path.read_bytes()).hexdigest() != key, path


def merged(world: World, *words: str) -> None:
    proc, took = bounded("merge", world.out, *world.shards)
    assert_refused(proc, took, *words)
    nothing_of_the_secret_in(world, world.out)
    assert not world.out.exists()


# ------------------------------------------------------------ paths out of the shard


def test_an_absolute_run_dir_outside_the_shard_is_refused(world):
    world.change(0, "UPDATE runs SET run_dir = ?", params=(str(world.secret),))
    merged(world, str(world.shards[0]))


@pytest.mark.parametrize("spelling", ["relative", "many-dots"])
def test_a_relative_run_dir_climbing_out_of_the_shard_is_refused(world, spelling):
    climb = (
        os.path.relpath(world.secret, world.shards[0])
        if spelling == "relative"
        else "runs/" + "../" * 40 + str(world.secret).lstrip("/")
    )
    world.change(0, "UPDATE runs SET run_dir = ?", params=(climb,))
    merged(world, str(world.shards[0]))


def test_a_failed_row_naming_a_foreign_directory_copies_nothing(world):
    """A failed cell's directory is copied when it has one: `/root`, here a directory of
    secrets that is no run at all."""
    (world.secret / "summary.json").unlink()
    world.change(0, "UPDATE runs SET status = 'failed', run_dir = ?", params=(str(world.secret),))
    merged(world, str(world.shards[0]))


def test_an_events_path_outside_the_run_is_refused(world):
    world.change(0, "UPDATE runs SET events_path = ?", params=(str(world.key),))
    merged(world, str(world.shards[0]))


def test_a_symlink_in_a_shards_run_directory_is_refused(world):
    (world.first_run_dir() / "stolen").symlink_to(world.key)
    merged(world, "stolen")


@pytest.mark.parametrize("reader", ["report", "matrix --resume"])
def test_a_runs_file_that_is_a_symlink_out_is_refused_by_readers(world, reader):
    """Found by test_hostile's fuzz: a report of a shard whose commits.parquet was a
    symlink to a database elsewhere opened that database."""
    commits = world.first_run_dir() / "commits.parquet"
    commits.unlink()
    commits.symlink_to(world.key)
    proc, took = READERS[reader](world)
    assert_refused(proc, took, "commits.parquet", "symlink")
    assert not (world.tmp / "page.html").exists()


@pytest.mark.parametrize("linked", ["runs", "a cell's directory"])
def test_a_resumed_shard_writes_no_cell_through_a_symlink(world, linked):
    """Found by test_hostile's fuzz: `matrix --resume` of a shard whose runs/ was a
    symlink made its cells' directories wherever that led (here the secret directory)."""
    if linked == "runs":
        shutil.rmtree(world.shards[0] / "runs")
        (world.shards[0] / "runs").symlink_to(world.secret)
    else:
        cell = world.first_run_dir()
        world.change(0, "UPDATE runs SET status = 'failed'")  # a cell to run again
        shutil.rmtree(cell)
        cell.symlink_to(world.secret)
    before = sorted(p.name for p in world.secret.iterdir())
    proc, took = resumed(world)
    assert_refused(proc, took, "symlink")
    assert sorted(p.name for p in world.secret.iterdir()) == before


@pytest.mark.root
def test_a_device_node_in_a_shards_run_directory_is_refused(world):
    """A tarball unpacked as root makes device nodes: copying one reads the device."""
    os.mknod(world.first_run_dir() / "disk", 0o600 | 0o020000, os.makedev(1, 3))  # /dev/null's numbers
    merged(world, "disk")


def test_a_report_of_a_store_naming_a_foreign_directory_is_refused_before_reading_it(world):
    """Readers take a run directory outside the store only where it holds a finished sqlwa
    run (one saved into the store from elsewhere); a store naming any other directory is
    refused as the store's fault, before anything in that directory is opened."""
    (world.secret / "summary.json").unlink()
    world.change(0, "UPDATE runs SET run_dir = ?", params=(str(world.secret),))
    proc, took = bounded("report", world.shards[0], "-o", world.tmp / "page.html")
    assert_refused(proc, took, str(world.shards[0]))
    assert not (world.tmp / "page.html").exists()


# ------------------------------------------------------------ stores that are not tables

RECURSIVE_RUNS = (
    "ALTER TABLE runs RENAME TO runs_kept",
    "CREATE VIEW runs AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
    "SELECT runs_kept.* FROM n, runs_kept",
)


def resumed(world: World) -> tuple[subprocess.CompletedProcess, float]:
    return bounded("matrix", *SWEEP, "--shard", "1/2", "--out", world.shards[0], "--resume")


def reported(world: World) -> tuple[subprocess.CompletedProcess, float]:
    return bounded("report", world.shards[0], "-o", world.tmp / "page.html")


def merge_of(world: World) -> tuple[subprocess.CompletedProcess, float]:
    return bounded("merge", world.out, *world.shards)


READERS: dict[str, Callable[[World], tuple[subprocess.CompletedProcess, float]]] = {
    "merge": merge_of,
    "report": reported,
    "matrix --resume": resumed,
}


@pytest.mark.parametrize("reader", READERS)
def test_a_runs_view_with_a_recursive_cte_is_refused_at_once(world, reader):
    world.change(0, *RECURSIVE_RUNS)
    proc, took = READERS[reader](world)
    assert_refused(proc, took, str(world.shards[0]), "view")
    assert not world.out.exists() and not (world.tmp / "page.html").exists()


@pytest.mark.parametrize("reader", READERS)
def test_a_trigger_in_a_shards_store_is_refused(world, reader):
    world.change(0, "CREATE TRIGGER t AFTER INSERT ON runs BEGIN DELETE FROM commits; END")
    proc, took = READERS[reader](world)
    assert_refused(proc, took, str(world.shards[0]), "trigger")


@pytest.mark.parametrize("reader", READERS)
def test_a_plan_nested_200000_deep_is_one_line(world, reader):
    world.change(0, "UPDATE matrix_plan SET plan_json = ?", params=("[" * DEEP + "]" * DEEP,))
    proc, took = READERS[reader](world)
    assert_refused(proc, took, str(world.shards[0]))


@pytest.mark.parametrize("reader", ["merge", "report"])
def test_a_summary_nested_200000_deep_is_one_line(world, reader):
    world.change(0, "UPDATE runs SET summary_json = ?", params=('{"a":' * DEEP + "1" + "}" * DEEP,))
    proc, took = READERS[reader](world)
    assert_refused(proc, took, str(world.shards[0]))


def test_a_value_larger_than_any_sqlwa_writes_is_refused(world):
    world.change(0, "UPDATE runs SET reason = printf('%.*c', 80000000, 'x')")
    merged(world, str(world.shards[0]))


@pytest.mark.parametrize("reader", ["merge", "report"])
def test_a_symlink_loop_given_as_a_shard_is_one_line(world, reader):
    loop = world.tmp / "loop"
    loop.symlink_to(loop)
    if reader == "merge":
        proc, took = bounded("merge", world.out, world.shards[0], loop)
    else:
        proc, took = bounded("report", loop, "-o", world.tmp / "page.html")
    assert_refused(proc, took, str(loop))
    assert not world.out.exists()


def test_the_shards_of_one_sweep_still_merge(world):
    proc, _ = bounded("merge", world.out, *world.shards)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(f"file:{world.out / store.STORE_FILE}?mode=ro", uri=True) as conn:
        dirs = [row[0] for row in conn.execute("SELECT run_dir FROM runs")]
    assert len(dirs) == 2 and all(d.startswith("runs/") and (world.out / d / "summary.json").is_file() for d in dirs)


# ------------------------------------------------------------ the reader's own bounds

ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"


def test_a_query_past_its_time_is_stopped(world):
    started = time.monotonic()
    with pytest.raises(Exception) as stopped:
        with store.connect_readonly(world.shards[0] / store.STORE_FILE, time_limit_s=1.0) as conn:
            conn.execute(ENDLESS).fetchone()
    assert time.monotonic() - started < 10 and "1 s" in str(stopped.value), stopped.value


def test_sigterm_stops_a_long_query(world):
    script = textwrap.dedent(f"""
        from sqlwa._system import signals
        from sqlwa.cli import _signals
        from sqlwa.results import store
        _signals.obey_signals()  # as sqlwa.cli.main does
        signals.also_ask(_signals.first_received)
        with store.connect_readonly({str(world.shards[0] / store.STORE_FILE)!r}) as conn:
            print("querying", flush=True)
            conn.execute({ENDLESS!r}).fetchone()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "querying\n"  # type: ignore[union-attr]
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
        assert time.monotonic() - sent < 5
        assert "terminated by SIGTERM" in stderr, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
