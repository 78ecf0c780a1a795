"""The gate's statistics for timing metrics (latency quantiles, frame-budget misses).

A count such as fsyncs per commit is the same in every run of a configuration; a latency
is not. Two identical sweeps on a shared machine measured p99 3.706 and 5.172 ms (+39.5%),
and one configuration's per-repeat p99 ranged from 16 to 64 ms. So a timing regression is
called only when the change is both larger than the rule's limit and significant:

* the spread of the repeats is shown as hyperfine shows it: mean ± standard deviation
  (sample, n − 1) and min … max of the per-run values;
* the test is the one-sided Mann–Whitney U test (``scipy.stats.mannwhitneyu``) of the
  per-run values of the metric, new against baseline: is a new run's value stochastically
  larger? The run is the unit, not the commit: commits of one run share its machine
  state (load, cache, the device's mood), so a per-commit test finds two identical
  sweeps "different" (p = 0.007 for the pair above) -- it tests the environment, not the
  change. The p-value is exact (every split of the runs into the two groups counted,
  ties included) where there are at most :data:`EXACT_SPLITS` splits.

With n and m runs the smallest p-value the test can give is 1 / C(n + m, n): 0.05 for
3 against 3 (every new run slower than every old one), 0.004 for 5 against 5. A verdict
resting on that one ordering means little: anything that orders the runs (a side's runs
measured beside other runs on one host: +263% and +728% p99 were called "significant"
so, 3 against 3) reaches it with no change at all. So the gate calls a change
significant only with enough runs that two orderings reach the level, 2 / C(n + m, n) ≤
level, which is the two-sided exact test's smallest p (scipy's: 0.1 for 3 against 3,
0.057 for 3 against 4, 0.029 for 4 against 4): at 0.05, 4 runs a side (or 3 against 5).
With fewer it says "too few runs" and how many it needs instead of a verdict.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from sqlwa.catalogue import CONFIG_KEYS

EXACT_SPLITS = 20_000  # up to this many splits the permutation distribution is enumerated
DEFAULT_SIGNIFICANCE_LEVEL = 0.05


@dataclass(frozen=True)
class Spread:
    """The per-run values of one metric for one configuration."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def stdev(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def text(self, digits: int = 3) -> str:
        """'3 runs: 3.510 ± 0.220 (3.300 … 3.710)', or '1 run' alone."""
        if len(self.values) < 2:
            return "1 run"
        return (
            f"{len(self.values)} runs: {self.mean:,.{digits}f} ± {self.stdev:,.{digits}f} "
            f"({min(self.values):,.{digits}f} … {max(self.values):,.{digits}f})"
        )


def run_values(runs: pl.DataFrame, key: tuple, metric: str) -> Spread:
    """The metric of each successful run of the configuration ``key``."""
    if runs.height == 0 or metric not in runs.columns:
        return Spread(())
    match = pl.all_horizontal([pl.col(k).cast(pl.String) == str(v) for k, v in zip(CONFIG_KEYS, key)])
    values = runs.filter(match & (pl.col("status") == "ok"))[metric].drop_nulls()
    return Spread(tuple(float(v) for v in values))


@dataclass(frozen=True)
class Significance:
    """The one-sided test that the new runs are slower (their values larger)."""

    p: float
    new_runs: int
    old_runs: int

    @property
    def smallest_p(self) -> float:
        """The smallest p-value these numbers of runs can give at all."""
        return 1 / math.comb(self.new_runs + self.old_runs, self.new_runs)

    @property
    def smallest_two_sided_p(self) -> float:
        """The two-sided exact test's smallest p: what the level must reach for a verdict
        not to rest on one ordering of the runs (see the module's docstring)."""
        return min(1.0, 2 * self.smallest_p)

    def too_few(self, level: float) -> bool:
        """These runs are too few for a verdict at ``level``."""
        return self.smallest_two_sided_p > level

    def text(self) -> str:
        return f"Mann–Whitney U over {self.new_runs} vs {self.old_runs} runs: p = {self.p:.3g}"


def slower(new: Spread, old: Spread) -> Significance:
    """Mann–Whitney U, one-sided (alternative: the new values are larger)."""
    try:
        from scipy import stats  # here, not at the top: every sqlwa command imports this module's importers
    except ImportError:
        from sqlwa.errors import UsageError

        raise UsageError(
            "the timing test of sqlwa check (Mann-Whitney U) needs scipy, which is not installed",
            "pip install 'sqlwa[stats]' (or: pip install scipy)",
        ) from None

    splits = math.comb(len(new.values) + len(old.values), len(new.values))
    method: object = stats.PermutationMethod(n_resamples=math.inf) if splits <= EXACT_SPLITS else "asymptotic"
    if min(len(new.values), len(old.values)) < 2:
        method = "exact"  # scipy's permutation test wants two values a side; one run has no ties to mind
    result = stats.mannwhitneyu(new.values, old.values, alternative="greater", method=method)
    p = float(result.pvalue)
    return Significance(1.0 if math.isnan(p) else p, len(new.values), len(old.values))


def runs_needed(level: float) -> int:
    """The fewest runs a side (as many on both) that are not too few at ``level``:
    2 / C(2r, r) ≤ level (4 at 0.05, 5 at 0.01)."""
    runs = 2
    while 2 / math.comb(2 * runs, runs) > level:
        runs += 1
    return runs


def shared_host(summary: Mapping[str, Any]) -> bool | None:
    """Whether another sqlwa run measured on the host while this run did (shards of a
    sweep side by side: their latencies were 2 to 4 times the cells' alone); None where
    the run did not record it (one analysed by an earlier version)."""
    sharing = (summary.get("config") or {}).get("host_sharing")
    return None if not isinstance(sharing, dict) else bool(sharing.get("other_runs"))


def shared_runs(runs: pl.DataFrame) -> dict[tuple, tuple[int, int]]:
    """Per configuration: (runs that shared the host, runs that recorded whether they did)."""
    counts: dict[tuple, tuple[int, int]] = {}
    if runs.height == 0 or "summary_json" not in runs.columns:
        return counts
    for row in runs.filter(pl.col("status") == "ok").iter_rows(named=True):
        shared = shared_host(json.loads(row["summary_json"] or "{}"))
        key = tuple(row[k] for k in CONFIG_KEYS)
        was, known = counts.get(key, (0, 0))
        if shared is not None:
            counts[key] = (was + shared, known + 1)
        else:
            counts[key] = (was, known)
    return counts
