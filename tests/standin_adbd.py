"""A stand-in Android device: the device side of the adb protocol over TCP, for tests.

No phone or emulator can be reached from the test machines, so the device flow of
``sqlwa … --adb`` is tested against this program, driven by the REAL adb client and
server (Debian's ``adb`` 29.0.6). ``adb connect 127.0.0.1:PORT`` makes it a device of the
adb server; ``adb -s 127.0.0.1:PORT shell|push|pull|devices -l|get-state|get-serialno``
work against it::

    python tests/standin_adbd.py --port 0 --root DIR [--model M --release R --prop K=V …]
                                 [--unauthorized | --auth [--accept-keys]] [--chroot]
                                 [--cut-after BYTES] [--log FILE]

``--port 0`` takes a free port; the first line on stdout is ``listening on PORT``.
Device paths map under ``--root`` (``/data/local/tmp/x`` is ``ROOT/data/local/tmp/x``;
``..`` and symlinks resolve with ROOT as ``/``, so no device path leads out of it); shell
commands run with ``/bin/sh -c`` in ROOT, with ``getprop`` (answering from the props
table) on their PATH. With ``--chroot`` (root only) they run chrooted to ROOT, in a mount
namespace of the stand-in's own that binds the host's /usr, /bin, /lib…, /etc (read-only),
/dev, /proc and /sys into ROOT, and makes ROOT/data a mount point: a command then names
device paths as on a phone (``/data/local/tmp/sqlwa-x/engine``), /proc/mounts lists
/data, and the mounts vanish with the stand-in. ``--log FILE`` appends each service the host opens
(``OPEN shell,v2,raw:…``) and each sync request (``SYNC STA2 /data/…``).
``--cut-after BYTES`` cuts the connection once, mid-stream, when that many bytes of
stream data (both ways) have passed: a phone lost in the middle of a push or pull.

SIGTERM/SIGINT: kill the commands, close, exit. SIGUSR1: cut every connection at once (a
reset, as a phone dropping off Wi-Fi) and keep listening; the adb server reconnects by
itself. SIGKILL closes the sockets as a phone vanishing does. Every process a stand-in
starts carries ``ADB_STANDIN_TOKEN`` in its environment; a guardian process, forked
first, kills them all once the stand-in is gone, however it went.

What adb 29 speaks, as learnt from AOSP's system/core/adb (protocol.txt, SYNC.TXT,
adb.cpp, file_sync_protocol.h, client/file_sync_client.cpp, shell_protocol.h) and
checked against Debian's adb 29.0.6 (tests/e2e/test_standin_adbd.py):

- **Messages.** A 24-byte header of six little-endian u32: command, arg0, arg1,
  data_length, data_check, magic (= command ^ 0xffffffff), then data_length bytes.
  ``data_check`` is named ``data_crc32`` but is the plain byte sum of the payload
  (adb.cpp, calculate_apacket_checksum). Commands: CNXN, AUTH, OPEN, OKAY, WRTE, CLSE
  (SYNC is obsolete; STLS, TLS, is only from adb 30 on and never offered here).
- **Versions.** The host's CNXN carries version 0x01000001 (A_VERSION, "skip checksum")
  and maxdata 1 MiB (MAX_PAYLOAD); the transport uses the smaller of each side's. From
  0x01000001 on neither side checks the byte sum and the host sends 0; this device
  answers with 0x01000001 and 1 MiB and still fills in the sum. CNXN and AUTH packets
  stay under 4 KiB (MAX_PAYLOAD_V1), the limit before the sizes are known.
- **Banner.** ``device::ro.product.name=…;ro.product.model=…;ro.product.device=…;
  features=…`` — split on ``:`` then ``;`` then ``=`` (adb.cpp, parse_banner), so no value
  may hold ``:``, ``;`` or ``=``; ``devices -l`` prints product/model/device from it. The
  host decides what to send from the features: ``shell_v2`` (the shell protocol; without
  it ``adb shell`` always exits 0), ``cmd``, ``stat_v2`` (STA2/LST2 instead of STAT),
  ``ls_v2`` (LIS2/DNT2), ``fixed_push_mkdir`` (SEND makes the parent directories; without
  it the client first runs ``mkdir`` over the shell). adb 29 knows no ``sendrecv_v2``.
- **Auth.** A secure device answers CNXN with AUTH(TOKEN=1, 0, 20 random bytes); the host
  state becomes "unauthorized", it answers AUTH(SIGNATURE=2) per key, the device sends a
  fresh TOKEN on each bad one, then the host sends AUTH(RSAPUBLICKEY=3) and waits for the
  user's tap on the phone, which stores the key and sends CNXN. A signature is RSA
  PKCS#1 v1.5 with the token taken as a SHA-1 digest (RSA_sign(NID_sha1, token)); the
  public key is base64 of Android's RSAPublicKey struct (u32 words, n0inv, n[words] and
  rr[words] little-endian, u32 exponent), a space and user@host, NUL-terminated; adbd
  keeps the keys it trusts in /data/misc/adb/adb_keys. The stand-in by default is an
  ``ro.adb.secure=0`` device that sends CNXN straight away; ``--auth`` checks signatures
  against ROOT/data/misc/adb/adb_keys, ``--accept-keys`` adds the user who taps "Allow",
  ``--unauthorized`` is a phone whose user never taps.
- **Streams.** OPEN(host-id, 0, "service\\0") → OKAY(our-id, host-id) or CLSE(0, host-id)
  for a service there is not. An OPEN implies a READY: each side may send one WRTE and
  must then wait for the other's OKAY before the next (one in flight per stream); every
  WRTE is answered with OKAY, which the receiver may hold back until it has room
  (protocol.txt; the stand-in does while 2 MiB wait unread). CLSE ends a stream; it is
  not answered.
- **Shell.** ``shell[,arg…]:command``; adb 29 sends ``shell,v2,TERM=…,raw:CMD`` for a
  command (``pty`` with ``-t`` or without a command); ``-x`` or a device without
  ``shell_v2`` gets the legacy ``shell:CMD``, a raw byte stream (stdout and stderr
  merged, no exit status). Shell v2 packets: one id byte (stdin 0, stdout 1, stderr 2,
  exit 3, close-stdin 4, window-size 5) and a u32 LE length; exit carries one byte, the
  status (128+N for a signal), after which the device closes the stream and the client
  exits with it. ``exec:CMD`` is a raw stream of stdout only.
- **Sync** (``sync:``), in the stream's bytes: requests are id + u32 length + path.
  STAT → id, mode, size, mtime (all 0: failed). STA2/LST2 → id, errno, dev, ino, mode,
  nlink, uid, gid, size (u64), atime, mtime, ctime (i64). LIST/LIS2 → DENT (mode, size,
  mtime, namelen, name) or DNT2 (the stat_v2 fields and namelen) per entry, then DONE.
  SEND "path,mode" then DATA (≤ 64 KiB each, split over WRTEs at will) and DONE(mtime);
  the device answers OKAY or FAIL+message only after DONE, and the client may pipeline
  several files before reading the answers. RECV path → DATA chunks then DONE, or FAIL.
  QUIT ends: the device closes the stream. Integers little-endian; errno values Linux's.
- **What the adb 29 client then shows** (each held by a test): ``adb connect`` to a
  device that wants a key it has not got prints "failed to authenticate to HOST:PORT"
  and exits 0; the device is listed "unauthorized" and a command fails with "error:
  device unauthorized." and three lines of advice. Two devices and no ``-s``: "error:
  more than one device/emulator". A connection lost mid-command ends ``adb shell`` with
  status 0 (no exit packet came, and 0 is where the client starts), so only the output
  tells a lost device from a finished command; mid-push, "failed to copy …: couldn't
  read from device" and status 1; mid-pull, status 1 and no file. Sync errors go to
  stdout when it is not a terminal. The server retries a lost TCP device by itself: it
  is "offline", then "device" again within seconds once the stand-in answers.
- **Host-side only.** ``devices -l``, ``get-state``, ``get-serialno`` are answered by the
  adb server from the transport (its serial for ``adb connect`` is ``HOST:PORT``).
  The server scans localhost ports 5555–5585 for emulators: a stand-in must not listen
  there or it becomes ``emulator-N`` of every adb server on the machine.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import errno
import os
import re
import secrets
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

A_CNXN = 0x4E584E43
A_AUTH = 0x48545541
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_CLSE = 0x45534C43
A_WRTE = 0x45545257

A_VERSION_MIN = 0x01000000
A_VERSION = 0x01000001  # from this version on, checksums are skipped
MAX_PAYLOAD = 1024 * 1024
MAX_PAYLOAD_V1 = 4 * 1024

AUTH_TOKEN = 1
AUTH_SIGNATURE = 2
AUTH_RSAPUBLICKEY = 3

FEATURES = ("shell_v2", "cmd", "stat_v2", "ls_v2", "fixed_push_mkdir")

SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT, SHELL_CLOSE_STDIN, SHELL_WINSIZE = range(6)

SYNC_DATA_MAX = 64 * 1024
EMULATOR_PORTS = range(5553, 5587)  # the adb server probes 5555..5585 (and each one's odd port)

HEADER = struct.Struct("<6I")
INBOX_HIGH = 2 * MAX_PAYLOAD  # unread bytes of a stream past which its OKAY waits

DEFAULT_PROPS = {
    "ro.product.name": "standin",
    "ro.product.model": "Standin",
    "ro.product.device": "standin",
    "ro.product.manufacturer": "sqlwa",
    "ro.product.cpu.abi": "arm64-v8a" if os.uname().machine in ("aarch64", "arm64") else "x86_64",
    "ro.build.version.release": "14",
    "ro.build.version.sdk": "34",
    "ro.build.type": "user",
    "ro.build.fingerprint": "sqlwa/standin/standin:14/STANDIN/1:user/release-keys",
    "ro.crypto.type": "file",
    "ro.adb.secure": "0",
    "ro.debuggable": "0",
}


def checksum(data: bytes) -> int:
    """adb's "data_crc32": the byte sum of the payload (adb.cpp, calculate_apacket_checksum)."""
    return sum(data) & 0xFFFFFFFF


