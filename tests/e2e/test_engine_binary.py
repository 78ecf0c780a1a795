"""sqlwa-engine, the engine as a static program for a phone (issue #46; scripts/build-engine):
the aarch64 build under qemu-user and the x86_64 build natively make the same VFS calls per
commit as the host engine (the native module) for every journal × sync, those calls are
SQLite's documented sequence (docs/reference/sqlite-commit-syncs.md, as
workloads/tests/sync_sequence.rs states it at the VFS), the markers it writes to a plain
file parse with sqlwa's own marker parser, and `file` calls both builds statically linked.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import REPO
from sqlwa import _native
from sqlwa.analysis import traceparse, windows
from sqlwa.measure.engine import JOURNAL_MODES, SYNC_MODES

BIN = Path(_native.__file__).parent / "_bin"
ARCHES = ("aarch64", "x86_64")
QEMU = "qemu-aarch64-static"
TXNS, WARMUP = 12, 3

#: One 100-byte row per autocommit insert, 4 KiB pages: sync_sequence.rs's scenario (run
#: shorter here: the aarch64 build runs under qemu).
SCENARIO = REPO / "workloads" / "tests" / "data" / "single-row-insert.toml"

#: xSyncs of (journal, database, WAL) per steady-state commit, by journal × sync, from
#: docs/reference/sqlite-commit-syncs.md at the VFS: the directory syncs happen inside
#: the journal's first xSync (after O_CREAT) or inside xDelete (EXTRA), not as an xSync
#: of their own. synchronous=OFF syncs nothing. The table has no row for journal_mode
#: MEMORY and OFF (no journal file): for those only the host engine is the reference.
DOCUMENTED = {
    ("delete", "normal"): (1, 1, 0),
    ("delete", "full"): (2, 1, 0),
    ("delete", "extra"): (2, 1, 0),
    ("truncate", "normal"): (1, 1, 0),
    ("truncate", "full"): (3, 1, 0),
    ("truncate", "extra"): (3, 1, 0),
    ("persist", "normal"): (2, 1, 0),
    ("persist", "full"): (3, 1, 0),
    ("persist", "extra"): (3, 1, 0),
    ("wal", "normal"): (0, 0, 0),
    ("wal", "full"): (0, 0, 1),
    ("wal", "extra"): (0, 0, 1),
} | {(journal, "off"): (0, 0, 0) for journal in JOURNAL_MODES}

#: What a commit is compared by: everything but its times (and CPU time).
COMPARED = ("index", "warmup", "logical_bytes", "statements")


def binary(arch: str) -> Path:
    path = BIN / f"sqlwa-engine-{arch}"
    if not path.is_file():
        pytest.skip(f"{path} is not built: ./scripts/build-engine builds it (./scripts/setup runs it)")
    return path


def command(arch: str) -> list[str]:
    path = binary(arch)
    if arch == "x86_64":
        return [str(path)]
    if shutil.which(QEMU) is None:
        pytest.skip(f"{QEMU} is missing: sudo ./scripts/system-deps installs qemu-user-static")
    return [QEMU, str(path)]


@pytest.fixture(scope="module")
def scenario_file() -> Path:
    return SCENARIO


def settings(journal: str, sync: str) -> dict:
    return {"journal": journal, "sync": sync, "txns": TXNS, "warmup": WARMUP}


def run_binary(cmd: list[str], scenario: Path, journal: str, sync: str, directory: Path) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    out, markers = directory / "result.json", directory / "markers.txt"
    ran = subprocess.run(
        [*cmd, "--dir", str(directory / "run"), "--settings-json", json.dumps(settings(journal, sync))]
        + ["--markers", str(markers), "--out", str(out), str(scenario)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == ""
    return json.loads(out.read_text())


def run_host(scenario: Path, journal: str, sync: str, directory: Path) -> dict:
    loaded = _native.scenario_from_file(str(scenario))
    return dict(_native.run_workload(loaded, settings(journal, sync), str(directory / "run")))


def per_commit(raw: dict) -> list[dict]:
    """Each commit's compared fields and VFS counters."""
    columns = raw["commits"]
    names = [c for c in columns if c in COMPARED or c.startswith("vfs_")]
    return [{name: columns[name][i] for name in names} for i in range(len(columns["index"]))]


