"""sqlwa.outputs, the one place that decides where sqlwa writes: what it refuses, and
that a write is whole or leaves the old file (#32)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sqlwa import outputs
from sqlwa.errors import UsageError


def test_a_fifo_and_a_symlink_to_one_are_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    for name in ("fifo", "link"):
        with pytest.raises(UsageError, match="is a FIFO"):
            outputs.check_file(tmp_path / name, "-o")


def test_a_symlink_to_a_file_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("old\n")
    (tmp_path / "link").symlink_to("real.txt")
    target = outputs.check_file(tmp_path / "link", "-o")
    outputs.write_file(target, "new\n", "the file")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real.txt").read_text() == "new\n"


def test_a_new_file_has_the_umasks_mode_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        outputs.write_file(outputs.check_file(tmp_path / "new.txt", "-o"), "x", "the file")
        (tmp_path / "kept.txt").write_text("old")
        os.chmod(tmp_path / "kept.txt", 0o640)
        outputs.write_file(outputs.check_file(tmp_path / "kept.txt", "-o"), "y", "the file")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "kept.txt").st_mode) == 0o640


def test_a_failed_write_leaves_the_old_file_and_nothing_beside_it(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text("before\n")
    with pytest.raises(UsageError, match="cannot write the file"):
        with outputs.replacing(tmp_path / "out.txt", "the file") as f:
            f.write(b"half")
            raise OSError(28, "No space left on device")
    assert os.listdir(tmp_path) == ["out.txt"] and (tmp_path / "out.txt").read_text() == "before\n"


@pytest.mark.parametrize("where", ["/etc/sqlwa-test.html", "/usr/lib/sqlwa-test.html", "/var/lib/sqlwa-test.html"])
def test_a_system_directory_needs_the_flag(where: str) -> None:
    with pytest.raises(UsageError, match="system directory") as err:
        outputs.check_file(Path(where), "-o")
    assert outputs.ALLOW_SYSTEM_FLAG in str(err.value.args[1])
    assert outputs.check_file(Path(where), "-o", allow_system=True) == Path(where)


def test_dev_is_refused_even_with_the_flag() -> None:
    with pytest.raises(UsageError, match="/dev/null"):
        outputs.check_file(Path("/dev/null"), "-o", allow_system=True)


def test_a_directory_output_takes_only_a_new_empty_or_own_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert outputs.check_dir(tmp_path / "new", "--out", lambda _: False, "run") == tmp_path / "new"
    assert (tmp_path / "new").is_dir()
    outputs.check_dir(tmp_path / "empty", "--out", lambda _: False, "run")
    with pytest.raises(UsageError, match="holds notes.txt and no sqlwa run"):
        outputs.check_dir(tmp_path / "mine", "--out", lambda _: False, "run")
    outputs.check_dir(tmp_path / "mine", "--out", lambda _: True, "run")
