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
