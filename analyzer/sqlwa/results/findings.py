"""The consistency findings of stored runs (summary.json's ``findings``), per configuration.

A finding such as ``fsync_flushed_nothing`` (every fsync of a commit returned without a
cache flush reaching the device, e.g. ext4 mounted ``barrier=0``) is what tells a cheap
durable commit from a cheap commit that may be lost on power loss. The gate
(``forbid_findings``), ``sqlwa compare`` and the report read it from here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import polars as pl

from sqlwa.catalogue import DURABILITY_FINDINGS, FINDINGS, config_key
from sqlwa.results import rundir


@dataclass
class CrashTally:
    """What the crash states of a configuration's `sqlwa crash` runs came to, all repeats:
    the direct measurement of durability, where the findings are the layers' word."""

    states: int = 0
    states_losing: int = 0  # sound states without some acknowledged commit
    max_lost: int = 0  # the most acknowledged commits one state lost (the schema's counted as one)
    unreadable: int = 0  # states whose database was corrupt, no commit's, or did not mount

    def add(self, durability: dict) -> None:
        lost = durability["lost_commits"]
        self.states += durability["states"]
        self.states_losing += lost["states_losing"]
        self.max_lost = max(self.max_lost, lost["max"])
        self.unreadable += durability["corrupt_states"] + durability["unmountable_states"]

    def lost_any(self) -> bool:
        return bool(self.states_losing or self.unreadable)

    def line(self) -> str:
        """'6 of 54 crash states lost acknowledged commits (up to 41)'."""
        parts = []
        if self.states_losing:
            parts.append(
                f"{self.states_losing:,} of {self.states:,} crash states lost acknowledged commits (up to {self.max_lost:,})"
            )
        if self.unreadable:
            parts.append(f"{self.unreadable:,} of {self.states:,} crash states left no readable database")
        return "; ".join(parts) or f"none of {self.states:,} crash states lost an acknowledged commit"


@dataclass
class ConfigFindings:
    """What the successful runs of one configuration found, over all its repeats."""

    levels: set[str]  # the levels every one of its runs measured and looked at
    commits: int = 0  # measured commits, all repeats
    hits: dict[str, int] = field(default_factory=dict)  # finding -> commits it was found in
    what: dict[str, str] = field(default_factory=dict)  # finding -> what it means
    crash: CrashTally | None = None  # the crash states of its `sqlwa crash` runs, if any

    def crash_lost(self) -> bool:
        """Whether crash states showed a power cut losing acknowledged commits."""
        return self.crash is not None and self.crash.lost_any()

    def looked_for(self, name: str) -> bool:
        """Whether every run measured the level the finding compares (else it cannot say)."""
        return FINDINGS[name] in self.levels

    def share(self, name: str) -> float:
        return self.hits.get(name, 0) / self.commits if self.commits else 0.0

    def durability_lost(self) -> list[str]:
        """The durability findings found in any commit, e.g. ['fsync_flushed_nothing']."""
        return [name for name in DURABILITY_FINDINGS if self.hits.get(name)]

    def line(self, name: str) -> str:
        """'20 of 20 commits (100%): fsync returned without …'."""
        return f"{self.hits.get(name, 0):,} of {self.commits:,} commits ({self.share(name):.0%}): {self.what.get(name, name)}"


def run_findings(row: dict) -> list[dict] | None:
    """One run's findings; None when it did not look for any (no syscall level). The
    store checked their shape when it was read (:func:`check_stored`)."""
    return json.loads(row.get("summary_json") or "{}").get("findings")


def run_durability(row: dict) -> dict | None:
    """One run's crash states (summary.json's ``durability``); None for a run without them."""
    durability = json.loads(row.get("summary_json") or "{}").get("durability")
    return durability if isinstance(durability, dict) else None


def check_stored(summary: object) -> None:
    """Raise :class:`rundir.Damaged` unless a stored summary (its summary_json, parsed)
    has findings readers can read."""
    found = summary.get("findings") if isinstance(summary, dict) else []
    if not isinstance(summary, dict) or not (
        found is None
        or isinstance(found, list)
        and all(
            isinstance(f, dict) and isinstance(f.get("check"), str) and isinstance(f.get("commits"), int) for f in found
        )
    ):
        raise rundir.Damaged("a run's summary or its findings are not of sqlwa's shape")
    durability = summary.get("durability")
    if durability is not None and not _durability_shaped(durability):
        raise rundir.Damaged("a run's crash states (summary.json's durability) are not of sqlwa's shape")


def _durability_shaped(durability: object) -> bool:
    """The figures :class:`CrashTally` reads are there, and are counts."""
    if not isinstance(durability, dict) or not isinstance(durability.get("lost_commits"), dict):
        return False
    figures = [durability.get(k) for k in ("states", "corrupt_states", "unmountable_states")]
    figures += [durability["lost_commits"].get(k) for k in ("max", "states_losing")]
    return all(isinstance(n, int) and n >= 0 for n in figures)


def config_findings(runs: pl.DataFrame) -> dict[tuple, ConfigFindings]:
    """Per configuration (:func:`sqlwa.catalogue.config_key`) of the successful runs."""
    out: dict[tuple, ConfigFindings] = {}
    ok = runs.filter(pl.col("status") == "ok") if runs.height else runs
    for row in ok.iter_rows(named=True):
        found = run_findings(row)
        # a run that did not look for findings measured none of the levels they compare
        levels = set(json.loads(row.get("levels") or "[]")) if found is not None else set()
        key = config_key(row)
        state = out.setdefault(key, ConfigFindings(levels))
        state.levels &= levels
        state.commits += row.get("commits") or 0
        for finding in found or []:
            state.hits[finding["check"]] = state.hits.get(finding["check"], 0) + finding["commits"]
            state.what[finding["check"]] = str(finding.get("what", finding["check"]))
        durability = run_durability(row)
        if durability is not None:
            state.crash = state.crash or CrashTally()
            state.crash.add(durability)
    return out
