"""The lab: fresh filesystems on loop devices, and nothing left behind — after a normal
exit, an exception, SIGINT / SIGTERM at several points of setup, and (via
``sqlwa lab cleanup``) after SIGKILL.

Most tests need root (loop devices, mkfs, mount) and are skipped cleanly without it.
Everything is named per process, so the tests may run in parallel (pytest-xdist).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import leftovers_after_release, sqlwa_leftovers
from sqlwa._system.loops import loop_devices
from sqlwa._system.mounts import mount_at
from sqlwa.cli.lab import lab as lab_group
from sqlwa.errors import LabError, NeedsRoot, UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab.cleanup import cleanup_leftovers
from sqlwa.lab.filesystem import LabFilesystem, LabOptions, MountedLab, filesystem_support, parse_size
from sqlwa.lab.layers import FillLayer

# --------------------------------------------------------------------------- helpers


def assert_lab_gone(lab: LabFilesystem | MountedLab) -> None:
    lab = lab.lab if isinstance(lab, MountedLab) else lab
    assert mount_at(lab.mountpoint) is None
    assert not [d for d in loop_devices() if d.backing_file == lab.image]
    assert not os.path.exists(lab.lab_dir)


def write_and_fsync(directory: str, size: int = 64 * 1024) -> str:
    path = os.path.join(directory, f"data-{secrets.token_hex(3)}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, os.urandom(size))
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


# A child process that builds a lab (and, with "capture", a trace capture inside it),
# prints every setup stage and pauses at the one named, so the parent can signal it there.
CHILD = textwrap.dedent(
    """
    import faulthandler, os, signal, sys, threading, time
    from sqlwa.lab.filesystem import LabFilesystem, LabOptions

    faulthandler.register(signal.SIGUSR1)  # the parent asks for a traceback if we hang

    fs, pause_at, with_capture, out_dir = sys.argv[1:5]

    def progress(stage):
        print("STAGE", stage, flush=True)
        if stage == pause_at:
            time.sleep(300)

    with LabFilesystem(fs, LabOptions(image_size="320M"), progress=progress) as lab:
        if with_capture == "capture":
            from sqlwa.capture.tracing import TraceCapture
            with TraceCapture(out_dir, dev=lab.dev,
                              pid=threading.get_native_id(), progress=progress):
                progress("capturing")
        else:
            progress("inside")
    print("EXITED CLEANLY", flush=True)
    """
)


def start_child(tmp_path: Path, fs: str, pause_at: str, with_capture: bool = False) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    argv = [sys.executable, str(script), fs, pause_at, "capture" if with_capture else "lab", str(tmp_path / "out")]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_stage(child: subprocess.Popen, stage: str, timeout: float = 60) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = child.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise AssertionError(f"child exited before stage {stage}: {seen}\n{child.stderr.read()}")  # type: ignore[union-attr]
        seen.append(line.strip())
        if line.strip() == f"STAGE {stage}":
            return seen
    raise AssertionError(f"stage {stage} not reached in {timeout}s: {seen}")


def kill_at_stage_and_check(tmp_path: Path, fs: str, stage: str, signum: int, pause: bool, capture: bool) -> None:
    child = start_child(tmp_path, fs, stage if pause else "never", with_capture=capture)
    try:
        wait_for_stage(child, stage)
        child.send_signal(signum)
        try:
            # Generous: under heavy parallel I/O an unmount's final sync through the loop
            # device was once seen to take a minute on this VM.
            child.wait(timeout=180)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)
            time.sleep(1)
            child.kill()
            raise AssertionError(f"the child ignored the signal:\n{child.communicate()[1]}") from None
        stderr = child.stderr.read()  # type: ignore[union-attr]
        assert leftovers_after_release(child.pid) == [], stderr
        if pause:
            assert child.returncode != 0, "the signal should have stopped the run"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if sqlwa_leftovers(child.pid):
            cleanup_leftovers()  # do not leave a failed test's debris on the machine


# --------------------------------------------------------------------------- no root needed


def test_parse_size() -> None:
    assert parse_size("1G") == 1 << 30
    assert parse_size("512M") == 512 << 20
    assert parse_size("64KiB") == 64 << 10
    assert parse_size(4096) == 4096
    with pytest.raises(UsageError):
        parse_size("lots")


def test_unknown_filesystem_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as err:
        LabFilesystem("/dev/vda")
    assert "ext4" in hint_of(err.value)


@pytest.mark.parametrize("opts", [["/dev/vda"], ["-d", "/dev/loop0"], ["-O", "fast_commit", "/dev/null"]])
def test_mkfs_options_naming_a_device_are_refused(opts: list[str]) -> None:
    with pytest.raises(LabError, match="names a device"):
        LabFilesystem("ext4", LabOptions(mkfs_opts=opts))


@pytest.mark.parametrize("workdir", ["/dev/null", "/dev/loop-control", "/dev/loop0"])
def test_a_device_path_is_never_used_as_workdir(workdir: str) -> None:
    if not os.path.exists(workdir):
        pytest.skip(f"{workdir} does not exist here")
    with pytest.raises(LabError, match="device"):
        LabFilesystem("ext4", LabOptions(workdir=workdir))


def test_mkfs_refuses_a_loop_device_that_is_not_ours(tmp_path: Path) -> None:
    lab = LabFilesystem("ext4", LabOptions(workdir=tmp_path))
    for device in ("/dev/vda", "/dev/sda", "/dev/loop0"):
        with pytest.raises(LabError, match="refusing to format"):
            lab._assert_loop_is_ours(device)


def test_f2fs_is_skipped_with_reason_and_fix_when_the_kernel_lacks_it() -> None:
    support = filesystem_support("f2fs")
    if support.available:
        pytest.skip("this kernel has f2fs")
    assert "f2fs" in support.reason and "/proc/filesystems" in support.reason
    with pytest.raises(UnsupportedFilesystem) as err:
        with LabFilesystem("f2fs"):
            pass
    assert "CONFIG_F2FS_FS" in hint_of(err.value)


def test_without_root_the_error_names_root_and_points_to_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NeedsRoot) as err:
        with LabFilesystem("tmpfs"):
            pass
    assert "root" in str(err.value) and "--dir" in hint_of(err.value)


# --------------------------------------------------------------------------- real filesystems


@pytest.mark.parametrize(
    "fs, fstype, expected_option",
    [
        ("ext4", "ext4", "data=ordered"),
        ("ext4-journal", "ext4", "data=journal"),
        ("ext4-writeback", "ext4", "data=writeback"),
        ("xfs", "xfs", None),
        ("btrfs", "btrfs", None),
        ("tmpfs", "tmpfs", None),
    ],
)
@pytest.mark.root
def test_each_filesystem_is_made_mounted_and_removed(fs: str, fstype: str, expected_option: str | None) -> None:
    with LabFilesystem(fs, LabOptions(image_size="320M", mount_opts=["noatime"])) as lab:
        mount = mount_at(lab.mountpoint)
        assert mount is not None and mount.fstype == fstype
        options = mount.options.split(",")
        assert "noatime" in options
        if expected_option:
            assert expected_option in options
        write_and_fsync(lab.mountpoint)
        described = lab.describe()
        if fs == "tmpfs":
            assert lab.loop_device is None and described["dev"] is None
        else:
            assert mount.source == lab.loop_device
            assert os.major(os.stat(lab.loop_device).st_rdev) == lab.dev[0] == 7
            assert os.minor(os.stat(lab.loop_device).st_rdev) == lab.dev[1]
            assert described["mkfs_cmd"][-1] == lab.loop_device
            assert described["loop_direct_io"] is True
        assert described["fs"] == fs and described["mount_options"] == mount.options
    assert_lab_gone(lab)


@pytest.mark.root
def test_mkfs_and_mount_options_pass_through() -> None:
    with LabFilesystem(
        "ext4", LabOptions(image_size="320M", mkfs_opts=["-O", "fast_commit"], mount_opts=["barrier=0"])
    ) as lab:
        assert "nobarrier" in mount_at(lab.mountpoint).options.split(",")
        features = subprocess.run(["dumpe2fs", "-h", lab.loop_device], capture_output=True, text=True).stdout
        assert "fast_commit" in features
        assert lab.mkfs.argv[-3:] == ["-O", "fast_commit", lab.loop_device]


@pytest.mark.root
@pytest.mark.parametrize("fs, pct", [("ext4", 60), ("xfs", 80), ("btrfs", 50)])
def test_fill_reaches_the_requested_level(fs: str, pct: int) -> None:
    with LabFilesystem(fs, LabOptions(image_size="320M"), [FillLayer(pct)]) as lab:
        fill = lab.describe()["fill"]
        assert fill["target_pct"] == pct
        assert pct <= fill["achieved_pct"] <= pct + 3, fill
        st = os.statvfs(lab.mountpoint)
        used = st.f_blocks - st.f_bfree
        assert abs(100 * used / (used + st.f_bavail) - fill["achieved_pct"]) < 1
        assert fill["files"] > 5  # mixed sizes, not one big file
        write_and_fsync(lab.mountpoint)  # the workload still has room
    assert_lab_gone(lab)


@pytest.mark.root
def test_everything_is_removed_after_an_exception() -> None:
    with pytest.raises(RuntimeError, match="workload failed"):
        with LabFilesystem("ext4", LabOptions(image_size="320M")) as lab:
            write_and_fsync(lab.mountpoint)
            raise RuntimeError("workload failed")
    assert_lab_gone(lab)
    assert not [x for x in sqlwa_leftovers(os.getpid()) if lab.name in x]


@pytest.mark.root
def test_a_failed_mkfs_leaves_nothing(tmp_path: Path) -> None:
    lab = LabFilesystem("ext4", LabOptions(image_size="320M", mkfs_opts=["-O", "no_such_feature"], workdir=tmp_path))
    with pytest.raises(LabError, match="mkfs"):
        with lab:
            pass
    assert_lab_gone(lab)
    assert os.listdir(tmp_path) == []


@pytest.mark.root
def test_signal_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with LabFilesystem("tmpfs", LabOptions(image_size="16M")):
        assert signal.getsignal(signal.SIGTERM) is not before[1]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@pytest.mark.root
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    "stage, pause",
    [
        ("image", True),  # lab dir made, image about to be created
        ("loop", True),  # image exists, loop device about to be attached
        ("mkfs", True),  # loop attached, about to format
        ("mkfs", False),  # signalled while mkfs runs
        ("mount", True),  # formatted, about to mount
        ("mount", False),  # signalled around the mount
        ("inside", True),  # mounted, the run in progress
    ],
)
def test_a_signal_at_any_point_leaves_nothing(tmp_path: Path, stage: str, pause: bool, signum: int) -> None:
    kill_at_stage_and_check(tmp_path, "ext4", stage, signum, pause, capture=False)


@pytest.mark.root
@pytest.mark.parametrize("fs", ["xfs", "btrfs", "tmpfs"])
def test_sigterm_inside_other_filesystems_leaves_nothing(tmp_path: Path, fs: str) -> None:
    kill_at_stage_and_check(tmp_path, fs, "inside", signal.SIGTERM, True, capture=False)


@pytest.fixture
def decoy_loop(tmp_path: Path):
    """A loop device that is not sqlwa's: cleanup must never touch it."""
    image = tmp_path / f"decoy-{secrets.token_hex(3)}.img"
    image.write_bytes(b"")
    os.truncate(image, 16 << 20)
    device = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True)
    device = device.stdout.strip()
    try:
        yield device, str(image)
    finally:
        subprocess.run(["losetup", "-d", device], capture_output=True)


