"""The run's summary table as the terminal shows it (#16, point 14): a count column holds
counts only, and a run without the block level says nothing about amortized bytes."""

from __future__ import annotations

import json
import re

from rich.console import Console

from helpers import REPO
from sqlwa.views.terminal import summary_table

LAB_RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"
COUNT = re.compile(r"^(\d[\d,.]*)?$")


def rendered(summary: dict) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(summary_table(summary))
    return console.export_text()


def test_the_count_column_holds_only_counts():
    table = summary_table(json.loads((LAB_RUN / "summary.json").read_text()))
    counts = [str(cell) for cell in table.columns[1].cells]
    assert counts and all(COUNT.match(c) for c in counts), counts


def test_a_vfs_only_run_has_no_amortized_footnote():
    summary = json.loads((LAB_RUN / "summary.json").read_text())
    assert "amortized" in rendered(summary)
    summary["levels"] = ["vfs"]
    summary.pop("bytes_by_category", None)
    assert "amortized" not in rendered(summary)


def test_output_to_a_pipe_is_not_wrapped_at_80_columns(tmp_path):
    """A CI log or `| tee` is not a terminal: nothing may be broken across lines there
    (#16, point 15). COLUMNS is unset so rich cannot take a width from it."""
    import os

    from helpers import sqlwa

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = sqlwa("run", "-n", "3", "--dir", str(tmp_path), "-o", str(tmp_path / "o"), env=env)
    lines = proc.stdout.splitlines()
    assert any(line.startswith("mobibench-insert · journal=delete") and "SQLite 3." in line for line in lines)
    assert (
        "block and syscall levels were not measured: they need a lab filesystem (--fs ext4 …), root and tracefs."
        in lines
    )
