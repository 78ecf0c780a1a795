"""summary.json's schema (sqlwa.analysis.schema): its check names what departs from it,
it agrees with the code whose keys it types, and the stored sample runs are of it.
Real runs of every kind are checked against it in tests/e2e and tests/lab
(test_summary_schema*.py)."""

from __future__ import annotations

import copy
import json
from typing import get_type_hints

import pytest

from helpers import REPO
from sqlwa import catalogue
from sqlwa.analysis import closing, metrics, phases, schema, summary

SAMPLES = sorted((REPO / "traces" / "samples" / "sqlwa-runs").glob("*/summary.json"))


@pytest.fixture(scope="module")
def sample() -> dict:
    return json.loads(SAMPLES[0].read_text())


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.parent.name)
def test_the_stored_sample_runs_are_of_the_schema(path) -> None:
    assert schema.check_summary(json.loads(path.read_text())) == []


def test_there_are_sample_runs_to_check() -> None:
    assert len(SAMPLES) >= 2


def test_a_missing_an_unknown_and_a_mistyped_key_are_each_named(sample: dict) -> None:
    bad = copy.deepcopy(sample)
    del bad["commits"]
    bad["per_commit"]["fsync_calls"] = "1.0"
    bad["config"]["lab"]["dev"] = 8
    bad["latency_ms"]["p95"] = 1.0
    bad["levels"].append(None)
    bad["findings"] = [{"check": "x", "what": "y", "commits": 1, "share": 0.5, "examples": [1, "2"]}]
    assert sorted(schema.check_summary(bad)) == sorted(
        [
            "summary.commits: missing",
            "summary.per_commit.fsync_calls: a string, not number",
            "summary.config.lab.dev: an integer, not string or null",
            "summary.latency_ms.p95: a key LatencyMs does not have",
            f"summary.levels[{len(sample['levels'])}]: null, not string",
            "summary.findings[0].examples[1]: a string, not integer",
        ]
    )


def test_a_section_of_another_shape_is_named_by_its_own_keys(sample: dict) -> None:
    bad = copy.deepcopy(sample)
    bad["config"]["lab"]["encryption"] = {"mode": "fscrypt"}  # an FsEncryption or null
    bad["waf"] = [1.0]
    problems = schema.check_summary(bad)
    assert "summary.config.lab.encryption.what: missing" in problems
    assert "summary.waf: a list, not an object (Waf)" in problems
    assert schema.check_summary([]) == ["summary: a list, not an object (Summary)"]


def test_numbers_are_json_numbers_and_booleans_are_not() -> None:
    assert schema.is_a(3, float) and schema.is_a(3.5, float)
    assert not schema.is_a(True, int) and not schema.is_a(True, float) and schema.is_a(False, bool)
    assert not schema.is_a(3.0, int)


def test_every_key_of_every_section_has_its_line() -> None:
    undocumented = [f"{cls.__name__}.{f.name}" for cls in schema.sections() for f in schema.fields(cls) if not f.doc]
    assert undocumented == []


def test_the_per_commit_keys_are_the_catalogues_columns() -> None:
    columns = {
        *catalogue.VFS_COMMIT_COLUMNS,
        *catalogue.CPU_COMMIT_COLUMNS,
        *catalogue.SYSCALL_COMMIT_COLUMNS,
        *catalogue.FUSE_SYSCALL_COMMIT_COLUMNS,
        *catalogue.BLOCK_COMMIT_COLUMNS,
        "amortized_write_bytes",
    }
    assert set(get_type_hints(schema.PerCommit)) == columns
    assert schema.PerCommit.__required_keys__ == set(catalogue.VFS_COMMIT_COLUMNS)


def test_the_sections_keys_are_those_their_writers_use() -> None:
    assert {f.name for f in schema.fields(schema.LatencyMs)} == {*metrics.LATENCY_QUANTILES, "max"}
    assert (
        {f.name for f in schema.fields(schema.VfsKindFigures)} == set(summary.KIND_FIELDS) == set(closing.KIND_FIELDS)
    )
    phase_keys = {f.name for f in schema.fields(schema.PhaseEntry)}
    assert set(phases.PHASE_FIGURES) <= phase_keys
    assert set(schema.get_args(get_type_hints(schema.PhaseEntry)["phase"])) == set(phases.PHASES)


def test_the_writers_version_is_the_schemas() -> None:
    assert summary.SUMMARY_SCHEMA_VERSION == schema.SUMMARY_SCHEMA_VERSION == 1


def test_the_reference_page_lists_every_key_under_its_section() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (REPO / "docs" / "reference" / "outputs.md").read_text()
    assert page.count("<!-- generated: summary-schema -->") == 1
    rendered = hooks.fill_generated(page)
    found = schema.sections()
    assert "### `config.lab`: LabDescription {#summary-lab-description}" in rendered
    for cls in found:
        heading = f"{{#{hooks.summary_anchor(cls)}}}"
        assert rendered.count(heading) == 1, cls
        table = rendered.split(heading, 1)[1].split("\n#", 1)[0]
        rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `")]
        assert rows == [f"`{field.name}`" for field in schema.fields(cls)], cls


def test_the_readers_check_asks_only_for_what_the_schema_has() -> None:
    from sqlwa.results import rundir

    assert set(rundir.SUMMARY_REQUIRED) <= schema.Summary.__required_keys__
    assert set(rundir.SUMMARY_OPTIONAL) <= set(get_type_hints(schema.Summary))
    config = set(get_type_hints(schema.Config))
    assert set(rundir.CONFIG_TEXT) <= config and "txns" in config and "lab" in config