@pytest.mark.root
def test_cleanup_removes_a_killed_runs_leftovers_and_nothing_else(tmp_path: Path, decoy_loop) -> None:
    from sqlwa.capture.tracing import tracefs_available

    with_capture = tracefs_available().available
    child = start_child(tmp_path, "ext4", "capturing" if with_capture else "inside", with_capture=with_capture)
    try:
        with LabFilesystem("tmpfs", LabOptions(image_size="16M")) as live_lab:  # a live run: must survive
            wait_for_stage(child, "capturing" if with_capture else "inside")
            child.kill()
            child.wait()
            left = sqlwa_leftovers(child.pid)
            assert any(x.startswith("loop:") for x in left) and any(x.startswith("mount:") for x in left)
            assert any(x.startswith("tracefs:") for x in left) == with_capture

            result = CliRunner().invoke(lab_group, ["cleanup"])  # `sqlwa lab cleanup`
            assert result.exit_code == 0, result.output
            assert leftovers_after_release(child.pid) == []
            assert f"sqlwa-lab-{child.pid}-" in result.output

            assert mount_at(live_lab.mountpoint) is not None
            assert any(d.device == decoy_loop[0] and d.backing_file == decoy_loop[1] for d in loop_devices())
        assert_lab_gone(live_lab)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if sqlwa_leftovers(child.pid):
            cleanup_leftovers()


