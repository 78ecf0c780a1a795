"""``sqlwa check --junit``: the outcome as JUnit XML for CI systems.

One ``<testsuite>`` per configuration, named by its label: one ``<testcase>`` per check
of a rule (a failure carries the check's line; a check whose level was not measured is
skipped unless the policy fails it), one per failed run, and one skipped case per
matrix cell that could not run here (a filesystem this kernel lacks). A suite's ``time``
is the seconds spent measuring the configuration (its runs' start to finish, as the store
records them; a lone run directory records none: 0), shared evenly by its cases so that
they add up to it. The measured value of every case is a ``<property>`` of its suite
named as the case, and a passing case carries its line as ``<system-out>``; the
published JUnit schemas (Jenkins xunit's junit-10.xsd, which pytest's xunit2 output
follows, and Maven Surefire's) allow properties in a suite, not in a case.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

import polars as pl

from sqlwa.catalogue import config_label
from sqlwa.results.check import CheckResult, Finding, Policy


@dataclass
class Case:
    name: str
    outcome: str  # pass | failure | skipped
    line: str
    measured: float | None = None


@dataclass
class Suite:
    name: str
    seconds: float = 0.0
    cases: list[Case] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for case in self.cases if case.outcome == outcome)


def run_seconds(row: dict) -> float:
    started, finished = row.get("started_at"), row.get("finished_at")
    return max(finished - started, 0.0) if started is not None and finished is not None else 0.0


def case_of(finding: Finding, failing: set[int]) -> Case:
    outcome = (
        "failure"
        if id(finding) in failing
        else "skipped"
        if finding.outcome in ("unmeasured", "not_checked")
        else "pass"
    )
    return Case(f"{finding.rule}: {finding.check}", outcome, finding.line(), finding.figures.measured)


def suites(result: CheckResult, policy: Policy, runs: pl.DataFrame) -> list[Suite]:
    """The configurations in the order they were checked, then those that only skipped."""
    failing = {id(f) for f in result.failing(policy)}
    by_name: dict[str, Suite] = {}
    for finding in result.findings:
        name = finding.suite or finding.config
        by_name.setdefault(name, Suite(name)).cases.append(case_of(finding, failing))
    seconds: dict[str, float] = defaultdict(float)
    for row in runs.iter_rows(named=True) if runs.height else []:
        name = config_label(row)
        seconds[name] += run_seconds(row)
        if row["status"] == "skipped":
            line = f"skipped {name}: {row['reason']}"
            by_name.setdefault(name, Suite(name)).cases.append(Case("measure", "skipped", line))
    for suite in by_name.values():
        suite.seconds = seconds[suite.name]
    return list(by_name.values())


def add_suite(parent: ET.Element, suite: Suite) -> None:
    element = ET.SubElement(
        parent,
        "testsuite",
        name=suite.name,
        tests=str(len(suite.cases)),
        failures=str(suite.count("failure")),
        errors="0",
        skipped=str(suite.count("skipped")),
        time=f"{suite.seconds:.3f}",
    )
    measured = [case for case in suite.cases if case.measured is not None]
    if measured:
        properties = ET.SubElement(element, "properties")
        for case in measured:
            ET.SubElement(properties, "property", name=case.name, value=f"{case.measured:.6g}")
    share = suite.seconds / len(suite.cases) if suite.cases else 0.0
    for case in suite.cases:
        testcase = ET.SubElement(element, "testcase", classname=suite.name, name=case.name, time=f"{share:.3f}")
        if case.outcome == "failure":
            ET.SubElement(testcase, "failure", message=case.line, type="violation").text = case.line
        elif case.outcome == "skipped":
            ET.SubElement(testcase, "skipped", message=case.line)
        else:
            ET.SubElement(testcase, "system-out").text = case.line


def junit_xml(result: CheckResult, policy: Policy, runs: pl.DataFrame) -> str:
    found = suites(result, policy, runs)
    root = ET.Element(
        "testsuites",
        name="sqlwa check",
        tests=str(sum(len(s.cases) for s in found)),
        failures=str(sum(s.count("failure") for s in found)),
        errors="0",
        time=f"{sum(s.seconds for s in found):.3f}",
    )
    for suite in found:
        add_suite(root, suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
