"""The stand-in adbd (tests/standin_adbd.py) as the real adb client and server see it.

Every check here runs Debian's adb 29.0.6 against the stand-in, on an adb server of this
module's own (tests/adb_standin.py): what a test of the device flow relies on is what adb
itself printed or did, not what the stand-in says about itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from adb_standin import STANDIN, AdbServer, Standin, adb_server_fixture, standin_fixture  # noqa: F401 - fixtures
from standin_adbd import marked_processes

MIB = 1024 * 1024


def _wait_for(what: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.1)


def test_devices_lists_the_stand_in_with_its_model(standin, adb_server: AdbServer) -> None:
    device = standin(model="Pixel 7")
    listed = [line for line in adb_server.adb("devices", "-l").stdout.splitlines() if line.startswith(device.serial)]
    assert len(listed) == 1, listed
    fields = listed[0].split()
    assert fields[:2] == [device.serial, "device"]
    # adb writes the banner's model with its spaces as underscores
    assert "model:Pixel_7" in fields and "product:standin" in fields and "device:standin" in fields
    assert device.adb("get-state").stdout.strip() == "device"
    assert device.adb("get-serialno").stdout.strip() == device.serial


def test_shell_output_exit_status_and_stderr_apart(standin) -> None:
    device = standin()
    hi = device.adb("shell", "echo", "hi")
    assert (hi.returncode, hi.stdout, hi.stderr) == (0, "hi\n", "")
    # shell v2: the client exits with the remote status
    assert device.adb("shell", "exit 3").returncode == 3
    apart = device.adb("shell", "echo out; echo err >&2; exit 5")
    assert (apart.returncode, apart.stdout, apart.stderr) == (5, "out\n", "err\n")
    # a signal's death, as a shell reports it: 128 + the signal
    assert device.adb("shell", "kill -9 $$").returncode == 128 + 9
    # stdin reaches the command, and its end closes the command's stdin
    assert device.adb("shell", "cat; echo done", stdin="hello\n").stdout == "hello\ndone\n"
    # the command runs in the device root, with ANDROID_DATA under it
    where = device.adb("shell", 'pwd; echo "$ANDROID_DATA"').stdout.split()
    assert where == [str(device.root.resolve()), str(device.root.resolve() / "data")]


def test_pty_shell_and_a_shell_reading_stdin(standin) -> None:
    device = standin()
    # -t -t: a pty even with no terminal here; shell v2 still brings the status back
    pty = device.adb("shell", "-t", "-t", "tty; echo hi; exit 7")
    assert pty.returncode == 7 and pty.stdout.splitlines()[0].startswith("/dev/pts/")
    # the client passes its own TERM along, when it has one
    assert re.fullmatch(
        r"OPEN shell,v2,(TERM=[^,:]*,)?pty:tty; echo hi; exit 7", device.log.read_text().splitlines()[-1]
    )
    # no command and stdin no terminal: a raw shell that runs what stdin says
    script = device.adb("shell", stdin="echo from stdin; echo err >&2; exit 2\n")
    assert (script.returncode, script.stdout, script.stderr) == (2, "from stdin\n", "err\n")


def test_legacy_shell_merges_streams_and_has_no_status(standin) -> None:
    device = standin()
    legacy = device.adb("shell", "-x", "echo out; echo err >&2; exit 4")
    # without the shell protocol adb 29 sees one byte stream and always exits 0
    assert (legacy.returncode, legacy.stdout, legacy.stderr) == (0, "out\nerr\n", "")
    assert device.adb("exec-out", "echo raw; echo gone >&2").stdout == "raw\n"


def test_getprop_answers_from_the_props_table(standin) -> None:
    device = standin(
        model="Pixel 7", release="13", sdk="33", build_type="userdebug", crypto_type="file", abi="arm64-v8a"
    )
    for name, value in [
        ("ro.product.model", "Pixel 7"),
        ("ro.build.version.release", "13"),
        ("ro.build.version.sdk", "33"),
        ("ro.build.type", "userdebug"),
        ("ro.crypto.type", "file"),
        ("ro.product.cpu.abi", "arm64-v8a"),
    ]:
        assert device.adb("shell", "getprop", name).stdout == value + "\n"
    assert device.adb("shell", "getprop", "no.such.prop").stdout == "\n"
    assert device.adb("shell", "getprop", "no.such.prop", "fallback").stdout == "fallback\n"
    listing = device.adb("shell", "getprop").stdout.splitlines()
    assert "[ro.product.model]: [Pixel 7]" in listing and "[ro.build.type]: [userdebug]" in listing
    assert listing == sorted(listing)


def test_push_then_pull_round_trips_5_mib(standin, tmp_path: Path) -> None:
    device = standin()
    local = tmp_path / "payload"
    local.write_bytes(os.urandom(5 * MIB))
    local.chmod(0o755)
    remote = "/data/local/tmp/sqlwa-test/deep/payload"
    pushed = device.adb("push", str(local), remote)
    assert pushed.returncode == 0, pushed.stderr
    on_device = device.root / remote.lstrip("/")
    # under the device root, parents made (fixed_push_mkdir), the mode kept
    assert on_device.read_bytes() == local.read_bytes()
    assert stat.S_IMODE(on_device.stat().st_mode) == 0o755
    back = tmp_path / "back"
    pulled = device.adb("pull", remote, str(back))
    assert pulled.returncode == 0, pulled.stderr
    assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(local.read_bytes()).digest()
    # and the shell sees what sync wrote
    assert device.adb("shell", "wc -c < data/local/tmp/sqlwa-test/deep/payload").stdout.strip() == str(5 * MIB)


def test_directories_push_pull_and_list(standin, tmp_path: Path) -> None:
    device = standin()
    tree = tmp_path / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    files = {"a.db": os.urandom(70_000), "sub/b.db-wal": os.urandom(3), "sub/deeper/c": b""}
    for name, data in files.items():
        (tree / name).write_bytes(data)
    pushed = device.adb("push", str(tree), "/data/local/tmp/")
    assert pushed.returncode == 0 and "3 files pushed" in pushed.stdout, pushed.stdout
    listed = device.adb("ls", "/data/local/tmp/tree").stdout.split("\n")
    # adb ls: mode, size and mtime in hex, then the name (LIS2 entries, as ls_v2 asks)
    assert sorted(line.split()[-1] for line in listed if line) == [".", "..", "a.db", "sub"]
    assert "SYNC LIS2 /data/local/tmp/tree" in device.log.read_text().splitlines()
    back = tmp_path / "back"
    back.mkdir()
    pulled = device.adb("pull", "/data/local/tmp/tree", str(back))
    assert pulled.returncode == 0 and "3 files pulled" in pulled.stdout, pulled.stdout
    for name, data in files.items():
        assert (back / "tree" / name).read_bytes() == data


def test_sync_paths_cannot_leave_the_device_root(standin, tmp_path: Path) -> None:
    device = standin()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host file\n")
    tmp = device.root / "data" / "local" / "tmp"
    # a link's absolute target is a device path: this one names a directory the device lacks
    (tmp / "absolute").symlink_to(outside)
    # and ".." stops at the device's /, however many there are
    (tmp / "relative").symlink_to("../" * 40 + str(outside).lstrip("/"))
    small = tmp_path / "small"
    small.write_text("x\n")
    for link in ("absolute", "relative"):
        pulled = device.adb("pull", f"/data/local/tmp/{link}/secret", str(tmp_path / "got"))
        # adb 29 prints its sync errors on stdout when that is not a terminal
        assert pulled.returncode == 1 and "No such file or directory" in pulled.stdout + pulled.stderr
        assert not (tmp_path / "got").exists()
        assert device.adb("push", str(small), f"/data/local/tmp/{link}/planted").returncode == 0
        # the push made the directories the link names, inside the device
        assert (device.root / str(outside).lstrip("/") / "planted").read_text() == "x\n"
    assert device.adb("push", str(small), "/../../x").returncode == 0
    assert (device.root / "x").read_text() == "x\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    # and a path the device has not got
    missing = device.adb("pull", "/data/local/tmp/none", str(tmp_path / "none"))
    assert missing.returncode == 1 and "No such file or directory" in missing.stdout + missing.stderr


def _mounts_under(root: Path) -> list[str]:
    """The host's mounts that name ``root`` (other tests' mounts may come and go meanwhile)."""
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(root) in line]


def _in_namespace(namespace: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/ns/mnt") == namespace:
                found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.root
def test_chroot_runs_commands_on_device_paths(standin, tmp_path: Path) -> None:
    device = standin(chroot=True)
    assert device.proc is not None
    namespace = os.readlink(f"/proc/{device.proc.pid}/ns/mnt")
    assert namespace != os.readlink("/proc/self/ns/mnt")
    engine = tmp_path / "engine"
    engine.write_text('#!/bin/sh\necho "engine in $(pwd) with $*" > /data/local/tmp/sqlwa-x/ran\n')
    engine.chmod(0o755)
    assert device.adb("push", str(engine), "/data/local/tmp/sqlwa-x/engine").returncode == 0
    ran = device.adb("shell", "cd /data/local/tmp/sqlwa-x && ./engine a b && /data/local/tmp/sqlwa-x/engine c")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (device.root / "data/local/tmp/sqlwa-x/ran").read_text() == "engine in /data/local/tmp/sqlwa-x with c\n"
    where = device.adb("shell", 'pwd; echo "$ANDROID_DATA $TMPDIR"; command -v getprop').stdout.splitlines()
    assert where == ["/", "/data /data/local/tmp", "/system/bin/getprop"]
    assert device.adb("shell", "getprop ro.product.model").stdout == "Standin\n"
    # /data is a mount of its own in the device's mount table, as on a phone
    data_mounts = device.adb("shell", "cat /proc/mounts").stdout.splitlines()
    assert [line.split()[1] for line in data_mounts].count("/data") == 1
    # the host's programs are there to run, not to change
    assert device.adb("shell", "touch /usr/sqlwa-probe").returncode != 0
    assert not Path("/usr/sqlwa-probe").exists()
    # the stand-in's mounts live in its own namespace, which ends with it
    assert _mounts_under(device.root) == []
    device.stop()
    assert device.leftovers() == []
    _wait_for("the stand-in's mount namespace to end", lambda: not _in_namespace(namespace), timeout=10)
    assert _mounts_under(device.root) == []
    assert device.adb("shell", "true").returncode != 0


@pytest.mark.skipif(os.geteuid() != 0, reason="loop devices and mounts need root")
def test_a_chroot_stand_in_holds_no_other_tests_filesystem(standin, tmp_path: Path) -> None:
    """Another test's lab, mounted when the stand-in's namespace is made, must go when
    that test takes it down: its loop device detached, not kept busy by a copy here."""
    image, mnt = tmp_path / "other-lab.img", tmp_path / "other-lab"
    mnt.mkdir()
    with image.open("wb") as f:
        f.truncate(16 * MIB)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True)
    loop_dev = loop.stdout.strip()
    try:
        subprocess.run(["mount", loop_dev, str(mnt)], check=True)
        device = standin(chroot=True)
        subprocess.run(["umount", str(mnt)], check=True)
        subprocess.run(["losetup", "-d", loop_dev], check=True)
        attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        assert str(image) not in attached, "the stand-in's namespace keeps the other lab's filesystem busy"
        assert device.adb("shell", "true").returncode == 0
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        subprocess.run(["losetup", "-d", loop_dev], capture_output=True)


def test_two_stand_ins_make_adb_ask_which(standin, adb_server: AdbServer) -> None:
    first = standin(model="One")
    second = standin(model="Two")
    unspecific = adb_server.adb("shell", "echo", "hi")
    assert unspecific.returncode != 0 and "more than one device" in unspecific.stderr
    assert first.adb("shell", "getprop", "ro.product.model").stdout == "One\n"
    assert second.adb("shell", "getprop", "ro.product.model").stdout == "Two\n"


def test_an_unauthorized_stand_in_is_listed_unauthorized(standin, adb_server: AdbServer) -> None:
    device = standin(unauthorized=True)
    assert device.connected is not None and device.connected.returncode == 0
    assert device.connected.stdout.strip() == f"failed to authenticate to {device.serial}"
    assert adb_server.devices()[device.serial] == "unauthorized"
    refused = device.adb("shell", "echo", "hi")
    assert refused.returncode != 0 and "device unauthorized" in refused.stderr
    assert refused.stdout == ""
    # adb offered its key for the user to accept, who never does: no service was opened
    assert not device.log.exists() or device.log.read_text() == ""


def test_a_secure_stand_in_takes_the_key_it_trusts(standin, adb_server: AdbServer) -> None:
    # the host signs the device's token with ~/.android/adbkey; the device checks the
    # signature against its adb_keys (RSA, PKCS#1 v1.5 over the token as a SHA-1 digest)
    device = standin(auth=True, trust_host=True)
    assert adb_server.devices()[device.serial] == "device"
    assert device.adb("shell", "echo", "hi").stdout == "hi\n"
    assert device.adb("shell", "getprop", "ro.adb.secure").stdout == "1\n"


def test_a_secure_stand_in_without_the_key_is_unauthorized(standin, adb_server: AdbServer) -> None:
    device = standin(auth=True)
    assert adb_server.devices()[device.serial] == "unauthorized"
    assert not device.adb_keys.exists()


def test_allowing_the_key_makes_a_device_that_remembers_it(standin, adb_server: AdbServer) -> None:
    device = standin(auth=True, accept_keys=True)  # the user taps "Allow"
    assert adb_server.devices()[device.serial] == "device"
    stored = device.adb_keys.read_text().splitlines()
    assert [line.split()[0] for line in stored] == [adb_server.public_key().split()[0]]
    # the next connection signs with that key: nothing more to allow
    adb_server.adb("disconnect", device.serial)
    _wait_for("the device to go", lambda: device.state() is None)
    adb_server.adb("connect", device.serial)
    _wait_for("the device to be back", lambda: device.state() == "device")
    assert device.adb_keys.read_text().splitlines() == stored


def _long_command_started(device, stderr: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    """``adb shell`` of a command that prints, then sleeps a minute: once it has printed."""
    running = subprocess.Popen(
        ["adb", "-s", device.serial, "shell", "echo start; sleep 60; echo end"],
        env=device.server.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    assert running.stdout is not None
    assert running.stdout.readline() == "start\n"
    return running


def test_killing_the_stand_in_mid_command_is_a_vanished_device(standin) -> None:
    device = standin()
    running = _long_command_started(device)
    device.signal(signal.SIGKILL)
    out, _ = running.communicate(timeout=30)
    # adb 29 ends the command when the transport goes; with no exit packet it exits 0, so a
    # caller must tell a finished command from a lost device by what the command printed
    assert "end" not in out and running.returncode == 0
    _wait_for("the device to be offline", lambda: device.state() in ("offline", None))
    assert device.leftovers() == []  # the sleep went with the stand-in
    gone = device.adb("shell", "echo", "hi")
    assert gone.returncode != 0 and ("offline" in gone.stderr or "not found" in gone.stderr)


@pytest.mark.skip(
    reason="with tests/lab/test_standin_device.py beside it, adb 29's shell client now and then never ends after "
    "the reset (3 of 6 runs, 30 s): unexplained, noted on #46; a lost device is tested by SIGKILL above"
)
def test_a_cut_connection_ends_the_command_and_adb_reconnects(standin) -> None:
    device = standin()
    running = _long_command_started(device, stderr=None)
    device.signal(signal.SIGUSR1)  # a reset on every connection; the stand-in lives on
    out, _ = running.communicate(timeout=30)
    assert "end" not in out
    _wait_for("the command on the device to be killed", lambda: "sleep" not in _marked_commands(device))
    # the adb server reconnects a TCP device by itself
    _wait_for("the device to be back", lambda: device.state() == "device", timeout=60)
    assert device.adb("shell", "echo", "back").stdout == "back\n"


def test_a_device_lost_mid_push_and_mid_pull(standin, tmp_path: Path) -> None:
    local = tmp_path / "payload"
    local.write_bytes(os.urandom(5 * MIB))
    device = standin(cut_after=MIB)
    pushed = device.adb("push", str(local), "/data/local/tmp/payload")
    assert pushed.returncode == 1 and "couldn't read from device" in pushed.stdout, pushed.stdout
    # as adbd, the device drops the file it never got whole, once it sees the connection go
    partial = device.root / "data" / "local" / "tmp" / "payload"
    _wait_for("the partial push to go", lambda: not partial.exists(), timeout=10)
    _wait_for("the device to be back", lambda: device.state() == "device", timeout=60)
    assert device.adb("push", str(local), "/data/local/tmp/payload").returncode == 0

    puller = standin(cut_after=MIB)
    (puller.root / "data" / "local" / "tmp" / "payload").write_bytes(local.read_bytes())
    back = tmp_path / "back"
    pulled = puller.adb("pull", "/data/local/tmp/payload", str(back))
    assert pulled.returncode == 1, pulled.stdout
    assert not back.exists()  # adb removes what it pulled in part


def _marked_commands(device: Standin) -> str:
    names = []
    for pid in marked_processes(device.token):
        try:
            names.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return "\n".join(names)


def test_teardown_leaves_nothing(adb_server: AdbServer, tmp_path: Path) -> None:
    device = Standin(adb_server, tmp_path / "device").start()
    background = device.adb("shell", "sleep 300 >/dev/null 2>&1 </dev/null & echo started")
    assert background.stdout == "started\n"
    device.stop()
    assert device.leftovers() == []
    assert device.serial not in adb_server.devices()


@pytest.mark.parametrize(
    ("option", "complaint"),
    [
        (["--model", "a:b"], "the banner cannot carry"),
        (["--prop", "ro.x=two\nlines"], "each on one line"),
        (["--prop", "novalue"], "NAME=VALUE"),
        (["--unauthorized", "--auth"], "--unauthorized takes no key"),
        (["--accept-keys"], "with --auth"),
    ],
)
def test_the_stand_in_refuses_what_it_cannot_be(option: list[str], complaint: str, tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, str(STANDIN), "--port", "0", "--root", str(tmp_path), *option],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0 and complaint in refused.stderr, refused.stderr


@pytest.mark.parametrize("port", ["5555", "5585"])
def test_emulator_ports_are_refused(port: str, tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, str(STANDIN), "--port", port, "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0 and "5555-5585" in refused.stderr
