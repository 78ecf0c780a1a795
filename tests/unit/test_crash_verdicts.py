"""A run whose crash states lost acknowledged commits is never "kept" or "better":
not in ``sqlwa compare`` (table and JSON), not in the report, not in ``sqlwa check``,
not on the terminal of ``sqlwa crash``.

The two runs are the shipped ext4 WAL sample run as WAL/FULL (A) and as WAL/NORMAL (B,
its fsyncs and flushes per commit set to 0, as NORMAL makes none per commit). Their
``durability`` is summarised from crash states built here: A's every state held every
acknowledged commit; of B's, one held none of them and one held all but the last 6
(SQLite's documented WAL/NORMAL: the commits since the last sync of the WAL may go).
No layer finding says anything is wrong with B: only its crash states do.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from helpers import REPO, sqlwa_in_process
from sqlwa.catalogue import METRICS
from sqlwa.durability import explore, reference, states, verdict, writelog
from sqlwa.results import check, compare, store
from sqlwa.views import report, terminal

SAMPLE = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"
WARMUP, TXNS = 2, 30
ALL = states.Acked(True, WARMUP + TXNS)  # acknowledged by the end: 33 with the schema's


def judged(held_at: list[int]) -> list[tuple[states.CrashState, verdict.Verdict]]:
    """One state per entry, each after every commit was acknowledged, whose database
    holds the rows of reference position ``held_at[i]`` (BEFORE_SETUP: none)."""
    out = []
    for point, present in enumerate(held_at):
        state = states.CrashState("none", point, point, (), ALL)
        out.append((state, verdict.judge(state, verdict.Inspection(None, present))))
    return out


def durability_of(held_at: list[int]) -> dict:
    log = writelog.WriteLog(Path("unused"), 512, [])
    return explore.summarise(judged(held_at), log, explore.CrashOptions(), len(held_at), 1.0, WARMUP)


LAST = WARMUP + TXNS - 1
DURABLE = durability_of([LAST] * 5)
LOSING = durability_of([LAST, reference.BEFORE_SETUP, LAST - 6, LAST])


def crash_run(where: Path, sync: str, durability: dict) -> Path:
    shutil.copytree(SAMPLE, where)
    summary = json.loads((where / "summary.json").read_text())
    summary["config"]["sync"] = summary["config"]["settings"]["sync"] = sync
    if sync == "normal":  # no fsync and no flush per commit: cheaper in every count
        summary["per_commit"].update(fsync_calls=0, flush_requests=0, vfs_sync_calls=0)
    summary["durability"] = durability
    (where / "summary.json").write_text(json.dumps(summary))
    return where


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("crash-verdicts")
    return crash_run(base / "full", "full", DURABLE), crash_run(base / "normal", "normal", LOSING)


def test_the_states_built_here_lost_what_they_should() -> None:
    assert DURABLE["lost_commits"]["states_losing"] == 0
    assert LOSING["lost_commits"] == {"max": 33, "states_losing": 2, "distribution": {"0": 2, "6": 1, "33": 1}}


def test_compare_never_calls_a_losing_setting_kept_or_better(runs) -> None:
    a, b = (store.load_results(path) for path in runs)
    sides = compare.durability(a, b).row(0, named=True)
    assert sides["a"] == "kept"
    assert sides["b"].startswith("lost") and "2 of 4 crash states lost acknowledged commits (up to 33)" in sides["b"]
    assert sides["change"] == "lost"
    rows = compare.compare(a, b)
    fsyncs = rows.filter(rows["metric"] == "fsync_calls_per_commit").row(0, named=True)
    assert fsyncs["delta"] < 0 and fsyncs["durability_lost"]
    verdicts = {
        compare.verdict(METRICS[r["metric"]], r["delta"], r["durability_lost"]) for r in rows.iter_rows(named=True)
    }
    assert "better" not in verdicts and "durability_lost" in verdicts


def test_compare_terminal_and_json_say_lost(runs, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # each row on one line, as a wide terminal shows it
    printed = sqlwa_in_process("compare", *map(str, runs))
    assert printed.returncode == 0, printed.stderr
    durability_line = next(line for line in printed.stdout.splitlines() if "durability" in line and "│" in line)
    assert "lost" in durability_line and "kept │ kept" not in durability_line
    assert "durability lost" in printed.stdout
    document = json.loads(sqlwa_in_process("compare", "--json", *map(str, runs)).stdout)
    [config] = document["configurations"]
    assert config["durability"]["b"].startswith("lost")
    assert all(m["verdict"] != "better" for m in config["metrics"].values())


def test_the_report_puts_the_crash_states_first(runs) -> None:
    losing = store.load_results(runs[1])
    banner = report.durability_banner(losing)
    assert "Durability lost" in banner and "2 of 4 crash states lost acknowledged commits" in banner
    table, note = report.findings_table(losing)
    assert note.startswith("A power cut would lose acknowledged commits of")
    assert "<td>4</td><td>2</td><td>33</td><td>0</td>" in table
    assert report.durability_banner(store.load_results(runs[0])) == ""


def test_check_fails_a_durability_rule_on_lost_commits(runs) -> None:
    policy = check.Policy(
        [check.parse_rule({"name": "durable commits", "forbid_findings": ["fsync_flushed_nothing"]}, 1)]
    )
    [losing] = check.check(policy, store.load_results(runs[1])).findings
    assert losing.outcome == "violation" and losing.figures.measured == 33, losing.line()
    assert "crash states lost acknowledged commits" in losing.detail
    [durable] = check.check(policy, store.load_results(runs[0])).findings
    assert durable.outcome == "pass", durable.line()


def test_crash_terminal_says_not_durable() -> None:
    out = io.StringIO()
    terminal.print_durability(LOSING, Console(file=out, width=400, no_color=True))
    printed = out.getvalue()
    assert (
        "not durable: 2 of 4 crash states lost acknowledged commits (up to 33 of the 33 acknowledged: the schema's"
        in printed
    )
    assert "the database held none of the 33 acknowledged commits (the schema's, 2 warm-up, 30 measured)" in printed
    out = io.StringIO()
    terminal.print_durability(DURABLE, Console(file=out, width=400, no_color=True))
    assert "no crash state of 5 lost an acknowledged commit" in out.getvalue()
