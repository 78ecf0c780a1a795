"""The matrix table's latency statistics (#44, item 7): it showed p99 alone, pooled over
the repeats, with a ± of each run's own p99, and the shards of a sweep run side by side
on one host (2 to 4 times the latency of the cells alone) unmarked. Truth: numpy over
the runs' own commits.parquet latencies, and the runs' commit timestamps (two runs
shared the host when their measured spans overlap)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

from helpers import REPO, sqlwa

WIDE = {**os.environ, "COLUMNS": "400"}


def table(stdout: str, title: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and rows (by label) of the table under ``title``, a row a line."""
    lines = stdout.splitlines()
    start = lines.index(title) + 1
    body = []
    for line in lines[start:]:
        if not line.startswith(("┏", "┃", "┡", "│", "├", "└")):
            break
        if line.startswith(("┃", "│")):
            body.append(line)
    split = [[cell.strip() for cell in re.split("[│┃]", line)[1:-1]] for line in body]
    heads = [row for row, line in zip(split, body) if line.startswith("┃")]
    header = [" ".join(part for part in parts if part) for parts in zip(*heads)]
    return header, {row[0]: row for row, line in zip(split, body) if line.startswith("│")}


def run_commits(matrix: Path) -> dict[str, list[pl.DataFrame]]:
    """Each configuration's runs' measured commits, by the journal."""
    found: dict[str, list[pl.DataFrame]] = {}
    for run in sorted((matrix / "runs").iterdir()):
        journal = run.name.split("-")[-3]
        found.setdefault(journal, []).append(pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup")))
    return found


def test_mean_p50_p99_are_pooled_and_their_spread_is_the_runs(tmp_path):
    out = tmp_path / "m"
    proc = sqlwa("matrix", "--vfs-only", "-j", "delete,wal", "--sync", "off", "-n", "60", "--repeat", "3",
                 "-o", str(out), env=WIDE)  # fmt: skip
    header, rows = table(proc.stdout, "commit latency")
    for journal, runs in run_commits(out).items():
        cells = rows[f"mobibench-insert none {journal}/off"]
        ms = [r["latency_ns"].to_numpy() / 1e6 for r in runs]
        pooled = np.concatenate(ms)
        for label, pooled_value, per_run in (
            ("mean ms", pooled.mean(), [m.mean() for m in ms]),
            ("p50 ms", np.percentile(pooled, 50), [np.percentile(m, 50) for m in ms]),
            ("p99 ms", np.percentile(pooled, 99), [np.percentile(m, 99) for m in ms]),
        ):
            assert cells[header.index(label)] == f"{pooled_value:,.3f} ± {np.std(per_run, ddof=1):,.3f}", label
        # one sweep, its cells one after the other: alone, unless another test measured meanwhile
        others = [json.loads((run / "summary.json").read_text())["config"]["host_sharing"]["other_runs"]
                  for run in sorted((out / "runs").iterdir()) if run.name.split("-")[-3] == journal]  # fmt: skip
        sharing = sum(1 for pids in others if pids)
        assert cells[header.index("shared")] == ("0" if not sharing else f"{sharing} of 3")
    said = " ".join(proc.stdout.split())
    assert "± = sample standard deviation (n − 1) of the runs' own values, here and below" in said
    assert said.count("± = ") == 1  # defined once


def test_shards_run_side_by_side_are_marked_as_sharing_the_host(tmp_path):
    """Two shards of one sweep at once, as `--shard` invites on one machine; a think time
    keeps each cell measuring long enough for the two to overlap."""
    scenario = tmp_path / "slow-insert.toml"
    text = (REPO / "workloads" / "scenarios" / "mobibench-insert.toml").read_text()
    scenario.write_text(text.replace('name = "mobibench-insert"', 'name = "slow-insert"\nthink_time_ms = 3.0'))
    sweep = [sys.executable, "-m", "sqlwa", "matrix", "--vfs-only", "-s", str(scenario), "-j", "delete,wal",
             "--sync", "off", "-n", "300"]  # fmt: skip
    shards = [
        subprocess.Popen(
            [*sweep, "--shard", f"{k}/2", "-o", str(tmp_path / f"s{k}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=WIDE,
        )  # fmt: skip
        for k in (1, 2)
    ]
    printed = [shard.communicate(timeout=300)[0] for shard in shards]
    assert [shard.returncode for shard in shards] == [0, 0]
    spans = []
    for k in (1, 2):
        [runs] = run_commits(tmp_path / f"s{k}").values()
        spans.append((runs[0]["start_ns"].min(), runs[0]["end_ns"].max()))
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, "the two cells measured at the same time"
    for stdout in printed:
        header, rows = table(stdout, "commit latency")
        [cells] = rows.values()
        assert cells[header.index("shared")] == "1 of 1"
    assert "another sqlwa run measured on this host" in " ".join(printed[0].split())
