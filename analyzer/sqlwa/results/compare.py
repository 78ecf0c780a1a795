"""``sqlwa compare``: two results (matrices or single runs) side by side, with deltas.

Matrices are matched configuration by configuration (scenario, fs, encrypt, fuse, profile,
crypt, journal, sync; means over repeats); a configuration present on one side only is shown
with the other side empty. Two single runs are compared with each other whatever their configurations.

Durability is compared too: where B's commits are not durable (a finding such as
``fsync_flushed_nothing``, or `sqlwa crash` states that lost acknowledged commits), B's
lower costs are bought with it and are no gain.

Results may also be split by the kernel their runs ran on (``--by kernel``): the runs of
one store (or of two, pooled) on two kernels become the two sides, so a VM lab run on
Debian's 6.1 and one on another kernel are compared configuration by configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from sqlwa.catalogue import CONFIG_KEYS, METRICS, Metric, config_label
from sqlwa.errors import UsageError
from sqlwa.results import emulated, phasematch, store
from sqlwa.results.findings import ConfigFindings, config_findings

#: What ``compare --by`` may split results by: a runs-table column of the environment.
SPLIT_COLUMNS = ("kernel",)


@dataclass
class Side:
    """One side of a comparison: what it is called, its runs and their commits' latencies."""

    label: str
    runs: pl.DataFrame
    latencies: pl.DataFrame


def load_side(path: Path) -> Side:
    return Side(str(path), store.load_results(path), store.load_latencies(path))


