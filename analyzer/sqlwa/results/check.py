"""``sqlwa check``: a policy of limits held against measured results (a regression gate).

A policy is TOML (see ``examples/policy.toml``)::

    [options]
    allow_lossy_trace = false   # a run whose trace lost events is a violation
    allow_unmeasured = false    # a rule about a level that was not measured is a violation
    significance_level = 0.05   # a timing regression needs p <= this (Mann–Whitney U)

    [[rule]]
    name = "durable journal modes"
    journal = ["delete", "truncate", "persist"]   # scope: scenario, fs, encrypt, fuse,
                                                  # profile, crypt, journal, sync;
    sync = "full"                                 # a string, a list, or "*" (default)
    max_fsync_calls_per_commit = 4
    max_write_kib_per_commit = 96

    [[rule]]
    forbid_findings = ["fsync_flushed_nothing"]   # consistency findings no commit may have

    [[rule]]
    forbid_corruption = true                      # sqlwa crash runs: no crash state may leave
    max_lost_commits = 0                          # a corrupt database, or lose an acknowledged commit

    [[rule]]
    max_regression_pct = 10                       # against --baseline, per configuration
    metrics = ["write_kib_per_commit", "p99_ms"]  # default: DEFAULT_REGRESSION_METRICS

    [[rule]]
    device = "pixel-2016"                         # a shipped profile, or a profile file
    max_predicted_p99_ms = 16.67                  # the commits replayed on that device

Every rule is held against every configuration (scenario, fs, encrypt, fuse, profile,
crypt, journal, sync: :data:`sqlwa.catalogue.CONFIG_KEYS`) in its scope, using the mean over
the configuration's repeats (latency quantiles over its commits pooled). A timing metric regresses only when the change is also significant
(:mod:`.timing`); counts are exact. A policy that checks nothing is a UsageError. Each outcome is one
:class:`Finding`: ``pass``, ``violation``, ``unmeasured`` (the level the rule needs
was not captured — reported, never passed silently) or ``not_checked``: a timing rule
about runs whose clock was an emulated CPU's (TCG, :mod:`.emulated`), reported and
neither passed nor failed unless the user asks for them (``use_emulated_timings``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from sqlwa import device as devices
from sqlwa import inputs
from sqlwa.analysis.phases import PHASE_LABELS
from sqlwa.catalogue import CONFIG_KEYS, DURABILITY_FINDINGS, FINDINGS, METRICS, config_key, config_label, run_label
from sqlwa.device.predict import ConfigPrediction, predict_runs
from sqlwa.device.profile import Profile
from sqlwa.errors import UsageError
from sqlwa.results import emulated, phasematch, store, timing
from sqlwa.results.findings import ConfigFindings, config_findings

# The catalogue metrics a rule may cap, each as ``max_<metric>``.
LIMIT_METRICS = (
    "fsync_calls_per_commit",
    "flushes_per_commit",
    "write_kib_per_commit",
    "p50_ms",
    "p99_ms",
    "frame_budget_misses",
    "frame_budget_miss_pct",
    "block_over_logical",
    "lost_commits",
    "corrupt_states",
)
LIMITS = {f"max_{metric}": metric for metric in LIMIT_METRICS}  # rule key → metric
# Limits on the latency the configuration's commits would have on the rule's `device`
# (sqlwa predict): rule key → (figure, unit).
PREDICTED_LIMITS = {
    "max_predicted_p50_ms": ("predicted_p50_ms", "ms"),
    "max_predicted_p99_ms": ("predicted_p99_ms", "ms"),
    "max_predicted_frame_budget_miss_pct": ("predicted_frame_budget_miss_pct", "%"),
}
DEVICE_KEYS = {"device", "device_fill"}
SCOPES = CONFIG_KEYS  # a rule is scoped by the configuration keys
RULE_KEYS = {
    "name",
    "max_regression_pct",
    "metrics",
    "forbid_findings",
    "forbid_corruption",
    *SCOPES,
    *LIMITS,
    *PREDICTED_LIMITS,
    *DEVICE_KEYS,
}
OPTION_KEYS = {"allow_lossy_trace", "allow_unmeasured", "significance_level"}
DEFAULT_REGRESSION_METRICS = ("fsync_calls_per_commit", "write_kib_per_commit", "flushes_per_commit", "p99_ms")


@dataclass
class PredictedLimits:
    """A rule's limits on the latency predicted on a device, with the profile they are
    about and the fill level it is priced at: the limits mean nothing without them, and a
    rule without such limits may name no device."""

    limits: dict[str, float]  # PREDICTED_LIMITS key → limit
    device: Profile
    device_fill: float | None = None


@dataclass
class Rule:
    name: str
    scope: dict[str, tuple[str, ...]]  # empty tuple: any value
    limits: dict[str, float]
    max_regression_pct: float | None = None
    metrics: tuple[str, ...] = DEFAULT_REGRESSION_METRICS
    forbid_findings: tuple[str, ...] = ()
    predicted: PredictedLimits | None = None  # None: the rule has no predicted limit

    def applies_to(self, config: dict) -> bool:
        return all(not allowed or str(config[key]) in allowed for key, allowed in self.scope.items())


@dataclass
class Policy:
    rules: list[Rule]
    allow_lossy_trace: bool = False
    allow_unmeasured: bool = False
    significance_level: float = timing.DEFAULT_SIGNIFICANCE_LEVEL  # largest p at which a timing change is real
    use_emulated_timings: bool = False  # hold timing rules to an emulated CPU's timings too (--use-emulated-timings)

    @property
    def needs_baseline(self) -> bool:
        return any(rule.max_regression_pct is not None for rule in self.rules)


@dataclass(frozen=True)
class Figures:
    """The numbers a check held against each other: the measured value and its limit
    (for a regression, the change in % and the largest allowed), and for a regression
    also its two sides and the significance of a timing change (its p-value). Each is
    None where the check had none; ``sqlwa check --json`` reports them side by side."""

    measured: float | None = None
    limit: float | None = None
    baseline: float | None = None
    current: float | None = None
    p_value: float | None = None


@dataclass
class Finding:
    outcome: str  # pass | violation | unmeasured | not_checked
    rule: str
    config: str
    check: str  # what was checked, e.g. "max_p99_ms"
    figures: Figures = Figures()
    detail: str = ""
    suite: str = ""  # the configuration a run's finding belongs to (config is the run's label)

    def line(self) -> str:
        tag = {"violation": "FAIL", "unmeasured": "NOT MEASURED", "not_checked": "NOT CHECKED", "pass": "ok"}[
            self.outcome
        ]
        if self.detail:
            return f"{tag} {self.config}: {self.check}: {self.detail} [rule: {self.rule}]"
        measured, limit = self.figures.measured, self.figures.limit
        return f"{tag} {self.config}: {self.check} measured {measured:,.3f}, limit {limit:g} [rule: {self.rule}]"


RUN_CHECK = "run"  # a failed run
LOST_EVENTS_CHECK = "trace.lost_events"


@dataclass(frozen=True)
class Checked:
    """What a finding's check is about: its ``kind`` (limit, regression, forbidden_finding,
    run or lost_events), the metric or finding it names (None for a run's own checks) and
    the unit of its measured value and limit (a regression's are the change in %)."""

    kind: str
    name: str | None
    unit: str | None


def checked(check: str) -> Checked:
    """Read a :attr:`Finding.check` as the functions below write it."""
    if check in LIMITS:
        return Checked("limit", LIMITS[check], METRICS[LIMITS[check]].unit)
    if check in PREDICTED_LIMITS:
        return Checked("limit", *PREDICTED_LIMITS[check])
    head, _, name = check.partition(" ")
    if head == "max_regression_pct":
        return Checked("regression", name or None, "%")  # no name: the baseline lacks the configuration
    if head == "forbid_findings":
        return Checked("forbidden_finding", name, "commits")
    if check == LOST_EVENTS_CHECK:
        return Checked("lost_events", None, "events")
    return Checked("run", None, None)


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def failing(self, policy: Policy) -> list[Finding]:
        return [
            f
            for f in self.findings
            if f.outcome == "violation" or (f.outcome == "unmeasured" and not policy.allow_unmeasured)
        ]

    def count(self, outcome: str) -> int:
        return sum(1 for f in self.findings if f.outcome == outcome)


# --------------------------------------------------------------------------- policy


def _scope_values(value, key: str, where: str) -> tuple[str, ...]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise UsageError(f"{where}: {key} must be a string or a list of strings", 'e.g. journal = ["delete", "wal"]')
    return () if "*" in values else tuple(v.lower() if key != "scenario" else v for v in values)


def _number(value, key: str, where: str) -> float:
    # nan would hold every limit (no comparison with it is true), inf none worth stating
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{where}: {key} must be a finite number, not {value!r}", f"e.g. {key} = 10")
    return float(value)


def _metric_names(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: metrics must be a list of metric names", 'e.g. metrics = ["p99_ms"]')
    return tuple(value)


def _name(value, where: str) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{where}: name must be a string, not {value!r}", 'e.g. name = "WAL"')
    return value


def parse_rule(raw: dict, number: int, policy_dir: Path | None = None) -> Rule:
    where = f"rule {number}" + (f" ({raw['name']!r})" if "name" in raw else "")
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise UsageError(f"policy {where}: unknown key {unknown[0]!r}", f"rule keys: {', '.join(sorted(RULE_KEYS))}")
    limits = {key: _number(raw[key], key, f"policy {where}") for key in LIMITS if key in raw}
    limits.update(_corruption_limit(raw, f"policy {where}"))
    predicted = {key: _number(raw[key], key, f"policy {where}") for key in PREDICTED_LIMITS if key in raw}
    regression = raw.get("max_regression_pct")
    forbidden = _finding_names(raw.get("forbid_findings", []), f"policy {where}")
    if not limits and not predicted and regression is None and not forbidden:
        raise UsageError(
            f"policy {where} sets no limit",
            f"add one of: {', '.join([*LIMITS, *PREDICTED_LIMITS, 'max_regression_pct', 'forbid_findings'])}",
        )
    on_device = _rule_device(raw, predicted, f"policy {where}", policy_dir)
    metrics = _metric_names(raw.get("metrics", list(DEFAULT_REGRESSION_METRICS)), f"policy {where}")
    directed = [name for name, metric in METRICS.items() if metric.better is not None]
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise UsageError(f"policy {where}: unknown metric {bad[0]!r}", f"metrics: {', '.join(directed)}")
    undirected = [m for m in metrics if m not in directed]
    if undirected:
        raise UsageError(
            f"policy {where}: {undirected[0]!r} is neither better nor worse when it grows, so it cannot regress",
            f"metrics: {', '.join(directed)}",
        )
    return Rule(
        name=_name(raw.get("name", f"rule {number}"), f"policy {where}"),
        scope={key: _scope_values(raw.get(key, "*"), key, f"policy {where}") for key in SCOPES},
        limits=limits,
        max_regression_pct=None if regression is None else _number(regression, "max_regression_pct", f"policy {where}"),
        metrics=metrics,
        forbid_findings=forbidden,
        predicted=on_device,
    )


def _corruption_limit(raw: dict, where: str) -> dict[str, float]:
    """``forbid_corruption = true``: no crash state of a `sqlwa crash` run may leave a
    corrupt database (``max_corrupt_states = 0``)."""
    value = raw.get("forbid_corruption", False)
    if not isinstance(value, bool):
        raise UsageError(f"{where}: forbid_corruption must be true or false", "e.g. forbid_corruption = true")
    if value and "max_corrupt_states" in raw:
        raise UsageError(f"{where}: forbid_corruption and max_corrupt_states say the same thing", "keep one")
    return {"max_corrupt_states": 0.0} if value else {}


def _rule_device(raw: dict, predicted: dict[str, float], where: str, policy_dir: Path | None) -> PredictedLimits | None:
    """A rule's ``predicted`` limits with the profile they are about: a shipped profile's
    name or a profile file (relative to the policy's directory); None without limits."""
    spec = raw.get("device")
    if not predicted:
        if spec is not None or "device_fill" in raw:
            raise UsageError(f"{where}: device without a predicted limit", f"add one of: {', '.join(PREDICTED_LIMITS)}")
        return None
    if not isinstance(spec, str) or not spec:
        raise UsageError(
            f"{where}: predicted limits need device = a profile", 'e.g. device = "pixel-2016" (sqlwa device list)'
        )
    beside = policy_dir / spec if policy_dir is not None and not Path(spec).is_absolute() else None
    try:
        profile = devices.resolve(str(beside) if beside is not None and beside.exists() else spec)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.args[0]}", exc.args[1] if len(exc.args) > 1 else None) from None
    fill = _number(raw["device_fill"], "device_fill", where) if "device_fill" in raw else None
    return PredictedLimits(predicted, profile, fill)


def _finding_names(value, where: str) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
        raise UsageError(
            f"{where}: forbid_findings must be a list of names", 'e.g. forbid_findings = ["fsync_flushed_nothing"]'
        )
    unknown = [name for name in names if name not in FINDINGS]
    if unknown:
        raise UsageError(f"{where}: unknown finding {unknown[0]!r}", f"findings: {', '.join(FINDINGS)}")
    return tuple(names)


def load_policy(path: Path) -> Policy:
    raw = read_policy(path)
    unknown = sorted(set(raw) - {"options", "rule"})
    if unknown:
        raise UsageError(f"policy {path}: unknown table {unknown[0]!r}", "a policy has [options] and [[rule]] tables")
    options = policy_options(raw.get("options", {}), path)
    rule_tables = raw.get("rule", [])
    if not isinstance(rule_tables, list) or not all(isinstance(rule, dict) for rule in rule_tables):
        raise UsageError(f"policy {path}: rules must be [[rule]] tables", "see examples/policy.toml")
    rules = [parse_rule(rule, n, Path(path).parent) for n, rule in enumerate(rule_tables, start=1)]
    if not rules:
        raise UsageError(f"policy {path} has no [[rule]]", "see examples/policy.toml")
    level = _number(
        options.get("significance_level", timing.DEFAULT_SIGNIFICANCE_LEVEL), "significance_level", f"policy {path}"
    )
    if not 0 < level < 1:
        raise UsageError(f"policy {path}: significance_level must be between 0 and 1, not {level:g}", "e.g. 0.05")
    return Policy(
        rules, bool(options.get("allow_lossy_trace", False)), bool(options.get("allow_unmeasured", False)), level
    )


def read_policy(path: Path) -> dict:
    """The policy file's TOML, read up to :data:`sqlwa.inputs.POLICY_LIMIT`."""
    try:
        return inputs.parse_toml(inputs.read_input(path, "policy", inputs.POLICY_LIMIT))
    except OSError as exc:
        raise UsageError(
            f"cannot read policy {path}: {exc.strerror}", "pass an existing TOML file to --policy"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"policy {path} is not a text file", "pass a TOML file to --policy") from None
    except ValueError as exc:
        raise UsageError(f"policy {path} is not valid TOML: {exc}", "see examples/policy.toml") from None


def policy_options(options: object, path: Path) -> dict[str, object]:
    """[options]: known names, each true or false (significance_level, a number, is
    checked where it is read)."""
    if not isinstance(options, dict):
        raise UsageError(f"policy {path}: options must be a table", "[options] allow_unmeasured = true")
    bad = sorted(set(options) - OPTION_KEYS)
    if bad:
        raise UsageError(f"policy {path}: unknown option {bad[0]!r}", f"options: {', '.join(sorted(OPTION_KEYS))}")
    for key, value in options.items():
        if key != "significance_level" and not isinstance(value, bool):
            raise UsageError(f"policy {path}: option {key} must be true or false, not {value!r}", f"{key} = true")
    return options


def skipped_notes(runs: pl.DataFrame) -> list[str]:
    """One note per reason runs were skipped, naming its configurations: a filesystem the
    machine lacks skips all of its cells for the same reason."""
    groups: dict[str, list[str]] = {}
    for skipped in runs.filter(pl.col("status") == "skipped").iter_rows(named=True) if runs.height else []:
        groups.setdefault(str(skipped["reason"]), []).append(config_label(skipped))
    return [f"skipped {', '.join(labels)}: {reason}" for reason, labels in groups.items()]


# --------------------------------------------------------------------------- checking


def limit_findings(rule: Rule, row: dict, runs: pl.DataFrame, clocks: Clocks | None = None) -> list[Finding]:
    label = config_label(row)
    clocks = clocks or Clocks()
    findings = []
    for key, limit in rule.limits.items():
        metric = LIMITS[key]
        level = METRICS[metric].level
        value = row.get(metric)
        if value is None:
            findings.append(
                Finding(
                    "unmeasured",
                    rule.name,
                    label,
                    key,
                    Figures(limit=limit),
                    detail=(
                        f"needs crash states, which only `sqlwa crash` runs have (limit {limit:g})"
                        if level == "crash"
                        else f"needs the {level} level, which was not measured (limit {limit:g})"
                    ),
                )
            )
        elif METRICS[metric].timing and config_key(row) in clocks.emulated:
            findings.append(emulated_limit(rule, label, key, value, limit, clocks.allowed))
        else:
            outcome = "violation" if value > limit else "pass"
            spread = timing.run_values(runs, config_key(row), metric) if METRICS[metric].timing else None
            # a timing figure of several runs: the pooled value, and how the runs spread
            detail = (
                f"measured {value:,.3f} ({spread.text()}), limit {limit:g}" if spread and len(spread.values) > 1 else ""
            )
            findings.append(Finding(outcome, rule.name, label, key, Figures(value, limit), detail))
    return findings


@dataclass(frozen=True)
class Clocks:
    """The configurations whose timings are an emulated CPU's (this side's, the
    baseline's), and whether the user let such timings be checked."""

    emulated: frozenset[tuple] = frozenset()
    baseline_emulated: frozenset[tuple] = frozenset()
    allowed: bool = False


def clocks_of(runs: pl.DataFrame, baseline_runs: pl.DataFrame, allowed: bool) -> Clocks:
    return Clocks(
        frozenset(emulated.emulated_configs(runs)), frozenset(emulated.emulated_configs(baseline_runs)), allowed
    )


NOT_CHECKED = "not checked: emulated timings (the runs ran on an emulated CPU, TCG: not a device's times)"
EMULATED_CHECKED = f"emulated timings (TCG), checked because {emulated.USE_FLAG} was given"


def emulated_limit(rule: Rule, label: str, key: str, value: float, limit: float, allowed: bool) -> Finding:
    """A timing limit on runs under TCG: not checked, or checked with a mark when asked."""
    if not allowed:
        detail = f"{NOT_CHECKED} (measured {value:,.3f}, limit {limit:g}; {emulated.USE_FLAG} checks it anyway)"
        return Finding("not_checked", rule.name, label, key, Figures(value, limit), detail)
    detail = f"measured {value:,.3f}, limit {limit:g}: {EMULATED_CHECKED}"
    return Finding("violation" if value > limit else "pass", rule.name, label, key, Figures(value, limit), detail)


def predicted_findings(rule: Rule, row: dict, predicted: ConfigPrediction | None) -> list[Finding]:
    """A rule's limits on the configuration's latency predicted on its device: unmeasured
    where the configuration has no lab run to replay."""
    assert rule.predicted is not None, "only a rule with predicted limits has them checked"
    label, device = config_label(row), rule.predicted.device.name
    findings = []
    for key, limit in rule.predicted.limits.items():
        if predicted is None:
            detail = f"needs the block level (a lab run) to predict on {device} (limit {limit:g})"
            findings.append(Finding("unmeasured", rule.name, label, key, Figures(limit=limit), detail=detail))
            continue
        ahead, here = predicted.summary.predicted, predicted.summary.measured
        value, measured_here = {
            "max_predicted_p50_ms": (ahead.p50_ms, here.p50_ms),
            "max_predicted_p99_ms": (ahead.p99_ms, here.p99_ms),
            "max_predicted_frame_budget_miss_pct": (ahead.frame_budget_miss_pct, here.frame_budget_miss_pct),
        }[key]
        findings.append(predicted_finding(rule, label, key, value, measured_here, limit, predicted))
    return findings


def predicted_finding(
    rule: Rule, label: str, key: str, value: float, measured_here: float | None, limit: float, conf: ConfigPrediction
) -> Finding:
    """One predicted limit. A prediction from runs under TCG without their emulated base
    is the device time alone, a lower bound: over the limit it is a violation, under it
    nothing is known (not checked)."""
    assert rule.predicted is not None
    profile, s = rule.predicted.device, conf.summary
    device, figures = profile.name, Figures(value, limit)
    sync = "" if profile.provenance.sync_stated else f"; {device}'s source did not state whether its writes were synced"
    if s.timings_emulated and s.base_source == "none":
        bound = f"predicted on {device} from the device time alone {value:,.3f}, limit {limit:g}{sync}"
        if value > limit:
            detail = f"{bound}: over the limit before any CPU time (the run's own is an emulated CPU's)"
            return Finding("violation", rule.name, label, key, figures, detail)
        detail = f"{NOT_CHECKED}: {bound}, a lower bound ({emulated.USE_FLAG} adds the emulated base)"
        return Finding("not_checked", rule.name, label, key, figures, detail)
    here = "—" if measured_here is None else f"{measured_here:,.3f}"
    mark = f"; {EMULATED_CHECKED}" if s.timings_emulated else ""
    detail = f"predicted on {device} {value:,.3f} (measured here {here}), limit {limit:g}{mark}{sync}"
    return Finding("violation" if value > limit else "pass", rule.name, label, key, figures, detail)


def rule_predictions(
    rule: Rule, runs: pl.DataFrame, cache: dict, use_emulated_timings: bool = False
) -> dict[tuple, ConfigPrediction]:
    """The configurations of ``runs`` predicted on the rule's device, by configuration key
    (once per device and fill level, whichever rules ask)."""
    assert rule.predicted is not None
    profile, fill = rule.predicted.device, rule.predicted.device_fill
    key = (profile.provenance.path or profile.name, fill)
    if key not in cache:
        result = predict_runs(runs, profile, fill, use_emulated_timings=use_emulated_timings)
        cache[key] = {config_key(c.config): c for c in result.configurations}
    return cache[key]


def forbidden_findings(rule: Rule, row: dict, found: ConfigFindings | None) -> list[Finding]:
    """One check per forbidden finding: violated by any commit that has it, and a
    durability finding also by crash states that lost acknowledged commits (they measure
    durability itself: a commit SQLite never synced has no finding, yet is lost)."""
    label = config_label(row)
    checks = []
    for name in rule.forbid_findings:
        check = f"forbid_findings {name}"
        if found is not None and found.crash is not None and found.crash_lost() and name in DURABILITY_FINDINGS:
            said = found.line(name) if found.hits.get(name) else f"in none of {found.commits:,} commits"
            detail = f"{said}; but {found.crash.line()}: the commits were not durable"
            checks.append(Finding("violation", rule.name, label, check, Figures(found.crash.max_lost, 0), detail))
        elif found is None or not found.looked_for(name):
            detail = f"needs the {FINDINGS[name]} level, which was not measured"
            checks.append(Finding("unmeasured", rule.name, label, check, detail=detail))
        elif found.hits.get(name):
            figures = Figures(found.hits[name], 0)
            checks.append(Finding("violation", rule.name, label, check, figures, found.line(name)))
        else:
            none_in = f"in none of {found.commits:,} commits"
            checks.append(Finding("pass", rule.name, label, check, Figures(0, 0), none_in))
    return checks


@dataclass
class Sides:
    """What a check reads besides the rule: both sides' runs (for the per-run values of a
    timing metric), the baseline's configuration means, and the significance level."""

    runs: pl.DataFrame
    baseline_runs: pl.DataFrame
    baseline: dict[tuple, dict]
    significance_level: float = timing.DEFAULT_SIGNIFICANCE_LEVEL
    clocks: Clocks = Clocks()
    # each side's phases per configuration, to compare like with like (results.phasematch)
    phases: dict[tuple, phasematch.PhaseMix] = field(default_factory=dict)
    baseline_phases: dict[tuple, phasematch.PhaseMix] = field(default_factory=dict)


def regression_findings(rule: Rule, row: dict, sides: Sides) -> list[Finding]:
    label = config_label(row)
    base = sides.baseline.get(config_key(row))
    limit = rule.max_regression_pct
    assert limit is not None, "only rules with max_regression_pct compare against a baseline"
    if base is None:
        return [
            Finding(
                "unmeasured",
                rule.name,
                label,
                "max_regression_pct",
                Figures(limit=limit),
                detail="configuration absent from the baseline",
            )
        ]
    findings = []
    key = config_key(row)
    for metric in rule.metrics:
        check = f"max_regression_pct {metric}"
        now, before = row.get(metric), base.get(metric)
        matched = phasematch.match(metric, sides.baseline_phases.get(key), sides.phases.get(key))
        if matched.refused and now is not None and before is not None:
            findings.append(
                Finding(
                    "unmeasured",
                    rule.name,
                    label,
                    check,
                    Figures(limit=limit, baseline=before, current=now),
                    detail=matched.why,
                )
            )
            continue
        if matched.phase is not None:  # runs of other lengths: the figure within a phase both had
            now, before = matched.b, matched.a
        if now is None or before is None:
            findings.append(
                Finding(
                    "unmeasured",
                    rule.name,
                    label,
                    check,
                    Figures(limit=limit, baseline=before, current=now),
                    detail=f"{METRICS[metric].level} level not measured in "
                    f"{'this run' if now is None else 'the baseline'}",
                )
            )
            continue
        pct = regression_pct(now, before)
        # a regression is a change for the worse: growth of a cost, a fall of a "higher is better" figure
        higher_is_better = METRICS[metric].better == "higher"
        worse_pct = -pct if higher_is_better else pct
        detail = f"{before:,.3f} → {now:,.3f} = {pct:+.1f}%, limit {'-' if higher_is_better else '+'}{limit:g}%"
        if matched.phase is not None:
            detail = f"in {PHASE_LABELS[matched.phase]}, the phase both runs had: {detail}"
        p_value = None
        key = config_key(row)
        either_emulated = key in sides.clocks.emulated or key in sides.clocks.baseline_emulated
        if METRICS[metric].timing and either_emulated and not sides.clocks.allowed:
            outcome, detail = "not_checked", f"{NOT_CHECKED} ({detail}; {emulated.USE_FLAG} checks it anyway)"
        elif METRICS[metric].timing:
            if either_emulated:
                detail += f"; {EMULATED_CHECKED}"
            outcome, detail, p_value = timing_verdict(worse_pct > limit, detail, metric, config_key(row), sides)
        else:  # a count is the same in every run: an exact rule
            outcome = "violation" if worse_pct > limit else "pass"
        figures = Figures(pct, limit, baseline=before, current=now, p_value=p_value)
        findings.append(Finding(outcome, rule.name, label, check, figures, detail))
    return findings


def timing_verdict(beyond_limit: bool, detail: str, metric: str, key: tuple, sides: Sides) -> tuple[str, str, float]:
    """A timing change beyond the limit is a regression only when it is significant: the
    new runs' values are larger than the baseline's by the Mann–Whitney U test. The
    outcome, its detail and the test's p-value."""
    new = timing.run_values(sides.runs, key, metric)
    old = timing.run_values(sides.baseline_runs, key, metric)
    worse_when_higher = METRICS[metric].better != "higher"
    sig = timing.slower(new, old) if worse_when_higher else timing.slower(old, new)
    level = sides.significance_level
    detail += f"; now {new.text()}, before {old.text()}; {sig.text()}"
    detail += shared_host_note(sides, key)
    if not beyond_limit:
        return "pass", detail, sig.p
    if sig.too_few(level):
        runs = timing.runs_needed(level)
        advice = (
            f"too few runs: {sig.new_runs} vs {sig.old_runs}; need {runs} vs {runs} (Mann–Whitney U's smallest "
            f"two-sided p with {sig.new_runs} vs {sig.old_runs} is {sig.smallest_two_sided_p:.3g}, above {level:g}): "
            f"measure both with --repeat {runs} or more"
        )
        return "unmeasured", f"{detail}; {advice}", sig.p
    if sig.p <= level:
        return "violation", f"{detail} ≤ {level:g}: significant (confidence {1 - sig.p:.1%})", sig.p
    return "pass", f"{detail} > {level:g}: not significant, so not called a regression", sig.p


def shared_host_note(sides: Sides, key: tuple) -> str:
    """'; 3 of 5 runs now shared the host …' where runs of either side measured beside
    other sqlwa runs on their host (their timings are a shared machine's); else ''."""
    parts = []
    for name, runs in (("now", sides.runs), ("before", sides.baseline_runs)):
        shared, known = timing.shared_runs(runs).get(key, (0, 0))
        if shared:
            parts.append(f"{shared} of {known} runs {name}")
    if not parts:
        return ""
    return f"; {' and '.join(parts)} measured beside other sqlwa runs on their host (timings of a shared machine)"


def regression_pct(now: float, before: float) -> float:
    if before == 0:
        return 0.0 if now == 0 else float("inf")
    return (now - before) / before * 100


def run_problems(runs: pl.DataFrame, policy: Policy) -> list[Finding]:
    """Lossy traces and failed runs: a gate must not pass a broken measurement."""
    findings = []
    for row in runs.iter_rows(named=True):
        label, suite = run_label(row), config_label(row)
        lost = row.get("lost_events") or 0
        if row["status"] == "failed":
            detail = f"failed: {row['reason']}"
            findings.append(Finding("violation", "run must succeed", label, RUN_CHECK, detail=detail, suite=suite))
        elif lost > 0 and not policy.allow_lossy_trace:
            detail = f"the trace lost {lost:,} events (policy does not allow loss)"
            findings.append(
                Finding("violation", "lossless trace", label, LOST_EVENTS_CHECK, Figures(lost, 0), detail, suite=suite)
            )
    return findings


def check(
    policy: Policy,
    runs: pl.DataFrame,
    baseline_runs: pl.DataFrame | None = None,
    latencies: pl.DataFrame | None = None,
    baseline_latencies: pl.DataFrame | None = None,
) -> CheckResult:
    """Hold ``runs`` to ``policy``; ``latencies`` (store.load_latencies) make the latency
    quantiles of a configuration those of its commits pooled over its repeats."""
    result = CheckResult(findings=run_problems(runs, policy))
    configs = list(store.config_means(runs, latencies).iter_rows(named=True))
    before = pl.DataFrame() if baseline_runs is None else baseline_runs
    baseline = {config_key(r): r for r in store.config_means(before, baseline_latencies).iter_rows(named=True)}
    clocks = clocks_of(runs, before, policy.use_emulated_timings)
    sides = Sides(
        runs,
        before,
        baseline,
        policy.significance_level,
        clocks,
        phasematch.config_mixes(runs),
        phasematch.config_mixes(before),
    )
    result.notes += skipped_notes(runs)
    found = config_findings(runs)
    unmatched = []
    predictions: dict = {}
    for rule in policy.rules:
        matched = [row for row in configs if rule.applies_to(row)]
        if not matched:
            unmatched.append(f"rule {rule.name!r} matches no measured configuration ({scope_miss(rule, configs)})")
        predicted = (
            rule_predictions(rule, runs, predictions, policy.use_emulated_timings)
            if matched and rule.predicted is not None
            else {}
        )
        for row in matched:
            result.findings.extend(limit_findings(rule, row, runs, clocks))
            if rule.predicted is not None:
                result.findings.extend(predicted_findings(rule, row, predicted.get(config_key(row))))
            result.findings.extend(forbidden_findings(rule, row, found.get(config_key(row))))
            if rule.max_regression_pct is not None:
                result.findings.extend(regression_findings(rule, row, sides))
    if not result.findings:
        # A gate that checked nothing must not pass (pytest exits 5 when it collects no test).
        raise UsageError(
            f"no rule checked anything: {'; '.join(unmatched)}",
            "scope the policy's rules to configurations the results hold, or pass the results they are for",
        )
    if all(f.outcome == "not_checked" for f in result.findings):
        raise UsageError(
            "no rule checked anything: every check was of timings an emulated CPU (TCG) measured",
            f"measure where the VM runs under KVM (or without --vm), or pass {emulated.USE_FLAG}",
        )
    result.notes.extend(unmatched)
    return result


def scope_miss(rule: Rule, configs: list[dict]) -> str:
    """What in a rule's scope the configurations do not hold, e.g. 'fs = ext5; the results have fs ext4'."""
    missing = [
        key for key, allowed in rule.scope.items() if allowed and not any(str(c[key]) in allowed for c in configs)
    ]
    if not configs:
        return "the results hold no successful run"
    if not missing:
        asked = " and ".join(f"{key} = {'/'.join(allowed)}" for key, allowed in rule.scope.items() if allowed)
        return f"no configuration has {asked} together"
    asked = ", ".join(f"{key} = {'/'.join(rule.scope[key])}" for key in missing)
    have = ", ".join(f"{key} {'/'.join(dict.fromkeys(str(c[key]) for c in configs))}" for key in missing)
    return f"{asked}; the results have {have}"
