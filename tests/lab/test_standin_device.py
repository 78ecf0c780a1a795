"""The stand-in Android device (tests/standin_device.py) that the device flow's tests
(#46) run against: it must look like a phone to the shell user where sqlwa looks — /data's
filesystem and mount options, getprop, a writable trace_marker, the phone's perfetto
command line — record a Perfetto trace that ``sqlwa parse`` reads to the same counts as a
tally of the kernel's own text, keep two devices' traces apart, and leave nothing behind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from standin_device import SHELL_UID, StandinDevice

from helpers import REPO, sqlwa, tally_parsed
from trace_truth import tally_block_per_commit

pytestmark = [pytest.mark.root, pytest.mark.tracefs]

CONFIG = REPO / "examples" / "perfetto-sqlwa.pbtx"
TRACE = "/data/misc/perfetto-traces/t"


def shell(device: StandinDevice, command: str, as_root: bool = False) -> str:
    proc = device.shell(command, as_root=as_root)
    assert proc.returncode == 0, f"{command}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def push_config(device: StandinDevice) -> str:
    """The config sqlwa ships, where `adb push` puts it (owned by the shell user)."""
    target = device.host_path("/data/local/tmp/sqlwa.pbtx")
    shutil.copy(CONFIG, target)
    os.chown(target, SHELL_UID, SHELL_UID)
    return "/data/local/tmp/sqlwa.pbtx"


def start_perfetto(device: StandinDevice) -> int:
    """`perfetto --background`, as sqlwa starts it on a phone: the PID it prints, once the
    ring records (the background child connects to traced after the parent has exited)."""
    out = shell(device, f"perfetto --txt -c {push_config(device)} -o {TRACE} --background")
    assert re.fullmatch(r"\d+\n", out), out  # Daemonize: the parent prints the child's PID
    assert StandinDevice.wait_until(device.tracing_on), "the session never started"
    return int(out)


def stop_perfetto(device: StandinDevice, pid: int) -> None:
    """`kill PID` as the shell user, then until the client has written the trace and gone."""
    shell(device, f"kill {pid}")
    # generous: the ring holds every process's syscalls of the set, and traced converts
    # them all in Python, so a busy machine's session can take a while to write
    assert StandinDevice.wait_until(lambda: not Path(f"/proc/{pid}").exists(), 300), "perfetto did not stop"
    assert not device.tracing_on()


def leftovers(device: StandinDevice) -> list[str]:
    """What of ``device`` is still on the host."""
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found = [f"loop: {line}" for line in losetup.splitlines() if device.name in line]
    found += [f"mount: {line}" for line in Path("/proc/mounts").read_text().splitlines() if device.name in line]
    instances = device.tracefs_root() / "instances"
    found += [f"tracefs: {n}" for n in os.listdir(instances) if n == device.name]
    found += [f"dir: {n}" for n in os.listdir(device.tmp.parent) if n == device.name]
    assert device.holder is not None
    found += [f"process: {device.holder.pid}"] if Path(f"/proc/{device.holder.pid}").exists() else []
    return found


def test_a_device_holds_no_other_tests_filesystem(tmp_path):
    """Another test's lab, mounted when the device's namespace is made, must go when that
    test takes it down: its loop device detached, not kept busy by a copy in the device."""
    image, mnt = tmp_path / "other-lab.img", tmp_path / "other-lab"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True)
    loop_dev = loop.stdout.strip()
    try:
        subprocess.run(["mount", loop_dev, str(mnt)], check=True)
        with StandinDevice() as device:
            subprocess.run(["umount", str(mnt)], check=True)
            subprocess.run(["losetup", "-d", loop_dev], check=True)
            attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
            assert str(image) not in attached, "the device's namespace keeps the other lab's filesystem busy"
            assert device.shell("echo alive").stdout == "alive\n"
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        subprocess.run(["losetup", "-d", loop_dev], capture_output=True)


def test_the_shell_user_sees_a_phone_s_data_props_and_trace_marker():
    with StandinDevice(props={"ro.product.model": "Pixel Standin"}) as device:
        assert shell(device, "id -u") == f"{SHELL_UID}\n"
        assert shell(device, "id -u", as_root=True) == "0\n"
        data = [line.split() for line in shell(device, "cat /proc/mounts").splitlines() if line.split()[1] == "/data"]
        assert len(data) == 1 and data[0][2] == "ext4", data
        assert {"nodev", "noatime", "nosuid"} <= set(data[0][3].split(",")), data
        assert shell(device, "getprop ro.product.model") == "Pixel Standin\n"
        assert shell(device, "getprop ro.product.cpu.abi") == "x86_64\n"
        assert "[ro.build.type]: [user]" in shell(device, "getprop").splitlines()
        modes = shell(
            device, "stat -c '%a %u:%g' /data/local/tmp /data/misc/perfetto-traces /data/misc/perfetto-configs"
        )
        assert modes == "771 2000:2000\n773 0:2000\n775 0:2000\n"  # init.rc; perfetto.rc
        # atrace.rc: the shell group may switch tracing on and read the ring, anyone may mark
        tracing = "/sys/kernel/tracing"
        shell(device, f"echo 1 > {tracing}/tracing_on; echo standin-marker > {tracing}/trace_marker")
        assert "tracing_mark_write: standin-marker" in shell(
            device, f"echo 0 > {tracing}/tracing_on; cat {tracing}/trace"
        )
        shell(device, "echo x > /data/local/tmp/f")
        assert device.host_path("/data/local/tmp/f").read_text() == "x\n"
        assert device.shell("ls /data").returncode != 0  # /data is 0771 system: not listed by the shell


def test_an_fsync_recorded_by_perfetto_parses_to_the_raw_text_s_tally(tmp_path):
    with StandinDevice() as device:
        dev = shell(device, "mountpoint -d /data").strip().replace(":", ",")
        pid = start_perfetto(device)
        shell(
            device,
            "echo 'sqlwa txn_begin i=1' > /sys/kernel/tracing/trace_marker; "
            "dd if=/dev/urandom of=/data/local/tmp/x bs=4096 count=16 conv=fsync 2>/dev/null; "
            "echo 'sqlwa txn_end i=1' > /sys/kernel/tracing/trace_marker",
        )
        stop_perfetto(device, pid)
        trace, text = tmp_path / "t.perfetto-trace", tmp_path / "t.txt"
        shutil.copy(device.host_path(TRACE), trace)
        shutil.copy(device.host_path(TRACE + ".standin.txt"), text)
    truth = tally_block_per_commit(text, dev)[1]
    # the fsync's own writes: 16 pages of data (at least), and ext4's journal commit with its cache flush
    assert truth["bytes"] >= 16 * 4096 and truth["flush"] >= 1, truth
    sqlwa("parse", str(trace), "-o", str(tmp_path / "events.parquet"))
    events = pl.read_parquet(tmp_path / "events.parquet").sort("time_ns", maintain_order=True)
    assert tally_parsed(events, dev) == truth
    raw_markers = text.read_text().count(": tracing_mark_write: ")
    assert events.filter(pl.col("kind") == "marker").height == raw_markers == 2


def test_two_devices_record_only_their_own_markers(tmp_path):
    with StandinDevice() as one, StandinDevice() as two:
        pids = {device: start_perfetto(device) for device in (one, two)}
        for device in (one, two):
            shell(device, f"echo 'standin of {device.name}' > /sys/kernel/tracing/trace_marker")
        for device, pid in pids.items():
            stop_perfetto(device, pid)
        texts = {device.name: device.host_path(TRACE + ".standin.txt").read_text() for device in (one, two)}
    for name, text in texts.items():
        assert re.findall(r"tracing_mark_write: standin of (\S+)", text) == [name]


def test_nothing_is_left_after_teardown_even_when_the_test_fails():
    device = StandinDevice()
    with pytest.raises(RuntimeError, match="the test failed"), device:
        pid = start_perfetto(device)  # a recording left running, as a failing test leaves it
        shell(device, "sleep 300 >/dev/null 2>&1 &")  # and a shell's orphan holding the namespace
        assert Path(f"/proc/{pid}").exists()
        raise RuntimeError("the test failed")
    deadline = time.monotonic() + 10
    while leftovers(device) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(device) == []


def test_perfetto_s_command_line_as_sqlwa_uses_it():
    """`--background-wait` returns once the ring records; a config on stdin (`-c -`) with a
    duration stops by itself; a config that does not parse fails before detaching, with
    no PID printed and no trace file, as perfetto_cmd.cc checks the config first."""
    with StandinDevice() as device:
        config = push_config(device)
        out = shell(device, f"perfetto --txt -c {config} -o {TRACE} --background-wait")
        assert re.fullmatch(r"\d+\n", out), out
        assert device.tracing_on()  # no wait: the parent waited for the session to start
        stop_perfetto(device, int(out))
        assert device.host_path(TRACE).stat().st_size > 0

        short = re.sub(r"duration_ms: \d+", "duration_ms: 500", CONFIG.read_text())
        started = time.monotonic()
        proc = device.shell(f"perfetto --txt -c - -o {TRACE}2", input=short)
        assert proc.returncode == 0, proc.stderr
        assert 0.5 <= time.monotonic() - started < 60
        assert device.host_path(TRACE + "2").stat().st_size > 0 and not device.tracing_on()

        bad = device.shell(f"perfetto --txt -c - -o {TRACE}3 --background", input="buffers { size_kb: }")
        assert (bad.returncode, bad.stdout) == (1, ""), bad
        assert "perfetto:" in bad.stderr
        assert not device.host_path(TRACE + "3").exists()


def test_a_ring_too_small_reports_its_losses(tmp_path):
    """traced's ftrace_stats at each end of the session carry the ring's overrun, which
    sqlwa parse reports as lost events (and none where the ring kept up)."""
    from sqlwa.analysis import traceparse

    with StandinDevice() as device:
        small = """
            buffers { size_kb: 1024 }
            data_sources { config { name: "linux.ftrace" ftrace_config {
                ftrace_events: "ftrace/print" ftrace_events: "block/block_rq_issue" buffer_size_kb: 4
            } } }
        """
        config = device.host_path("/data/local/tmp/small.pbtx")
        config.write_text(small)
        out = shell(device, f"perfetto --txt -c /data/local/tmp/small.pbtx -o {TRACE} --background-wait")
        marks = "i=0; while [ $i -lt 3000 ]; do echo mark $i >&3; i=$((i+1)); done"
        shell(device, f"exec 3>/sys/kernel/tracing/trace_marker; {marks}")
        shell(device, "dd if=/dev/zero of=/data/local/tmp/x bs=4096 count=1 conv=fsync 2>/dev/null")
        stop_perfetto(device, int(out))
        shutil.copy(device.host_path(TRACE), tmp_path / "t.perfetto-trace")
        raw = device.host_path(TRACE + ".standin.txt").read_text()
    events, report = traceparse.parse(tmp_path / "t.perfetto-trace")
    kept = raw.count(": tracing_mark_write: mark ")
    assert kept < 3000  # a page per CPU: the marks are mostly (or all) overwritten
    assert report["lost_events"] >= 3000 - kept, report


def test_host_path_resolves_links_inside_the_device():
    """A link the shell user plants resolves as the device resolves it: an absolute target
    from the device's /, and `..` never above it; the last part unfollowed on request."""
    with StandinDevice() as device:
        shell(device, "cd /data/local/tmp && echo inside > target && ln -s /data/local/tmp/target abs")
        shell(device, "cd /data/local/tmp && ln -s ../../../../../../../../etc up && ln -s loop loop")
        assert device.host_path("/data/local/tmp/abs").read_text() == "inside\n"
        assert device.host_path("/data/local/tmp/abs", follow=False).is_symlink()
        root = device.host_path("/")
        assert device.host_path("/data/local/tmp/up") == root / "etc"
        with pytest.raises(OSError, match="symbolic links"):
            device.host_path("/data/local/tmp/loop")


