"""The real adb client and server against stand-in devices (``standin_adbd.py``), for tests.

:class:`AdbServer` is an adb server of the test's own: a free port
(``ADB_SERVER_SOCKET`` and ``ANDROID_ADB_SERVER_PORT``, in :attr:`AdbServer.env`: what a
sqlwa run under test is given), a private HOME (adb keeps its key in ``~/.android/adbkey``)
and TMPDIR (its log, ``adb.UID.log``), so a test never touches the user's server, keys or
devices, and parallel workers never each other's; :meth:`AdbServer.stop` kills it
(``adb kill-server``) and makes sure it is gone. :class:`Standin` is one stand-in device on a
free port of its own choosing, ``adb connect``-ed; :meth:`Standin.stop` disconnects it, ends
it and every process it started. The fixtures ``adb_server`` (one per module) and
``standin`` (a factory: ``standin(model="Pixel 7")``; what it made is stopped at teardown)
are imported by the test modules that use them (``from adb_standin import
adb_server_fixture, standin_fixture``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from standin_adbd import kill_marked, marked_processes

STANDIN = Path(__file__).with_name("standin_adbd.py")
NO_ADB = "needs adb, the real client (Debian's package adb)"

# adb's own variables that would point it at the user's server, keys or device
ADB_VARIABLES = (
    "ANDROID_SERIAL",
    "ANDROID_SDK_HOME",
    "ANDROID_USER_HOME",
    "ADB_VENDOR_KEYS",
    "ADB_SERVER_SOCKET",
    "ADB_TRACE",
)


def adb_binary() -> str | None:
    return shutil.which("adb")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(what: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


def _server_processes(port: int) -> list[int]:
    """The adb server processes listening on ``port`` (``adb -L tcp:PORT fork-server server``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"fork-server" in argv and f"tcp:{port}".encode() in argv:
            found.append(int(entry))
    return found


class AdbServer:
    """An adb server of one test module: its port, HOME and TMPDIR are its own."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = 0
        self.env: dict[str, str] = {}

    def adb(self, *args: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``adb ARGS`` against this server, its output captured."""
        return subprocess.run(
            ["adb", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if k not in ADB_VARIABLES}
        for attempt in range(5):
            self.port = _free_port()
            self.env = {
                **base,
                "HOME": str(self.home),
                "TMPDIR": str(self.home),
                "ANDROID_ADB_SERVER_PORT": str(self.port),
                "ADB_SERVER_SOCKET": f"tcp:localhost:{self.port}",
            }
            # the server is a daemon that keeps whatever output it was given: a file, not a pipe
            with open(self.home / "start-server.log", "ab") as log:
                started = subprocess.run(
                    ["adb", "start-server"], env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=60
                )
            if started.returncode == 0 and _port_open(self.port):
                return
            self.stop()
            if attempt == 4:
                raise AssertionError(f"adb start-server failed: {(self.home / 'start-server.log').read_text()}")

    def public_key(self) -> str:
        """This server's public key as a device stores it (``~/.android/adbkey.pub``)."""
        return (self.home / ".android" / "adbkey.pub").read_text().strip()

    def devices(self) -> dict[str, str]:
        """``adb devices``: serial → state."""
        listed = self.adb("devices").stdout.splitlines()[1:]
        return dict(line.split("\t", 1) for line in listed if "\t" in line)

    def stop(self) -> None:
        if not self.port:
            return
        subprocess.run(["adb", "kill-server"], env=self.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        try:
            _wait(f"the adb server on port {self.port} to go", lambda: not _server_processes(self.port), timeout=10)
        except AssertionError:
            for pid in _server_processes(self.port):
                os.kill(pid, signal.SIGKILL)
            raise


class Standin:
    """One stand-in device, connected to ``server``."""

    def __init__(
        self,
        server: AdbServer,
        root: Path,
        *,
        unauthorized: bool = False,
        auth: bool = False,
        accept_keys: bool = False,
        cut_after: int | None = None,
        chroot: bool = False,
        **props: str,
    ) -> None:
        self.server = server
        self.chroot = chroot
        self.cut_after = cut_after
        self.root = root
        self.unauthorized = unauthorized
        self.auth = auth
        self.accept_keys = accept_keys
        self.props = props
        self.token = secrets.token_hex(8)
        self.log = root.with_name(root.name + ".services")
        self.proc: subprocess.Popen[str] | None = None
        self.connected: subprocess.CompletedProcess[str] | None = None  # what ``adb connect`` said
        self.port = 0

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        argv = [
            sys.executable,
            str(STANDIN),
            "--port",
            "0",
            "--root",
            str(self.root),
            "--token",
            self.token,
            "--log",
            str(self.log),
        ]
        options = {"model", "release", "sdk", "build_type", "crypto_type", "abi"}
        for key, value in self.props.items():
            if key in options:
                argv += ["--" + key.replace("_", "-"), value]
            else:
                argv += ["--prop", f"{key}={value}"]
        if self.cut_after is not None:
            argv += ["--cut-after", str(self.cut_after)]
        flags = {
            "--chroot": self.chroot,
            "--unauthorized": self.unauthorized,
            "--auth": self.auth,
            "--accept-keys": self.accept_keys,
        }
        return argv + [flag for flag, wanted in flags.items() if wanted]

    def start(self) -> Standin:
        self.root.mkdir(parents=True, exist_ok=True)
        # the token in its own environment too: the sweep then finds the stand-in's guardian
        env = {**os.environ, "ADB_STANDIN_TOKEN": self.token}
        self.proc = subprocess.Popen(
            self.command(), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if not first.startswith("listening on "):
            self.stop()
            raise AssertionError(f"the stand-in did not start: {first!r}")
        self.port = int(first.split()[-1])
        self.connected = self.server.adb("connect", self.serial)
        expected = (
            "unauthorized"
            if self.unauthorized or (self.auth and not self.accept_keys and not self.trusts_host())
            else "device"
        )
        _wait(f"{self.serial} to be {expected}", lambda: self.state() == expected)
        return self

    @property
    def adb_keys(self) -> Path:
        """The keys the device trusts (adbd's /data/misc/adb/adb_keys)."""
        return self.root / "data" / "misc" / "adb" / "adb_keys"

    def trusts_host(self) -> bool:
        public = self.server.public_key()
        return self.adb_keys.exists() and public in self.adb_keys.read_text().splitlines()

    def state(self) -> str | None:
        return self.server.devices().get(self.serial)

    def adb(self, *args: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``adb -s SERIAL ARGS``."""
        return self.server.adb("-s", self.serial, *args, timeout=timeout, stdin=stdin)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        """Disconnect, end the stand-in (SIGTERM; SIGKILL after 10 s) and what it started."""
        if self.port:
            self.server.adb("disconnect", self.serial)
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        kill_marked(self.token)

    def leftovers(self) -> list[int]:
        """Processes the stand-in started that still run, given a moment to go."""
        deadline = time.monotonic() + 10
        while (left := marked_processes(self.token)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left


@pytest.fixture(scope="module", name="adb_server")
def adb_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbServer]:
    if adb_binary() is None:
        pytest.skip(NO_ADB)
    server = AdbServer(tmp_path_factory.mktemp("adb-home"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="standin")
def standin_fixture(adb_server: AdbServer, tmp_path: Path) -> Iterator[Callable[..., Standin]]:
    made: list[Standin] = []

    def make(*, trust_host: bool = False, **options: Any) -> Standin:
        device = Standin(adb_server, tmp_path / f"device{len(made)}", **options)
        made.append(device)
        if trust_host:  # a phone that took this host's key before
            device.adb_keys.parent.mkdir(parents=True, exist_ok=True)
            device.adb_keys.write_text(adb_server.public_key() + "\n")
        return device.start()

    try:
        yield make
    finally:
        for device in made:
            device.stop()