class Cut(Exception):
    """The connection is gone (the host hung up, or the stand-in cut it)."""


class Stream:
    """One adb stream: bytes the host wrote to us, and writes to it one WRTE at a time."""

    def __init__(self, conn: Connection, local_id: int, remote_id: int) -> None:
        self.conn = conn
        self.local_id = local_id
        self.remote_id = remote_id
        self._cond = threading.Condition()
        self._inbox = bytearray()
        self._eof = False  # the host closed the stream (or the connection went)
        self._ready = True  # an OPEN implies a READY
        self._closed = False  # we sent CLSE
        self._owed = False  # an OKAY held back until the service reads the backlog
        self._write_lock = threading.Lock()
        self.on_close: Callable[[], None] | None = None

    # -- from the connection's reader
    def deliver(self, data: bytes) -> None:
        """Take a WRTE's data. Its OKAY goes back at once while little waits unread, else
        once the service has read the backlog: the host can run no further ahead."""
        with self._cond:
            self._inbox += data
            self._cond.notify_all()
            self._owed = len(self._inbox) > INBOX_HIGH
            owed = self._owed
        if not owed:
            self._acknowledge()

    def _acknowledge(self) -> None:
        try:
            self.conn.send(A_OKAY, self.local_id, self.remote_id)
        except Cut:
            pass

    def _taken(self) -> None:
        """After a read (the lock released): the OKAY held back, once the backlog is small."""
        with self._cond:
            owed = self._owed and len(self._inbox) <= INBOX_HIGH
            if owed:
                self._owed = False
        if owed:
            self._acknowledge()

    def okay(self) -> None:
        with self._cond:
            self._ready = True
            self._cond.notify_all()

    def hang_up(self) -> None:
        with self._cond:
            self._eof = True
            self._cond.notify_all()
        if self.on_close is not None:
            self.on_close()

    # -- for the service
    def read_some(self) -> bytes:
        """Whatever the host has written, b"" once it closed the stream."""
        with self._cond:
            while not self._inbox and not self._eof:
                self._cond.wait()
            data = bytes(self._inbox)
            self._inbox.clear()
        self._taken()
        return data

    def read_exact(self, n: int) -> bytes:
        with self._cond:
            while len(self._inbox) < n and not self._eof:
                self._cond.wait()
            if len(self._inbox) < n:
                raise Cut("stream closed mid-message")
            data = bytes(self._inbox[:n])
            del self._inbox[:n]
        self._taken()
        return data

    def write(self, data: bytes) -> None:
        with self._write_lock:
            for start in range(0, len(data), self.conn.max_payload):
                chunk = data[start : start + self.conn.max_payload]
                with self._cond:
                    while not self._ready and not self._eof:
                        self._cond.wait()
                    if self._eof or self._closed:
                        raise Cut("stream closed")
                    self._ready = False
                self.conn.send(A_WRTE, self.local_id, self.remote_id, chunk)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            eof = self._eof
        if not eof:
            try:
                self.conn.send(A_CLSE, self.local_id, self.remote_id)
            except Cut:
                pass
        self.conn.forget(self)


