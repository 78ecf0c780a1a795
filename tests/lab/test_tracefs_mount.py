"""A fresh machine's first lab run (#36): as root, `sqlwa run --fs` mounts tracefs where
it is absent and says so in one line. Run in a private mount namespace where tracefs (and
debugfs, whose tracing/ directory would mount it on access) is unmounted first, so other
tests never see it gone; the namespace's own mount table is the truth."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.root


def test_a_lab_run_mounts_tracefs_when_it_is_absent_and_says_so(tmp_path):
    out = tmp_path / "run"
    script = f"""
        umount /sys/kernel/debug/tracing 2>/dev/null; umount /sys/kernel/tracing 2>/dev/null
        umount /sys/kernel/debug 2>/dev/null
        if grep -qw tracefs /proc/self/mountinfo; then echo "tracefs still mounted"; exit 90; fi
        {sys.executable} -m sqlwa run --fs ext4 -n 20 --warmup 1 --out {out} || exit 91
        grep -w tracefs /proc/self/mountinfo | cut -d' ' -f5 | sed 's/^/MOUNTED /'
    """
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mounted = [line for line in proc.stderr.splitlines() if "mounted tracefs" in line]
    assert mounted == ["sqlwa: mounted tracefs on /sys/kernel/tracing (the block and syscall levels read it)"]
    assert proc.stdout.count("MOUNTED /sys/kernel/tracing") == 1
    assert "block" in json.loads((out / "summary.json").read_text())["levels"]
