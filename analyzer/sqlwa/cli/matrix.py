"""``sqlwa matrix``: a sweep over scenarios × filesystems × layers (encryption, FUSE,
profile, dm-crypt) × journal × sync, and ``sqlwa demo``: the default sweep with its table and HTML
report."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sqlwa import outputs
from sqlwa.catalogue import (
    DEFAULT_FRAME_BUDGET_MS,
    DEFAULT_JOURNALS,
    DEFAULT_SYNCS,
    FRAME_RATES,
    METRICS,
    config_key,
    config_label,
)
from sqlwa.cli._stack import split_list, stack_option
from sqlwa.lab.stack import STACK_FIELDS, StackSpec

if TYPE_CHECKING:  # imported where a sweep runs: `sqlwa matrix --help` needs none of them
    import polars as pl
    from rich.console import Console
    from rich.progress import TaskID
    from rich.table import Table

    from sqlwa.measure import matrix, shard
    from sqlwa.results import phasematch


def split_scenarios(_ctx, _param, value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())  # paths keep their case


class MatrixProgress:
    """One bar over the cells (cell name, done/total, elapsed, ETA) and one over the
    current cell's transactions; on a non-terminal, one line per finished cell instead."""

    def __init__(self, total: int, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self.cells = self.progress.add_task("cells", total=total)
        self.txns: TaskID | None = None
        self.total = total
        self.reasons_shown: set[str] = set()

    def __enter__(self):
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.progress.stop()

    def start(self, number: int, cell: matrix.Cell) -> None:
        self.progress.update(self.cells, description=f"cell {number}/{self.total}: {cell.label}")
        if self.txns is not None:
            self.progress.remove_task(self.txns)
            self.txns = None

    def txn(self, done: int, total: int) -> None:
        if not self.live:
            return
        if self.txns is None:
            self.txns = self.progress.add_task("  txns", total=total)
        self.progress.update(self.txns, completed=done, total=total)

    def once(self, reason: str) -> str:
        """A reason in full the first time, then as a back reference: a filesystem the
        machine lacks skips every one of its cells for the same reason."""
        if reason in self.reasons_shown:
            return "(the same reason as above)"
        self.reasons_shown.add(reason)
        return short(reason)

    def done(self, result: matrix.CellResult) -> None:
        self.progress.advance(self.cells)
        style = {"ok": "green", "done-earlier": "dim", "skipped": "yellow", "failed": "red"}[result.status]
        note = f" — {self.once(result.reason)}" if result.reason else ""
        lost = f" [red]({result.lost_events:,} events lost)[/red]" if result.lost_events else ""
        self.console.print(
            f"[{style}]{result.status:>12}[/{style}] {result.cell.label} ({result.seconds:.1f} s){lost}{note}",
            highlight=False,
            markup=True,
        )


def by_reason(results: list[matrix.CellResult]) -> dict[str, list[str]]:
    """Cell labels grouped by their reason, each reason once, in the order first seen."""
    groups: dict[str, list[str]] = {}
    for result in results:
        groups.setdefault(result.reason or "", []).append(result.cell.label)
    return groups


def short(reason: str | None, limit: int = 240) -> str:
    """A failure reason on one readable line (mkfs usage texts run to pages)."""
    text = " ".join((reason or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt(value, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


# The catalogue metrics the matrix table shows, in its column order.
TABLE_METRICS = (
    "vfs_sync_calls_per_commit",
    "fsync_calls_per_commit",
    "flushes_per_commit",
    "vfs_write_kib_per_commit",
    "write_kib_per_commit",
    "block_over_logical",
)
# The timing columns of the latency table, after the mean (which is no catalogue metric).
LATENCY_METRICS = ("p50_ms", "p99_ms", "frame_budget_misses")


MATRIX_CAPTION = (
    "per commit, mean over measured commits (and repeats); "
    "± = sample standard deviation (n − 1) of the runs' own values, here and below; "
    "— = level not measured; "
    "block KiB amortized: all block bytes from the first commit to the end / commits"
)
LATENCY_CAPTION = (
    "commit latency over the measured commits of every run pooled (mean, p50, p99); ± of each run's own "
    "mean, p50, p99; frame misses: a run's commits over the frame budget, mean over the runs; shared: runs measured while "
    "another sqlwa run measured on this host (shards side by side), whose timings are not the cell's alone "
    "(— = not recorded)"
)
PHASES_CAPTION = (
    "; a configuration whose runs went through phases (WAL: growth until the first checkpoint, the "
    "checkpoint commits, the steady state after) has a row per phase below its whole-run row, the runs' "
    "commits in that phase pooled (blank: a figure of the whole run only)"
)


def results_table(runs: pl.DataFrame, title: str, latencies: pl.DataFrame | None = None) -> Table:
    """Means per configuration; '—' marks a layer that was not measured (never 0). A
    configuration whose commits went through phases (:mod:`sqlwa.analysis.phases`) has
    a row per phase under it: a whole-run mean of a WAL run depends on its length."""
    from rich.table import Table

    from sqlwa.results import phasematch, store

    mixes = phasematch.config_mixes(runs)
    phased = any(mix.phased() for mix in mixes.values())
    table = Table(title=title, title_justify="left", caption=MATRIX_CAPTION + (PHASES_CAPTION if phased else ""))
    table.add_column("configuration")
    table.add_column("runs", justify="right")
    table.add_column("commits", justify="right")
    for name in TABLE_METRICS:
        table.add_column(METRICS[name].label, justify="right")
    for row in store.config_means(runs, latencies).iter_rows(named=True):
        table.add_row(
            config_label(row),
            f"{row['repeats']:,}",
            f"{row['commits']:,}",
            *(with_spread(row, name) for name in TABLE_METRICS),
        )
        mix = mixes.get(config_key(row))
        if mix is not None and mix.phased():
            for cells in phase_rows(mix):
                table.add_row(*cells)
    return table


def latency_table(runs: pl.DataFrame, latencies: pl.DataFrame | None) -> Table:
    """Per configuration, its commits' latency (mean, p50, p99 pooled over its runs, ±
    the runs' spread), frame-budget misses, and how many of its runs shared the host."""
    from rich.table import Table

    from sqlwa.results import store, timing

    shared = timing.shared_runs(runs)
    table = Table(title="commit latency", title_justify="left", caption=LATENCY_CAPTION)
    table.add_column("configuration")
    table.add_column("runs", justify="right")
    table.add_column("mean ms", justify="right")
    for name in LATENCY_METRICS:
        table.add_column(METRICS[name].label, justify="right")
    table.add_column("shared", justify="right")
    for row in store.config_means(runs, latencies).iter_rows(named=True):
        mean = row.get("mean_ms")
        sd = row.get(store.sd_column("mean_ms"))
        mean_text = fmt(mean, 3) if sd is None or mean is None else f"{fmt(mean, 3)} ± {fmt(sd, 3)}"
        table.add_row(
            config_label(row),
            f"{row['repeats']:,}",
            mean_text,
            *(with_spread(row, name) for name in LATENCY_METRICS),
            shared_text(shared.get(config_key(row), (0, 0)), row["repeats"]),
        )
    return table


def shared_text(counts: tuple[int, int], repeats: int) -> str:
    """'0' (every run measured alone), '2 of 3' (of the runs that recorded it), or '—'
    where none did."""
    was, known = counts
    if known == 0:
        return "—"
    return "0" if was == 0 and known == repeats else f"{was:,} of {known:,}"


def phase_rows(mix: phasematch.PhaseMix) -> list[list[str]]:
    """One row per phase of a configuration's runs: its commits and, for each column the
    phase has a figure of, its mean over those commits ± the runs' spread."""
    from sqlwa.analysis.phases import PHASE_FIGURES, PHASE_SHORT

    rows = []
    for phase, commits in mix.commits.items():
        cells = []
        for name in TABLE_METRICS:
            mean = mix.mean(phase, name) if name in PHASE_FIGURES else None
            digits = METRICS[name].digits
            sd = mix.spread(phase, name)
            text = "" if mean is None else fmt(mean, digits)
            cells.append(text if sd is None or mean is None else f"{text} ± {fmt(sd, digits)}")
        rows.append([f"  {PHASE_SHORT[phase]}", "", f"{commits:,}", *cells])
    return rows


def with_spread(row: dict, name: str) -> str:
    """'mean ± sd' over a configuration's runs, as hyperfine prints it; the mean alone
    for one run (no spread to show) or an unmeasured level."""
    from sqlwa.results import store

    digits = METRICS[name].digits
    sd = row.get(store.sd_column(name))
    text = fmt(row[name], digits)
    return text if sd is None or row[name] is None else f"{text} ± {fmt(sd, digits)}"


def print_outcome(outcome: matrix.MatrixOutcome, console: Console) -> None:
    import polars as pl

    from sqlwa.results import store

    runs = store.load_results(outcome.plan.out_dir)
    if runs.height and runs.filter(pl.col("status") == "ok").height:
        latencies = store.load_latencies(outcome.plan.out_dir)
        console.print(results_table(runs, f"matrix {outcome.plan.out_dir}", latencies))
        console.print(latency_table(runs, latencies))
    if outcome.plan.stack.machine.vm:
        console.print(
            "VM lab: every cell ran in one guest; under TCG its latencies (p99, frame misses) are an emulated "
            "CPU's and not comparable (each run's config.vm says which accelerator)",
            highlight=False,
        )
    for status in ("skipped", "failed"):
        cells = outcome.with_status(status)
        if cells:
            console.print(f"[bold]{len(cells)} cell(s) {status}:[/bold]")
            for reason, labels in by_reason(cells).items():
                console.print(f"  {', '.join(labels)}: {short(reason)}", highlight=False)
    lossy = [r for r in outcome.results if r.lost_events]
    if lossy:
        console.print(
            f"[red]{len(lossy)} run(s) lost trace events; `sqlwa check` fails them unless the policy allows loss[/red]"
        )


def run_with_progress(plan: matrix.MatrixPlan) -> matrix.MatrixOutcome:
    """Run the sweep, saying on stderr what it does and how far it is."""
    from sqlwa.measure import matrix
    from sqlwa.views.terminal import wide_console

    err = wide_console(stderr=True)
    why_not_lab = matrix.lab_unavailable_reason(plan) if plan.lab and not plan.stack.machine.vm else None
    if why_not_lab:
        plan.lab, plan.lab_unavailable = False, why_not_lab
        err.print(f"[yellow]VFS level only:[/yellow] {why_not_lab}", highlight=False)
    matrix.check_axes(plan)  # a refused axis is the only line, before the sweep says what it will do
    cells = plan.cells()
    with MatrixProgress(len(cells), err) as bar:
        return matrix.run_matrix(
            plan,
            on_start=bar.start,
            on_done=bar.done,
            progress=bar.txn,
            on_ready=lambda: err.print(f"{len(cells)} cell(s) into {plan.out_dir}", highlight=False),
        )


def run_and_report(plan: matrix.MatrixPlan, console: Console) -> matrix.MatrixOutcome:
    outcome = run_with_progress(plan)
    print_outcome(outcome, console)
    return outcome


def print_json(outcome: matrix.MatrixOutcome) -> None:
    from sqlwa.results import store
    from sqlwa.views import json_output

    out_dir = outcome.plan.out_dir
    document = json_output.matrix_document(outcome, store.load_results(out_dir), store.load_latencies(out_dir))
    click.echo(json_output.dumps(document))


MATRIX_OPTIONS = [
    click.option(
        "-s",
        "--scenario",
        "scenarios",
        default="mobibench-insert",
        show_default=True,
        callback=split_scenarios,
        metavar="A,B",
        help="Scenarios (built-in names or TOML paths), comma-separated.",
    ),
    *(stack_option(name, sweep=True) for name in ("fs", "encrypt", "fuse", "profile", "crypt")),
    click.option(
        "-j",
        "--journal",
        "journals",
        default=",".join(DEFAULT_JOURNALS),
        show_default=True,
        callback=split_list,
        metavar="MODE,..",
        help="PRAGMA journal_mode values.",
    ),
    click.option(
        "--sync",
        "syncs",
        default=",".join(DEFAULT_SYNCS),
        show_default=True,
        callback=split_list,
        metavar="MODE,..",
        help="PRAGMA synchronous values.",
    ),
    click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Runs per configuration."),
    click.option(
        "-n", "--txns", type=click.IntRange(min=1), help="Measured transactions per run [default: the scenario's]."
    ),
    click.option(
        "--warmup", type=click.IntRange(min=0), help="Warm-up transactions per run [default: the scenario's]."
    ),
    click.option(
        "--from",
        "from_db",
        metavar="DB",
        help="Replayed SQL logs: start each run from this snapshot of the app's database (and its -wal).",
    ),
    click.option(
        "--timing",
        metavar="recorded|back-to-back|FACTOR",
        help="Replayed SQL logs: the log's gaps, none, or the gaps times FACTOR [default: recorded].",
    ),
    click.option("--strict", is_flag=True, help="Replayed SQL logs: stop at the first statement that fails."),
    click.option("--vfs-only", is_flag=True, help="Measure the VFS level only, even as root (no lab filesystems)."),
    *(stack_option(name, sweep=True) for name in ("image_size", "vm", "device_delay_ms")),
    click.option(
        "--frame-rate",
        type=click.Choice([str(rate) for rate in FRAME_RATES]),
        callback=lambda _ctx, _param, value: None if value is None else int(value),
        metavar="|".join(str(rate) for rate in FRAME_RATES),
        help="The display's refresh rate, Hz: every run's frame budget is one frame of it (as `sqlwa run "
        f"--frame-rate`) [default: {DEFAULT_FRAME_BUDGET_MS} ms, 60 Hz].",
    ),
    stack_option("kernel", sweep=True),
    outputs.allow_system_option,
]


# Each stack option of a cell with the axis parameter that sets it.
STACK_AXES = {"fs": "filesystems", "encrypt": "encrypts", "fuse": "fuses"}


def profile_overrides() -> tuple[str, ...]:
    """The stack options whose axis was given on the command line: as with `sqlwa run
    --profile`, an option given explicitly wins over the profile's."""
    context = click.get_current_context()
    return tuple(
        option
        for option, parameter in STACK_AXES.items()
        if context.get_parameter_source(parameter) not in (None, click.core.ParameterSource.DEFAULT)
    )


def plan_json(plan: matrix.MatrixPlan) -> str:
    """The plan's cells as ``sqlwa matrix --plan`` prints them (:func:`sqlwa.measure.matrix.plan_document`):
    the axes checked and the lab's availability settled as the sweep itself would (without
    root, the VFS level)."""
    from sqlwa.measure import matrix
    from sqlwa.views import json_output

    why_not_lab = matrix.lab_unavailable_reason(plan) if plan.lab and not plan.stack.machine.vm else None
    if why_not_lab:
        plan.lab, plan.lab_unavailable = False, why_not_lab
    matrix.check_axes(plan)
    return json_output.dumps({"schema_version": json_output.SCHEMA_VERSION, **matrix.plan_document(plan)})


def plan_of(
    out_dir: Path | None,
    options: dict,
    resume: bool = False,
    check_out: bool = True,
    part: shard.Shard | None = None,
) -> matrix.MatrixPlan:
    """The sweep MATRIX_OPTIONS describe (``options``: their values by parameter name),
    each value in the part of the plan it belongs to; ``part``: the shard it runs of them
    (``--shard``)."""
    from sqlwa.measure import engine, matrix

    given = dict(options)

    def take(names: tuple[str, ...]) -> dict:
        return {name: given.pop(name) for name in names if name in given}

    plan = matrix.MatrixPlan(
        out_dir=out_dir or Path("."),
        axes=matrix.Axes(**take(matrix.AXIS_NAMES)),
        stack=StackSpec.from_flat(**take(STACK_FIELDS), profile_overrides=profile_overrides()),
        settings=engine.RunSettings.from_flat(take(matrix.SHARED_SETTINGS)),
        runs=matrix.Runs(**take(matrix.RUNS_FIELDS)),
        lab=not given.pop("vfs_only"),
        invocation=matrix.Invocation(shard=part, resume=resume, allow_system_dir=given.pop("allow_system_dir")),
    )
    assert not given, f"options no part of the plan takes: {sorted(given)}"
    if check_out:
        matrix.check_out_dir(plan)  # before the sweep is announced
    return plan


def with_options(options):
    def apply(func):
        for option in reversed(options):
            func = option(func)
        return func

    return apply


@click.command("matrix")
@with_options(MATRIX_OPTIONS)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Matrix directory: results.sqlite and runs/<cell>/ (required unless --plan).",
)
@click.option("--resume", is_flag=True, help="Continue a matrix in --out: cells already done are skipped.")
@click.option(
    "--plan",
    "show_plan",
    is_flag=True,
    help="Print the cells as JSON (each with its stable id, run key and directory) and run nothing; with "
    "--shard, that shard's cells.",
)
@click.option(
    "--shard",
    "shard_text",
    metavar="K/N",
    help="Run only shard K of N (a deterministic split of the cells by id; K from 1 to N) into its own --out; "
    "`sqlwa merge` brings the shards together.",
)
@click.option(
    "--shard-base",
    type=click.Choice(["0", "1"]),
    default="1",
    show_default=True,
    help="What K of --shard counts from: 0 takes a 0-based index as it comes (Kubernetes' JOB_COMPLETION_INDEX).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the outcome as JSON instead of the table (progress stays on stderr): the plan, every cell "
    "with its status, reason, run directory and figures, and the means per configuration.",
)
def matrix_command(
    out_dir: Path | None,
    resume: bool,
    as_json: bool,
    show_plan: bool,
    shard_text: str | None,
    shard_base: str,
    **options,
) -> None:
    """Run every combination of scenario × fs × encrypt × fuse × profile × crypt × journal ×
    sync, each on a fresh filesystem.

    \b
    Examples:
      sudo sqlwa matrix --out m1                                  # mobibench-insert, ext4, 4 journals x 2 syncs
      sudo sqlwa matrix -s mobibench-insert,messenger --fs ext4,xfs,btrfs \\
           -j delete,wal --sync normal,full --repeat 3 -n 500 --out m2
      sudo sqlwa matrix ... --out m2 --resume                     # after Ctrl-C or a failure
      sqlwa matrix -j delete,wal --out m3                         # no root: VFS level only
      sudo sqlwa matrix --encrypt none,fscrypt --fuse none,passthrough -j wal --sync full --out m4
      sudo sqlwa matrix --profile none,android-ext4,android-sdcard -j delete,wal --out m5
      sqlwa matrix --vm --crypt none,dm-crypt -j delete,wal --sync full --out m6
      sqlwa matrix -j delete,wal --plan                           # the cells as JSON, with their ids
      sqlwa matrix -j delete,wal --shard 2/4 --out s2             # one shard; then sqlwa merge m s1 s2 s3 s4

    Every run lands in OUT/runs/<scenario>-<stack>-<journal>-<sync>-r<N>/ (stack: the fs and
    its layers, e.g. ext4+fscrypt+fuse-passthrough, ext4+dm-crypt) and in the store OUT/results.sqlite. A
    cell that cannot run here (a filesystem the kernel lacks, fscrypt on xfs, no /dev/fuse)
    is skipped with its reason, a failing cell is recorded with its error, and the sweep
    goes on; both are listed at the end. Exit status 1 when a cell failed.
    Then: `sqlwa report OUT -o report.html`, `sqlwa check --policy P OUT`, `sqlwa compare OUT OTHER`.
    """
    from sqlwa.measure import shard
    from sqlwa.views.terminal import wide_console

    part = shard.parse(shard_text, int(shard_base)) if shard_text is not None else None
    if show_plan:
        click.echo(plan_json(plan_of(out_dir, options, check_out=False, part=part)))
        return
    if out_dir is None:
        raise click.UsageError("Missing option '-o' / '--out'.")
    plan = plan_of(out_dir, options, resume=resume, part=part)
    if as_json:
        outcome = run_with_progress(plan)
        print_json(outcome)
    else:
        outcome = run_and_report(plan, wide_console())
    if outcome.with_status("failed"):
        sys.exit(1)


# Measured commits per cell. A rollback journal's commit repeats the same I/O from the first
# commit on (100 and 500 commits gave the same fsyncs and flushes, block KiB within 0.3%),
# and those cells are the slow ones: 6 of them took 92 s of a 110 s demo at 500 commits
# (load 11). WAL's figures change with the run's length: its first checkpoint comes at about
# commit 317 (docs/guide/device-level.md, WAL's phases), so WAL's cells keep 500 and show
# WAL growth, the checkpoint and the steady state. `-n` sets every cell alike.
DEMO_TXNS = 100
DEMO_WAL_TXNS = 500
# The 8 lab cells take 5 to 50 s on this project's 2-core machine: quiet, and shared with
# other work (load 11: 36 s at 100 commits a cell; 46.9 s as now, load 7). README says the same.
DEMO_DURATION = "5 to 50 s"


def demo_plan(out_dir: Path, options: dict, check_out: bool = True) -> matrix.MatrixPlan:
    """The demo's sweep of MATRIX_OPTIONS' values: its own -n per journal mode unless -n was given."""
    per_journal = () if options["txns"] else (("wal", DEMO_WAL_TXNS),)
    shortened = {**options, "txns": options["txns"] or DEMO_TXNS, "journal_txns": per_journal}
    return plan_of(out_dir, shortened, check_out=check_out)


@click.command("demo")
@with_options(MATRIX_OPTIONS)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Matrix directory [default: sqlwa-out/demo-TIME].",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where the HTML report goes [default: report.html in the current directory].",
)
def demo_command(out_dir: Path | None, report_path: Path | None, **options) -> None:
    """The default sweep: mobibench-insert on ext4, journal delete/truncate/persist/wal ×
    sync normal/full, then the table and report.html.

    \b
    Examples:
      sudo sqlwa demo                     # block + syscall + VFS levels, 5 to 50 s
      sqlwa demo                          # without root: the VFS level only
      sudo sqlwa demo -n 1000 --fs ext4,xfs --report /tmp/wa.html

    Takes the same axis options as `sqlwa matrix` (defaults shown there); measured
    transactions default to 100 per cell here, 500 for WAL (whose first checkpoint comes
    at about commit 317; a rollback journal's commits repeat the same I/O from the first):
    the whole sweep takes 5 to 50 s on a 2-core machine, the more the busier it is. `-n`
    sets every cell alike. Without root every cell runs at the VFS level and says so.
    """
    from sqlwa.views import report
    from sqlwa.views.terminal import wide_console

    out_dir = out_dir or Path("sqlwa-out") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    plan = demo_plan(out_dir, options)
    # Where the report goes is checked before the sweep, not after minutes of it.
    outputs.check_file(
        report_path or Path("report.html"),
        "--report",
        allow_system=plan.invocation.allow_system_dir,
        make_parents=True,
        reads=(out_dir,),
    )
    console = wide_console()
    outcome = run_and_report(plan, console)
    target = report_path or Path("report.html")
    report.write_report(out_dir, target, allow_system=plan.invocation.allow_system_dir)
    console.print(f"wrote {target} (open it in a browser; it works offline) and {out_dir}/results.sqlite")
    if outcome.with_status("failed"):
        sys.exit(1)
