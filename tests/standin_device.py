"""A stand-in Android device on this host, for the tests of the device flow (#46): no
phone or emulator can be reached here, so ``tests/standin_adbd.py`` (the device side of
the adb protocol, which the real adb client talks to) fronts this environment instead.

``StandinDevice(props=..., fs="ext4", encrypt=False)`` is a context manager (needs
root). Inside:

- **A private mount namespace** held by one holder process (``unshare --mount
  --propagation private``; it tears the device down itself should the test die without
  closing it), with a new root ``R`` (a tmpfs mounted there, in that
  namespace only). :meth:`StandinDevice.argv` is the command line that runs a shell
  command in it, ``nsenter -t HOLDER -m -- chroot --userspec=2000:2000 R env -i … /system/bin/sh -c CMD``:
  uid 2000 is AID_SHELL, what ``adb shell`` runs as on a user build; ``as_root`` runs it
  as root (``adb root`` on a userdebug build). The environment is the device's own
  (:data:`ANDROID_ENV`), whatever the caller's. :meth:`host_path` is where a device path
  is on the host (through ``/proc/HOLDER/root``), for tests.
- In ``R``: read-only binds of ``/usr`` (and ``bin``, ``lib``, ``lib64``, ``sbin`` as
  symlinks into it, as Debian's merged /usr has them) and ``/etc``; ``/dev`` (rbind), a
  fresh ``/proc``, ``/sys`` (rbind) with ``/sys/kernel/tracing`` replaced by a tracefs
  instance of the device's own (``instances/sqlwa-standin-<pid>-<hex>``, bind-mounted
  there), whose ``trace_marker`` is 0222 as AOSP's frameworks/native/cmds/atrace/atrace.rc
  makes the phone's ("Allow writing to the kernel trace log": ``chmod 0222
  /sys/kernel/tracing/trace_marker``), so the engine's markers land in this device's
  ring and parallel tests never share one. As atrace.rc has it too, the shell group
  may switch ``tracing_on`` (off at start), size the ring and read ``trace``
  (:data:`ATRACE_SHELL_FILES`); the directory itself is 0755, as the shell must reach
  it (a new instance is 0750).
- ``/data``: a fresh ext4 image, loop-mounted with the options AOSP's fstab gives /data
  (``nodev,noatime,nosuid``: :data:`sqlwa.lab.profiles.ANDROID_EXT4`, after cuttlefish's
  fstab), owned and moded as init.rc makes the directories sqlwa uses: ``/data`` 0771
  system:system, ``/data/local`` 0751 root:root, ``/data/local/tmp`` 0771 shell:shell,
  ``/data/misc`` 01771 system:misc; and as Perfetto's perfetto.rc makes its own,
  ``/data/misc/perfetto-traces`` 0773 root:shell and ``/data/misc/perfetto-configs``
  0775 root:shell. With ``encrypt=True`` the image has ext4's ``encrypt`` feature and
  /data/local and /data/misc a v2 fscrypt policy (AES-256-XTS/CTS) of one key, as a
  phone's file-based encryption puts them under its device-encrypted key
  (``ro.crypto.type`` is then ``file``, else ``none``).
- ``/system/bin``: ``sh`` (dash), ``getprop`` (``[name]: [value]`` lines, or one
  property's value) from the props the device was made with, and ``perfetto``, the
  client of tests/standin_perfetto.py, whose ``traced`` runs as root in the device from
  its start, on a socket in ``R``'s own tmpfs (``/run/perfetto``; not ``/dev/socket``,
  which is the host's /dev).
- The interpreter: the venv's prefix, its base prefix and the repository are bound
  read-only at their own paths, so :data:`sys.executable` runs in the device.

Teardown (also when the test fails) kills every process of the namespace (traced, a
backgrounded perfetto, a shell's leftovers) and the holder, so the namespace and its
mounts go; waits until the loop device has auto-cleared; removes the tracefs instance
(retried while the kernel still holds it busy), the image and the temp directory.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from standin_adbd import kill_namespace, resolve_in_root

from sqlwa.lab.profiles import ANDROID_EXT4  # /data's options, after cuttlefish's fstab

REPO = Path(__file__).resolve().parent.parent
PREFIX = "sqlwa-standin"
SHELL_UID = 2000  # AID_SHELL
SYSTEM_UID = 1000  # AID_SYSTEM
MISC_GID = 9998  # AID_MISC
TRACED_SOCKET = "/run/perfetto/traced-consumer.sock"
IMAGE_MB = 256
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"

# The tracing files atrace.rc (frameworks/native/cmds/atrace/atrace.rc, "on post-fs")
# gives to root:shell, and their modes; its per-event enable files are left root's.
ATRACE_SHELL_FILES = (
    ("trace_clock", "0664"),
    ("buffer_size_kb", "0664"),
    ("options/overwrite", "0664"),
    ("options/print-tgid", "0664"),
    ("tracing_on", "0664"),
    ("trace", "0660"),
)

DEFAULT_PROPS = {
    "ro.product.manufacturer": "Google",
    "ro.product.model": "Standin 1",
    "ro.product.cpu.abi": "x86_64",
    "ro.build.version.release": "14",
    "ro.build.version.sdk": "34",
    "ro.build.type": "user",
    "ro.build.fingerprint": "standin/standin_x86_64/standin:14/UQ1A.240105.004/1:user/release-keys",
}

ANDROID_ENV = {
    "PATH": "/system/bin:/usr/bin:/bin",
    "ANDROID_DATA": "/data",
    "ANDROID_ROOT": "/system",
    "TMPDIR": "/data/local/tmp",
    "HOME": "/",
    "USER": "shell",
    "LANG": "C.UTF-8",
}

GETPROP = """#!/system/bin/sh
# getprop as Android's toybox answers it: every property as "[name]: [value]", or one value.
if [ $# -eq 0 ]; then
    cat <<'EOF'
@LIST@
EOF
    exit 0
fi
case "$1" in
@CASES@
    *) echo "${2-}" ;;
