"""A scenario's SQL stays inside the run's own database (#15): scenarios are shared files
and sqlwa often runs as root, so ATTACH, VACUUM INTO, PRAGMAs and load_extension() in a
scenario are refused with one line (exit 2) before anything is written outside."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import sqlwa


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
