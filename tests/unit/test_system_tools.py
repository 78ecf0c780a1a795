"""Tools in the sbin directories are found whatever PATH says (#32: `run --vm` as a user
whose PATH has no sbin said "depmod not found" beside /usr/sbin/depmod)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sqlwa import _system
from sqlwa.errors import ToolError

NO_SBIN = "/usr/bin:/bin"


def require_depmod_in_sbin_only() -> None:
    in_sbin = any((Path(d) / "depmod").exists() for d in ("/usr/local/sbin", "/usr/sbin", "/sbin"))
    if not in_sbin or shutil.which("depmod", path=NO_SBIN):
        pytest.skip("needs depmod in an sbin directory only (Debian package kmod)")


@pytest.fixture
def path_without_sbin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", NO_SBIN)


def test_run_tool_finds_a_tool_that_only_sbin_has(path_without_sbin: None) -> None:
    require_depmod_in_sbin_only()
    proc = _system.tools.run_tool(["depmod", "--version"], "asking depmod its version")
    assert "kmod" in proc.stdout  # depmod is kmod's: its version line names it


def test_try_tool_finds_a_tool_that_only_sbin_has(path_without_sbin: None) -> None:
    require_depmod_in_sbin_only()
    proc = _system.tools.try_tool(["depmod", "--version"], timeout=30)
    assert proc is not None and proc.returncode == 0


def test_start_daemon_finds_a_tool_that_only_sbin_has(path_without_sbin: None, tmp_path: Path) -> None:
    require_depmod_in_sbin_only()
    proc = _system.processes.start_daemon(["depmod", "--version"], tmp_path / "log")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "kmod" in out


def test_a_tool_found_nowhere_is_still_named_in_the_error(path_without_sbin: None) -> None:
    with pytest.raises(ToolError, match=r"^checking: sqlwa-no-such-tool not found$"):
        _system.tools.run_tool(["sqlwa-no-such-tool"], "checking")


def test_a_tool_that_prints_bytes_not_utf8_keeps_them() -> None:
    """A path or a phone's property in a tool's output need not be UTF-8: kept as the
    bytes they were (surrogate escapes, as os.fsdecode), never a UnicodeDecodeError."""
    argv = ["sh", "-c", r"printf 'caf\351\n'; printf 'err\377\n' >&2"]
    done = _system.tools.try_tool(argv)
    assert done is not None
    assert done.stdout.encode("utf-8", "surrogateescape") == b"caf\xe9\n"
    assert _system.tools.run_tool(argv, "printing").stderr.encode("utf-8", "surrogateescape") == b"err\xff\n"
