"""``sqlwa run --vm``: the lab in a qemu guest with Debian's kernel, against independent truth.

- fsyncs: SQLite's documented per-commit xSync sequence
  (docs/reference/sqlite-commit-syncs.md), at the VFS and at the syscall level;
- block: the tests' own tally of the guest's raw trace.txt (tests/trace_truth.py: regular
  expressions, no sqlwa code), per commit window;
- the host: an ext4 run here and one in the guest agree on fsyncs and flushes per commit;
- the guest's kernel is the one asked for (its release in the run's config equals the
  kernel package's), and f2fs, which this host's kernel lacks, is measured there.

The kernel is Debian's current one, fetched once into the cache (~/.cache/sqlwa).
Without qemu or a static busybox these tests skip with the reason; ./scripts/system-deps
installs both as root.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from helpers import DIRECTORY_SYNCS, VFS_SYNCS, sqlwa, sqlwa_as_nobody
from sqlwa.results import store
from sqlwa.vm import machine
from sqlwa.vm.kernel import cache_dir as kernel_cache_dir
from trace_truth import strace_per_commit, tally_block_per_commit, trace_records
from vm_guest import vm_runs

pytestmark = [pytest.mark.vm, pytest.mark.slow]


def vm_run(out: Path, *args: str, prefix: list[str] | None = None) -> dict:
    cmd = [*(prefix or []), sys.executable, "-m", "sqlwa", "run", "--vm", *args, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "summary.json").read_text())


MOTO_Z = "moto"  # the android-f2fs profile's run among guest_runs


@pytest.fixture(scope="module")
def guest_runs(tmp_path_factory) -> dict[tuple[str, str] | str, Path]:
    """One guest run per (fs, journal): ext4 and f2fs, DELETE and WAL, all FULL; and the
    Moto Z profile's f2fs: each as `sqlwa run --vm` parses its command line, all in one
    guest (a fresh lab each: tests/vm_guest.py)."""
    runs: dict[tuple[str, str] | str, tuple[str, list[str]]] = {
        (fs, journal): (
            "run",
            ["--vm", "--fs", fs, "--image-size", "128M", "-j", journal, "--sync", "full", "-n", "40"],
        )
        for fs in ("ext4", "f2fs")
        for journal in ("delete", "wal")
    }
    moto = ["--vm", "--profile", "android-f2fs", "--image-size", "128M", "-j", "wal", "--sync", "full", "-n", "40"]
    runs[MOTO_Z] = ("run", moto)
    return vm_runs(tmp_path_factory.mktemp("vm-lab"), runs)


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("fs", ["ext4", "f2fs"])
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_fsyncs_follow_sqlites_documented_sequence(guest_runs, fs, journal):
    commits = pl.read_parquet(guest_runs[fs, journal] / "commits.parquet").filter(~pl.col("warmup"))
    expected = VFS_SYNCS[journal]
    assert commits["vfs_sync_calls"].to_list() == [expected] * commits.height
    assert commits["fsync_calls"].to_list() == [expected + DIRECTORY_SYNCS[journal]] * commits.height


@pytest.mark.parametrize("fs", ["ext4", "f2fs"])
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_block_per_commit_equals_independent_tally_of_the_guests_trace(guest_runs, fs, journal):
    out = guest_runs[fs, journal]
    summary = summary_of(out)
    truth = tally_block_per_commit(out / "trace.txt", summary["config"]["lab"]["dev"].replace(":", ","))
    commits = pl.read_parquet(out / "commits.parquet").filter(~pl.col("warmup"))
    assert commits.height == 40
    for row in commits.iter_rows(named=True):
        tally = truth[row["index"]]
        assert (row["write_requests"], row["write_bytes"], row["flush_requests"]) == (
            tally["writes"],
            tally["bytes"],
            tally["flush"],
        ), row["index"]


@pytest.mark.parametrize("fs", ["ext4", "f2fs"])
def test_the_guest_ran_the_kernel_asked_for_and_says_its_timings_are_emulated(guest_runs, fs):
    config = summary_of(guest_runs[fs, "wal"])["config"]
    vm = config["vm"]
    kernel_dir = Path(vm["kernel"]["root"])
    assert config["kernel"] == vm["kernel"]["release"] == config["lab"]["kernel"]
    assert (kernel_dir / "lib" / "modules" / config["kernel"]).is_dir()
    assert config["kernel"] != os.uname().release
    assert config["fs"] == fs and config["lab"]["fs_type"] == fs
    assert vm["timings_comparable"] == (vm["accelerator"] == "kvm")
    # the CPUs the guest had, by its own trace: the CPU column of every event
    cpus = {int(event["cpu"]) for event in trace_records(guest_runs[fs, "wal"] / "trace.txt")}
    assert vm["cpus"] == {"kvm": 2, "tcg": 1}[vm["accelerator"]] and max(cpus) < vm["cpus"], cpus


@pytest.mark.parametrize("fs", ["ext4", "f2fs"])
def test_guest_block_bytes_are_attributed(guest_runs, fs):
    """Attribution works in the guest as on the host: the bytes of every category add up to
    the total and almost none is left unattributed."""
    summary = summary_of(guest_runs[fs, "wal"])
    section = summary["bytes_by_category"]
    assert section["unattributed_share"] <= 0.05, section


@pytest.fixture(scope="module")
def host_run(tmp_path_factory) -> Path:
    """The guest's ext4 DELETE/FULL run, on this host's kernel (needs root)."""
    host = tmp_path_factory.mktemp("host-ext4") / "host"
    subprocess.run(
        [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--image-size", "128M", "-j", "delete"]
        + ["--sync", "full", "-n", "40", "--out", str(host)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return host


@pytest.mark.root
def test_ext4_in_the_guest_agrees_with_the_host_on_fsyncs_and_flushes(guest_runs, host_run):
    guest = summary_of(guest_runs["ext4", "delete"])["per_commit"]
    here = summary_of(host_run)["per_commit"]
    for metric in ("fsync_calls", "flush_requests"):
        assert guest[metric] == here[metric], metric


@pytest.mark.root
def test_compare_by_kernel_sets_the_guests_kernel_against_the_hosts(guest_runs, host_run, tmp_path):
    """One store holding the same configuration run on the guest's kernel and on this
    host's: its kernel column (read with sqlite3) holds both releases, and `compare --by
    kernel` makes them the two sides — the older kernel A — with each side's figures its
    own run's summary.json; without --by, a note says the kernels were pooled."""
    guest = guest_runs["ext4", "delete"]
    guest_kernel = summary_of(guest)["config"]["vm"]["kernel"]["release"]
    assert (Path(summary_of(guest)["config"]["vm"]["kernel"]["root"]) / "lib" / "modules" / guest_kernel).is_dir()
    both = tmp_path / "both"
    both.mkdir()
    for run in (guest, host_run):
        store.save_run_dir(both / store.STORE_FILE, run)
    with sqlite3.connect(both / store.STORE_FILE) as conn:
        kernels = {row[0] for row in conn.execute("SELECT kernel FROM runs")}
    assert kernels == {guest_kernel, os.uname().release}
    documented_fsyncs = VFS_SYNCS["delete"] + DIRECTORY_SYNCS["delete"]
    for sources in ([str(both)], [str(guest), str(host_run)]):
        proc = sqlwa("compare", *sources, "--by", "kernel", "--json")
        document = json.loads(proc.stdout)
        assert document["a"].endswith(f"[kernel {guest_kernel}]")  # 6.1 is older than this host's
        assert document["b"].endswith(f"[kernel {os.uname().release}]")
        [config] = document["configurations"]
        assert config["label"] == "mobibench-insert ext4 delete/full"
        fsyncs, flushes = config["metrics"]["fsync_calls_per_commit"], config["metrics"]["flushes_per_commit"]
        assert fsyncs["a"] == fsyncs["b"] == documented_fsyncs
        assert flushes["a"] == summary_of(guest)["per_commit"]["flush_requests"]
        assert flushes["b"] == summary_of(host_run)["per_commit"]["flush_requests"]
    pooled = sqlwa("compare", str(both), str(both))
    assert f"holds runs of 2 kernels ({guest_kernel}, {os.uname().release}), pooled here" in pooled.stderr


@pytest.mark.root
def test_a_user_without_root_gets_the_block_level_from_the_guest(guest_runs):
    """As nobody, with the kernel the other tests prepared given as a directory (nobody
    cannot read root's cache): block and syscall levels measured, nothing left behind."""
    interpreter = os.path.realpath(sys.executable)
    readable_by_nobody = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "test", "-r", interpreter]
    )
    if readable_by_nobody.returncode != 0:
        # qemu, run as nobody, serves the guest the host's files as nobody may read them
        pytest.skip(f"nobody cannot read this Python ({interpreter}), which the guest runs")
    kernel_dir = Path(summary_of(guest_runs["ext4", "wal"])["config"]["vm"]["kernel"]["root"])
    readable = Path(
        shutil.copytree(kernel_dir, Path(os.environ.get("TMPDIR", "/tmp")) / f"sqlwa-test-kernel-{os.getpid()}")
    )
    try:
        for path in [readable, *readable.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0))
        with sqlwa_as_nobody(
            "run",
            "--vm",
            "--kernel",
            str(readable),
            "--image-size",
            "128M",
            "-n",
            "20",
            "-o",
            "{dir}/out",
            prefix="sqlwa-vm-nobody-",
            timeout=900,
        ) as (proc, workdir):
            assert proc.returncode == 0, proc.stderr
            summary = json.loads((workdir / "out" / "summary.json").read_text())
            assert {"syscall", "block"} <= set(summary["levels"])
            assert summary["config"]["vm"]["accelerator"] == "tcg"  # nobody cannot open /dev/kvm
    finally:
        shutil.rmtree(readable, ignore_errors=True)


def test_a_matrix_runs_every_cell_in_one_guest(tmp_path):
    """`sqlwa matrix --vm`: one boot for all cells (the same guest uptime at boot in every
    run's config.vm), each cell on a fresh filesystem of its own kind, stored like a host
    matrix, and its per-commit block figures equal the tally of its own raw trace."""
    out = tmp_path / "m"
    subprocess.run(
        [sys.executable, "-m", "sqlwa", "matrix", "--vm", "--fs", "ext4,f2fs", "-j", "wal", "--sync", "full"]
        + ["-n", "20", "--image-size", "128M", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    runs = sorted((out / "runs").iterdir())
    summaries = [summary_of(run) for run in runs]
    assert sorted(s["config"]["fs"] for s in summaries) == ["ext4", "f2fs"]
    assert len({s["config"]["vm"]["boot_s"] for s in summaries}) == 1
    assert len({s["config"]["lab"]["mountpoint"] for s in summaries}) == 2  # a fresh lab per cell
    for run, summary in zip(runs, summaries):
        truth = tally_block_per_commit(run / "trace.txt", summary["config"]["lab"]["dev"].replace(":", ","))
        commits = pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup"))
        assert commits["flush_requests"].to_list() == [truth[i]["flush"] for i in commits["index"]]


def test_the_moto_z_profile_makes_f2fs_fsync_flush_nothing(guest_runs):
    """--profile android-f2fs (the Moto Z's /data: f2fs with nobarrier): the device sees no
    cache flush in any commit, where plain f2fs flushes once per WAL/FULL commit — counted
    in the raw traces — and the run says fsync flushed nothing."""
    out = guest_runs[MOTO_Z]
    summary = summary_of(out)
    assert "nobarrier" in summary["config"]["mount_options"]
    for run, expected in ((out, 0), (guest_runs["f2fs", "wal"], 1)):
        config = summary_of(run)["config"]
        truth = tally_block_per_commit(run / "trace.txt", config["lab"]["dev"].replace(":", ","))
        commits = pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup"))
        assert [truth[i]["flush"] for i in commits["index"]] == [expected] * commits.height
    assert any(f["check"] == "fsync_flushed_nothing" for f in summary["findings"])


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_guest_syscalls_per_commit_equal_strace_in_the_guest(tmp_path, journal):
    """The syscall level inside the guest against strace (the host's binary over the share,
    run in the guest around the guest program): fsync-family and pwrite64 calls and bytes
    of the SQL thread per commit."""
    out = tmp_path / "out"
    summary = vm_run(out, "--guest-strace", "--image-size", "128M", "-j", journal, "--sync", "full", "-n", "20")
    truth = strace_per_commit(out / "guest.strace", summary["config"]["tid"])
    assert truth, "strace saw no commit"
    commits = pl.read_parquet(out / "commits.parquet")
    for column in ("fsync_calls", "pwrite_calls", "pwrite_bytes"):
        for index, count in zip(commits["index"], commits[column]):
            assert count == truth[index][column], (column, index)


@pytest.mark.parametrize("command", ["run", "crash"])
def test_a_relative_out_is_made_in_the_working_directory(tmp_path, command):
    """``--out rel`` names a directory in the user's working directory, as on the host:
    the guest (whose init and qemu run elsewhere) writes the trace there and the host
    analyses it."""
    args = [command, "--vm", "--fs", "ext4", "--image-size", "64M", "-j", "wal", "--sync", "full", "-n", "3"]
    args += ["--samples", "1"] if command == "crash" else []
    proc = subprocess.run(
        [sys.executable, "-m", "sqlwa", *args, "--out", "rel"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "rel"
    assert (out / "trace.txt").stat().st_size > 0
    assert summary_of(out)["commits"] == 3


def test_a_kvm_that_could_not_boot_the_guest_is_remembered(guest_runs):
    """Where KVM could not boot the guest (this lab machine's PVM KVM), the run says why
    and the verdict is in the cache, so the next guest boots under TCG at once."""
    vm = summary_of(guest_runs["ext4", "wal"])["config"]["vm"]
    if vm["accelerator"] == "kvm" or vm["accelerator_note"] is None:
        pytest.skip("KVM booted the guest here, or /dev/kvm cannot be opened: nothing to remember")
    verdicts = json.loads((kernel_cache_dir() / machine.KVM_VERDICTS_FILE).read_text())
    assert vm["accelerator_note"] in verdicts.values()


@pytest.mark.parametrize("command", ["run", "matrix"])
def test_a_kernel_that_is_not_one_is_one_line_and_makes_nothing(tmp_path, command):
    """--kernel given a file that is no kernel package: one error line naming it, exit 2,
    and no output directory (the kernel is resolved before OUT is made)."""
    bad = tmp_path / "bad.deb"
    bad.write_text("not a Debian archive\n")
    out = tmp_path / "out"
    args = [command, "--vm", "--kernel", str(bad), "-n", "5", "-j", "wal", "--sync", "full", "--out", str(out)]
    proc = subprocess.run([sys.executable, "-m", "sqlwa", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("sqlwa: error: unpacking bad.deb failed") and "Traceback" not in proc.stderr
    assert not out.exists()
