"""Predictions for results on disk: every lab run of a matrix (or one run directory)
replayed on a device profile, pooled per configuration as the measured latencies are.

The model is :mod:`sqlwa.analysis.prediction`; this module finds the runs, reads what the
model needs from each (events, commit windows, the lab device, the SQL thread, the CPU
columns where the run has them) and says what a reader must know about the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import polars as pl

from sqlwa.analysis import prediction, windows
from sqlwa.catalogue import CONFIG_KEYS, config_key, config_label
from sqlwa.catalogue import DEFAULT_FRAME_BUDGET_MS as FRAME_BUDGET_MS
from sqlwa.device.profile import LevelModel, Profile, pricing_notes, sync_notes
from sqlwa.errors import UsageError
from sqlwa.results import emulated, rundir, store

BaseChoice = Literal["auto", "non_io", "cpu"]
BASE_CHOICES: tuple[BaseChoice, ...] = ("auto", "non_io", "cpu")
BASE_TEXT = {
    "non_io": "measured latency minus the recorded device path (what the commit spent not waiting for the device)",
    "cpu": "the SQL thread's measured CPU time (cpu_ns)",
    "none": "left out: the run ran on an emulated CPU (TCG), whose latencies and CPU times are not a device's; "
    f"the prediction is the device time of its recorded requests alone, a lower bound ({emulated.USE_FLAG} "
    "adds the emulated base)",
}
#: Said of a configuration whose emulated timings the user let through.
EMULATED_USED = (
    f"measured and base times are an emulated CPU's (TCG), not a device's: used because {emulated.USE_FLAG} was given"
)


@dataclass
class ConfigPrediction:
    """One configuration's predicted latency on one device, its repeats pooled."""

    config: dict  # scenario, fs, journal, sync
    label: str
    runs: int
    summary: prediction.Summary
    predictions: list[prediction.Prediction]
    notes: list[str] = field(default_factory=list)


@dataclass
class DevicePrediction:
    """Every configuration of some results on one device profile."""

    profile: Profile
    fill_pct: float | None  # the profile level used
    configurations: list[ConfigPrediction]
    skipped: list[str]  # runs that could not be predicted, with why
    notes: list[str]


def base_for(commits: pl.DataFrame, choice: BaseChoice, where: str) -> prediction.BaseSource:
    """The base time a run can give: its CPU time where asked for (or, with ``auto``,
    where it has one), else its latency minus the recorded device path."""
    has_cpu = prediction.CPU_COLUMN in commits.columns
    if choice == "cpu" and not has_cpu:
        raise UsageError(
            f"{where} has no CPU time per commit ({prediction.CPU_COLUMN})",
            "leave --base out (or --base non-io): the base is then its latency minus the recorded device path",
        )
    if choice == "auto":
        return "cpu" if has_cpu else "non_io"
    return choice


def predict_run(
    run_dir: Path,
    model: prediction.ServiceModel,
    draws: int,
    seed: int,
    base: BaseChoice,
    use_emulated_timings: bool = False,
) -> prediction.Prediction:
    """One lab run's measured commits replayed on ``model``. A run whose clock is an
    emulated CPU's gives its requests but no base time, unless ``use_emulated_timings``."""
    summary = rundir.summary(run_dir)
    if "block" not in summary.get("levels", []):
        raise UsageError(
            f"{run_dir} has no block level: prediction replays the block requests of a lab run",
            "measure with sqlwa run --fs ext4 (or sqlwa matrix --fs ...)",
        )
    config = summary["config"]
    dev = rundir.lab_device(config)
    if dev is None:  # a tmpfs lab: no device at all
        raise UsageError(f"{run_dir} ran on {config.get('fs')}, which has no block device", "use a disk filesystem")
    events = rundir.events(run_dir)
    commits = rundir.commits(run_dir)
    commit_windows = rundir.commit_windows(commits, lambda: events)
    requests = prediction.waited_requests(events, commit_windows, dev, windows.run_tid(events))
    measured = commits.filter(~pl.col("warmup"))
    clock_emulated = emulated.timings_emulated(config)
    source = "none" if clock_emulated and not use_emulated_timings else base_for(commits, base, str(run_dir))
    predicted = prediction.predict(requests, measured, model, draws, seed, source)
    predicted.timings_emulated = clock_emulated
    return predicted


def predict_results(
    results: Path,
    profile: Profile,
    fill_pct: float | None = None,
    draws: int = prediction.DEFAULT_DRAWS,
    seed: int = prediction.DEFAULT_SEED,
    base: BaseChoice = "auto",
    budget_ms: float = FRAME_BUDGET_MS,
    progress: Callable[[str], None] | None = None,
    use_emulated_timings: bool = False,
) -> DevicePrediction:
    """Predict every successful run of ``results`` (a matrix or a run directory) on
    ``profile``; configurations pool their repeats. A run without a block level is
    skipped with its reason; results with no run to predict are refused."""
    runs = store.load_results(results)
    found = predict_runs(runs, profile, fill_pct, draws, seed, base, budget_ms, progress, use_emulated_timings)
    if not found.configurations:
        reasons = "; ".join(found.skipped) or "it holds no successful run"
        raise UsageError(f"nothing in {results} can be predicted: {reasons}", "measure with sqlwa run --fs ext4")
    return found


