"""Like with like: which phase two sides of a gate or a comparison can be compared in.

A whole-run mean per commit weighs each phase (:mod:`sqlwa.analysis.phases`) by how many
commits the run spent in it, and that depends on the run's length: a 200-commit WAL run
never checkpoints (2 cache flushes a commit on ext4 FULL), a 500-commit one spends 40% of
its commits after the first checkpoint (1 flush), so its mean is 1.62 while no commit
changed. Two sides whose phase mix is the same compare as before; where it differs, a
figure each phase has (:data:`~sqlwa.analysis.phases.PHASE_FIGURES`) is compared within
the phase both went through (steady state first, else WAL growth), and a figure only the
whole run has (amortized bytes, latency quantiles) is not compared at all.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from sqlwa.analysis.phases import COMPARED_PHASES, PHASE_FIGURES, PHASE_SHORT, phase_figures
from sqlwa.catalogue import config_key

#: Two runs' shares of commits in a phase may differ by this much and still count as the
#: same mix (a seed or a page size moves a checkpoint by a commit or two).
MIX_TOLERANCE = 0.01


@dataclass
class PhaseMix:
    """One configuration's runs pooled: measured commits per phase and, per phase, each
    figure's mean over those commits (runs weighted by their commits)."""

    commits: dict[str, int] = field(default_factory=dict)
    sums: dict[str, dict[str, float]] = field(default_factory=dict)
    #: phase → figure → each run's own mean over its commits in the phase
    per_run: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, summary: Mapping[str, Any]) -> None:
        for name, entry in phase_figures(summary).items():
            if name == "warmup":
                continue
            self.commits[name] = self.commits.get(name, 0) + entry["commits"]
            sums = self.sums.setdefault(name, {})
            runs = self.per_run.setdefault(name, {})
            for figure in PHASE_FIGURES:
                if figure in entry:
                    sums[figure] = sums.get(figure, 0.0) + entry[figure] * entry["commits"]
                    runs.setdefault(figure, []).append(entry[figure])

    def spread(self, phase: str, figure: str) -> float | None:
        """The sample standard deviation (n - 1) of the runs' own means of ``figure`` in
        ``phase``, as the matrix table's ± is everywhere; None for fewer than two runs."""
        values = self.per_run.get(phase, {}).get(figure, [])
        return statistics.stdev(values) if len(values) > 1 else None

    def phased(self) -> bool:
        """Its measured commits are not all of one steady state: a whole-run mean is then
        a mix that depends on the run's length (or, all WAL growth, no steady state)."""
        return set(self.commits) != {"steady"} and bool(self.commits)

    def share(self, phase: str) -> float:
        total = sum(self.commits.values())
        return self.commits.get(phase, 0) / total if total else 0.0

    def mean(self, phase: str, figure: str) -> float | None:
        value = self.sums.get(phase, {}).get(figure)
        return None if value is None else value / self.commits[phase]

    def text(self) -> str:
        """e.g. '500 commits: 307 WAL growth, 1 checkpoint, 192 steady state'."""
        parts = ", ".join(f"{count:,} {PHASE_SHORT[name]}" for name, count in self.commits.items())
        return f"{sum(self.commits.values()):,} commits: {parts}"


def config_mixes(runs: pl.DataFrame) -> dict[tuple, PhaseMix]:
    """Each configuration's :class:`PhaseMix` over its successful runs; a configuration
    none of whose runs reported phases (analysed by an earlier version) is left out."""
    if runs.height == 0 or "summary_json" not in runs.columns:
        return {}
    mixes: dict[tuple, PhaseMix] = {}
    for row in runs.filter(pl.col("status") == "ok").iter_rows(named=True):
        summary = json.loads(row["summary_json"] or "{}")
        if phase_figures(summary):
            mixes.setdefault(config_key(row), PhaseMix()).add(summary)
    return mixes


def same_mix(a: PhaseMix, b: PhaseMix) -> bool:
    """The two went through the same phases in the same proportions."""
    names = set(a.commits) | set(b.commits)
    return set(a.commits) == set(b.commits) and all(abs(a.share(n) - b.share(n)) <= MIX_TOLERANCE for n in names)


@dataclass(frozen=True)
class Matched:
    """How one metric of one configuration is compared: ``phase`` None = the whole-run
    means as they are; a phase = within it (``a``, ``b``: that phase's means);
    ``refused`` = not at all (``why`` says why, in one line)."""

    phase: str | None = None
    a: float | None = None
    b: float | None = None
    refused: bool = False
    why: str = ""


WHOLE_RUN = Matched()


def match(metric: str, a: PhaseMix | None, b: PhaseMix | None, names: tuple[str, str] = ("before", "now")) -> Matched:
    """How ``metric`` compares between sides ``a`` (the baseline) and ``b``; ``names``
    are what the reason calls them."""
    if a is None or b is None or same_mix(a, b):
        return WHOLE_RUN
    differ = f"the runs went through other phases ({names[0]}: {a.text()}; {names[1]}: {b.text()})"
    if metric not in PHASE_FIGURES:
        return Matched(
            refused=True,
            why=f"not compared: {differ}, and {metric} is a whole-run figure; measure both with the same -n",
        )
    for phase in COMPARED_PHASES:
        before, now = a.mean(phase, metric), b.mean(phase, metric)
        if before is not None and now is not None:
            return Matched(phase, before, now)
    return Matched(refused=True, why=f"not compared: {differ}, with no phase in common")
