"""``sqlwa check``: a policy of limits held against measured results (a regression gate).

A policy is TOML (see ``examples/policy.toml``)::

    [options]
    allow_lossy_trace = false   # a run whose trace lost events is a violation
    allow_unmeasured = false    # a rule about a level that was not measured is a violation

    [[rule]]
    name = "durable journal modes"
    journal = ["delete", "truncate", "persist"]   # scope: scenario, fs, journal, sync;
    sync = "full"                                 # a string, a list, or "*" (default)
    max_fsync_calls_per_commit = 4
    max_write_kib_per_commit = 96

    [[rule]]
    max_regression_pct = 10                       # against --baseline, per configuration
    metrics = ["write_kib_per_commit", "p99_ms"]  # default: DEFAULT_REGRESSION_METRICS

Every rule is held against every configuration (scenario, fs, journal, sync) in its
scope, using the mean over the configuration's repeats. Each outcome is one
:class:`Finding`: ``pass``, ``violation`` or ``unmeasured`` (the level the rule needs
was not captured — reported, never passed silently).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree as ET

import polars as pl

from sqlwa.catalogue import CONFIG_KEYS, METRICS, config_key, config_label, run_label
from sqlwa.errors import UsageError
from sqlwa.results import store

# The catalogue metrics a rule may cap, each as ``max_<metric>``.
LIMIT_METRICS = (
    "fsync_calls_per_commit",
    "write_kib_per_commit",
    "p99_ms",
    "frame_budget_misses",
    "frame_budget_miss_pct",
    "block_over_logical",
)
LIMITS = {f"max_{metric}": metric for metric in LIMIT_METRICS}  # rule key → metric
SCOPES = CONFIG_KEYS  # a rule is scoped by the configuration keys
RULE_KEYS = {"name", "max_regression_pct", "metrics", *SCOPES, *LIMITS}
OPTION_KEYS = {"allow_lossy_trace", "allow_unmeasured"}
DEFAULT_REGRESSION_METRICS = ("fsync_calls_per_commit", "write_kib_per_commit", "flushes_per_commit", "p99_ms")


@dataclass
class Rule:
    name: str
    scope: dict[str, tuple[str, ...]]  # empty tuple: any value
    limits: dict[str, float]
    max_regression_pct: float | None = None
    metrics: tuple[str, ...] = DEFAULT_REGRESSION_METRICS

    def applies_to(self, config: dict) -> bool:
        return all(not allowed or str(config[key]) in allowed for key, allowed in self.scope.items())


@dataclass
class Policy:
    rules: list[Rule]
    allow_lossy_trace: bool = False
    allow_unmeasured: bool = False

    @property
    def needs_baseline(self) -> bool:
        return any(rule.max_regression_pct is not None for rule in self.rules)


@dataclass
class Finding:
    outcome: str  # pass | violation | unmeasured
    rule: str
    config: str
    check: str  # what was checked, e.g. "max_p99_ms"
    measured: float | None = None
    limit: float | None = None
    detail: str = ""

    def line(self) -> str:
        tag = {"violation": "FAIL", "unmeasured": "NOT MEASURED", "pass": "ok"}[self.outcome]
        if self.detail:
            return f"{tag} {self.config}: {self.check}: {self.detail} [rule: {self.rule}]"
        return (
            f"{tag} {self.config}: {self.check} measured {self.measured:,.3f}, limit {self.limit:g} [rule: {self.rule}]"
        )


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


def parse_rule(raw: dict, number: int) -> Rule:
    where = f"rule {number}" + (f" ({raw['name']!r})" if "name" in raw else "")
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise UsageError(f"policy {where}: unknown key {unknown[0]!r}", f"rule keys: {', '.join(sorted(RULE_KEYS))}")
    limits = {key: _number(raw[key], key, f"policy {where}") for key in LIMITS if key in raw}
    regression = raw.get("max_regression_pct")
    if not limits and regression is None:
        raise UsageError(f"policy {where} sets no limit", f"add one of: {', '.join([*LIMITS, 'max_regression_pct'])}")
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
    )


MAX_POLICY_BYTES = 1 << 20  # a policy is a page of rules; /dev/zero as one would never end


def load_policy(path: Path) -> Policy:
    raw = read_policy(path)
    unknown = sorted(set(raw) - {"options", "rule"})
    if unknown:
        raise UsageError(f"policy {path}: unknown table {unknown[0]!r}", "a policy has [options] and [[rule]] tables")
    options = policy_options(raw.get("options", {}), path)
    rule_tables = raw.get("rule", [])
    if not isinstance(rule_tables, list) or not all(isinstance(rule, dict) for rule in rule_tables):
        raise UsageError(f"policy {path}: rules must be [[rule]] tables", "see examples/policy.toml")
    rules = [parse_rule(rule, n) for n, rule in enumerate(rule_tables, start=1)]
    if not rules:
        raise UsageError(f"policy {path} has no [[rule]]", "see examples/policy.toml")
    return Policy(rules, options.get("allow_lossy_trace", False), options.get("allow_unmeasured", False))


def read_policy(path: Path) -> dict:
    """The policy file's TOML, read up to :data:`MAX_POLICY_BYTES`."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_POLICY_BYTES + 1)
        if len(data) > MAX_POLICY_BYTES:
            raise UsageError(f"policy {path} is larger than 1 MiB: not a policy", "pass a TOML file to --policy")
        return tomllib.loads(data.decode())
    except OSError as exc:
        raise UsageError(
            f"cannot read policy {path}: {exc.strerror}", "pass an existing TOML file to --policy"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"policy {path} is not a text file", "pass a TOML file to --policy") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"policy {path} is not valid TOML: {exc}", "see examples/policy.toml") from None