def predict_runs(
    runs: pl.DataFrame,
    profile: Profile,
    fill_pct: float | None = None,
    draws: int = prediction.DEFAULT_DRAWS,
    seed: int = prediction.DEFAULT_SEED,
    base: BaseChoice = "auto",
    budget_ms: float = FRAME_BUDGET_MS,
    progress: Callable[[str], None] | None = None,
    use_emulated_timings: bool = False,
) -> DevicePrediction:
    """:func:`predict_results` for a runs frame (:func:`sqlwa.results.store.load_results`);
    configurations none of whose runs could be predicted are absent."""
    say = progress or (lambda text: None)
    ok = runs.filter(pl.col("status") == "ok") if runs.height else runs
    level = profile.level(fill_pct)
    by_config: dict[tuple, tuple[dict, list[prediction.Prediction], LevelModel]] = {}
    skipped = []
    for number, row in enumerate(ok.iter_rows(named=True), start=1):
        config = {key: row[key] for key in CONFIG_KEYS}
        _, predictions, model = by_config.setdefault(config_key(row), (config, [], LevelModel(level)))
        try:
            run_dir = Path(row["run_dir"])
            predictions.append(predict_run(run_dir, model, draws, seed + number, base, use_emulated_timings))
        except UsageError as exc:
            skipped.append(f"{config_label(row)}: {exc.args[0]}")
            continue
        say(f"predicted run {number}/{ok.height} ({config_label(row)}) on {profile.name}")
    configurations = [
        configuration(config, predictions, model, budget_ms)
        for config, predictions, model in by_config.values()
        if predictions
    ]
    notes = [*sync_notes(profile), *pricing_notes(level)]
    return DevicePrediction(profile, level.fill_pct, configurations, skipped, notes)


def configuration(
    config: dict, predictions: list[prediction.Prediction], model: LevelModel, budget_ms: float
) -> ConfigPrediction:
    summary = prediction.summarise(predictions, budget_ms)
    notes = [f"base time: {BASE_TEXT[summary.base_source]}"]
    if model.unpriced:
        notes.append(f"the profile has no figure for {', '.join(sorted(model.unpriced))}: priced at 0")
    if summary.clamped:
        notes.append(f"{summary.clamped} commits' recorded device path exceeded their latency; their base is 0")
    if summary.timings_emulated and summary.base_source != "none":
        notes.append(EMULATED_USED)
    return ConfigPrediction(config, config_label(config), len(predictions), summary, predictions, notes)


def configurations_frame(result: DevicePrediction) -> pl.DataFrame:
    """One row per configuration: the device, runs and commits, measured and predicted
    p50/p99 (ms) and frame-budget misses (%), each part's share of the predicted latency
    (``share_base``, ``share_write`` …), requests per commit and the base's source."""
    rows = []
    for conf in result.configurations:
        s = conf.summary
        rows.append(
            {
                **{key: str(conf.config[key]) for key in CONFIG_KEYS},
                "device": result.profile.name,
                "runs": conf.runs,
                "commits": s.commits,
                "measured_p50_ms": s.measured.p50_ms,
                "predicted_p50_ms": s.predicted.p50_ms,
                "measured_p99_ms": s.measured.p99_ms,
                "predicted_p99_ms": s.predicted.p99_ms,
                "predicted_p90_ms": s.predicted.p90_ms,
                "measured_frame_budget_miss_pct": s.measured.frame_budget_miss_pct,
                "predicted_frame_budget_miss_pct": s.predicted.frame_budget_miss_pct,
                **{f"share_{part}": share for part, share in s.predicted.shares.items()},
                "requests_per_commit": s.requests_per_commit,
                "base_source": s.base_source,
                "timings_emulated": s.timings_emulated,
            }
        )
    return pl.DataFrame(rows)


def per_commit_frame(result: DevicePrediction) -> pl.DataFrame:
    """One row per predicted commit: the configuration, the run (its number among the
    configuration's repeats), the device, and :meth:`PerCommit.frame`'s columns."""
    frames = []
    for conf in result.configurations:
        for repeat, pred in enumerate(conf.predictions, start=1):
            frames.append(
                pred.per_commit.frame().with_columns(
                    *[pl.lit(str(conf.config[key])).alias(key) for key in CONFIG_KEYS],
                    pl.lit(repeat).alias("run"),
                    pl.lit(result.profile.name).alias("device"),
                    pl.lit(pred.base_source).alias("base_source"),
                )
            )
    columns = [*CONFIG_KEYS, "run", "device"]
    return pl.concat(frames).select(*columns, pl.exclude(columns)) if frames else pl.DataFrame()
