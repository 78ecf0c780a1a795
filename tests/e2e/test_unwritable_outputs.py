"""Output files sqlwa cannot write, and a policy that is not text: one line and exit 2,
never a traceback (#15, point 6). /proc refuses new files even to root."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import REPO, sqlwa

RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"
KEKS = REPO / "traces" / "samples" / "blktrace-keks" / "keks"
POLICY = REPO / "examples" / "policy.toml"


@pytest.mark.parametrize(
    "args, option",
    [
        (["parse", str(KEKS), "-o", "/proc/sqlwa-test.parquet"], "-o"),
        (["report", str(RUN), "-o", "/proc/sqlwa-test.html"], "-o"),
        (["check", "--policy", str(POLICY), "--junit", "/proc/sqlwa-test.xml", str(RUN)], "--junit"),
    ],
)
def test_an_output_that_cannot_be_written_is_one_error(args, option):
    """Refused before any work, by where it is (sqlwa.outputs), not by the failed write."""
    proc = sqlwa(*args, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"sqlwa: error: {option} /proc/sqlwa-test"), errors
    assert "kernel interface" in errors[0]


def test_a_binary_policy_is_one_error(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_bytes(bytes(range(256)))
    proc = sqlwa("check", "--policy", str(policy), str(RUN), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"sqlwa: error: policy {policy} is not a text file")


@pytest.mark.parametrize(
    "out, fstype",
    [
        ("/proc", "proc"),
        ("/sys/kernel/tracing/instances/sqlwa-test-out", "tracefs"),
        ("/sys/kernel/debug/tracing/instances/sqlwa-test-out", None),
        ("/dev/sqlwa-test-out", "devtmpfs"),
    ],
)
@pytest.mark.parametrize("lab", [[], ["--fs", "ext4"]], ids=["vfs-only", "lab"])
def test_an_output_directory_on_a_kernel_interface_is_refused(out, fstype, lab):
    """A mkdir in tracefs's instances/ makes a tracefs instance, in /dev a device node
    directory: the run is refused before it makes anything, with one line."""
    from sqlwa import _system

    actual = _system.mounts.kernel_interface_at(out)
    if fstype is None:
        fstype = actual
    if actual is None or actual != fstype:
        pytest.skip(f"{out} is not on {fstype or 'a kernel interface'} here")
    existed = Path(out).exists()
    try:
        proc = sqlwa("run", *lab, "-n", "3", "-o", out, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"sqlwa: error: output directory {out} is on {fstype}, a kernel interface")
        assert Path(out).exists() == existed
    finally:
        if not existed and Path(out).is_dir():
            Path(out).rmdir()


def _filesystem_type(path: str) -> str:
    """The type of the filesystem holding ``path``, as coreutils' ``stat -f`` names it."""
    import subprocess

    return subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True, check=True).stdout.strip()


def test_a_run_into_dev_shm_is_written_there(tmp_path):
    """/dev/shm is the usual tmpfs: memory, not a kernel interface (#44, item 7)."""
    import json
    import shutil
    import uuid

    if not Path("/dev/shm").is_dir() or _filesystem_type("/dev/shm") != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    out = Path("/dev/shm") / f"sqlwa-test-{uuid.uuid4().hex}"
    try:
        sqlwa("run", "-n", "3", "-o", str(out))
        assert json.loads((out / "summary.json").read_text())["commits"] == 3
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert not out.exists()


@pytest.mark.parametrize("target", ["/dev/null", "/dev/sqlwa-test-out.html"])
def test_a_file_in_dev_off_its_tmpfs_is_still_refused(target):
    """/dev/null is a device node; any other name in /dev is on devtmpfs."""
    from helpers import assert_one_line_error

    existed = Path(target).exists()
    proc = sqlwa("report", str(RUN), "-o", target, check=False)
    assert_one_line_error(proc, "-o", target)
    assert Path(target).exists() == existed


@pytest.mark.parametrize(
    "kind, device, said",
    [("char", (1, 3), "a character device"), ("block", (7, 0), "a block device")],  # /dev/null, /dev/loop0
)
def test_a_device_node_a_tmpfs_in_dev_holds_is_refused(kind, device, said):
    """On /dev/shm a regular file may be written, a device node made there may not."""
    import os
    import stat
    import uuid

    from helpers import assert_one_line_error

    if os.geteuid() != 0 or _filesystem_type("/dev/shm") != "tmpfs":
        pytest.skip("needs root and a tmpfs at /dev/shm")
    node = f"/dev/shm/sqlwa-test-{uuid.uuid4().hex}"
    os.mknod(node, (stat.S_IFCHR if kind == "char" else stat.S_IFBLK) | 0o600, os.makedev(*device))
    try:
        proc = sqlwa("report", str(RUN), "-o", node, check=False)
        assert_one_line_error(proc, said)
        assert stat.S_ISCHR(os.stat(node).st_mode) if kind == "char" else stat.S_ISBLK(os.stat(node).st_mode)
    finally:
        os.unlink(node)