@pytest.mark.root
def test_cleanup_never_touches_a_live_run() -> None:
    with LabFilesystem("tmpfs", LabOptions(image_size="16M")) as lab:
        removed = cleanup_leftovers()
        assert not [r for r in removed if lab.name in r]
        assert mount_at(lab.mountpoint) is not None
    assert_lab_gone(lab)


@pytest.mark.root
def test_options_as_typed_on_the_command_line() -> None:
    with LabFilesystem(
        "ext4", LabOptions(image_size="320M", mkfs_opts="-O fast_commit", mount_opts="noatime,barrier=0")
    ) as lab:
        assert lab.mkfs.argv[-3:] == ["-O", "fast_commit", lab.loop_device]
        options = mount_at(lab.mountpoint).options.split(",")
        assert "noatime" in options and "nobarrier" in options


def test_lab_check_lists_every_filesystem_and_the_capture() -> None:
    result = CliRunner().invoke(lab_group, ["check"])
    assert result.exit_code == 0, result.output
    for fs in ("ext4", "ext4-journal", "ext4-writeback", "xfs", "btrfs", "f2fs", "tmpfs"):
        assert f"--fs {fs} " in result.output
    assert "tracefs" in result.output and "root" in result.output
    f2fs = filesystem_support("f2fs")
    if not f2fs.available:
        assert f2fs.reason in result.output and f"fix: {f2fs.hint}" in result.output


