"""--json on the commands that print tables (#16, point 16): the JSON says what the
table says, checked against independent truth where there is one."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import REPO, sqlwa
from sqlwa.lab.filesystem import FILESYSTEMS

KEKS = REPO / "traces" / "samples" / "blktrace-keks" / "keks"


def test_parse_json_counts_agree_with_blkparse(tmp_path):
    report = json.loads(sqlwa("parse", str(KEKS), "--json").stdout)
    assert [f["format"] for f in report["files"]] == ["blktrace"] * len(report["files"])
    if subprocess.run(["which", "blkparse"], capture_output=True).returncode:
        pytest.skip("blkparse (Debian package blktrace) is not installed")
    # blkparse's own count of completions and their bytes, as independent truth
    fmt = "%a %n\n"
    out = subprocess.run(
        ["blkparse", "-i", KEKS.name, "-D", str(KEKS.parent), "-q", "-f", fmt, "-a", "complete"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    completes = [line.split() for line in out if line.startswith("C ")]
    assert report["per_action"]["C"] == len(completes)
    assert report["bytes_per_action"]["C"] == 512 * sum(int(n) for _, n in completes)


def test_lab_check_json_lists_every_filesystem():
    lines = json.loads(sqlwa("lab", "check", "--json").stdout)
    assert {"root", "tracefs"} <= {line["what"] for line in lines}
    assert {f"--fs {fs}" for fs in FILESYSTEMS} <= {line["what"] for line in lines}
    assert all(set(line) == {"what", "ok", "reason", "hint"} for line in lines)