def policy_options(options: object, path: Path) -> dict[str, bool]:
    """[options]: known names, each true or false."""
    if not isinstance(options, dict):
        raise UsageError(f"policy {path}: options must be a table", "[options] allow_unmeasured = true")
    bad = sorted(set(options) - OPTION_KEYS)
    if bad:
        raise UsageError(f"policy {path}: unknown option {bad[0]!r}", f"options: {', '.join(sorted(OPTION_KEYS))}")
    for key, value in options.items():
        if not isinstance(value, bool):
            raise UsageError(f"policy {path}: option {key} must be true or false, not {value!r}", f"{key} = true")
    return options


# --------------------------------------------------------------------------- checking


def limit_findings(rule: Rule, row: dict) -> list[Finding]:
    label = config_label(row)
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
                    limit=limit,
                    detail=f"needs the {level} level, which was not measured (limit {limit:g})",
                )
            )
        else:
            findings.append(Finding("violation" if value > limit else "pass", rule.name, label, key, value, limit))
    return findings


def regression_findings(rule: Rule, row: dict, baseline: dict[tuple, dict]) -> list[Finding]:
    label = config_label(row)
    base = baseline.get(config_key(row))
    limit = rule.max_regression_pct
    assert limit is not None, "only rules with max_regression_pct compare against a baseline"
    if base is None:
        return [
            Finding(
                "unmeasured",
                rule.name,
                label,
                "max_regression_pct",
                limit=limit,
                detail="configuration absent from the baseline",
            )
        ]
    findings = []
    for metric in rule.metrics:
        check = f"max_regression_pct {metric}"
        now, before = row.get(metric), base.get(metric)
        if now is None or before is None:
            findings.append(
                Finding(
                    "unmeasured",
                    rule.name,
                    label,
                    check,
                    limit=limit,
                    detail=f"{METRICS[metric].level} level not measured in "
                    f"{'this run' if now is None else 'the baseline'}",
                )
            )
            continue
        pct = regression_pct(now, before)
        # a regression is a change for the worse: growth of a cost, a fall of a "higher is better" figure
        higher_is_better = METRICS[metric].better == "higher"
        worse_pct = -pct if higher_is_better else pct
        outcome = "violation" if worse_pct > limit else "pass"
        findings.append(
            Finding(
                outcome,
                rule.name,
                label,
                check,
                pct,
                limit,
                detail=f"{before:,.3f} → {now:,.3f} = {pct:+.1f}%, limit {'-' if higher_is_better else '+'}{limit:g}%",
            )
        )
    return findings


def regression_pct(now: float, before: float) -> float:
    if before == 0:
        return 0.0 if now == 0 else float("inf")
    return (now - before) / before * 100


def run_problems(runs: pl.DataFrame, policy: Policy) -> list[Finding]:
    """Lossy traces and failed runs: a gate must not pass a broken measurement."""
    findings = []
    for row in runs.iter_rows(named=True):
        label = run_label(row)
        lost = row.get("lost_events") or 0
        if row["status"] == "failed":
            findings.append(Finding("violation", "run must succeed", label, "run", detail=f"failed: {row['reason']}"))
        elif lost > 0 and not policy.allow_lossy_trace:
            findings.append(
                Finding(
                    "violation",
                    "lossless trace",
                    label,
                    "trace.lost_events",
                    lost,
                    0,
                    detail=f"the trace lost {lost:,} events (policy does not allow loss)",
                )
            )
    return findings


def check(policy: Policy, runs: pl.DataFrame, baseline_runs: pl.DataFrame | None = None) -> CheckResult:
    result = CheckResult(findings=run_problems(runs, policy))
    configs = list(store.config_means(runs).iter_rows(named=True))
    baseline = (
        {}
        if baseline_runs is None
        else {config_key(r): r for r in store.config_means(baseline_runs).iter_rows(named=True)}
    )
    for skipped in runs.filter(pl.col("status") == "skipped").iter_rows(named=True) if runs.height else []:
        result.notes.append(f"skipped {config_label(skipped)}: {skipped['reason']}")
    for rule in policy.rules:
        matched = [row for row in configs if rule.applies_to(row)]
        if not matched:
            result.notes.append(f"rule {rule.name!r} matches no measured configuration")
        for row in matched:
            result.findings.extend(limit_findings(rule, row))
            if rule.max_regression_pct is not None:
                result.findings.extend(regression_findings(rule, row, baseline))
    return result


# --------------------------------------------------------------------------- JUnit


def junit_xml(result: CheckResult, policy: Policy) -> str:
    """One test case per (rule, configuration, check); failures carry the line."""
    failing = {id(f) for f in result.failing(policy)}
    suite = ET.Element(
        "testsuite",
        name="sqlwa check",
        tests=str(len(result.findings)),
        failures=str(len(failing)),
        skipped=str(len([f for f in result.findings if f.outcome == "unmeasured" and id(f) not in failing])),
    )
    for finding in result.findings:
        case = ET.SubElement(suite, "testcase", classname=finding.config, name=f"{finding.rule}: {finding.check}")
        if id(finding) in failing:
            ET.SubElement(case, "failure", message=finding.line(), type=finding.outcome).text = finding.line()
        elif finding.outcome == "unmeasured":
            ET.SubElement(case, "skipped", message=finding.line())
    suites = ET.Element("testsuites")
    suites.append(suite)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
