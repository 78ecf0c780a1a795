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


TABLE_EDGES = tuple("┏┃┡│├└")


def check_piped_widths(stdout: str, width: int) -> None:
    """Every line of a table fits ``width`` with no word cut; the documented exceptions
    (views.terminal.PipedConsole): a line of text outside a table is never broken, nor
    is a row's label (a grep finds both), and a table whose labels and longest words
    cannot fit is as narrow as they allow — that width tallied here from its cells."""
    table_lines = [line for line in stdout.splitlines() if line.startswith(TABLE_EDGES)]
    assert table_lines, stdout
    assert not [line for line in table_lines if "…" in line]  # nothing cut to fit
    allowed = max(width, narrowest_width(table_lines))
    too_wide = [line for line in table_lines if len(line) > allowed]
    assert not too_wide, too_wide


def narrowest_width(table_lines: list[str]) -> int:
    """The width a table needs when its first column is as wide as its longest line (a
    whole configuration label) or word, and every other as its longest word, plus a space either side and the
    borders."""
    rows = [re.split("[│┃]", line)[1:-1] for line in table_lines if line[0] in "│┃"]
    columns = max(map(len, rows))
    cells = [[row[i] for row in rows if i < len(row)] for i in range(columns)]
    labels = any(cell.strip() == "configuration" for cell in cells[0])  # kept whole, as grep keys
    longest = [max(len(cell.strip()) if labels else max(map(len, cell.split()), default=0) for cell in cells[0])]
    longest += [max((len(word) for cell in column for word in cell.split()), default=0) for column in cells[1:]]
    return sum(n + 2 for n in longest) + columns + 1


def test_piped_tables_fit_100_columns_or_COLUMNS(tmp_path):
    """#33 item 11: piped, `sqlwa scenarios` printed 2,337-character lines and run,
    compare, matrix and predict tables ran to ~190 columns."""
    import os

    from helpers import sqlwa

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    check_piped_widths(sqlwa("scenarios", env=env).stdout, 100)
    check_piped_widths(sqlwa("scenarios", env={**env, "COLUMNS": "72"}).stdout, 72)
    a, b = tmp_path / "a", tmp_path / "b"
    check_piped_widths(sqlwa("run", "-n", "3", "--dir", str(tmp_path), "-o", str(a), env=env).stdout, 100)
    sqlwa("run", "-n", "3", "-j", "wal", "--dir", str(tmp_path), "-o", str(b), env=env)
    check_piped_widths(sqlwa("compare", str(a), str(b), env=env).stdout, 100)
    matrix = sqlwa(
        "matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "3", "-o", str(tmp_path / "m"), env=env
    )
    check_piped_widths(matrix.stdout, 100)  # its labels and words need 105: the exception
    predicted = sqlwa("predict", "-d", "pixel-2016", str(LAB_RUN), env=env)
    check_piped_widths(predicted.stdout, 100)  # 128
    assert "predicted run" not in predicted.stderr  # progress goes to a terminal only


def test_predict_progress_is_one_line_rewritten_on_a_terminal_and_none_piped(monkeypatch):
    """#33 item 11: a matrix of 8 runs on two devices printed 16 progress lines."""
    import io
    import sys

    from sqlwa.cli.predict import progress_line

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    say = progress_line()
    assert say is not None
    for number in range(1, 17):
        say(f"predicted run {number}/16")
    say("")
    assert "\n" not in terminal.getvalue() and terminal.getvalue().endswith("\r\033[K")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_line() is None


def test_a_run_that_shared_its_host_says_so_beside_its_latency():
    """#44 item 7: shards side by side had 2-4x the latency of the cells alone."""
    from sqlwa.views.terminal import print_summary

    summary = json.loads((LAB_RUN / "summary.json").read_text())

    def printed(sharing: dict | None) -> str:
        console = Console(width=400, record=True, file=open("/dev/null", "w"))
        print_summary({**summary, "config": {**summary["config"], "host_sharing": sharing}}, console)
        return console.export_text()

    assert "shared host: 2 other sqlwa run(s) measured on this host meanwhile (pid 41, 42)" in printed(
        {"other_runs": [41, 42], "load_average_1m": [1.0, 2.0], "cpus": 2}
    )
    assert "shared host" not in printed({"other_runs": [], "load_average_1m": [1.0, 1.0], "cpus": 2})
    assert "shared host" not in printed(None)


def test_what_is_no_commit_is_shown_apart_and_an_old_summary_shows_none():
    from sqlwa.views.terminal import print_summary

    summary = json.loads((LAB_RUN / "summary.json").read_text())

    def printed(s: dict) -> str:
        console = Console(width=200, record=True, file=open("/dev/null", "w"))
        print_summary(s, console)
        return " ".join(console.export_text().split())

    old = printed(summary)  # written before wrote_nothing and close existed
    assert "outside the commits" not in old and "wrote nothing" not in old
    summary["wrote_nothing"] = {
        "transactions": 2,
        "statements": 3,
        "vfs_sync_calls": 0,
        "vfs_write_bytes": 0,
        "first": [{"line": 7, "statement": "UPDATE t SET v = 1 WHERE id = 99", "statements": 2}],
    }
    summary["close"] = {
        "connections": 1,
        "vfs_sync_calls": 2,
        "vfs_write_bytes": 8192,
        "syscalls": {"fsync_calls": 2},
        "block": {"write_requests": 3, "write_bytes": 12288, "flush_requests": 2},
    }
    text = printed(summary)
    assert "│ transactions that wrote nothing │ 2 │ 0 │ 0 B │ — │ — │ — │" in text
    assert "│ close checkpoint (connections closed) │ 1 │ 2 │ 8.0 KiB │ 2 │ 3 (12.0 KiB) │ 2 │" in text
    assert "2 transactions changed no database file (3 statements, the first at line 7: UPDATE t SET" in text
