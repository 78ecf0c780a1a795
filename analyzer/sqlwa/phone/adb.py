"""An Android device reached with Android's own ``adb`` client (Debian's ``adb``, or the
SDK's platform-tools): which device, and its shell, push and pull.

sqlwa never speaks the adb protocol itself: every step is one run of the client the user
already trusts with the phone, so what sqlwa does there is what ``adb`` would do for
them by hand (the commands are listed in docs/guide/phone.md). The client finds its
server as it always does (``ADB_SERVER_SOCKET``, ``ANDROID_ADB_SERVER_PORT``), and
``ADB`` names another client than the one on PATH, as Android's own scripts take it.

The device side needs shell protocol v2 (Android 7 and later): it keeps stderr apart from
stdout and returns the command's exit status, which every step here relies on. One thing
v2 does not tell: a connection cut mid-command ends ``adb shell`` with status 0, as no
exit packet came. So every command prints its status after itself, on a line with a word
drawn afresh for it; a command whose line never came was cut off, whatever adb said.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sqlwa._system import tools
from sqlwa.errors import DeviceError, UsageError

ADB_ENV = "ADB"  # another adb client than PATH's, as AOSP's scripts take it
COMMAND_TIMEOUT_S = 60.0  # a step that takes longer has a device that stopped answering
LIST_TIMEOUT_S = 30.0  # `adb devices` (which may start the server: a few seconds)
READY = "device"  # the state adb lists a usable device in
INSTALL_HINT = "install Debian's adb (apt install adb) or Android's platform-tools, or name the client in $ADB"


@dataclass(frozen=True)
class Attached:
    """A device as ``adb devices -l`` lists it: its serial, its state (``device``,
    ``unauthorized``, ``offline``, ``no permissions`` …) and its ``key:value`` details
    (``model``, ``product``, ``device``, ``transport_id``, ``usb``)."""

    serial: str
    state: str
    details: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        model = self.details.get("model")
        return f"{self.serial} ({model})" if model else self.serial


@dataclass(frozen=True)
class Completed:
    """A finished device command: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


class Device(Protocol):
    """What the phone's modules need of a device (:class:`Adb` is the one there is):
    commands in its shell, and files pulled from it."""

    def shell(self, argv: Sequence[str], timeout: float = ..., check: bool = ...) -> Completed: ...

    def shell_text(self, command: str, timeout: float = ..., check: bool = ...) -> Completed: ...

    def pull(self, remote: str, local: Path, timeout: float = ...) -> None: ...


def client() -> str:
    """The adb client to run: ``$ADB``, else ``adb`` on PATH; a usage error naming how to
    get one when there is none."""
    named = os.environ.get(ADB_ENV)
    if named:
        if not os.access(named, os.X_OK):
            raise UsageError(f"${ADB_ENV} names {named}, which is not an executable adb client", INSTALL_HINT)
        return named
    found = tools.find_tool("adb")
    if found is None:
        raise UsageError(
            "no adb client: --adb reaches the phone through Android's adb, and none is on PATH", INSTALL_HINT
        )
    return found


def parse_devices(text: str) -> list[Attached]:
    """The devices of ``adb devices -l``'s output (its header and the server's start-up
    lines left out)."""
    found = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("List of devices", "* ", "adb server")):
            continue
        serial, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if rest.startswith("no permissions"):  # blanks, then "(why); see [URL]" before the details
            state, details = "no permissions", rest.rpartition("]" if "]" in rest else ")")[2].split()
        else:
            state, *details = rest.split() or ["unknown"]
        found.append(Attached(serial, state, dict(d.partition(":")[::2] for d in details if ":" in d)))
    return found


def attached(adb: str) -> list[Attached]:
    """Every device the adb server knows of, in any state."""
    proc = tools.try_tool([adb, "devices", "-l"], timeout=LIST_TIMEOUT_S)
    if proc is None:
        raise DeviceError(
            f"{adb} devices did not answer within {LIST_TIMEOUT_S:g} s", "run `adb kill-server`, then retry"
        )
    if proc.returncode != 0:
        raise DeviceError(
            f"{adb} devices failed: {one_line(proc.stderr or proc.stdout)}", "run `adb kill-server`, then retry"
        )
    return parse_devices(proc.stdout)


def choose(devices: Sequence[Attached], serial: str | None) -> Attached:
    """The device a run goes to: the one named, or the only one attached; each way it can
    fail is one line saying what to do."""
    if serial is not None:
        named = [d for d in devices if d.serial == serial]
        if not named:
            listed = ", ".join(d.label for d in devices) or "none"
            raise UsageError(f"no device {serial} is attached (attached: {listed})", "give a serial from `adb devices`")
        return ready(named[0])
    if not devices:
        raise UsageError(
            "no Android device is attached (adb devices lists none)",
            "connect a phone with USB debugging on (or `adb connect HOST:PORT`), then retry",
        )
    if len(devices) > 1:
        listed = ", ".join(d.label for d in devices)
        raise UsageError(f"{len(devices)} devices are attached ({listed}): which one?", "name it: --adb SERIAL")
    return ready(devices[0])


