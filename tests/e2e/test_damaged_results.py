"""Damaged results (#15, point 7): every file of a real run directory and a real matrix,
damaged in many ways, met by `sqlwa report`, `sqlwa check`, `sqlwa compare` and
`sqlwa.load()` with its attributes.

What must hold for every case: the CLI ends in a clean exit (2 with one `sqlwa: error:`
line naming the file when it refuses; never a traceback), the API raises nothing but
``SqlwaError``, and the damaged file is byte-identical afterwards (readers never write,
create or migrate). Damage that leaves no trace in a file (a garbled byte inside a
Parquet page or a store's text cell) may be read as it is; the rest must be refused.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

import sqlwa
from helpers import REPO
from helpers import sqlwa as sqlwa_cli
from sqlwa.cli import main as cli_main

POLICY = REPO / "examples" / "policy.toml"
CELL = "runs/mobibench-insert-none-wal-full-r1"

# --------------------------------------------------------------------------- damages


def truncate_at(fraction: float) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[: max(1, int(len(data) * fraction))])

    return damage


def garble(seed: int, count: int = 8) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = bytearray(path.read_bytes())
        rng = random.Random(seed)
        for _ in range(count):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))

    return damage


def replace_with(content: bytes | Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.unlink()
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)

    return damage


def foreign_parquet(path: Path) -> None:
    pl.DataFrame({"index": ["a", "b"], "warmup": [1, 2]}).write_parquet(path)


def parquet_without_warmup(path: Path) -> None:
    pl.DataFrame({"index": [0, 1], "latency_ns": [5, 6]}).write_parquet(path)


def sqlite_db(*statements: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        conn = sqlite3.connect(path)
        for statement in statements:
            conn.execute(statement)
        conn.commit()
        conn.close()

    return make


def junk(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(4096))


# Damages that leave a file sqlwa cannot have written: these must be refused.
COMMON: dict[str, Callable[[Path], None]] = {
    "missing": lambda path: path.unlink(),
    "empty": replace_with(b""),
    "truncated-1-byte": truncate_at(0.0),
    "truncated-third": truncate_at(1 / 3),
    "truncated-half": truncate_at(1 / 2),
    "binary-junk": replace_with(junk),
}
JSON_SHAPES: dict[str, Callable[[Path], None]] = {
    "not-utf8": replace_with(b'{"config": "\xff\xfe"}'),
    "json-list": replace_with(b"[]"),
    "json-null": replace_with(b"null"),
    "json-empty-object": replace_with(b"{}"),
    "config-is-number": replace_with(b'{"config": 5, "levels": [], "commits": 1, "per_commit": {}}'),
    "levels-not-names": replace_with(b'{"config": {}, "levels": [1], "commits": 1, "per_commit": {}}'),
    "per-commit-text": replace_with(
        b'{"config": {}, "levels": [], "commits": 1, "per_commit": {"vfs_write_bytes": "x"}}'
    ),
    "bad-lab-dev": replace_with(
        b'{"config": {"lab": {"dev": "sda"}}, "levels": ["vfs"], "commits": 1, "per_commit": {}}'
    ),
    "latency-text": replace_with(
        b'{"config": {}, "levels": [], "commits": 1, "per_commit": {}, "latency_ms": {"p99": "slow"}}'
    ),
}
PARQUET_SHAPES: dict[str, Callable[[Path], None]] = {
    "foreign-table": replace_with(foreign_parquet),
    "no-warmup-column": replace_with(parquet_without_warmup),
    "json-instead": replace_with(b"{}"),
}
STORE_SHAPES: dict[str, Callable[[Path], None]] = {
    "no-tables": replace_with(sqlite_db("PRAGMA user_version = 0")),
    "other-tables": replace_with(sqlite_db("CREATE TABLE t (x)", "PRAGMA user_version = 3")),
    "runs-of-text": replace_with(
        sqlite_db(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, status TEXT, levels TEXT, run_dir TEXT, events_path TEXT,"
            " p99_ms REAL)",
            "INSERT INTO runs VALUES (1, 'ok', 'not json', NULL, NULL, 'slow')",
            "PRAGMA user_version = 3",
        )
    ),
    "newer-schema": replace_with(sqlite_db("CREATE TABLE runs (id INTEGER)", "PRAGMA user_version = 99")),
}
# Damages that may leave a readable file (no checksum covers the byte): either way is fine.
GARBLED: dict[str, Callable[[Path], None]] = {f"garbled-{seed}": garble(seed) for seed in (1, 2, 3, 4)}

# (which result, the damaged file inside it, its damages)
TARGETS = [
    ("run", "summary.json", {**COMMON, **JSON_SHAPES, **GARBLED}),
    ("run", "commits.parquet", {**COMMON, **PARQUET_SHAPES, **GARBLED}),
    ("matrix", "results.sqlite", {**COMMON, **STORE_SHAPES, **GARBLED}),
    ("matrix", f"{CELL}/summary.json", {**COMMON, **JSON_SHAPES, **GARBLED}),
    ("matrix", f"{CELL}/commits.parquet", {**COMMON, **PARQUET_SHAPES, **GARBLED}),
]
CASES = [
    pytest.param(kind, name, damage, label.startswith("garbled"), id=f"{kind}:{name}:{label}")
    for kind, name, damages in TARGETS
    for label, damage in damages.items()
]

# --------------------------------------------------------------------------- results


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("pristine")
    sqlwa_cli("run", "-n", "20", "--warmup", "2", "--out", str(base / "run"))
    sqlwa_cli(
        "matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "10", "--warmup", "1",
        "--out", str(base / "matrix"),
    )  # fmt: skip
    return {"run": base / "run", "matrix": base / "matrix"}


def cli(argv: list[str], capsys) -> tuple[int, str]:
    """``sqlwa ARGV`` in this process (an exception other than SystemExit is a traceback)."""
    capsys.readouterr()
    try:
        cli_main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


RUN_ATTRIBUTES: dict[str, Callable] = {
    "repr": repr,
    "summary": lambda r: r.summary,
    "config": lambda r: r.config,
    "levels": lambda r: r.levels,
    "commits": lambda r: r.commits,
    "has_trace": lambda r: r.has_trace,
    "windows": lambda r: r.windows,
    "events": lambda r: r.events,
    "device": lambda r: r.device,
    "attributed_writes": lambda r: r.attributed_writes,
    "categories": lambda r: r.categories(),
    "commit": lambda r: r.commit(3),
    "requests": lambda r: r.requests(),
    "timeline": lambda r: r.timeline(),
    "stacked_categories": lambda r: r.stacked_categories(),
    "latency_cdf": lambda r: r.latency_cdf(),
}
MATRIX_ATTRIBUTES: dict[str, Callable] = {
    "repr": repr,
    "summary": lambda m: m.summary,
    "ok": lambda m: m.ok(),
    "runs": lambda m: [[get(run) for get in RUN_ATTRIBUTES.values()] for run in m.runs],
    "run": lambda m: m.run(journal="wal"),
    "commits": lambda m: m.commits,
    "stacked_categories": lambda m: m.stacked_categories(),
    "latency_cdf": lambda m: m.latency_cdf(),
}


def api_outcomes(path: Path) -> list[str]:
    """``sqlwa.load(path)`` and every attribute: 'ok' or 'refused' each (anything but a
    SqlwaError fails the test)."""
    try:
        loaded = sqlwa.load(path)
    except sqlwa.SqlwaError:
        return ["refused"]
    attributes = RUN_ATTRIBUTES if isinstance(loaded, sqlwa.Run) else MATRIX_ATTRIBUTES
    outcomes = []
    for get in attributes.values():
        try:
            get(loaded)
            outcomes.append("ok")
        except sqlwa.SqlwaError:
            outcomes.append("refused")
    return outcomes


@pytest.mark.parametrize(("kind", "name", "damage", "may_pass"), CASES)
def test_damaged_results_are_refused_cleanly_and_left_alone(tmp_path, capsys, pristine, kind, name, damage, may_pass):
    result = tmp_path / kind
    shutil.copytree(pristine[kind], result)
    other = pristine["matrix" if kind == "run" else "run"]
    damaged = result / name
    damage(damaged)
    before = damaged.read_bytes() if damaged.exists() else None

    report_html = tmp_path / "report.html"
    commands = {
        "report": ["report", str(result), "-o", str(report_html)],
        "check": ["check", "--policy", str(POLICY), str(result)],
        "compare": ["compare", str(result), str(other)],
        "compare-b": ["compare", str(other), str(result)],
    }
    refusals = 0
    for command, argv in commands.items():
        code, err = cli(argv, capsys)
        assert "Traceback" not in err, (command, err)
        if code == 2:
            errors = [line for line in err.splitlines() if line.startswith("sqlwa: error:")]
            assert len(errors) == 1, (command, err)
            refusals += 1
        else:
            assert may_pass or (kind == "matrix" and CELL in name and command != "report"), (command, code, err)
            assert code in (0, 1), (command, code, err)

    outcomes = api_outcomes(result) + api_outcomes(damaged.parent if kind == "run" else result / "results.sqlite")
    if not may_pass:
        assert "refused" in outcomes, "the API read a damaged result without a word"

    after = damaged.read_bytes() if damaged.exists() else None
    assert after == before, "a reader wrote into the damaged file"
    if name == "results.sqlite" or before is None:
        assert sorted(p.name for p in result.iterdir()) == sorted(p.name for p in pristine[kind].iterdir()) or (
            before is None and not damaged.exists()
        )


def test_check_does_not_make_a_store_of_an_empty_file(tmp_path):
    """A 0-byte results.sqlite stays 0 bytes: readers never create or migrate a store."""
    (tmp_path / "results.sqlite").touch()
    proc = sqlwa_cli("check", "--policy", str(POLICY), str(tmp_path), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")] == [
        f"sqlwa: error: {tmp_path / 'results.sqlite'} is damaged or not sqlwa's: "
        "it holds no sqlwa results (schema version 0)"
    ]
    assert (tmp_path / "results.sqlite").stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


@pytest.mark.parametrize("command", ["report", "check", "compare"])
def test_the_real_command_line_says_one_line(tmp_path, pristine, command):
    """The same through a real process: exit 2, one line naming the file, no traceback."""
    run = tmp_path / "run"
    shutil.copytree(pristine["run"], run)
    (run / "summary.json").write_bytes(b'{"config": {"scen')
    argv = {
        "report": ["report", str(run), "-o", str(tmp_path / "r.html")],
        "check": ["check", "--policy", str(POLICY), str(run)],
        "compare": ["compare", str(run), str(pristine["matrix"])],
    }[command]
    proc: subprocess.CompletedProcess = sqlwa_cli(*argv, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and str(run / "summary.json") in errors[0], proc.stderr


def test_store_reader_keeps_json_of_old_stores(pristine):
    """The read-only reader still reads what it did before (a guard against over-refusing)."""
    runs = sqlwa.load(pristine["matrix"]).summary
    assert runs.height == 2 and set(runs["status"]) == {"ok"}
    assert all(json.loads(levels) == ["vfs"] for levels in runs["levels"])
