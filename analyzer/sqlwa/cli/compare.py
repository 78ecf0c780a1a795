"""``sqlwa compare``: two matrices or runs side by side with deltas."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sqlwa.catalogue import METRICS, Metric
from sqlwa.cli.matrix import fmt
from sqlwa.errors import UsageError

if TYPE_CHECKING:  # imported where a comparison runs: `sqlwa compare --help` needs none of them
    from rich.table import Table

    from sqlwa.results import compare as comparing

VERDICT_COLOURS = {"worse": "red", "durability_lost": "red", "better": "green"}  # others: dim


def delta_text(delta, pct, metric: Metric, durability_lost: bool = False, timings_emulated: bool = False) -> str:
    """The delta and its share, red for a change for the worse, green for the better; a
    saving bought by giving up durability is red and says so, never green; a change of
    emulated timings is neither, and says so."""
    from sqlwa.results import compare as comparing

    judged = comparing.verdict(metric, delta, durability_lost, timings_emulated)
    if judged is None:
        return "—"
    colour = VERDICT_COLOURS.get(judged, "dim")
    pct_text = f" ({pct:+.1f}%)" if pct is not None else ""
    note = {"durability_lost": " durability lost", "emulated": " emulated"}.get(judged, "")
    return f"[{colour}]{delta:+,.3f}{pct_text}{note}[/{colour}]"


def emulated_mark(row: dict, value: float | None) -> str:
    """After a timing an emulated CPU measured (a --vm run under TCG)."""
    return " [yellow](emulated)[/yellow]" if row["timings_emulated"] and value is not None else ""


CHANGE_TEXT = {"lost": "[red]LOST[/red]", "regained": "[green]regained[/green]", None: ""}


@click.command("compare")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path), required=False)
@click.option(
    "--by",
    "split",
    metavar="kernel[=A,B]",
    help="Split the runs of A (and B, pooled) by the kernel they ran on and compare the two kernels: "
    "the lower version is A; =A,B names the two (a store of more than two kernels needs it).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the comparison as JSON instead of the table: per configuration each metric's unit, a, b, "
    "change, change_pct and verdict (worse, better, durability_lost, unchanged, undirected), and durability.",
)
def compare_command(a, b, as_json, split):
    """Show two results side by side with deltas (B − A): matrices or single runs.

    \b
    Examples:
      sqlwa compare m-before m-after                 # two matrix directories
      sqlwa compare sqlwa-out/run-delete sqlwa-out/run-wal
      sqlwa compare m1/results.sqlite m2
      sqlwa compare m-kernels --by kernel            # one store, runs on two kernels
      sqlwa compare m-510 m-61 --by kernel=5.10.0-30-amd64,6.1.0-56-amd64

    Matrices are matched by configuration (scenario, fs and its layers: encrypt, fuse,
    profile, crypt; journal, sync; means over repeats, latency quantiles over the repeats'
    commits pooled). Per commit figures; a change for the worse is shown red, for the
    better green (higher is worse for all of them). — means the level was not measured
    on that side (never 0). Lab runs also show durability: where B's commits are not durable
    (e.g. fsync_flushed_nothing: mounted barrier=0; or `sqlwa crash` states that lost
    acknowledged commits), B's savings are red and marked "durability lost", not green. A side whose runs ran on several kernels pools
    them (a note says so); --by kernel compares the kernels instead.
    """
    from rich.table import Table

    from sqlwa.analysis.phases import PHASE_SHORT
    from sqlwa.results import compare as comparing
    from sqlwa.results import store
    from sqlwa.views import json_output
    from sqlwa.views.terminal import wide_console

    side_a, side_b = sides(a, b, split)
    for path in (a, b):
        if path is not None:
            store.say_if_partial(path)
    rows = comparing.compare(side_a.runs, side_b.runs, side_a.latencies, side_b.latencies)
    durability_rows = comparing.durability(side_a.runs, side_b.runs)
    if as_json:
        document = json_output.compare_document(side_a.label, side_b.label, rows, durability_rows)
        click.echo(json_output.dumps(document))
        return
    durability = {row["config"]: row for row in durability_rows.iter_rows(named=True)}
    table = Table(title=f"A = {side_a.label}   B = {side_b.label}", title_justify="left")
    table.add_column("configuration")
    table.add_column("per commit")
    for name in ("A", "B", "B − A"):
        table.add_column(name, justify="right")
    previous = None
    refusals: dict[str, str] = {}
    for row in rows.iter_rows(named=True):
        if previous is not None and row["config"] != previous:
            add_durability(table, durability.get(previous))
            table.add_section()
        if row["refused"]:
            refusals.setdefault(row["config"], row["why"].removeprefix("not compared: ").split(", and ")[0])
        table.add_row(
            row["config"] if row["config"] != previous else "",
            row["metric"] + (f" [{PHASE_SHORT[row['phase']]}]" if row["phase"] else ""),
            fmt(row["a"], 3) + emulated_mark(row, row["a"]),
            fmt(row["b"], 3) + emulated_mark(row, row["b"]),
            "[dim]not compared: a whole-run figure[/dim]"
            if row["refused"]
            else delta_text(
                row["delta"], row["pct"], METRICS[row["metric"]], row["durability_lost"], row["timings_emulated"]
            ),
        )
        previous = row["config"]
    add_durability(table, durability.get(previous))
    console = wide_console()
    console.print(table)
    for config, why in refusals.items():  # one line per configuration: why some rows say "not compared"
        console.print(
            f"{config}: {why}: per-commit counts compared within the phase in brackets; "
            "whole-run figures not compared (measure both with the same -n)",
            highlight=False,
        )


def sides(a: Path, b: Path | None, split: str | None) -> tuple[comparing.Side, comparing.Side]:
    """A and B as given, or the runs of A (and B) split by --by."""
    from sqlwa.results import compare as comparing

    if split is None:
        if b is None:
            raise UsageError("compare needs two results, A and B", "give B, or --by kernel to split A by kernel")
        side_a, side_b = comparing.load_side(a), comparing.load_side(b)
        for side in (side_a, side_b):
            note_pooled_kernels(side)
        return side_a, side_b
    column, chosen = comparing.parse_split(split)
    sources = [comparing.load_side(path) for path in (a, b) if path is not None]
    return comparing.split_by(sources, column, chosen)


def note_pooled_kernels(side: comparing.Side) -> None:
    """A side of runs on several kernels is compared as one: say so, and how to split it."""
    from sqlwa.results import compare as comparing

    kernels = comparing.values_of(side.runs, "kernel")
    if len(kernels) > 1:
        click.echo(
            f"note: {side.label} holds runs of {len(kernels)} kernels ({', '.join(kernels)}), pooled here; "
            "--by kernel compares them",
            err=True,
        )


def add_durability(table: Table, row: dict | None) -> None:
    """The configuration's durability row, where either side looked for it (a lab run)."""
    if row is not None and (row["a"] or row["b"]):
        table.add_row("", "durability", row["a"] or "—", row["b"] or "—", CHANGE_TEXT[row["change"]])