def version_key(text: str) -> tuple:
    """Orders releases as versions: 5.10.0-30 before 6.1.0-56 before 6.12.0-1."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


def values_of(runs: pl.DataFrame, column: str) -> list[str]:
    """The values ``column`` takes among the successful runs, in version order."""
    if runs.height == 0 or column not in runs.columns:
        return []
    ok = runs.filter((pl.col("status") == "ok") & pl.col(column).is_not_null())
    return sorted({str(value) for value in ok[column]}, key=version_key)


def parse_split(option: str) -> tuple[str, tuple[str, str] | None]:
    """``kernel`` or ``kernel=A,B`` → (column, the two values or None)."""
    column, _, chosen = option.partition("=")
    if column not in SPLIT_COLUMNS:
        raise UsageError(f"--by {option}: results split only by {', '.join(SPLIT_COLUMNS)}", "give --by kernel")
    if not chosen:
        return column, None
    values = [value.strip() for value in chosen.split(",") if value.strip()]
    if len(values) != 2 or values[0] == values[1]:
        raise UsageError(f"--by {option}: name two different {column}s", f"e.g. --by {column}=6.1.0-56-amd64,6.12.0-1")
    return column, (values[0], values[1])


def split_by(sources: list[Side], column: str, chosen: tuple[str, str] | None) -> tuple[Side, Side]:
    """The runs of ``sources`` pooled and split into two sides by ``column``: the two values
    ``chosen``, or the only two there are (the lower version is A)."""
    found = sorted({v for side in sources for v in values_of(side.runs, column)}, key=version_key)
    where = " and ".join(side.label for side in sources)
    if chosen is None:
        if len(found) != 2:
            listed = f" ({', '.join(found)})" if found else ""
            raise UsageError(
                f"{where} hold{'s' if len(sources) == 1 else ''} runs of {len(found)} "
                f"{column}{'' if len(found) == 1 else 's'}{listed}; "
                f"--by {column} compares two",
                f"say which two: --by {column}=A,B" if len(found) > 2 else "give results of two kernels",
            )
        chosen = (found[0], found[1])
    missing = [value for value in chosen if value not in found]
    if missing:
        raise UsageError(
            f"--by {column}: no successful run of {where} ran on {missing[0]}",
            f"choose from: {', '.join(found) or 'none'}",
        )
    return side_of(sources, column, chosen[0]), side_of(sources, column, chosen[1])


def side_of(sources: list[Side], column: str, value: str) -> Side:
    """The runs whose ``column`` is ``value``, from every source, with their latencies
    (matched within each source: run keys repeat from one store to another)."""
    runs, latencies = [], []
    for source in sources:
        picked = source.runs.filter(pl.col(column).cast(pl.String) == value) if source.runs.height else source.runs
        keys = picked["run_key"].to_list() if picked.height else []
        runs.append(picked)
        latencies.append(source.latencies.filter(pl.col("run_key").is_in(keys)))
    label = f"{' + '.join(side.label for side in sources)} [{column} {value}]"
    return Side(label, pl.concat(runs, how="diagonal_relaxed"), pl.concat(latencies))


# The catalogue metrics a reader compares first, in this order.
COMPARED_METRICS = (
    "fsync_calls_per_commit",
    "vfs_sync_calls_per_commit",
    "flushes_per_commit",
    "fua_per_commit",
    "write_kib_per_commit",
    "block_write_kib_per_commit",
    "vfs_write_kib_per_commit",
    "block_over_logical",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "frame_budget_misses",
)


def is_single_run(runs: pl.DataFrame) -> bool:
    return runs.height == 1 and ("cell" not in runs.columns or runs["cell"].is_null().all())


def long_means(
    runs: pl.DataFrame, side: str, label: str | None = None, latencies: pl.DataFrame | None = None
) -> pl.DataFrame:
    """config, metric, value (one row per configuration and metric) for one side."""
    means = store.config_means(runs, latencies)
    if means.height == 0:
        return pl.DataFrame(schema={"config": pl.String, "metric": pl.String, side: pl.Float64})
    metrics = [m for m in COMPARED_METRICS if m in means.columns]
    configs = [label or config_label(row) for row in means.iter_rows(named=True)]
    return means.select(
        pl.Series("config", configs, dtype=pl.String), *[pl.col(m).cast(pl.Float64) for m in metrics]
    ).unpivot(index="config", variable_name="metric", value_name=side)


def single_label(runs: pl.DataFrame) -> str:
    return config_label(runs.row(0, named=True))


def shared_label(a: pl.DataFrame, b: pl.DataFrame) -> str | None:
    """The one label two single runs are compared under; None for matrices."""
    if not (is_single_run(a) and is_single_run(b)):
        return None
    label_a, label_b = single_label(a), single_label(b)
    return label_a if label_a == label_b else f"{label_a} → {label_b}"


def durability_state(state: ConfigFindings | None) -> str | None:
    """'kept', 'lost: fsync_flushed_nothing 100%', 'lost: 6 of 54 crash states lost
    acknowledged commits (up to 41)', or None where it was not looked for. Crash states
    measure durability itself: where a run has them, their word counts."""
    if state is None or ("syscall" not in state.levels and state.crash is None):
        return None
    lost = [f"{name} {state.share(name):.0%}" for name in state.durability_lost()]
    if state.crash is not None and state.crash.lost_any():
        lost.append(state.crash.line())
    return "lost: " + ", ".join(lost) if lost else "kept"


def side_durability(runs: pl.DataFrame, label: str | None) -> dict[str, str | None]:
    return {
        label or config_label(dict(zip(CONFIG_KEYS, key))): durability_state(state)
        for key, state in config_findings(runs).items()
    }


def durability(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """config, a, b, change: each side's durability ('kept', 'lost: …', null = not looked
    for) and 'lost' where B lost what A kept, 'regained' the other way round."""
    label = shared_label(a, b)
    side_a, side_b = side_durability(a, label), side_durability(b, label)
    rows = []
    for config in dict.fromkeys([*side_a, *side_b]):
        before, after = side_a.get(config), side_b.get(config)
        change = None
        if before == "kept" and after is not None and after != "kept":
            change = "lost"
        elif after == "kept" and before is not None and before != "kept":
            change = "regained"
        rows.append({"config": config, "a": before, "b": after, "change": change})
    return pl.DataFrame(rows, schema={"config": pl.String, "a": pl.String, "b": pl.String, "change": pl.String})


def compare(
    a: pl.DataFrame,
    b: pl.DataFrame,
    latencies_a: pl.DataFrame | None = None,
    latencies_b: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """config, metric, a, b, delta, pct, durability_lost — rows where neither side measured
    the metric dropped; durability_lost marks the configurations whose B is not durable
    (its lower costs are no gain). With each side's latencies
    (store.load_latencies) the latency quantiles are over its repeats' commits pooled."""
    label = shared_label(a, b)
    # B's saving is no gain where B's commits are not durable, whatever A's were: a side
    # that loses acknowledged commits is never "better" without saying so
    sides = durability(a, b)
    lost = sides.filter(pl.col("b").is_not_null() & (pl.col("b") != "kept"))["config"].to_list()
    clock_emulated = list(emulated_labels(a, label) | emulated_labels(b, label))
    timings = [name for name, metric in METRICS.items() if metric.timing]
    joined = long_means(a, "a", label, latencies_a).join(
        long_means(b, "b", label, latencies_b), on=["config", "metric"], how="full", coalesce=True
    )
    order = {name: i for i, name in enumerate(COMPARED_METRICS)}
    joined = joined.filter(pl.col("a").is_not_null() | pl.col("b").is_not_null())
    # Two runs of other configurations (DELETE against WAL) differ in phases by their
    # nature: that is what is being compared. Runs of one configuration are matched.
    other_configs = label is not None and single_label(a) != single_label(b)
    joined = unmatched(joined) if other_configs else like_with_like(joined, a, b, label)
    return (
        joined.with_columns(
            pl.when(~pl.col("refused")).then(pl.col("b") - pl.col("a")).alias("delta"),
            pl.when((pl.col("a") != 0) & ~pl.col("refused"))
            .then((pl.col("b") - pl.col("a")) / pl.col("a") * 100)
            .alias("pct"),
            pl.col("metric").replace_strict(order, default=len(order)).alias("_order"),
            pl.col("config").is_in(lost).alias("durability_lost"),
            # a timing either side measured on an emulated CPU (TCG): marked, judged neither way
            (pl.col("config").is_in(clock_emulated) & pl.col("metric").is_in(timings)).alias("timings_emulated"),
        )
        .sort("config", "_order")
        .drop("_order")
    )


