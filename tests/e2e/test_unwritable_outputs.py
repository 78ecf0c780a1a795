"""Output files sqlwa cannot write, and a policy that is not text: one line and exit 2,
never a traceback (#15, point 6). /proc refuses new files even to root."""

from __future__ import annotations

import pytest

from helpers import REPO, sqlwa

RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"
KEKS = REPO / "traces" / "samples" / "blktrace-keks" / "keks"
POLICY = REPO / "examples" / "policy.toml"


@pytest.mark.parametrize(
    "args, what",
    [
        (["parse", str(KEKS), "-o", "/proc/sqlwa-test.parquet"], "the event table"),
        (["report", str(RUN), "-o", "/proc/sqlwa-test.html"], "the report"),
        (["check", "--policy", str(POLICY), "--junit", "/proc/sqlwa-test.xml", str(RUN)], "the JUnit report"),
    ],
)
def test_an_output_that_cannot_be_written_is_one_error(args, what):
    proc = sqlwa(*args, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"sqlwa: error: cannot write {what} /proc/sqlwa-test")


def test_a_binary_policy_is_one_error(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_bytes(bytes(range(256)))
    proc = sqlwa("check", "--policy", str(policy), str(RUN), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"sqlwa: error: policy {policy} is not a text file")