def test_a_test_killed_outright_leaves_nothing(tmp_path):
    """A test process SIGKILLed with a device open (a worker past its timeout): the holder
    sees its parent gone and tears the device down itself."""
    script = tmp_path / "killed.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path[:0] = [{str(REPO / 'tests')!r}]\n"
        "from standin_device import StandinDevice\n"
        "device = StandinDevice().__enter__()\n"
        "print(device.name, device.holder.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'analyzer'}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    name, holder = proc.stdout.readline().split()
    proc.kill()
    proc.wait()

    def left() -> list[str]:
        losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        found = [line for line in losetup.splitlines() if name in line]
        found += [n for n in os.listdir(StandinDevice.tracefs_root() / "instances") if n == name]
        found += [n for n in os.listdir(tempfile.gettempdir()) if n == name]
        return found + ([f"holder {holder}"] if Path(f"/proc/{holder}").exists() else [])

    assert StandinDevice.wait_until(lambda: not left(), 30), left()


def test_a_shell_without_a_command_reads_its_stdin():
    with StandinDevice() as device:
        proc = subprocess.run(device.argv(None), input="getprop ro.build.type; id -u\n", capture_output=True, text=True)
        assert (proc.returncode, proc.stdout) == (0, f"user\n{SHELL_UID}\n"), proc.stderr