def syncs(commit: dict) -> tuple[int, int, int]:
    return (commit["vfs_journal_sync_calls"], commit["vfs_db_sync_calls"], commit["vfs_wal_sync_calls"])


def test_both_builds_are_statically_linked() -> None:
    for arch in ARCHES:
        described = subprocess.run(["file", "-L", str(binary(arch))], capture_output=True, text=True, check=True)
        assert "statically linked" in described.stdout, described.stdout
        machine = "ARM aarch64" if arch == "aarch64" else "x86-64"
        assert machine in described.stdout, described.stdout


@pytest.mark.parametrize("arch", ARCHES)
def test_every_journal_and_sync_makes_the_host_engines_vfs_calls(
    arch: str, scenario_file: Path, tmp_path: Path
) -> None:
    cmd = command(arch)
    for journal in JOURNAL_MODES:
        for sync in SYNC_MODES:
            cell = tmp_path / f"{journal}-{sync}"
            host = run_host(scenario_file, journal, sync, cell / "host")
            program = run_binary(cmd, scenario_file, journal, sync, cell / "program")
            # the native module's shape: the same keys, in the same order
            assert list(program) == list(host) == ["info", "commits"]
            assert list(program["info"]) == list(host["info"])
            assert list(program["commits"]) == list(host["commits"])
            assert program["info"]["pragmas"] == host["info"]["pragmas"], (journal, sync)
            assert program["info"]["sqlite_version"] == host["info"]["sqlite_version"]
            commits = per_commit(program)
            assert len(commits) == TXNS + WARMUP
            assert commits == per_commit(host), f"{arch} {journal}/{sync}: VFS calls differ from the host engine's"
            measured = [c for c in commits if not c["warmup"]]
            others = [sum(v for k, v in c.items() if k.endswith("_sync_calls")) - sum(syncs(c)) for c in measured]
            assert others == [0] * TXNS, f"{journal}/{sync}: syncs of -shm or temp files"
            documented = DOCUMENTED.get((journal, sync))
            if documented is not None:
                assert {syncs(c) for c in measured} == {documented}, f"{arch} {journal}/{sync}"
            shutil.rmtree(cell)


def as_ftrace(markers: Path, tid: int) -> str:
    """The plain marker file's lines as a tracefs trace prints them (the stamp is each
    marker's own t=), which is what sqlwa's marker parser reads."""
    lines = []
    for text in markers.read_text().splitlines():
        assert text.startswith("sqlwa "), text
        stamp = int(re.search(r"\bt=(\d+)", text).group(1))  # type: ignore[union-attr]
        lines.append(f"{'sqlwa-engine':>16}-{tid:<6} [000] ..... {stamp / 1e9:.9f}: tracing_mark_write: {text}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("arch", ARCHES)
def test_its_markers_parse_with_sqlwas_marker_parser(arch: str, scenario_file: Path, tmp_path: Path) -> None:
    raw = run_binary(command(arch), scenario_file, "delete", "full", tmp_path)
    trace = tmp_path / "trace.txt"
    trace.write_text(as_ftrace(tmp_path / "markers.txt", raw["info"]["tid"]))
    events, report = traceparse.parse(trace, format="ftrace")
    assert report["bad_records"] == 0
    marks = windows.markers(events)
    assert set(marks["event"]) >= {"run_begin", "run_end", "txn_begin", "txn_end", "sync_begin", "sync_end"}
    wins = windows.commit_windows(events)
    assert wins["index"].to_list() == raw["commits"]["index"]
    assert wins["warmup"].to_list() == raw["commits"]["warmup"]
    assert wins["win_start_ns"].to_list() == raw["commits"]["start_ns"]
    assert wins["win_end_ns"].to_list() == raw["commits"]["end_ns"]
    assert windows.run_tid(events) == raw["info"]["tid"]
    # every xSync the engine counted is one sync_begin marker
    assert (marks["event"] == "sync_begin").sum() >= sum(
        sum(v) for k, v in raw["commits"].items() if k.endswith("_sync_calls")
    )


def test_errors_are_one_line_with_a_status_of_their_kind(scenario_file: Path, tmp_path: Path) -> None:
    cmd = command("x86_64")
    cases = {
        3: ["--dir", str(tmp_path / "a"), "no-such-scenario"],
        4: ["--dir", str(tmp_path / "b"), "--settings-json", '{"journal": "sideways"}', str(scenario_file)],
        2: [str(scenario_file)],
    }
    for status, args in cases.items():
        ran = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)
        assert ran.returncode == status, (args, ran.stderr)
        assert ran.stderr.count("\n") == 1 and ran.stderr.startswith("sqlwa-engine: "), ran.stderr
        assert "; hint: " in ran.stderr
        assert ran.stdout == ""
    ran = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=True)
    assert "Usage: sqlwa-engine" in ran.stdout and "Exit status" in ran.stdout


