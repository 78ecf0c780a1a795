"""The device chosen through the real adb client (Debian's adb) on a private adb server:
a test never meets the user's own server, devices or keys."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest

from sqlwa.errors import UsageError
from sqlwa.phone import adb

pytestmark = pytest.mark.skipif(
    shutil.which("adb") is None, reason="Debian's adb is not installed (scripts/system-deps)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def private_adb_server(tmp_path, monkeypatch):
    """ADB_SERVER_SOCKET on a port of this test's own, HOME (adb's keys) in tmp_path; the
    server killed at the end."""
    monkeypatch.setenv("ADB_SERVER_SOCKET", f"tcp:localhost:{free_port()}")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("ADB", raising=False)
    yield
    subprocess.run(["adb", "kill-server"], env=os.environ.copy(), capture_output=True, timeout=30)


def test_no_device_is_one_line_naming_the_fix(private_adb_server):
    with pytest.raises(UsageError) as raised:
        adb.Adb.connect()
    assert raised.value.args == (
        "no Android device is attached (adb devices lists none)",
        "connect a phone with USB debugging on (or `adb connect HOST:PORT`), then retry",
    )


def test_a_named_device_that_is_not_there_names_what_is(private_adb_server):
    with pytest.raises(UsageError, match=r"^no device R58M is attached \(attached: none\)$"):
        adb.Adb.connect("R58M")


def test_no_adb_client_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ADB", raising=False)
    monkeypatch.setattr(adb.tools, "SYSTEM_BIN_DIRS", ())
    with pytest.raises(UsageError) as raised:
        adb.Adb.connect()
    assert raised.value.args[0] == "no adb client: --adb reaches the phone through Android's adb, and none is on PATH"
    assert "apt install adb" in raised.value.args[1]


def test_an_adb_variable_naming_no_program_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ADB", str(tmp_path / "adb"))
    with pytest.raises(UsageError, match=r"^\$ADB names .*/adb, which is not an executable adb client$"):
        adb.Adb.connect()
