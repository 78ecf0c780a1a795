"""``sqlwa device`` and ``sqlwa predict`` as a user meets them without root: the shipped
profiles, the job file, importing fio's own JSON (checked against the JSON read here),
and every mistake as one line with exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import sqlwa, sqlwa_in_process
from sqlwa.device import fio

needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")


def one_error_line(done: subprocess.CompletedProcess, *phrases: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("sqlwa: error: ") and len(lines) <= 2 and "Traceback" not in done.stderr, lines
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def test_list_names_each_shipped_profile_with_its_source() -> None:
    done = sqlwa_in_process("device", "list")
    assert done.returncode == 0
    for name in ("pixel-2016", "moto-z-2016", "nexus6-encrypted", "nexus6-unencrypted"):
        assert name in done.stdout
    assert done.stdout.count("source: ") == 4


def test_show_prints_the_published_figure_and_how_it_is_priced() -> None:
    done = sqlwa_in_process("device", "show", "pixel-2016")
    assert done.returncode == 0 and "3.3" in done.stdout and "taras.glek.net" in done.stdout
    assert "pricing: the profile states only durable 4 KiB writes" in done.stdout
    doc = json.loads(sqlwa_in_process("device", "show", "moto-z-2016", "--json").stdout)
    assert doc["levels"][0]["durable_write"]["percentiles_ms"] == {"50": 0.5} and doc["kind"] == "published"


def test_the_jobfile_is_the_one_the_probe_runs() -> None:
    done = sqlwa_in_process("device", "jobfile", "--seconds", "3", "--size", "32")
    assert done.returncode == 0 and done.stdout == fio.job_file(3, 32)
    assert "Termux" in sqlwa_in_process("device", "jobfile", "--help").stdout


@needs_fio
def test_import_reads_fios_own_json_numbers(tmp_path: Path) -> None:
    """fio runs the job file here (a small file, half a second per job); the profile's
    figures must be fio's, as its JSON has them."""
    (tmp_path / "p.fio").write_text(fio.job_file(0.5, 4))
    subprocess.run(
        ["fio", "--output-format=json", "--output=probe.json", "p.fio"], cwd=tmp_path, check=True, capture_output=True
    )
    text = (tmp_path / "probe.json").read_text()
    raw = json.loads(text[text.index("{") :])  # fio writes its warnings, if any, into the file first
    jobs = {job["jobname"]: job for job in raw["jobs"]}
    out = tmp_path / "mine.toml"
    sqlwa("device", "import", str(tmp_path / "probe.json"), "--name", "here", "--fill", "12", "-o", str(out))
    doc = json.loads(sqlwa("device", "show", str(out), "--json").stdout)
    level = doc["levels"][0]
    assert doc["kind"] == "imported" and level["fill_pct"] == 12.0
    fdatasync = jobs["write_fdatasync"]
    assert level["write"]["samples"] == fdatasync["write"]["lat_ns"]["N"]
    assert level["write"]["percentiles_ms"]["50"] == pytest.approx(
        fdatasync["write"]["lat_ns"]["percentile"]["50.000000"] / 1e6
    )
    assert level["flush"]["percentiles_ms"]["99"] == pytest.approx(
        fdatasync["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e6
    )
    assert level["read"]["max_ms"] == pytest.approx(jobs["read"]["read"]["lat_ns"]["max"] / 1e6)
    assert level["seq_write_mib_s"] == pytest.approx(jobs["seq_write"]["write"]["bw_bytes"] / 2**20)
    ratio = jobs["write_qd8"]["write"]["iops"] / jobs["write_qd1"]["write"]["iops"]
    assert level["queue_depth"] == max(1, min(8, round(ratio)))
    assert sorted(os.listdir(tmp_path)) == sorted(["p.fio", "probe.json", "mine.toml", fio.DATA_FILE])


@pytest.mark.parametrize(
    ("args", "phrases"),
    [
        (("device", "show", "pixel-2099"), ("neither a profile file nor a shipped profile",)),
        (("device", "import", "{missing}", "--name", "x", "-o", "{tmp}/o.toml"), ("cannot read",)),
        (("device", "import", "{garbage}", "--name", "x", "-o", "{tmp}/o.toml"), ("not fio's JSON output",)),
        (("device", "import", "{garbage}", "--name", "x", "--fill", "1", "--fill", "2", "-o", "{tmp}/o.toml"), ("2 --fill for 1",)),
        (("device", "import", "{garbage}", "--name", "x", "-o", "{tmp}"), ("is a directory",)),
        (("device", "probe", "{tmp}/nowhere", "-o", "{tmp}/o.toml"), ("not an existing directory",)),
        (("device", "probe", "{tmp}", "-o", "{tmp}/o.toml", "--fill", "150"), ("--fill 150",)),
        (("device", "probe", "/proc", "-o", "{tmp}/o.toml"), ("kernel interface",)),
        (("device", "probe", "{tmp}", "-o", "{tmp}/no/such/o.toml"), ("no/such does not exist",)),
        (("predict", "-d", "pixel-2099", "{tmp}"), ("neither a profile file nor a shipped profile",)),
        (("predict", "-d", "{garbage}", "{tmp}"), ("profile", "not valid TOML")),
        (("predict", "-d", "pixel-2016", "{tmp}"), ("neither results.sqlite nor summary.json",)),
    ],
)  # fmt: skip
def test_a_mistake_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], phrases: tuple[str, ...]) -> None:
    (tmp_path / "garbage.json").write_text("fio: engine libaio not loadable\n[[[")
    fill = {"tmp": str(tmp_path), "missing": str(tmp_path / "missing.json"), "garbage": str(tmp_path / "garbage.json")}
    before = sorted(os.listdir(tmp_path))
    one_error_line(sqlwa_in_process(*(a.format(**fill) for a in args)), *phrases)
    assert sorted(os.listdir(tmp_path)) == before  # nothing made


def test_predicting_a_run_without_a_block_level_says_what_it_needs(tmp_path: Path) -> None:
    sqlwa("run", "-n", "5", "--out", str(tmp_path / "vfs"))
    one_error_line(sqlwa_in_process("predict", "-d", "pixel-2016", str(tmp_path / "vfs")), "has no block level")
    policy = tmp_path / "p.toml"
    policy.write_text('[[rule]]\ndevice = "pixel-2016"\nmax_predicted_p99_ms = 16.67\n')
    done = sqlwa_in_process("check", "-p", str(policy), str(tmp_path / "vfs"))
    assert done.returncode == 1 and "NOT MEASURED" in done.stdout and "needs the block level" in done.stdout


@pytest.mark.parametrize(
    ("rule", "phrase"),
    [
        ("max_predicted_p99_ms = 16.67", "predicted limits need device"),
        ('device = "pixel-2016"\nmax_p99_ms = 1', "device without a predicted limit"),
        ('device = "pixel-2099"\nmax_predicted_p99_ms = 1', "neither a profile file nor a shipped profile"),
        ('device = "pixel-2016"\nmax_predicted_p99_ms = "fast"', "must be a finite number"),
    ],
)
def test_a_policy_mistake_about_devices_is_one_line(tmp_path: Path, rule: str, phrase: str) -> None:
    sqlwa("run", "-n", "3", "--out", str(tmp_path / "vfs"))
    (tmp_path / "p.toml").write_text(f"[[rule]]\n{rule}\n")
    one_error_line(sqlwa_in_process("check", "-p", str(tmp_path / "p.toml"), str(tmp_path / "vfs")), phrase)
