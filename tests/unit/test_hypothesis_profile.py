"""The tests' hypothesis profile (tests/conftest.py): two runs draw the same examples, so CI
can only draw what the last local run drew; the "explore" profile draws fresh ones.

The examples drawn are read from hypothesis' own record of them (its observability
output: one JSON line per test case, with the case's representation), not from anything
the test under run reports. The run under test is a real module of the suite, so the
check is of the profile the suite actually gets from conftest.py, in a fresh pytest
process, as CI starts one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import REPO

# A property test of the suite whose examples are cheap (about a second for its 150).
PROBE = "tests/unit/test_quantiles.py::test_figures_are_polars_figures_of_the_whole_column"


def drawn_examples(storage: Path, *pytest_args: str) -> list[str]:
    """The representations of the test cases a fresh pytest process ran for :data:`PROBE`,
    in the order it ran them, with hypothesis' files kept in ``storage``."""
    env = {
        **os.environ,
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY": "1",
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1",
        "HYPOTHESIS_STORAGE_DIRECTORY": str(storage),
    }
    env.pop("CI", None)  # a local run: hypothesis would load its own "ci" profile where CI is set
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", PROBE, *pytest_args],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    lines = [json.loads(line) for f in sorted((storage / "observed").glob("*_testcases.jsonl")) for line in f.open()]
    cases = [line["representation"] for line in lines if line.get("type") == "test_case"]
    assert len(cases) >= 100, f"hypothesis recorded only {len(cases)} test cases"
    return cases


def test_two_runs_draw_the_same_examples(tmp_path):
    assert drawn_examples(tmp_path / "first") == drawn_examples(tmp_path / "second")


def test_the_explore_profile_draws_fresh_examples(tmp_path):
    first = drawn_examples(tmp_path / "first", "--hypothesis-profile", "explore")
    second = drawn_examples(tmp_path / "second", "--hypothesis-profile", "explore")
    assert first != second
