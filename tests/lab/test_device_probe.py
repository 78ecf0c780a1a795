"""``sqlwa device probe`` on a fresh filesystem of its own (a lab ext4): the levels it
was asked for, the device it was on (from sysfs and uname, read here), and nothing left
in the directory afterwards — also when it is stopped by SIGTERM or killed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa import _system
from sqlwa.lab.filesystem import LabFilesystem, LabOptions

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)"),
]


def listing(directory: str) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*"))


def test_a_probe_at_two_fill_levels_records_the_device_and_leaves_nothing(tmp_path: Path) -> None:
    with LabFilesystem("ext4", LabOptions(image_size="256M", workdir=tmp_path)) as lab:
        before = listing(lab.mountpoint)
        out = tmp_path / "lab.toml"
        done = sqlwa(
            "device", "probe", lab.mountpoint, "--fill", "70", "--fill", "40", "--seconds", "0.5", "--size", "8",
            "--name", "lab-ext4", "-o", str(out),
        )  # fmt: skip
        assert listing(lab.mountpoint) == before
        loop = os.path.basename(lab.loop_device or "")
        profile = json.loads(sqlwa("device", "show", str(out), "--json").stdout)
    assert "filling" in done.stderr and "job 6/6 seq_write" in done.stderr  # progress, on stderr
    fills = [level["fill_pct"] for level in profile["levels"]]
    assert 40 <= fills[0] < 50 and 70 <= fills[1] < 80, fills  # in rising order, as df counts
    dev = profile["device"]
    assert dev["filesystem"] == "ext4" and dev["block_device"] == loop and dev["loop_backing_file"] == lab.lab.image
    assert dev["kernel"] == os.uname().release
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    assert dev["fio_version"] == fio_version and fio_version in profile["source"]
    assert dev["fua"] is (Path(f"/sys/block/{loop}/queue/fua").read_text().strip() == "1")
    for level in profile["levels"]:
        assert {"write", "flush", "durable_write", "read"} <= set(level)
        assert level["write"]["samples"] > 0 and level["queue_depth"] >= 1 and level["seq_write_mib_s"] > 0
        # a flush is not free; percentiles do not fall
        assert level["flush"]["percentiles_ms"]["50"] > 0
        values = list(level["write"]["percentiles_ms"].values())
        assert values == sorted(values)


def fios_in(directory: str) -> list[int]:
    """The fio processes working in a directory below ``directory``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "fio":
                if os.readlink(proc / "cwd").startswith(directory):
                    found.append(int(proc.name))
        except OSError:
            continue  # gone meanwhile
    return found


def start_probe(directory: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sqlwa", "device", "probe", directory, "--seconds", "30", "--size", "8", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_fio(proc: subprocess.Popen, directory: str) -> None:
    """Until the probe's fio is measuring (its first job is under way)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if fios_in(directory) and any(Path(directory).glob("sqlwa-probe-*/sqlwa-probe.dat")):
            time.sleep(1.0)
            return
        time.sleep(0.1)
    raise AssertionError("the probe's fio never started")


def test_sigterm_stops_the_probe_and_its_fio_and_removes_its_files(tmp_path: Path) -> None:
    with LabFilesystem("ext4", LabOptions(image_size="128M", workdir=tmp_path)) as lab:
        before = listing(lab.mountpoint)
        proc = start_probe(lab.mountpoint, tmp_path / "p.toml")
        wait_for_fio(proc, lab.mountpoint)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert time.monotonic() - started < 10  # not the 30 s of the job
        assert err.strip().splitlines()[-1] == "sqlwa: terminated by SIGTERM"
        assert listing(lab.mountpoint) == before and not (tmp_path / "p.toml").exists()
        assert fios_in(lab.mountpoint) == []


def test_after_a_kill_its_fio_dies_too_and_cleanup_removes_what_it_left(tmp_path: Path) -> None:
    with LabFilesystem("ext4", LabOptions(image_size="128M", workdir=tmp_path)) as lab:
        before = listing(lab.mountpoint)
        proc = start_probe(lab.mountpoint, tmp_path / "p.toml")
        wait_for_fio(proc, lab.mountpoint)
        proc.kill()
        proc.communicate(timeout=60)
        left = [p.name for p in Path(lab.mountpoint).glob("sqlwa-probe-*")]
        assert left, "a killed probe cannot remove its directory"
        # The kernel sends fio its parent-death signal at once, but fio is gone only once it
        # is scheduled to die: on a loaded machine that can take seconds. Until then it holds
        # its files, so the lab's unmount and loop device would be held too.
        assert _system.settle.settled(lambda: fios_in(lab.mountpoint) == []), fios_in(lab.mountpoint)
        done = sqlwa("lab", "cleanup", "--workdir", lab.mountpoint)
        assert f"removed {lab.mountpoint}/{left[0]}" in done.stdout
        assert listing(lab.mountpoint) == before
