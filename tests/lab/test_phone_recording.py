"""sqlwa.phone.record (the run's perfetto session on a phone) against the stand-in
device's perfetto (tests/standin_device.py, whose client copies the real one's command
line): the session starts, the writes and markers made meanwhile are in the trace it
pulls, equal to the stand-in ring's raw text, and nothing of the session is left."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import polars as pl
import pytest
from standin_device import StandinDevice

from helpers import sqlwa, tally_parsed
from sqlwa.errors import DeviceError
from sqlwa.phone import record
from sqlwa.phone.adb import Completed
from trace_truth import tally_block_per_commit

pytestmark = [pytest.mark.root, pytest.mark.tracefs]


class OnDevice:
    """The stand-in device as sqlwa.phone's modules reach a phone (adb.Device), without
    adb in between: its shell as the shell user, files copied out of its root."""

    def __init__(self, device: StandinDevice) -> None:
        self.device = device

    def shell(self, argv, timeout=60.0, check=True) -> Completed:
        return self.shell_text(" ".join(shlex.quote(str(a)) for a in argv), timeout, check)

    def shell_text(self, command, timeout=60.0, check=True) -> Completed:
        proc = self.device.shell(command, timeout=timeout)
        if check and proc.returncode != 0:
            raise DeviceError(f"`{command}` failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return Completed(proc.returncode, proc.stdout, proc.stderr)

    def pull(self, remote, local, timeout=60.0) -> None:
        source = self.device.host_path(remote)
        if not source.exists():
            raise DeviceError(f"no {remote}")
        shutil.copy(source, local)


def test_a_recorded_session_holds_the_writes_and_markers_made_meanwhile(tmp_path: Path) -> None:
    with StandinDevice() as device:
        phone = OnDevice(device)
        marker = record.marker_file(phone)
        assert marker == "/sys/kernel/tracing/trace_marker"
        dev = phone.shell(["mountpoint", "-d", "/data"]).stdout.strip().replace(":", ",")
        local = tmp_path / "run.perfetto-trace"
        name = "sqlwa-record-test"
        with record.recorded(phone, name, 300_000, local):
            assert device.tracing_on(), "recorded() returned before the session recorded"
            phone.shell_text(
                f"echo 'sqlwa txn_begin i=1' > {marker}; "
                "dd if=/dev/urandom of=/data/local/tmp/x bs=4096 count=16 conv=fsync 2>/dev/null; "
                f"echo 'sqlwa txn_end i=1' > {marker}"
            )
        assert not device.tracing_on()
        trace_on_device = record.trace_path(name)
        assert not device.host_path(trace_on_device).exists(), "the session's trace was left on the phone"
        text = tmp_path / "raw.txt"
        shutil.copy(device.host_path(trace_on_device + ".standin.txt"), text)
    truth = tally_block_per_commit(text, dev)[1]
    assert truth["bytes"] >= 16 * 4096 and truth["flush"] >= 1, truth
    sqlwa("parse", str(local), "-o", str(tmp_path / "events.parquet"))
    events = pl.read_parquet(tmp_path / "events.parquet").sort("time_ns", maintain_order=True)
    assert tally_parsed(events, dev) == truth
    assert events.filter(pl.col("kind") == "marker").height == 2


def test_a_failing_body_still_ends_the_session_and_leaves_no_trace(tmp_path: Path) -> None:
    with StandinDevice() as device:
        phone = OnDevice(device)
        with pytest.raises(RuntimeError, match="the engine failed"):
            with record.recorded(phone, "sqlwa-record-fail", 300_000, tmp_path / "t.perfetto-trace"):
                raise RuntimeError("the engine failed")
        assert not device.tracing_on()
        assert not device.host_path(record.trace_path("sqlwa-record-fail")).exists()
        assert not (tmp_path / "t.perfetto-trace").exists()