@pytest.mark.parametrize(
    ("signum", "status", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated by SIGTERM")]
)
def test_a_signal_stops_it_and_keeps_what_was_measured(
    signum: int, status: int, said: str, scenario_file: Path, tmp_path: Path
) -> None:
    out, markers = tmp_path / "result.json", tmp_path / "markers.txt"
    # a think time: the run lasts minutes unless stopped
    slow = {"journal": "wal", "txns": 100000, "warmup": WARMUP, "think_time_ms": 20}
    proc = subprocess.Popen(
        [*command("x86_64"), "--dir", str(tmp_path / "run"), "--settings-json", json.dumps(slow)]
        + ["--markers", str(markers), "--out", str(out), str(scenario_file)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # stopped between measured transactions: once the fifth one has begun
        measuring = f"sqlwa txn_begin i={WARMUP + 2} "
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and measuring not in (markers.read_text() if markers.exists() else ""):
            time.sleep(0.02)
        sent = time.monotonic()
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == status, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() - sent < 1.0
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
    raw = json.loads(out.read_text())
    assert raw["info"]["stopped_by"] == "interrupted"
    assert raw["info"]["interruption"] == said
    assert sum(not w for w in raw["commits"]["warmup"]) > 0


#: A recorded SQL log (format 1, the docs' "SQL log format"): a table, a transaction of
#: two inserts, an insert in autocommit.
SQL_LOG = """\
{"sqlwa_sql_log": 1, "source": "sql-file", "timed": false}
{"ev": "open", "conn": 1, "db": "/data/app.db"}
{"ev": "sql", "conn": 1, "sql": "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)"}
{"ev": "sql", "conn": 1, "sql": "BEGIN"}
{"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (1, 'one')"}
{"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (2, 'two')"}
{"ev": "sql", "conn": 1, "sql": "COMMIT"}
{"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (3, 'three')"}
{"ev": "close", "conn": 1}
"""


@pytest.mark.parametrize("arch", ARCHES)
def test_a_sql_log_replays_as_the_host_engine_replays_it(arch: str, tmp_path: Path) -> None:
    log = tmp_path / "app.jsonl"
    log.write_text(SQL_LOG)
    chosen = {"journal": "truncate", "sync": "full", "timing": "back-to-back"}
    # the settings from standard input, the result to standard output
    ran = subprocess.run(
        [*command(arch), "--dir", str(tmp_path / "program"), "--settings", "-", str(log)],
        input=json.dumps(chosen),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    program = json.loads(ran.stdout)
    host = dict(_native.run_workload(_native.scenario_from_file(str(log)), chosen, str(tmp_path / "host")))
    assert list(program["info"]) == list(host["info"])
    assert per_commit(program) == per_commit(host)
    assert program["commits"]["statements"] == [1, 3, 1]
    replayed, hosted = program["info"]["replay"], host["info"]["replay"]
    assert list(replayed) == list(hosted)
    assert untimed(replayed) == untimed(hosted)


def untimed(value: object) -> object:
    """A JSON value without its times (``*time_ns``) and the log's path."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not k.endswith("time_ns") and k != "log"}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value