@pytest.mark.root
def test_cleanup_in_another_pid_namespace_leaves_a_live_run_alone(tmp_path: Path) -> None:
    """Inside `unshare --pid`, every host pid looks dead; the owner's lock still says the
    run is alive (#15, point 5)."""
    from sqlwa.capture.tracing import tracefs_available

    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed (Debian package util-linux)")
    with_capture = tracefs_available().available
    stage = "capturing" if with_capture else "inside"
    child = start_child(tmp_path, "ext4", stage, with_capture=with_capture)
    try:
        wait_for_stage(child, stage)
        before = sqlwa_leftovers(child.pid)
        assert before, "the live run has made nothing to protect"
        namespaced = [sys.executable, "-m", "sqlwa", "lab", "cleanup"]
        proc = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", *namespaced], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert f"sqlwa-lab-{child.pid}-" not in proc.stdout and f"sqlwa-{child.pid}-" not in proc.stdout
        assert sqlwa_leftovers(child.pid) == before
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=180)
        if sqlwa_leftovers(child.pid):
            cleanup_leftovers()
    assert leftovers_after_release(child.pid) == []


@pytest.mark.root
def test_a_refused_mount_option_shows_the_kernels_reason() -> None:
    """xfs dropped nobarrier in Linux 4.19; mount(8) only says "wrong fs type, bad option";
    the kernel's log says which option and why (#16, point 14)."""
    if not filesystem_support("xfs").available:
        pytest.skip(filesystem_support("xfs").reason)
    with pytest.raises(LabError) as err:
        with LabFilesystem("xfs", LabOptions(image_size="320M", mount_opts="nobarrier")):
            pass
    assert "the kernel says: xfs: Unknown parameter 'nobarrier'" in str(err.value)