def like_with_like(joined: pl.DataFrame, a: pl.DataFrame, b: pl.DataFrame, label: str | None) -> pl.DataFrame:
    """``joined`` with ``phase`` (null: whole-run means; else the phase both sides' values
    are of) and ``refused`` (true: not compared, ``why`` says why): where the two sides
    went through other phases (runs of other lengths), a figure is compared within the
    phase both had or not at all (:mod:`sqlwa.results.phasematch`)."""
    mixes_a, mixes_b = mixes_by_label(a, label), mixes_by_label(b, label)
    rows = []
    for row in joined.iter_rows(named=True):
        matched = phasematch.match(row["metric"], mixes_a.get(row["config"]), mixes_b.get(row["config"]), ("A", "B"))
        if matched.phase is not None:
            row.update(a=matched.a, b=matched.b)
        rows.append({**row, "phase": matched.phase, "refused": matched.refused, "why": matched.why})
    schema = pl.Schema({**joined.schema, "phase": pl.String(), "refused": pl.Boolean(), "why": pl.String()})
    return pl.DataFrame(rows, schema=schema)


def unmatched(joined: pl.DataFrame) -> pl.DataFrame:
    """``joined`` compared as whole runs (the columns :func:`like_with_like` adds)."""
    return joined.with_columns(
        pl.lit(None, pl.String).alias("phase"), pl.lit(False).alias("refused"), pl.lit("").alias("why")
    )


def mixes_by_label(runs: pl.DataFrame, label: str | None) -> dict[str, phasematch.PhaseMix]:
    """Each configuration's phases under the label the comparison shows it by (``label``:
    two single runs, compared whatever their configurations)."""
    mixes = phasematch.config_mixes(runs)
    if label is not None:  # a single run has one configuration
        return {label: next(iter(mixes.values()))} if mixes else {}
    return {config_label(dict(zip(CONFIG_KEYS, key))): mix for key, mix in mixes.items()}


def emulated_labels(runs: pl.DataFrame, label: str | None) -> set[str]:
    """The labels (as :func:`long_means` gives them) of the configurations whose timings
    an emulated CPU measured (:mod:`.emulated`)."""
    return {label or config_label(dict(zip(CONFIG_KEYS, key))) for key in emulated.emulated_configs(runs)}


def verdict(
    metric: Metric, delta: float | None, durability_lost: bool = False, timings_emulated: bool = False
) -> str | None:
    """What a change (B − A) of ``metric`` is: ``worse``; ``better``; ``durability_lost``
    for a saving bought by giving up the durability A had (no gain); ``emulated`` for a
    change of timings an emulated CPU measured (neither, as a device would see it);
    ``unchanged``; ``undirected`` for a change of a figure that is neither better nor
    worse when it grows. None where a side did not measure it."""
    if delta is None:
        return None
    if timings_emulated:
        return "emulated"
    if metric.worse(delta):
        return "worse"
    if metric.improved(delta):
        return "durability_lost" if durability_lost else "better"
    return "unchanged" if delta == 0 else "undirected"
