"""The run's directory on the phone, and what a cut connection leaves there, taken off by
the next run: checked with this host's own sh standing in for the phone's shell."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sqlwa.phone import workspace
from sqlwa.phone.adb import Completed


class LocalShell:
    """Commands in this host's sh, as the phone's shell runs what adb hands it (a line)."""

    def shell(self, argv, timeout=60.0, check=True):
        proc = subprocess.run(["sh", "-c", " ".join(shlex.quote(a) for a in argv)], capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(proc.stderr)
        return Completed(proc.returncode, proc.stdout, proc.stderr)


def test_a_run_gets_its_own_directory_with_its_owner_and_leaves_nothing(tmp_path):
    with workspace.workspace(LocalShell(), str(tmp_path)) as path:
        made = Path(path)
        assert made.parent == tmp_path and made.name.startswith("sqlwa-")
        assert oct(made.stat().st_mode & 0o777) == "0o700"
        assert workspace.Owner.parse((made / "owner").read_text()) == workspace.Owner.here()
        (made / "db").write_text("x")
    assert list(tmp_path.iterdir()) == []


def test_the_directory_goes_also_when_the_run_fails(tmp_path):
    with pytest.raises(RuntimeError), workspace.workspace(LocalShell(), str(tmp_path)):
        raise RuntimeError("the engine failed")
    assert list(tmp_path.iterdir()) == []


def test_cleanup_removes_what_ended_runs_of_this_host_left_and_keeps_the_rest(tmp_path):
    here = workspace.Owner.here()
    dead = subprocess.Popen(["true"])
    dead.wait()
    earlier_boot = "00000000-1111-2222-3333-444444444444"
    dirs = {
        "sqlwa-1-ended": f"{here.host} {here.boot_id} {dead.pid}",
        "sqlwa-2-running": here.line(),
        "sqlwa-3-other-host": f"another-host {here.boot_id} {dead.pid}",
        "sqlwa-4-cut-before-owner": None,
        "sqlwa-5-earlier-boot": f"{here.host} {earlier_boot} {here.pid}",
        "not-ours": f"{here.host} {here.boot_id} {dead.pid}",
    }
    for name, owner in dirs.items():
        (tmp_path / name).mkdir()
        if owner is not None:
            (tmp_path / name / "owner").write_text(owner + "\n")
    removed, kept = workspace.clean(LocalShell(), str(tmp_path))
    assert sorted(Path(d.path).name for d in removed) == [
        "sqlwa-1-ended",
        "sqlwa-4-cut-before-owner",
        "sqlwa-5-earlier-boot",
    ]
    assert sorted(Path(d.path).name for d in kept) == ["sqlwa-2-running", "sqlwa-3-other-host"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-ours", "sqlwa-2-running", "sqlwa-3-other-host"]
