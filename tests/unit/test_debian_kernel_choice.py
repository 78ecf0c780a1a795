"""Which Debian kernel ``--kernel debian`` means (sqlwa.vm.kernel): apt's answer, asked
once for each state of apt's lists and settings and remembered in the user's cache. The
truth is apt-cache itself, asked here directly; a changed list must make sqlwa ask again."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from sqlwa.vm import kernel


def apt_cache_show(package: str) -> str:
    return subprocess.run(
        ["apt-cache", "show", "--no-all-versions", package], capture_output=True, text=True, check=True
    ).stdout


def field(record: str, name: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in record.splitlines() if line.startswith(f"{name}:"))


@pytest.fixture
def asked(tmp_path, monkeypatch) -> list[list[str]]:
    """The apt-cache calls sqlwa makes, with the cache and apt's state in ``tmp_path``:
    apt's real lists, and a settings file of the test's own that it can change."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = tmp_path / "apt-settings"
    settings.write_text("one\n")
    monkeypatch.setattr(kernel, "APT_STATE_PATHS", (*kernel.APT_STATE_PATHS, settings))
    calls: list[list[str]] = []
    real = kernel._system.tools.run_tool

    def counted(argv, *args, **kwargs):
        calls.append([str(a) for a in argv])
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(kernel._system.tools, "run_tool", counted)
    return calls


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="needs apt (a Debian machine)")
def test_the_kernel_is_the_one_apt_names_and_apt_is_asked_once(asked, tmp_path):
    try:
        depends = field(apt_cache_show(kernel.DEBIAN_META_PACKAGE), "Depends")
    except (subprocess.CalledProcessError, StopIteration):
        pytest.skip(f"apt knows no {kernel.DEBIAN_META_PACKAGE} here (apt-get update)")
    package = depends.split(",")[0].split("(")[0].strip()
    truth = (package, field(apt_cache_show(package), "Version"))
    assert kernel.debian_kernel_package() == truth
    assert len(asked) == 2  # the meta-package, then its kernel
    assert kernel.debian_kernel_package() == truth
    assert len(asked) == 2  # remembered
    remembered = tmp_path / "cache" / "sqlwa" / kernel.DEBIAN_CHOICE_FILE
    assert sorted(p.name for p in remembered.parent.iterdir()) == [
        remembered.name  # no staged file left
    ]
    settings = tmp_path / "apt-settings"
    settings.write_text("two, as after an apt-get update\n")
    os.utime(settings, ns=(0, 10**18))
    assert kernel.debian_kernel_package() == truth
    assert len(asked) == 4  # asked again


@pytest.fixture
def fake_apt(tmp_path, monkeypatch) -> list[str]:
    """apt's answer made up (these tests are of the remembering), with the cache in ``tmp_path``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    questions: list[str] = []

    def ask() -> tuple[str, str]:
        questions.append("asked")
        return "linux-image-9.9.9-amd64", "9.9.9-1"

    monkeypatch.setattr(kernel, "ask_apt_for_debian_kernel", ask)
    return questions


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"apt_state": 3}', ""])
def test_a_damaged_remembered_answer_is_asked_again(fake_apt, tmp_path, text):
    remembered = tmp_path / "cache" / "sqlwa" / kernel.DEBIAN_CHOICE_FILE
    remembered.parent.mkdir(parents=True)
    remembered.write_text(text)
    assert kernel.debian_kernel_package() == ("linux-image-9.9.9-amd64", "9.9.9-1")
    assert len(fake_apt) == 1
    kernel.debian_kernel_package()
    assert len(fake_apt) == 1  # the damaged file was replaced


def test_an_unwritable_cache_costs_only_the_question(fake_apt, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache cannot be made below a file
    assert kernel.debian_kernel_package() == kernel.debian_kernel_package() == ("linux-image-9.9.9-amd64", "9.9.9-1")
    assert len(fake_apt) == 2
    assert blocker.read_text() == ""


def test_a_settings_directory_this_user_cannot_list_is_no_error(fake_apt, tmp_path, monkeypatch):
    """Without root, a directory of apt's may be closed to listing: its own time of change
    stands for its files (as root every directory can be listed, so the refusal is made)."""
    closed = tmp_path / "apt.conf.d"
    closed.mkdir()
    monkeypatch.setattr(kernel, "APT_STATE_PATHS", (closed,))
    real_iterdir = type(closed).iterdir

    def refused(self):
        if self == closed:
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(type(closed), "iterdir", refused)
    assert kernel.debian_kernel_package() == kernel.debian_kernel_package()
    assert len(fake_apt) == 1  # remembered: the state was read both times