esac
"""

PERFETTO = """#!/system/bin/sh
exec @PYTHON@ @SCRIPT@ client --socket @SOCKET@ "$@"
"""


# The holder: it keeps the namespace alive while its parent (the test) lives. Should the
# test die without closing the device (a SIGKILLed worker), the holder does the teardown
# itself: it kills the namespace's other processes, unmounts the device's root (the loop
# device auto-clears), removes the tracefs instance (retried while busy) and the files.
HOLDER = """
import os, shutil, signal, subprocess, sys, time
parent, root, instance, tmp, tests = int(sys.argv[1]), *sys.argv[2:]
sys.path.insert(0, tests)
from standin_adbd import kill_namespace
signal.signal(signal.SIGTERM, signal.SIG_DFL)
while os.getppid() == parent:
    time.sleep(0.2)
kill_namespace(os.readlink("/proc/self/ns/mnt"), spare=os.getpid(), pause_s=0.1)
subprocess.run(["umount", "-R", root], check=False)
for _ in range(100):
    try:
        os.rmdir(instance)
        break
    except FileNotFoundError:
        break
    except OSError:
        time.sleep(0.1)
shutil.rmtree(tmp, ignore_errors=True)
"""


def quoted(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def getprop_script(props: dict[str, str]) -> str:
    listing = "\n".join(f"[{k}]: [{v}]" for k, v in sorted(props.items()))
    cases = "\n".join(f"    {quoted(k)}) echo {quoted(v)} ;;" for k, v in sorted(props.items()))
    return GETPROP.replace("@LIST@", listing).replace("@CASES@", cases)


def python_binds() -> list[Path]:
    """What the interpreter needs, bound at its own path: the venv's prefix (its real
    path), the base installation and the repository; a path inside another is bound with
    it."""
    paths = sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), REPO})
    kept: list[Path] = []
    for path in paths:
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return kept


class StandinDevice:
    """An Android-shaped environment on this host; see the module's docstring."""

    def __init__(self, props: dict[str, str] | None = None, fs: str = "ext4", encrypt: bool = False) -> None:
        if fs != "ext4":
            raise ValueError(f"the stand-in device's /data is ext4 for now, not {fs}")
        self.props = {**DEFAULT_PROPS, "ro.crypto.type": "file" if encrypt else "none", **(props or {})}
        self.fs = fs
        self.encrypt = encrypt
        self.name = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        self.tmp = Path(tempfile.gettempdir()) / self.name
        self.root = self.tmp / "root"  # R, a tmpfs in the namespace (an empty directory outside)
        self.image = self.tmp / "data.img"
        self.instance = self.tracefs_root() / "instances" / self.name
        self.holder: subprocess.Popen[bytes] | None = None
        self.traced: subprocess.Popen[bytes] | None = None
        self.traced_log = self.tmp / "traced.log"
        self.key_id: bytes | None = None

    @staticmethod
    def tracefs_root() -> Path:
        from sqlwa._system import tracefs

        root = tracefs.tracefs_root()
        if root is None:
            raise RuntimeError("the stand-in device needs tracefs mounted")
        return root

    # ------------------------------------------------------------ the interface

    def argv(self, command: str | None, as_root: bool = False) -> list[str]:
        """The command line that runs ``command`` in the device as its shell user (or as
        root), ``/system/bin/sh -c COMMAND``; for ``None`` a shell reading stdin
        (interactive when that is a pty), as adbd runs ``adb shell`` without a command."""
        assert self.holder is not None, "the device is not started"
        user = [] if as_root else [f"--userspec={SHELL_UID}:{SHELL_UID}"]
        env = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in ANDROID_ENV.items())]
        shell = ["/system/bin/sh", "-c", command] if command is not None else ["/system/bin/sh"]
        return [NSENTER, "-t", str(self.holder.pid), "-m", "--", CHROOT, *user, str(self.root), *env, *shell]

    def host_path(self, device_path: str, *, follow: bool = True) -> Path:
        """Where ``device_path`` is on the host: through the holder's root, in the
        device's mount namespace (readable and writable by root), symlinks resolved as
        the device resolves them, inside its root (:func:`standin_adbd.resolve_in_root`)."""
        assert self.holder is not None, "the device is not started"
        base = Path(f"/proc/{self.holder.pid}/root") / str(self.root).lstrip("/")
        return resolve_in_root(base, device_path, follow=follow)

    def shell(self, command: str, as_root: bool = False, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        """Run ``command`` in the device (text output, not checked)."""
        if "input" not in kw:
            kw["stdin"] = subprocess.DEVNULL
        return subprocess.run(self.argv(command, as_root), capture_output=True, text=True, timeout=timeout, **kw)

    def tracing_on(self) -> bool:
        """Whether the device's ring is recording (a Perfetto session has started)."""
        return (self.instance / "tracing_on").read_text().strip() == "1"

    # ------------------------------------------------------------ start

    def __enter__(self) -> StandinDevice:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.tmp.mkdir(mode=0o700)
        self.root.mkdir()
        subprocess.run(["truncate", "-s", f"{IMAGE_MB}M", str(self.image)], check=True)
        features = ["-O", "encrypt"] if self.encrypt else []
        mkfs = ["mkfs.ext4", "-q", "-F", *features, "-L", "data", str(self.image)]
        subprocess.run(mkfs, check=True, capture_output=True)
        self.instance.mkdir()
        holder = [sys.executable, "-c", HOLDER, str(os.getpid()), str(self.root), str(self.instance), str(self.tmp)]
        holder.append(str(REPO / "tests"))
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", *holder], stdin=subprocess.DEVNULL
        )
        self.wait_for_namespace()
        self.detach_host_mounts()
        self.in_namespace(self.setup_script())
        if self.encrypt:
            self.encrypt_data()
        self.in_namespace(self.data_script())
        self.write_system_bin()
        self.start_traced()

    def wait_for_namespace(self) -> None:
        """Until the holder has its own mount namespace (unshare has run, sleep not yet
        necessarily)."""
        assert self.holder is not None
        mine = os.readlink("/proc/self/ns/mnt")
        for _ in range(500):
            try:
                if os.readlink(f"/proc/{self.holder.pid}/ns/mnt") != mine:
                    return
            except OSError:
                pass
            if self.holder.poll() is not None:
                raise RuntimeError(f"unshare exited with {self.holder.returncode}")
            time.sleep(0.01)
        raise RuntimeError("the holder never entered a mount namespace of its own")

    def detach_host_mounts(self) -> None:
        """Let go of the host's other mounts in the device's namespace: a copy of another
        test's lab held here would keep its loop device busy after that test unmounts it
        (standin_adbd.detach_copied_mounts says why)."""
        assert self.holder is not None
        detach = f"import sys; sys.path.insert(0, {str(REPO / 'tests')!r}); import standin_adbd; standin_adbd.detach_copied_mounts()"
        proc = subprocess.run(
            [NSENTER, "-t", str(self.holder.pid), "-m", "--", sys.executable, "-c", detach],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"detaching the host's mounts from the stand-in device failed: {proc.stderr.strip()}")

    def in_namespace(self, script: str) -> None:
        assert self.holder is not None
        proc = subprocess.run(
            [NSENTER, "-t", str(self.holder.pid), "-m", "--", "sh", "-ec", script],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"setting the stand-in device up failed: {proc.stderr.strip()}")

    def setup_script(self) -> str:
        r = shlex.quote(str(self.root))
        lines = [
            f"mount -t tmpfs -o mode=0755,size=64m {PREFIX} {r}",
            f"cd {r}",
            "mkdir -p usr etc dev proc sys data system/bin run/perfetto",
            "chmod 0711 run/perfetto",  # the socket reachable by all, the session texts listed by none
            "mount --bind -o ro /usr usr",
            "mount --bind -o ro /etc etc",
        ]
        lines += [f"[ -e /{d} ] && ln -s usr/{d} {d}" + " || true" for d in ("bin", "lib", "lib64", "sbin")]
        lines += [
            "mount --rbind /dev dev",
            "mount -t proc proc proc",
            "mount --rbind /sys sys",
            f"mount --bind {shlex.quote(str(self.instance))} sys/kernel/tracing",
            # the shell user reaches the tracing directory (a new instance is 0750) ...
            "chmod 0755 sys/kernel/tracing",
            "chmod 0222 sys/kernel/tracing/trace_marker",  # ... and writes markers (atrace.rc: on post-fs)
            # atrace.rc also lets the shell group switch tracing, size the ring and read it
            *(
                f"chown 0:{SHELL_UID} sys/kernel/tracing/{name} && chmod {mode} sys/kernel/tracing/{name}"
                for name, mode in ATRACE_SHELL_FILES
            ),
            "echo 0 > sys/kernel/tracing/tracing_on",  # a new instance records; atrace.rc: disabled by default
        ]
        for path in python_binds():
            inside = shlex.quote(str(self.root / str(path).lstrip("/")))
            lines += [f"mkdir -p {inside}", f"mount --bind -o ro {shlex.quote(str(path))} {inside}"]
        lines += [
            f"mount -t ext4 -o loop,{ANDROID_EXT4.options.mount_opts} {shlex.quote(str(self.image))} data",
            f"chown {SYSTEM_UID}:{SYSTEM_UID} data && chmod 0771 data",
            "rm -rf data/lost+found",
            "mkdir data/local data/misc",
        ]
        return "\n".join(lines)

    def encrypt_data(self) -> None:
        """/data/local and /data/misc (still empty) under a v2 fscrypt policy of one fresh
        key, AES-256-XTS contents and AES-256-CTS names, as init.rc's ``mkdir … encryption=
        Require`` puts them under the device-encrypted key (vold's system DE key); what is
        made in them inherits it. The key goes with the filesystem when it unmounts."""
        from sqlwa._system import fscrypt
        from sqlwa.lab.encryption import KEY_BYTES, MODES

        mode = MODES["fscrypt"]
        self.key_id = fscrypt.add_encryption_key(self.host_path("/data"), secrets.token_bytes(KEY_BYTES))
        for directory in ("/data/local", "/data/misc"):
            fscrypt.set_encryption_policy(
                self.host_path(directory), mode.contents, mode.filenames, mode.flags, self.key_id
            )

    def data_script(self) -> str:
        """/data's directories as init.rc (and perfetto.rc) make them."""
        lines = [
            f"cd {shlex.quote(str(self.root))}",
            "mkdir -p data/local/tmp data/misc/perfetto-traces data/misc/perfetto-configs",
            "chown 0:0 data/local && chmod 0751 data/local",
            f"chown {SHELL_UID}:{SHELL_UID} data/local/tmp && chmod 0771 data/local/tmp",
            f"chown {SYSTEM_UID}:{MISC_GID} data/misc && chmod 01771 data/misc",
            # perfetto.rc (on property:persist.traced.enable=1): traces written by shell, and
            # configs the shell saves where the perfetto client may read them
            f"chown 0:{SHELL_UID} data/misc/perfetto-traces && chmod 0773 data/misc/perfetto-traces",
            f"chown 0:{SHELL_UID} data/misc/perfetto-configs && chmod 0775 data/misc/perfetto-configs",
        ]
        return "\n".join(lines)

    def write_system_bin(self) -> None:
        bin_dir = self.host_path("/system/bin")
        (bin_dir / "sh").symlink_to("/usr/bin/dash")
        (bin_dir / "getprop").write_text(getprop_script(self.props))
        script = PERFETTO.replace("@PYTHON@", sys.executable).replace(
            "@SCRIPT@", str(REPO / "tests" / "standin_perfetto.py")
        )
        (bin_dir / "perfetto").write_text(script.replace("@SOCKET@", TRACED_SOCKET))
        for name in ("getprop", "perfetto"):
            (bin_dir / name).chmod(0o755)

    def start_traced(self) -> None:
        """traced, as root in the device, until its socket is there."""
        assert self.holder is not None
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO / 'tests'}:{REPO / 'analyzer'}", "LANG": "C.UTF-8"}
        command = [sys.executable, str(REPO / "tests" / "standin_perfetto.py"), "traced"]
        command += ["--socket", TRACED_SOCKET, "--tracing", "/sys/kernel/tracing", "--workdir", "/run/perfetto"]
        with open(self.traced_log, "wb") as log:
            self.traced = subprocess.Popen(
                [NSENTER, "-t", str(self.holder.pid), "-m", "--", CHROOT, str(self.root), *command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        socket_path = self.host_path(TRACED_SOCKET)
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            if self.traced.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stand-in traced did not start: {self.traced_log.read_text()}")
            time.sleep(0.05)

    # ------------------------------------------------------------ teardown

    def close(self) -> None:
        """Everything of the device gone: its processes, namespace, mounts, loop device,
        tracefs instance and files. Safe to call more than once, and after a failed start."""
        errors = []
        if self.holder is not None and self.holder.poll() is None:
            try:
                ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
            except OSError:
                ns = None
            if ns is not None and ns != os.readlink("/proc/self/ns/mnt"):
                kill_namespace(ns, spare=self.holder.pid)  # also what they fork meanwhile
            self.holder.kill()
        for proc in (self.traced, self.holder):
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    errors.append(f"process {proc.pid} did not exit")
        if self.image.exists() and not self.wait_until(lambda: not self.loop_devices()):
            errors.append(f"loop device still attached: {self.loop_devices()}")
        if self.instance.exists() and not self.wait_until(self.remove_instance):
            errors.append(f"tracefs instance {self.instance} still busy")
        if self.tmp.exists():
            subprocess.run(["rm", "-rf", "--one-file-system", str(self.tmp)], check=False)
        if errors:
            raise RuntimeError("the stand-in device left things behind: " + "; ".join(errors))

    def loop_devices(self) -> list[str]:
        proc = subprocess.run(["losetup", "-j", str(self.image)], capture_output=True, text=True)
        return proc.stdout.splitlines()

    def remove_instance(self) -> bool:
        try:
            self.instance.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    @staticmethod
    def wait_until(done, seconds: float = 10) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            if done():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
