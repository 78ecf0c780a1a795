"""A run never deletes a file it did not write: an --out holding a user's own file with
the name of a run's file is refused, and the file is untouched."""

from __future__ import annotations

import json

import pytest

from helpers import sqlwa


@pytest.mark.parametrize("name", ["trace.txt", "console.log"])  # console.log: a --vm run's guest console
def test_a_users_file_named_like_a_run_file_is_kept(tmp_path, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("my own notes\n")
    proc = sqlwa("run", "-n", "2", "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"sqlwa: error: output directory {out} holds {name} and no sqlwa run")
    assert (out / name).read_text() == "my own notes\n"
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_an_earlier_run_is_replaced(tmp_path):
    out = tmp_path / "out"
    sqlwa("run", "-n", "2", "--out", str(out))
    sqlwa("run", "-n", "3", "--out", str(out))
    # (a count of '"commits": 3' in the text also met the frame-budget section's commits on a slow machine)
    assert json.loads((out / "summary.json").read_text())["config"]["txns"] == 3
