"""``sqlwa check``: hold measured results against a policy; exit 0 / 1 / 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sqlwa import outputs
from sqlwa.errors import UsageError
from sqlwa.outputs import allow_system_option

if TYPE_CHECKING:  # imported where a check runs: `sqlwa check --help` needs none of them
    import polars as pl

    from sqlwa.results import check as checking


@click.command("check")
@click.option(
    "-p",
    "--policy",
    "policy_path",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Policy TOML: [[rule]] tables with limits and scopes (see examples/policy.toml).",
)
@click.argument("results", type=click.Path(path_type=Path))
@click.option(
    "-b",
    "--baseline",
    type=click.Path(path_type=Path),
    help="Results to compare against for max_regression_pct rules (a matrix or run directory).",
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the outcome as JUnit XML: a suite per configuration (time: seconds measuring it), a case per "
    "rule x limit, skipped cells as skipped cases, measured values as the suite's properties.",
)
@click.option("-v", "--verbose", is_flag=True, help="Also print the checks that passed.")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Check a partial matrix (a sweep stopped before all its cells ran) or partial run (one a signal "
    "stopped, its measured commits kept) without failing for it.",
)
@click.option(
    "--use-emulated-timings",
    is_flag=True,
    help="Hold timing rules (latency, frame misses, CPU time, predicted latency) to runs whose clock is an "
    "emulated CPU's (a --vm run under TCG) too; without it such checks are reported as not checked.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the outcome as JSON instead of the lines (the exit status stays): passed, counts, the rules, "
    "every check with its configuration, metric, unit, measured value, limit, outcome and whether it fails, "
    "and the notes.",
)
@allow_system_option
def check_command(
    policy_path, results, baseline, junit_path, verbose, use_emulated_timings, as_json, allow_partial, allow_system_dir
):
    """Check a matrix (or one run) against a policy of limits: a regression gate for CI.

    \b
    Examples:
      sqlwa check --policy examples/policy.toml m1
      sqlwa check --policy examples/policy.toml m2 --baseline m1 --junit check.xml
      sqlwa check -p policy.toml sqlwa-out/mobibench-insert-wal-full-...    # one run dir

    \b
    Rules (each scoped by scenario, fs, encrypt, fuse, profile, crypt, journal, sync; means over
    repeats, latency quantiles over the repeats' commits pooled):
      max_fsync_calls_per_commit   syscall level: fsync + fdatasync + sync_file_range
      max_flushes_per_commit       block level: device cache flushes per commit
      max_write_kib_per_commit     block level: KiB written per commit, writeback included
      max_p50_ms                   commit latency p50 (median)
      max_p99_ms                   commit latency p99
      max_frame_budget_misses      commits slower than one 60 Hz frame (16.67 ms), a count
      max_frame_budget_miss_pct    the same as a share of the measured commits, %
      max_block_over_logical       block bytes / logical bytes (whole-stack amplification)
      max_predicted_p50_ms         commit latency predicted on the rule's `device`
      max_predicted_p99_ms           (a shipped profile's name or a profile file,
      max_predicted_frame_budget_miss_pct   see `sqlwa device list`; `device_fill`
                                   picks its fill level): as `sqlwa predict` shows it
      max_regression_pct           vs --baseline, for the rule's `metrics`
      forbid_findings              consistency findings no commit may have, e.g.
                                   ["fsync_flushed_nothing"] (an fsync that flushed nothing)

    Prints one line per violation (configuration, measured, limit). A run whose trace
    lost events fails unless [options] allow_lossy_trace = true; a rule about a level
    that was not measured is reported NOT MEASURED and fails unless allow_unmeasured = true.
    A timing metric (latency, frame-budget misses) regresses only when the change is past
    the limit and significant: one-sided Mann–Whitney U over the runs' values, p at most
    [options] significance_level (default 0.05), with enough runs that the verdict does
    not rest on one ordering of them (4 a side at 0.05; fewer: "too few runs", NOT
    MEASURED); the line shows each side's mean ± sd (min … max) over its runs, p, and
    the runs that measured beside other sqlwa runs on their host. Counts are exact rules. A partial matrix (its sweep
    stopped before every cell ran: finish it with `sqlwa matrix ... --resume`) or a partial
    run (Ctrl-C kept the commits measured before it) fails unless --allow-partial.
    Exit status: 0 every rule holds, 1 a violation or a partial matrix or run, 2 a usage error
    (also: no rule matched anything to check).
    """
    from sqlwa.results import check as checking
    from sqlwa.results import junit, store
    from sqlwa.views import json_output

    # Said before the checks run and print, not after (as the write would).
    junit_target = (
        None
        if junit_path is None
        else outputs.check_file(
            junit_path,
            "--junit",
            allow_system=allow_system_dir,
            reads=(policy_path, results, *filter(None, [baseline])),
        )
    )
    policy = checking.load_policy(policy_path)
    policy.use_emulated_timings = use_emulated_timings
    runs = store.load_results(results)
    result = run_checks(policy, runs, results, baseline)
    partial = store.partial_of(results)
    failing = result.failing(policy)
    if junit_target is not None:
        # Before the outcome is printed: a report that cannot be written is then the one
        # error said, with nothing (no half of a JSON document) before it on stdout.
        outputs.write_file(junit_target, junit.junit_xml(result, policy, runs), "the JUnit report")
    if as_json:
        sources = {"policy": policy_path, "results": results, "baseline": baseline}
        document = json_output.check_document(result, policy, runs, sources)
        document["partial"] = json_output.partial_entry(partial)
        document["passed"] = document["passed"] and (partial is None or allow_partial)
        click.echo(json_output.dumps(document))
    else:
        print_lines(result, failing, verbose)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if partial is not None:
        allowed = " (allowed: --allow-partial)" if allow_partial else ": it fails the check unless --allow-partial"
        click.echo(f"{results} is a {partial}{allowed}", err=True)
    click.echo(counts_line(result, policy), err=True)
    sys.exit(1 if failing or (partial is not None and not allow_partial) else 0)


def run_checks(
    policy: checking.Policy, runs: pl.DataFrame, results: Path, baseline: Path | None
) -> checking.CheckResult:
    """Hold the results (and the baseline, for regression rules) to the policy."""
    from sqlwa.results import check as checking
    from sqlwa.results import store

    if policy.needs_baseline and baseline is None:
        raise UsageError(
            "the policy has max_regression_pct rules but no --baseline was given",
            "pass --baseline DIR (an earlier matrix or run directory)",
        )
    baseline_runs = store.load_results(baseline) if baseline is not None else None
    baseline_latencies = store.load_latencies(baseline) if baseline is not None else None
    return checking.check(policy, runs, baseline_runs, store.load_latencies(results), baseline_latencies)


def counts_line(result: checking.CheckResult, policy: checking.Policy) -> str:
    allowed = " (allowed)" if policy.allow_unmeasured and result.count("unmeasured") else ""
    return (
        f"{len(result.findings)} checks: {result.count('pass')} passed, {result.count('violation')} violated, "
        f"{result.count('unmeasured')} not measured{allowed}"
        + (f", {result.count('not_checked')} not checked (emulated timings)" if result.count("not_checked") else "")
    )


def print_lines(result: checking.CheckResult, failing: list[checking.Finding], verbose: bool) -> None:
    """A line per failing or unmeasured check (every check with ``verbose``)."""
    for finding in result.findings:
        if finding in failing or finding.outcome in ("unmeasured", "not_checked") or verbose:
            click.echo(finding.line())
