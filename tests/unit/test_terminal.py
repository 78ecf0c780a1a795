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