class Device:
    """What the stand-in is: its root, props, and the processes it runs."""

    def __init__(self, root: Path, props: dict[str, str], auth: str, token: str, *, accept_keys: bool = False) -> None:
        self.root = root.resolve()
        self.props = props
        self.auth = auth  # "open" (ro.adb.secure=0), "keys" (adb_keys), "never" (no key is ever taken)
        self.accept_keys = accept_keys
        self.adb_keys = self.root / "data" / "misc" / "adb" / "adb_keys"
        self.chroot = False  # --chroot: commands run with ROOT as their /
        self.token = token
        self.bin = self.root / "system" / "bin"
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._procs_lock = threading.Lock()
        self.connections: set[Connection] = set()
        self.connections_lock = threading.Lock()
        self.log: Path | None = None
        self.cut_after: int | None = None  # --cut-after: stream bytes, both ways, before the one cut
        self._moved = 0
        self._log_lock = threading.Lock()

    def moved(self, n: int) -> bool:
        """Count ``n`` stream bytes; True once, when the count first reaches ``--cut-after``."""
        if self.cut_after is None:
            return False
        with self._log_lock:
            before, self._moved = self._moved, self._moved + n
            return before < self.cut_after <= self._moved

    def note(self, line: str) -> None:
        """Append a line to the ``--log`` file (the services and sync requests, in order)."""
        if self.log is None:
            return
        with self._log_lock, open(self.log, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(line + "\n")

    def trusted_keys(self) -> list[tuple[int, int]]:
        """The public keys in ROOT/data/misc/adb/adb_keys, as (modulus, exponent)."""
        try:
            lines = self.adb_keys.read_bytes().splitlines()
        except OSError:
            return []
        return [key for line in lines if (key := parse_public_key(line)) is not None]

    def trust(self, public_key: bytes) -> None:
        with self._log_lock:
            self.adb_keys.parent.mkdir(parents=True, exist_ok=True)
            with open(self.adb_keys, "ab") as f:
                f.write(public_key.rstrip(b"\0").strip() + b"\n")

    def banner(self) -> bytes:
        keys = ("ro.product.name", "ro.product.model", "ro.product.device")
        parts = [f"{k}={self.props.get(k, '')}" for k in keys] + ["features=" + ",".join(FEATURES)]
        return ("device::" + ";".join(parts)).encode()

    def prepare(self) -> None:
        for sub in ("data/local/tmp", "sdcard", "system/bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        lines = "".join(f"{k}={v}\n" for k, v in sorted(self.props.items()))
        getprop = self.bin / "getprop"
        getprop.write_text(GETPROP.replace("@PROPS@", lines))
        getprop.chmod(0o755)

    # -- device paths
    def host_path(self, device_path: str, *, follow: bool = True) -> Path:
        """Where a device path lives under ROOT, ROOT standing as the device's ``/``
        (:func:`resolve_in_root`)."""
        return resolve_in_root(self.root, device_path, follow=follow)

    # -- processes
    def env(self) -> dict[str, str]:
        if self.chroot:  # the command's / is ROOT: device paths as they are
            return {
                "PATH": "/system/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                "ANDROID_DATA": "/data",
                "ANDROID_ROOT": "/system",
                "EXTERNAL_STORAGE": "/sdcard",
                "TMPDIR": "/data/local/tmp",
                "HOME": "/",
                "USER": "shell",
                "LANG": "C.UTF-8",
                "ADB_STANDIN_ROOT": str(self.root),
                "ADB_STANDIN_TOKEN": self.token,
            }
        return {
            "PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin",
            "ANDROID_DATA": str(self.root / "data"),
            "ANDROID_ROOT": str(self.root / "system"),
            "EXTERNAL_STORAGE": str(self.root / "sdcard"),
            "TMPDIR": str(self.root / "data" / "local" / "tmp"),
            "HOME": str(self.root),
            "USER": "shell",
            "LANG": "C.UTF-8",
            "ADB_STANDIN_ROOT": str(self.root),
            "ADB_STANDIN_TOKEN": self.token,
        }

    def spawn(
        self, argv: list[str], *, stderr_apart: bool, stdin: int | None = None, stdout: int | None = None
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            cwd=None if self.chroot else self.root,
            env=self.env(),
            preexec_fn=self._enter_root if self.chroot else None,
            stdin=subprocess.PIPE if stdin is None else stdin,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=(subprocess.PIPE if stderr_apart else subprocess.STDOUT) if stdout is None else stdout,
            start_new_session=True,
        )
        with self._procs_lock:
            self._procs.add(proc)
        return proc

    def _enter_root(self) -> None:
        os.chroot(self.root)
        os.chdir("/")

    def reap(self, proc: subprocess.Popen[bytes]) -> int:
        code = proc.wait()
        with self._procs_lock:
            self._procs.discard(proc)
        return 128 - code if code < 0 else code

    def hang_up_process(self, proc: subprocess.Popen[bytes]) -> None:
        """The host closed the stream: SIGHUP the command's group, SIGKILL it a second later."""
        if proc.poll() is not None:
            return
        _killpg(proc.pid, signal.SIGHUP)
        timer = threading.Timer(1.0, _killpg, (proc.pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def kill_all(self) -> None:
        with self._procs_lock:
            procs = list(self._procs)
        for proc in procs:
            _killpg(proc.pid, signal.SIGKILL)

    def cut_all(self) -> None:
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            conn.cut()


def marked_processes(token: str) -> list[int]:
    """The processes whose environment carries ``ADB_STANDIN_TOKEN=token``: what one stand-in
    started, and what those started in turn."""
    marker = f"ADB_STANDIN_TOKEN={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_marked(token: str) -> None:
    """SIGKILL every process of :func:`marked_processes`, again until none is left (one may
    fork while its siblings die); zombies are their parents' to reap."""
    for _ in range(50):
        alive = []
        for pid in marked_processes(token):
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        continue
                os.kill(pid, signal.SIGKILL)
                alive.append(pid)
            except (OSError, IndexError):
                continue
        if not alive:
            return
        time.sleep(0.02)


def start_guardian(token: str) -> int:
    """Fork a process that outlives the stand-in by a moment: once the stand-in is gone, by
    any signal, SIGKILL included (the pipe's end closes), it kills what the stand-in started.
    Returns the pipe's write end, which the stand-in keeps open and never writes."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        try:
            os.close(write_end)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # nobody waits on the stand-in's output for this one
                os.dup2(devnull, fd)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
                signal.signal(sig, signal.SIG_IGN)
            while os.read(read_end, 64):
                pass
            kill_marked(token)
        finally:
            os._exit(0)
    os.close(read_end)
    return write_end


# the DER prefix of a SHA-1 DigestInfo, which PKCS#1 v1.5 puts before the digest
SHA1_DIGEST_INFO = bytes.fromhex("3021300906052b0e03021a05000414")


def parse_public_key(line: bytes) -> tuple[int, int] | None:
    """(modulus, exponent) of an adb public key: base64 of Android's RSAPublicKey struct
    (u32 words, u32 n0inv, n and rr of ``words`` u32 each, little-endian, u32 exponent),
    then a space and user@host; None when it is not one."""
    try:
        raw = base64.b64decode(line.rstrip(b"\0").split()[0], validate=True)
        (words,) = struct.unpack_from("<I", raw, 0)
        modulus = int.from_bytes(raw[8 : 8 + 4 * words], "little")
        (exponent,) = struct.unpack_from("<I", raw, 8 + 8 * words)
    except (ValueError, IndexError, struct.error):
        return None
    return (modulus, exponent) if modulus > 0 and exponent > 0 else None


def verify_signature(key: tuple[int, int], token: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is the host's RSA_sign(NID_sha1, token) under ``key``: PKCS#1
    v1.5, the token standing as the SHA-1 digest."""
    modulus, exponent = key
    size = (modulus.bit_length() + 7) // 8
    if len(signature) != size or not token:
        return False
    block = pow(int.from_bytes(signature, "big"), exponent, modulus).to_bytes(size, "big")
    payload = SHA1_DIGEST_INFO + token
    return block == b"\x00\x01" + b"\xff" * (size - 3 - len(payload)) + b"\x00" + payload


CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
#: The host's mounts a device namespace keeps: the root filesystem and the kernel's own.
KEPT_HOST_MOUNTS = ("/proc", "/sys", "/dev")
# what of the host a command in ROOT needs: its programs and libraries (read-only), /dev,
# /proc, /sys; a merged-/usr link (/bin -> usr/bin) is copied as the link
HOST_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc", "sys")
WRITABLE_HOST_DIRS = ("dev", "proc", "sys")


def _mount(source: str | None, target: str | Path | None, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    as_bytes = [None if v is None else os.fsencode(v) for v in (source, target)]
    if libc.mount(as_bytes[0], as_bytes[1], None, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def resolve_in_root(root: Path, device_path: str, *, follow: bool = True) -> Path:
    """Where ``device_path`` lies under ``root``, ``root`` standing as the device's ``/``:
    ``..`` stops there and a symlink's absolute target is a device path too, so no path,
    however its links run, leads out. The last part is not followed unless ``follow``.
    OSError(ELOOP) after 40 links."""
    pending = [part for part in device_path.split("/") if part not in ("", ".")]
    parts: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if parts:
                parts.pop()
            continue
        here = root.joinpath(*parts, part)
        if (pending or follow) and here.is_symlink():
            links += 1
            if links > 40:
                raise OSError(errno.ELOOP, "Too many levels of symbolic links", device_path)
            target = os.readlink(here)
            if target.startswith("/"):
                parts = []
            pending[:0] = [p for p in target.split("/") if p not in ("", ".")]
            continue
        parts.append(part)
    return root.joinpath(*parts)


def namespace_processes(ns: str) -> list[int]:
    """The processes in the mount namespace ``ns`` (a ``/proc/PID/ns/mnt`` link's text)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{entry}/ns/mnt") == ns:
                found.append(int(entry))
        except OSError:
            pass
    return found


def kill_namespace(ns: str, spare: int, pause_s: float = 0.05) -> None:
    """SIGKILL every process in the mount namespace ``ns`` but ``spare``, again while
    they fork (up to 50 rounds), until none is left."""
    for _ in range(50):
        pids = [pid for pid in namespace_processes(ns) if pid != spare]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(pause_s)


def copied_mounts() -> list[str]:
    """The mount points this namespace copied from the host that it does not keep
    (:data:`KEPT_HOST_MOUNTS` and /), deepest first. Octal escapes (``\\040``) decoded."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4])
        kept = point == "/" or any(point == k or point.startswith(k + "/") for k in KEPT_HOST_MOUNTS)
        if not kept:
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def detach_copied_mounts() -> None:
    """Let go of the host's other mounts in this namespace. A copy of a lab filesystem
    (another test's loop device, FUSE daemon or tmpfs) held here would outlive its
    unmount on the host: the loop device stays busy (``losetup -d`` fails), the FUSE
    daemon keeps serving. Detached lazily, each as a whole; the host keeps its own."""
    libc = ctypes.CDLL(None, use_errno=True)
    for point in copied_mounts():
        if libc.umount2(os.fsencode(point), MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
            err = ctypes.get_errno()
            raise SystemExit(f"--chroot: detaching the host's {point} here: {os.strerror(err)}")


def enter_device_namespace(root: Path) -> None:
    """Give the stand-in a mount namespace of its own in which ROOT holds the host's
    programs (bind mounts, read-only), so that a command chrooted to ROOT runs with device
    paths as they are. Nothing propagates back: the namespace is private from its first
    step, and its mounts end with its last process. Needs root; call before any thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"--chroot: unshare(CLONE_NEWNS): {os.strerror(err)} (needs root)")
    _mount("none", "/", MS_REC | MS_PRIVATE)  # before any mount: none may reach the host
    detach_copied_mounts()
    for name in HOST_DIRS:
        host, inside = Path("/") / name, root / name
        if host.is_symlink():
            if not inside.is_symlink():
                inside.symlink_to(os.readlink(host))
        elif host.is_dir():
            inside.mkdir(exist_ok=True)
            _mount(str(host), inside, MS_BIND | MS_REC)
            if name not in WRITABLE_HOST_DIRS:
                _mount(None, inside, MS_REMOUNT | MS_BIND | MS_RDONLY)
    # /data a mount point of its own, as a phone's is: the device's mount table (its
    # /proc/mounts, read from inside ROOT) lists it, with the filesystem ROOT is on
    _mount(str(root / "data"), root / "data", MS_BIND)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


GETPROP = r"""#!/bin/sh
# getprop of the adb stand-in: answers from the props table it was started with
props() {
cat <<'STANDIN_PROPS'
@PROPS@STANDIN_PROPS
}
if [ $# -eq 0 ]; then
    props | while IFS= read -r line; do printf '[%s]: [%s]\n' "${line%%=*}" "${line#*=}"; done
    exit 0
fi
if value=$(props | awk -v k="$1" 'index($0, k "=") == 1 { print substr($0, length(k) + 2); found = 1; exit } END { exit !found }'); then
    printf '%s\n' "$value"
else
    printf '%s\n' "${2:-}"
fi
"""


class Connection:
    """One TCP connection from an adb server: the handshake, then the streams."""

    def __init__(self, device: Device, sock: socket.socket) -> None:
        self.device = device
        self.sock = sock
        self._send_lock = threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._streams_lock = threading.Lock()
        self._next_id = 1
        self.version = A_VERSION_MIN
        self.max_payload = MAX_PAYLOAD_V1
        self.online = False
        self._dead = False
        self._token = b""

    # -- wire
    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        if command == A_WRTE and self.device.moved(len(data)):
            self.cut()
        header = HEADER.pack(command, arg0, arg1, len(data), checksum(data), command ^ 0xFFFFFFFF)
        with self._send_lock:
            if self._dead:
                raise Cut("connection gone")
            try:
                self.sock.sendall(header + data)
            except OSError as exc:
                self._dead = True
                raise Cut(str(exc)) from exc

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except OSError as exc:
                raise Cut(str(exc)) from exc
            if not chunk:
                raise Cut("host hung up")
            buf += chunk
        return bytes(buf)

    def _read_message(self) -> tuple[int, int, int, bytes]:
        command, arg0, arg1, length, check, magic = HEADER.unpack(self._recv_exact(HEADER.size))
        if magic != command ^ 0xFFFFFFFF:
            raise Cut(f"bad magic on {command:#x}")
        if length > MAX_PAYLOAD:
            raise Cut(f"payload of {length} bytes")
        data = self._recv_exact(length) if length else b""
        if self.version < A_VERSION and command != A_CNXN and check != checksum(data):
            raise Cut("bad checksum")
        return command, arg0, arg1, data

    # -- streams
    def forget(self, stream: Stream) -> None:
        with self._streams_lock:
            self._streams.pop(stream.local_id, None)

    def cut(self) -> None:
        """Drop the connection as a vanished device does: a reset, no goodbye."""
        with self._send_lock:
            self._dead = True
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self) -> None:
        with self.device.connections_lock:
            self.device.connections.add(self)
        try:
            self._serve()
        except Cut:
            pass
        finally:
            with self.device.connections_lock:
                self.device.connections.discard(self)
            self._dead = True
            with self._streams_lock:
                streams = list(self._streams.values())
                self._streams.clear()
            for stream in streams:
                stream.hang_up()
            try:
                self.sock.close()
            except OSError:
                pass

    def _serve(self) -> None:
        while True:
            command, arg0, arg1, data = self._read_message()
            if command == A_CNXN:
                self._connect(arg0, arg1)
            elif command == A_AUTH:
                self._auth(arg0, data)
            elif not self.online:
                continue  # nothing but CNXN/AUTH counts before the handshake
            elif command == A_OPEN and arg0 != 0 and arg1 == 0:
                self._open(arg0, data.rstrip(b"\0").decode("utf-8", "replace"))
            elif command == A_WRTE and arg0 != 0 and arg1 != 0:
                if self.device.moved(len(data)):
                    self.cut()
                    raise Cut("cut, as --cut-after asked")
                stream = self._find(arg1)
                if stream is not None:
                    stream.deliver(data)
            elif command == A_OKAY and arg0 != 0 and arg1 != 0:
                stream = self._find(arg1)
                if stream is not None:
                    stream.okay()
            elif command == A_CLSE and arg1 != 0:
                stream = self._find(arg1)
                if stream is not None:
                    self.forget(stream)
                    stream.hang_up()
            else:
                raise Cut(f"unknown command {command:#x}")

    def _find(self, local_id: int) -> Stream | None:
        with self._streams_lock:
            return self._streams.get(local_id)

    def _connect(self, version: int, max_payload: int) -> None:
        if version < A_VERSION_MIN or max_payload < MAX_PAYLOAD_V1:
            raise Cut("host too old")
        if self.online:  # a reconnect on the same socket: every stream ends
            self.online = False
            with self._streams_lock:
                streams = list(self._streams.values())
                self._streams.clear()
            for stream in streams:
                stream.hang_up()
        self.version = min(version, A_VERSION)
        self.max_payload = min(max_payload, MAX_PAYLOAD)
        if self.device.auth != "open":
            self._send_token()
            return
        self._go_online()

    def _go_online(self) -> None:
        self.online = True
        self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, self.device.banner())

    def _send_token(self) -> None:
        self._token = secrets.token_bytes(20)
        self.send(A_AUTH, AUTH_TOKEN, 0, self._token)

    def _auth(self, kind: int, data: bytes) -> None:
        device = self.device
        if self.online or device.auth == "open":
            return
        if kind == AUTH_SIGNATURE:
            if device.auth == "keys" and any(verify_signature(key, self._token, data) for key in device.trusted_keys()):
                self._go_online()
            else:  # as adbd after a signature it cannot verify: a fresh token for the next key
                self._send_token()
        elif kind == AUTH_RSAPUBLICKEY:
            # the phone now asks its user; with --accept-keys the user taps "Allow"
            if device.auth == "keys" and device.accept_keys and parse_public_key(data) is not None:
                device.trust(data)
                self._go_online()

    def _open(self, remote_id: int, service: str) -> None:
        self.device.note(f"OPEN {service}")
        handler = service_for(service)
        if handler is None:
            self.send(A_CLSE, 0, remote_id)
            return
        with self._streams_lock:
            local_id = self._next_id
            self._next_id += 1
            stream = Stream(self, local_id, remote_id)
            self._streams[local_id] = stream
        self.send(A_OKAY, local_id, remote_id)
        threading.Thread(target=_run_service, args=(handler, self.device, stream), daemon=True).start()


def _run_service(handler: Callable[[Device, Stream], None], device: Device, stream: Stream) -> None:
    try:
        handler(device, stream)
    except Cut:
        pass
    finally:
        stream.close()


def service_for(service: str) -> Callable[[Device, Stream], None] | None:
    name, _, rest = service.partition(":")
    base, *args = name.split(",")
    if base == "shell" and service.find(":") >= 0:
        v2 = "v2" in args
        pty = "pty" in args or ("raw" not in args and rest == "")
        return lambda device, stream: shell_service(device, stream, rest, v2=v2, pty=pty)
    if name == "exec" and rest:
        return lambda device, stream: exec_service(device, stream, rest)
    if service == "sync:":
        return sync_service
    if service in ("root:", "unroot:"):
        return root_service
    return None


def root_service(device: Device, stream: Stream) -> None:
    """``adb root``: what adbd answers on a user build, or where it already is root."""
    if device.props.get("ro.build.type") == "user":
        stream.write(b"adbd cannot run as root in production builds\n")
    else:
        stream.write(b"adbd is already running as root\n")


# -- shell -----------------------------------------------------------------------------


def _shell_argv(command: str) -> list[str]:
    # no command: a shell reading stdin, interactive when that is a pty (as adbd's)
    return ["/bin/sh", "-c", command] if command else ["/bin/sh"]


def _pump(fd: int, emit: Callable[[bytes], None]) -> None:
    """Copy what a command writes to ``fd`` onto the stream until EOF (or the stream ends)."""
    try:
        while True:
            try:
                data = os.read(fd, SYNC_DATA_MAX)
            except OSError:  # a pty reads EIO once its last writer is gone
                data = b""
            if not data:
                return
            emit(data)
    except Cut:
        pass
    finally:
        os.close(fd)


def shell_service(device: Device, stream: Stream, command: str, *, v2: bool, pty: bool) -> None:
    master = -1
    if pty:
        master, slave = os.openpty()
        proc = device.spawn(_shell_argv(command), stderr_apart=False, stdin=slave, stdout=slave)
        os.close(slave)
        outputs = [(os.dup(master), SHELL_STDOUT)]
        stdin_fd = master
    else:
        proc = device.spawn(_shell_argv(command), stderr_apart=v2)
        assert proc.stdin is not None and proc.stdout is not None
        outputs = [(os.dup(proc.stdout.fileno()), SHELL_STDOUT)]
        proc.stdout.close()
        if proc.stderr is not None:
            outputs.append((os.dup(proc.stderr.fileno()), SHELL_STDERR))
            proc.stderr.close()
        stdin_fd = os.dup(proc.stdin.fileno())
        proc.stdin.close()
    stream.on_close = lambda: device.hang_up_process(proc)

    def emit_as(kind: int) -> Callable[[bytes], None]:
        if not v2:
            return stream.write
        return lambda data: stream.write(struct.pack("<BI", kind, len(data)) + data)

    pumps = [threading.Thread(target=_pump, args=(fd, emit_as(kind)), daemon=True) for fd, kind in outputs]
    for pump in pumps:
        pump.start()
    feeder = threading.Thread(target=_feed_stdin, args=(stream, stdin_fd, v2, master, proc), daemon=True)
    feeder.start()
    code = device.reap(proc)
    for pump in pumps:
        pump.join()
    if v2:
        stream.write(struct.pack("<BI", SHELL_EXIT, 1) + bytes([code & 0xFF]))
    if pty and master >= 0:
        try:
            os.close(master)
        except OSError:
            pass


def _feed_stdin(stream: Stream, fd: int, v2: bool, master: int, proc: subprocess.Popen[bytes]) -> None:
    """The host's stdin for the command (shell v2 packets, or raw bytes), until either ends.
    Owns ``fd`` and closes it, unless it is a pty's master (which carries the output too)."""
    open_fd = [fd] if master < 0 else []

    def write_all(data: bytes) -> bool:
        try:
            while data:
                data = data[os.write(fd, data) :]
            return True
        except OSError:
            return False

    def close_stdin() -> None:
        while open_fd:
            os.close(open_fd.pop())

    try:
        if not v2:
            while data := stream.read_some():
                if not write_all(data):
                    break
            return
        while True:
            kind, length = struct.unpack("<BI", stream.read_exact(5))
            data = stream.read_exact(length) if length else b""
            if kind == SHELL_STDIN:
                write_all(data)
            elif kind == SHELL_CLOSE_STDIN:
                if master >= 0:
                    write_all(b"\x04")  # EOF, as the line discipline takes it
                return
            elif kind == SHELL_WINSIZE and master >= 0:
                _set_winsize(master, data)
    except Cut:
        pass
    finally:
        close_stdin()


def _set_winsize(master: int, data: bytes) -> None:
    import fcntl
    import termios

    try:  # "rows x cols,xpixels x ypixels" (shell_service.cpp)
        sizes, _, pixels = data.decode().rstrip("\0").partition(",")
        rows, cols = (int(v) for v in sizes.split("x"))
        xpix, ypix = (int(v) for v in pixels.split("x")) if pixels else (0, 0)
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, xpix, ypix))
    except (ValueError, OSError):
        pass


def exec_service(device: Device, stream: Stream, command: str) -> None:
    proc = device.spawn(_shell_argv(command), stderr_apart=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stream.on_close = lambda: device.hang_up_process(proc)
    proc.stderr.close()
    out = os.dup(proc.stdout.fileno())
    proc.stdout.close()
    stdin_fd = os.dup(proc.stdin.fileno())
    proc.stdin.close()
    feeder = threading.Thread(target=_feed_stdin, args=(stream, stdin_fd, False, -1, proc), daemon=True)
    feeder.start()
    _pump(out, stream.write)
    device.reap(proc)


# -- sync ------------------------------------------------------------------------------


def _fail(stream: Stream, message: str) -> None:
    data = message.encode()
    stream.write(struct.pack("<4sI", b"FAIL", len(data)) + data)


def _stat_v2(kind: bytes, st: os.stat_result | None, error: int) -> bytes:
    if st is None:
        return struct.pack("<4sIQQIIIIQqqq", kind, error, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return struct.pack(
        "<4sIQQIIIIQqqq",
        kind,
        0,
        st.st_dev,
        st.st_ino,
        st.st_mode,
        st.st_nlink,
        st.st_uid,
        st.st_gid,
        st.st_size,
        int(st.st_atime),
        int(st.st_mtime),
        int(st.st_ctime),
    )


def _lstat(device: Device, path: str, *, follow: bool) -> tuple[os.stat_result | None, int]:
    try:
        target = device.host_path(path, follow=follow)
        return (os.stat(target) if follow else os.lstat(target)), 0
    except OSError as exc:
        return None, exc.errno or errno.EIO


def sync_service(device: Device, stream: Stream) -> None:
    while True:
        try:
            head = stream.read_exact(8)
        except Cut:
            return
        kind, length = head[:4], struct.unpack("<I", head[4:])[0]
        if kind == b"QUIT":
            return
        if length > 1024:
            _fail(stream, "path too long")
            return
        path = stream.read_exact(length).decode("utf-8", "surrogateescape")
        device.note(f"SYNC {kind.decode('latin-1')} {path}")
        if kind == b"STAT":
            st, _ = _lstat(device, path, follow=False)
            fields = (st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime) & 0xFFFFFFFF) if st else (0, 0, 0)
            stream.write(struct.pack("<4sIII", b"STAT", *fields))
        elif kind in (b"STA2", b"LST2"):
            st, err = _lstat(device, path, follow=kind == b"STA2")
            stream.write(_stat_v2(kind, st, err))
        elif kind in (b"LIST", b"LIS2"):
            _sync_list(device, stream, path, v2=kind == b"LIS2")
        elif kind == b"SEND":
            if not _sync_send(device, stream, path):
                return
        elif kind == b"RECV":
            _sync_recv(device, stream, path)
        else:
            _fail(stream, f"unknown sync request {kind!r}")
            return


def _sync_list(device: Device, stream: Stream, path: str, *, v2: bool) -> None:
    try:
        directory = device.host_path(path)
        names = [".", ".."] + sorted(os.listdir(directory))
    except OSError:
        names, directory = [], device.root
    out = bytearray()
    for name in names:
        try:
            st = os.lstat(directory / name)
        except OSError:
            continue
        raw = os.fsencode(name)
        if v2:
            out += _stat_v2(b"DNT2", st, 0) + struct.pack("<I", len(raw)) + raw
        else:
            out += (
                struct.pack(
                    "<4sIIII", b"DENT", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime) & 0xFFFFFFFF, len(raw)
                )
                + raw
            )
    if v2:
        out += _stat_v2(b"DONE", None, 0) + struct.pack("<I", 0)
    else:
        out += struct.pack("<4sIIII", b"DONE", 0, 0, 0, 0)
    stream.write(bytes(out))


def _sync_send(device: Device, stream: Stream, spec: str) -> bool:
    """SEND "path,mode" DATA… DONE(mtime) → OKAY or FAIL. False: the stream is lost."""
    path, comma, mode_text = spec.rpartition(",")
    if not comma:
        path, mode_text = spec, "33188"  # 0100644
    error = ""
    try:
        mode = int(mode_text)
    except ValueError:
        mode, error = 0o100644, f"bad mode {mode_text!r}"
    target: Path | None = None
    out: BinaryIO | None = None
    content = bytearray()  # a symlink's target
    if not error:
        try:
            target = device.host_path(path, follow=False)
            target.parent.mkdir(parents=True, exist_ok=True)  # fixed_push_mkdir
            if stat.S_ISLNK(mode):
                pass
            else:
                if target.is_symlink() or (target.exists() and not target.is_file()):
                    if target.is_dir() and not target.is_symlink():
                        raise OSError(errno.EISDIR, "is a directory")
                    target.unlink()
                out = open(target, "wb")  # closed below, on every path
        except OSError as exc:
            error = f"couldn't create file: {exc.strerror or exc}"
    mtime = 0
    try:
        while True:
            head = stream.read_exact(8)
            kind, length = head[:4], struct.unpack("<I", head[4:])[0]
            if kind == b"DATA":
                if length > SYNC_DATA_MAX:
                    error = error or "data chunk larger than 64 KiB"
                data = stream.read_exact(length)
                if error:
                    continue
                try:
                    if out is not None:
                        out.write(data)
                    else:
                        content += data
                except OSError as exc:
                    error = f"write failed: {exc.strerror or exc}"
            elif kind == b"DONE":
                mtime = length
                break
            else:
                _discard(out, target)
                _fail(stream, f"invalid data message {kind!r}")
                return False
    except Cut:
        _discard(out, target)  # as adbd: a push the host never finished leaves no file
        raise
    if out is not None:
        out.close()
    if not error and target is not None:
        try:
            if stat.S_ISLNK(mode):
                if target.is_symlink() or target.exists():
                    target.unlink()
                os.symlink(bytes(content).rstrip(b"\0"), target)
            else:
                os.chmod(target, mode & 0o7777)
                os.utime(target, (mtime, mtime))
        except OSError as exc:
            error = f"couldn't finish file: {exc.strerror or exc}"
    if error:
        if target is not None and out is not None and not stat.S_ISLNK(mode):
            try:
                target.unlink()
            except OSError:
                pass
        _fail(stream, error)
    else:
        stream.write(struct.pack("<4sI", b"OKAY", 0))
    return True


def _discard(out: BinaryIO | None, target: Path | None) -> None:
    if out is None or target is None:
        return
    out.close()
    try:
        target.unlink()
    except OSError:
        pass


def _sync_recv(device: Device, stream: Stream, path: str) -> None:
    try:
        source = open(device.host_path(path), "rb")  # closed below
    except OSError as exc:
        _fail(stream, f"open failed: {exc.strerror or exc}")
        return
    with source:
        while True:
            try:
                data = source.read(SYNC_DATA_MAX)
            except OSError as exc:
                _fail(stream, f"read failed: {exc.strerror or exc}")
                return
            if not data:
                break
            stream.write(struct.pack("<4sI", b"DATA", len(data)) + data)
    stream.write(struct.pack("<4sI", b"DONE", 0))


# -- the program -----------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A stand-in adbd over TCP, for tests.")
    parser.add_argument("--port", type=int, required=True, help="TCP port (0: a free one, printed)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--root", type=Path, required=True, help="the device's / on this machine")
    parser.add_argument("--model", help="ro.product.model")
    parser.add_argument("--release", help="ro.build.version.release")
    parser.add_argument("--sdk", help="ro.build.version.sdk")
    parser.add_argument("--build-type", help="ro.build.type (user, userdebug, eng)")
    parser.add_argument("--crypto-type", help="ro.crypto.type (file, block, none)")
    parser.add_argument("--abi", help="ro.product.cpu.abi")
    parser.add_argument("--prop", action="append", default=[], metavar="NAME=VALUE", help="any other property")
    parser.add_argument("--unauthorized", action="store_true", help="never accept the host's key")
    parser.add_argument("--auth", action="store_true", help="take the keys in ROOT/data/misc/adb/adb_keys")
    parser.add_argument("--accept-keys", action="store_true", help="with --auth: the user allows a key offered")
    parser.add_argument(
        "--cut-after",
        type=int,
        metavar="BYTES",
        help="cut the connection once, when this many stream bytes have passed",
    )
    parser.add_argument(
        "--chroot",
        action="store_true",
        help="run commands with ROOT as their / (needs root: a private mount namespace)",
    )
    parser.add_argument("--log", type=Path, help="append each service opened and sync request to this file")
    parser.add_argument("--token", default="", help="marks every process started (ADB_STANDIN_TOKEN)")
    return parser.parse_args(argv)


def props_of(args: argparse.Namespace) -> dict[str, str]:
    props = dict(DEFAULT_PROPS)
    named = {
        "ro.product.model": args.model,
        "ro.build.version.release": args.release,
        "ro.build.version.sdk": args.sdk,
        "ro.build.type": args.build_type,
        "ro.crypto.type": args.crypto_type,
        "ro.product.cpu.abi": args.abi,
    }
    props.update({k: v for k, v in named.items() if v is not None})
    for item in args.prop:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SystemExit(f"--prop {item!r}: NAME=VALUE")
        props[key] = value
    if args.unauthorized or args.auth:
        props["ro.adb.secure"] = "1"
    for key, value in props.items():  # one line of getprop's table each
        if "\n" in key or "\n" in value or "=" in key or not key.strip():
            raise SystemExit(f"prop {key!r}={value!r}: a name without '=' and a value, each on one line")
    for key in ("ro.product.name", "ro.product.model", "ro.product.device"):
        if any(c in props[key] for c in ":;="):
            raise SystemExit(f"{key} {props[key]!r}: the banner cannot carry ':', ';' or '='")
    return props


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.port in EMULATOR_PORTS:
        raise SystemExit(f"port {args.port}: adb servers probe 5555-5585 for emulators; take another")
    if args.unauthorized and (args.auth or args.accept_keys):
        raise SystemExit("--unauthorized takes no key: not with --auth or --accept-keys")
    if args.accept_keys and not args.auth:
        raise SystemExit("--accept-keys: with --auth")
    auth = "never" if args.unauthorized else "keys" if args.auth else "open"
    device = Device(args.root, props_of(args), auth, args.token or secrets.token_hex(8), accept_keys=args.accept_keys)
    device.log = args.log
    device.chroot = args.chroot
    device.cut_after = args.cut_after
    device.prepare()
    if args.chroot:
        enter_device_namespace(device.root)
    start_guardian(device.token)  # before any thread: a fork copies only the caller
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    while True:
        listener.bind((args.host, args.port))
        port = listener.getsockname()[1]
        if port not in EMULATOR_PORTS:
            break
        listener.close()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.listen(16)

    stop_r, stop_w = os.pipe()
    cut_r, cut_w = os.pipe()

    def on_stop(signum: int, frame: object) -> None:
        os.write(stop_w, b"x")

    def on_cut(signum: int, frame: object) -> None:
        os.write(cut_w, b"x")

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_stop)
    signal.signal(signal.SIGUSR1, on_cut)
    print(f"listening on {port}", flush=True)
    try:
        while True:
            ready, _, _ = select.select([listener, stop_r, cut_r], [], [])
            if stop_r in ready:
                break
            if cut_r in ready:
                os.read(cut_r, 64)
                device.cut_all()
            if listener in ready:
                sock, _ = listener.accept()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                threading.Thread(target=Connection(device, sock).run, daemon=True).start()
    finally:
        listener.close()
        device.kill_all()
        device.cut_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
