"""A scenario's SQL stays inside the run's own database (#15): scenarios are shared files
and sqlwa often runs as root, so ATTACH, VACUUM INTO, PRAGMAs and load_extension() in a
scenario are refused with one line (exit 2) before anything is written outside. The
virtual tables a scenario may make (FTS5, R*Tree) run, with the statements SQLite's own
modules prepare for them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from helpers import sqlwa

SCENARIOS = Path(__file__).parent / "scenarios"


def write_scenario(path: Path, table_sql: str, pragmas: str = "") -> Path:
    escaped = table_sql.replace("\\", "\\\\").replace('"', '\\"')
    path.write_text(
        f'name = "shared"\n[pragmas]\n{pragmas}\n'
        f'[[table]]\nname = "t"\nsql = "{escaped}"\n'
        '[[txn]]\nop = "insert"\ntable = "t"\nvalues = { v = { kind = "int", min = 1, max = 9 } }\n'
    )
    return path


def refusal(tmp_path: Path, scenario: Path) -> str:
    """The one error line of `sqlwa run` on ``scenario``, which must make nothing."""
    out = tmp_path / "out"
    proc = sqlwa("run", "-s", str(scenario), "-n", "2", "--warmup", "0", "--out", str(out), check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1, proc.stderr
    assert not out.exists()
    return errors[0]


@pytest.mark.parametrize(
    "attack",
    [
        "CREATE TABLE t (v); ATTACH DATABASE '{victim}' AS e; CREATE TABLE e.z (a)",
        "CREATE TABLE t (v); VACUUM INTO '{victim}'",
        "CREATE TABLE t (v); PRAGMA temp_store_directory = '{victim_dir}'",
        "CREATE TABLE t (v); SELECT load_extension('{victim}')",
    ],
    ids=["attach", "vacuum-into", "pragma", "load-extension"],
)
def test_a_scenario_cannot_reach_outside_its_database(tmp_path, attack):
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim = victim_dir / "x.db"
    sql = attack.format(victim=victim, victim_dir=victim_dir)
    scenario = write_scenario(tmp_path / "shared.toml", sql)

    line = refusal(tmp_path, scenario)

    assert line.startswith(f"sqlwa: error: scenario {scenario}: statement refused: "), line
    assert line.endswith(f"(statement: {sql})"), line
    assert list(victim_dir.iterdir()) == [], "nothing was created outside the run's database"


@pytest.mark.parametrize(
    "pragma,why",
    [('journal_mode = "off"', "sqlwa run --journal"), ('data_store_directory = "victim"', "outside the run")],
)
def test_the_pragmas_table_cannot_set_what_the_run_owns_or_reach_outside(tmp_path, pragma, why):
    scenario = write_scenario(tmp_path / "shared.toml", "CREATE TABLE t (v)", pragmas=pragma)
    line = refusal(tmp_path, scenario)
    assert line.startswith(f"sqlwa: error: scenario file {scenario}, line 3, column "), line
    assert why in line, line


def run_kept(tmp_path: Path, scenario: str, txns: int, warmup: int) -> tuple[dict, sqlite3.Connection]:
    """`sqlwa run` of a test scenario with --keep-db: its summary, and its database opened
    by Python's own sqlite3 (read-only)."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    sqlwa("run", "-s", str(SCENARIOS / f"{scenario}.toml"), "-n", str(txns), "--warmup", str(warmup),
          "--keep-db", "--dir", str(work), "--out", str(out))  # fmt: skip
    (db,) = work.glob(f"sqlwa-run-*/{scenario}.db")
    return json.loads((out / "summary.json").read_text()), sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def test_an_fts5_scenario_runs_and_measures(tmp_path):
    """#32: FTS5's own `PRAGMA data_version` was refused as if the scenario had run it."""
    summary, conn = run_kept(tmp_path, "notes-fts5", txns=6, warmup=2)
    with conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (8,)
        assert conn.execute("SELECT count(*) FROM notes_content").fetchone() == (8,)  # FTS5's shadow table
        # a word of the last note, found through the full-text index
        word = conn.execute("SELECT title FROM notes ORDER BY rowid DESC LIMIT 1").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM notes WHERE notes MATCH ?", (f'"{word}"',)).fetchone()[0] >= 1
        (payload,) = conn.execute("SELECT sum(length(title) + length(body)) FROM notes WHERE rowid > 2").fetchone()
    assert summary["commits"] == 6 and summary["levels"] == ["vfs"]
    assert summary["per_commit"]["logical_bytes"] == pytest.approx(payload / 6)
    assert summary["per_commit"]["vfs_sync_calls"] > 0 and summary["per_commit"]["vfs_write_bytes"] > payload / 6


def test_an_rtree_scenario_runs_and_measures(tmp_path):
    """#32: R*Tree's own `PRAGMA page_size` (on CREATE VIRTUAL TABLE) was refused."""
    summary, conn = run_kept(tmp_path, "places-rtree", txns=5, warmup=1)
    with conn:
        assert conn.execute("SELECT count(*) FROM places_rowid").fetchone() == (6,)  # R*Tree's shadow table
        # every box spans x = 99.5 .. 100 and y alike: the index finds them all
        inside = "SELECT count(*) FROM places WHERE min_x <= 99.5 AND max_x >= 100 AND min_y <= 99.5 AND max_y >= 100"
        assert conn.execute(inside).fetchone() == (6,)
    assert summary["commits"] == 5 and summary["per_commit"]["logical_bytes"] == 4 * 8  # four numbers
    assert summary["per_commit"]["vfs_sync_calls"] > 0 and summary["per_commit"]["vfs_write_bytes"] > 0


def test_a_scenarios_own_read_of_those_pragmas_stays_refused(tmp_path):
    scenario = write_scenario(tmp_path / "shared.toml", "CREATE TABLE t (v); PRAGMA page_size")
    assert "statement refused: PRAGMA page_size: a scenario's SQL may not run PRAGMAs" in refusal(tmp_path, scenario)
