"""sqlwa's side of the phone path (sqlwa.phone) through the real adb client and server,
against stand-in devices (tests/standin_adbd.py): which device, each way one cannot be
had, commands and their status, a device lost mid-command, and the phone described."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from adb_standin import AdbServer, adb_server_fixture, standin_fixture  # noqa: F401 - fixtures

from sqlwa.errors import DeviceError, UsageError
from sqlwa.phone import adb, describe

DEBIAN_LIBSQLITE = Path("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0")


@pytest.fixture(autouse=True)
def on_the_test_server(adb_server: AdbServer, monkeypatch):
    """sqlwa's adb runs find this module's adb server, as a user's find theirs."""
    for key in ("HOME", "TMPDIR", "ANDROID_ADB_SERVER_PORT", "ADB_SERVER_SOCKET"):
        monkeypatch.setenv(key, adb_server.env[key])
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    monkeypatch.delenv("ADB", raising=False)


def test_the_only_device_is_chosen_and_its_commands_keep_status_and_streams(standin):
    device = standin(model="Pixel 7")
    phone = adb.Adb.connect()
    assert phone.serial == device.serial and phone.device.details["model"] == "Pixel_7"
    done = phone.shell(["sh", "-c", "printf out; echo err >&2; exit 3"], check=False)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out", "err\n")
    with pytest.raises(DeviceError, match=r"`sh -c 'exit 4'` failed \(exit 4\)"):
        phone.shell(["sh", "-c", "exit 4"])
    assert phone.shell(["echo", "it's", "a b"]).stdout == "it's a b\n"


def test_several_devices_ask_which_and_a_serial_picks_one(standin):
    first, second = standin(model="Pixel 7"), standin(model="Pixel 8")
    with pytest.raises(UsageError) as raised:
        adb.Adb.connect()
    listed = sorted([f"{first.serial} (Pixel_7)", f"{second.serial} (Pixel_8)"])
    assert raised.value.args == (f"2 devices are attached ({', '.join(listed)}): which one?", "name it: --adb SERIAL")
    assert adb.Adb.connect(second.serial).shell(["getprop", "ro.product.model"]).stdout == "Pixel 8\n"


def test_an_unauthorized_device_says_to_accept_the_prompt(standin):
    device = standin(unauthorized=True)
    with pytest.raises(DeviceError) as raised:
        adb.Adb.connect()
    assert raised.value.args[0] == f"device {device.serial} is not ready for commands (adb lists it as unauthorized)"
    assert "Allow USB debugging" in raised.value.args[1]


def test_a_device_lost_mid_command_is_said_so_though_adb_exits_0(standin):
    device = standin()
    phone = adb.Adb.connect()
    threading.Timer(1.0, device.signal, (signal.SIGKILL,)).start()
    started = time.monotonic()
    with pytest.raises(DeviceError, match=rf"(lost the connection to device {device.serial}|was cut off)"):
        phone.shell(["sleep", "20"])
    assert time.monotonic() - started < 15


@pytest.mark.skipif(not DEBIAN_LIBSQLITE.exists(), reason="Debian's libsqlite3 stands in for the framework's")
@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 shell says its library's version")
def test_the_phone_is_described_from_what_its_shell_reads(standin, tmp_path):
    device = standin(
        chroot=True,
        model="Pixel 7",
        release="14",
        sdk="34",
        build_type="user",
        crypto_type="file",
        abi="arm64-v8a",
        **{"ro.product.manufacturer": "Google"},
    )
    library = device.root / "system" / "lib64" / "libsqlite.so"
    library.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(DEBIAN_LIBSQLITE, library)
    phone = describe.describe(adb.Adb.connect(), device.serial)
    assert (phone.model, phone.abi, phone.encryption) == ("Google Pixel 7", "arm64-v8a", "file")
    assert (phone.build.release, phone.build.sdk, phone.build.build_type) == ("14", "34", "user")
    assert phone.kernel == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    version = subprocess.run(["sqlite3", "--version"], capture_output=True, text=True).stdout.split()[0]
    assert phone.framework_sqlite == version
    # /data is the stand-in's root's filesystem, as the host's own mount table has it
    fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", str(device.root)], capture_output=True, text=True)
    assert phone.data.fs == fs.stdout.strip()
    df = shutil.disk_usage(device.root)
    assert phone.data.size_bytes == pytest.approx(df.total, rel=0.01)
    assert phone.data.free_bytes == pytest.approx(df.free, rel=0.05)