def ready(device: Attached) -> Attached:
    """``device`` if adb can run commands on it, else why not and what to do."""
    if device.state == READY:
        return device
    fixes = {
        "unauthorized": "unlock the phone and accept its 'Allow USB debugging?' prompt for this computer",
        "offline": "reconnect the cable (or `adb reconnect`), then retry",
        "no permissions": "give your user access to the USB device (Debian: the plugdev group and android-sdk-platform-tools-common's udev rules)",
        "recovery": "boot the phone into Android, then retry",
        "bootloader": "boot the phone into Android, then retry",
        "sideload": "boot the phone into Android, then retry",
    }
    raise DeviceError(
        f"device {device.label} is not ready for commands (adb lists it as {device.state})",
        fixes.get(device.state, "check `adb devices`, then retry"),
    )


def one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip()) or "no message"


def finished(proc: subprocess.CompletedProcess[str], word: str) -> Completed | None:
    """The command's own status and output from its status line (``WORD:STATUS``, the
    last thing it printed), or None if that line never came (the command was cut off)."""
    found = re.search(rf"{re.escape(word)}:(\d+)\n\Z", proc.stdout)
    if found is None:
        return None
    return Completed(int(found[1]), proc.stdout[: found.start()], proc.stderr)


@dataclass(frozen=True)
class Adb:
    """One device through the adb client: commands in its shell, files pushed and pulled.

    Every command names the device (``-s SERIAL``), so another device plugged in
    mid-run never receives one."""

    client: str
    device: Attached

    @classmethod
    def connect(cls, serial: str | None = None) -> Adb:
        """The device ``serial`` (None: the only one attached), checked to be ready and
        to speak shell protocol v2."""
        adb = client()
        phone = cls(adb, choose(attached(adb), serial))
        phone.require_shell_v2()
        return phone

    @property
    def serial(self) -> str:
        return self.device.serial

    def require_shell_v2(self) -> None:
        proc = self._client(["features"], LIST_TIMEOUT_S)
        features = proc.stdout.split()
        if proc.returncode == 0 and "shell_v2" not in features:
            raise DeviceError(
                f"device {self.device.label} has no shell protocol v2 (Android 7 or later): "
                "adb could not return its commands' exit status",
                "use a phone on Android 7 or later",
            )

    def shell(self, argv: Sequence[str], timeout: float = COMMAND_TIMEOUT_S, check: bool = True) -> Completed:
        """``argv`` run in the device's shell, each word quoted as the device's sh reads
        it. With ``check``, a non-zero exit is a :class:`DeviceError` naming the command."""
        command = " ".join(shlex.quote(str(a)) for a in argv)
        return self.shell_text(command, timeout, check)

    def shell_text(self, command: str, timeout: float = COMMAND_TIMEOUT_S, check: bool = True) -> Completed:
        """``command`` as a line of the device's shell (pipes, redirections), in a subshell
        of its own so that its ``exit`` cannot skip the status line after it."""
        word = f"sqlwa-status-{secrets.token_hex(6)}"
        proc = self._client(["shell", f"(\n{command}\n); printf '%s:%d\\n' {word} $?"], timeout)
        done = finished(proc, word)
        if done is None:
            self.still_there()
            raise DeviceError(
                f"on {self.device.label}: `{command}` was cut off before it finished",
                "check the cable or connection, then retry",
            )
        if done.returncode != 0 and check:
            raise DeviceError(
                f"on {self.device.label}: `{command}` failed (exit {done.returncode}): "
                f"{one_line(done.stderr or done.stdout)}"
            )
        return done

    def push(self, local: Path, remote: str, timeout: float = COMMAND_TIMEOUT_S) -> None:
        self._transfer(["push", str(local), remote], f"push {local} to {remote}", timeout)

    def pull(self, remote: str, local: Path, timeout: float = COMMAND_TIMEOUT_S) -> None:
        self._transfer(["pull", remote, str(local)], f"pull {remote}", timeout)

    def _transfer(self, args: list[str], what: str, timeout: float) -> None:
        proc = self._client(args, timeout)
        if proc.returncode != 0:
            self.still_there()
            raise DeviceError(f"on {self.device.label}: {what} failed: {one_line(proc.stderr or proc.stdout)}")

    def still_there(self) -> None:
        """After a failed step: a :class:`DeviceError` if the device itself went away
        (a cut cable, a reboot), so the failure is not taken for the command's own."""
        proc = tools.try_tool([self.client, "-s", self.serial, "get-state"], timeout=LIST_TIMEOUT_S)
        state = proc.stdout.strip() if proc is not None and proc.returncode == 0 else "gone"
        if state != READY:
            raise DeviceError(
                f"lost the connection to device {self.device.label} (adb: {state})",
                "reconnect it; `sqlwa lab cleanup --adb` then removes what the run left there",
            )

    def _client(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        argv = [self.client, "-s", self.serial, *args]
        proc = tools.try_tool(argv, timeout=timeout)
        if proc is None:
            self.still_there()
            raise DeviceError(f"on {self.device.label}: adb {args[0]} did not finish within {timeout:g} s")
        return proc