def test_the_engine_run_by_the_shell_user_marks_commits_that_parse_to_the_truth(tmp_path):
    """sqlwa's engine, run in the device as the shell user on /data/local/tmp with its
    markers going to the device's trace_marker, while perfetto records: `sqlwa parse
    --commits` of the pulled trace finds every commit, and each one's write requests,
    bytes and flushes equal a tally of the raw text on the device they are counted on
    (the one with the most issued requests, as sqlwa picks for a trace from elsewhere)."""
    with StandinDevice() as device:
        out = shell(device, f"perfetto --txt -c {push_config(device)} -o {TRACE} --background-wait")
        run = (
            "from sqlwa import _native; "
            "r = _native.run_workload(_native.builtin_scenario('kv-prefs'), "
            "{'txns': 12, 'warmup': 2, 'journal': 'wal', 'sync': 'full'}, "
            "'/data/local/tmp/run', '/sys/kernel/tracing/trace_marker'); "
            "print(len(r['commits']['index']))"
        )
        ran = shell(device, f'PYTHONPATH={REPO / "analyzer"} {sys.executable} -c "{run}"')
        stop_perfetto(device, int(out))
        trace, text = tmp_path / "t.perfetto-trace", tmp_path / "t.txt"
        shutil.copy(device.host_path(TRACE), trace)
        shutil.copy(device.host_path(TRACE + ".standin.txt"), text)
    assert ran == "14\n"  # 2 warm-up + 12 measured
    sqlwa("parse", str(trace), "-o", str(tmp_path / "events.parquet"), "--commits", str(tmp_path / "commits.parquet"))
    commits = pl.read_parquet(tmp_path / "commits.parquet").sort("index")
    assert commits["index"].to_list() == list(range(14))
    issued = Counter(m["dev"] for m in re.finditer(r": block_rq_issue: (?P<dev>\d+,\d+) ", text.read_text()))
    dev = max(issued, key=lambda d: (issued[d], tuple(map(int, d.split(",")))))
    truth = tally_block_per_commit(text, dev)
    for row in commits.iter_rows(named=True):
        want = truth.get(row["index"], Counter())
        got = (row["write_requests"], row["write_bytes"], row["flush_requests"])
        assert got == (want["writes"], want["bytes"], want["flush"]), row["index"]
    assert sum(truth[i]["flush"] for i in range(2, 14)) >= 12  # a synced commit flushes the cache


def test_an_encrypted_device_keeps_the_shell_user_s_files_under_fscrypt():
    """encrypt=True: /data/local/tmp inherits the v2 policy /data/local was given (as a
    phone's device-encrypted directories), the shell user's files there are encrypted,
    and getprop says file-based encryption; without it, none."""
    from sqlwa._system import fscrypt

    with StandinDevice(encrypt=True) as device:
        shell(device, "echo secret > /data/local/tmp/f && sync")
        policy = fscrypt.encryption_policy(device.host_path("/data/local/tmp/f"))
        assert policy is not None and policy[:3] == (2, 1, 4), policy  # v2, AES-256-XTS, AES-256-CTS
        assert policy[4] == device.key_id
        assert fscrypt.encryption_policy(device.host_path("/data")) is None  # /data itself is not
        assert shell(device, "getprop ro.crypto.type") == "file\n"
        assert shell(device, "cat /data/local/tmp/f") == "secret\n"
        assert b"secret\n" not in device.image.read_bytes()  # on the image: ciphertext only
    with StandinDevice() as device:
        assert shell(device, "getprop ro.crypto.type") == "none\n"
