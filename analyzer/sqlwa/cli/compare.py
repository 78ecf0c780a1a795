"""``sqlwa compare``: two matrices or runs side by side with deltas."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from sqlwa.catalogue import METRICS, Metric
from sqlwa.cli.matrix import fmt, wide_console
from sqlwa.results import compare as comparing
from sqlwa.results import store
from sqlwa.views import json_output

VERDICT_COLOURS = {"worse": "red", "durability_lost": "red", "better": "green"}  # others: dim


def delta_text(delta, pct, metric: Metric, durability_lost: bool = False) -> str:
    """The delta and its share, red for a change for the worse, green for the better; a
    saving bought by giving up durability is red and says so, never green."""
    judged = comparing.verdict(metric, delta, durability_lost)
    if judged is None:
        return "—"
    colour = VERDICT_COLOURS.get(judged, "dim")
    pct_text = f" ({pct:+.1f}%)" if pct is not None else ""
    note = " durability lost" if judged == "durability_lost" else ""
    return f"[{colour}]{delta:+,.3f}{pct_text}{note}[/{colour}]"


CHANGE_TEXT = {"lost": "[red]LOST[/red]", "regained": "[green]regained[/green]", None: ""}


@click.command("compare")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the comparison as JSON instead of the table: per configuration each metric's unit, a, b, "
    "change, change_pct and verdict (worse, better, durability_lost, unchanged, undirected), and durability.",
)
def compare_command(a, b, as_json):
    """Show two results side by side with deltas (B − A): matrices or single runs.

    \b
    Examples:
      sqlwa compare m-before m-after                 # two matrix directories
      sqlwa compare sqlwa-out/run-delete sqlwa-out/run-wal
      sqlwa compare m1/results.sqlite m2

    Matrices are matched by configuration (scenario, fs and its layers: encrypt, fuse,
    profile, crypt; journal, sync; means over repeats, latency quantiles over the repeats'
    commits pooled). Per commit figures; a change for the worse is shown red, for the
    better green (higher is worse for all of them). — means the level was not measured
    on that side (never 0). Lab runs also show durability: where B's commits lost the durability
    A's had (e.g. fsync_flushed_nothing: mounted barrier=0), B's savings are red and
    marked "durability lost", not green.
    """
    runs_a, runs_b = store.load_results(a), store.load_results(b)
    rows = comparing.compare(runs_a, runs_b, store.load_latencies(a), store.load_latencies(b))
    durability_rows = comparing.durability(runs_a, runs_b)
    if as_json:
        click.echo(json_output.dumps(json_output.compare_document(a, b, rows, durability_rows)))
        return
    durability = {row["config"]: row for row in durability_rows.iter_rows(named=True)}
    table = Table(title=f"A = {a}   B = {b}", title_justify="left")
    table.add_column("configuration")
    table.add_column("per commit")
    for name in ("A", "B", "B − A"):
        table.add_column(name, justify="right")
    previous = None
    for row in rows.iter_rows(named=True):
        if previous is not None and row["config"] != previous:
            add_durability(table, durability.get(previous))
            table.add_section()
        table.add_row(
            row["config"] if row["config"] != previous else "",
            row["metric"],
            fmt(row["a"], 3),
            fmt(row["b"], 3),
            delta_text(row["delta"], row["pct"], METRICS[row["metric"]], row["durability_lost"]),
        )
        previous = row["config"]
    add_durability(table, durability.get(previous))
    wide_console().print(table)


def add_durability(table: Table, row: dict | None) -> None:
    """The configuration's durability row, where either side looked for it (a lab run)."""
    if row is not None and (row["a"] or row["b"]):
        table.add_row("", "durability", row["a"] or "—", row["b"] or "—", CHANGE_TEXT[row["change"]])
