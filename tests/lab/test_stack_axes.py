"""The phone's storage stack on the host (#17): the android-sdcard profile, and sweeps over
the layers (--encrypt, --fuse, --profile) whose store rows, directories, checks and
comparisons carry them.

Truth is what the kernel says (the mount table, the encryption policy
FS_IOC_GET_ENCRYPTION_POLICY_EX reports on the database's directory, what the FUSE
daemon was granted at FUSE_INIT), SQLite's documented sync sequence, and the results
store read with sqlite3 directly. Everything runs as a subprocess whose pid names its
lab, so the test can see that it left nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import sqlwa
from helpers import leftovers_after_release
from sqlwa.catalogue import config_label
from sqlwa.lab import fuse
from sqlwa.measure import matrix
from sqlwa.measure.engine import Length, RunSettings
from sqlwa.results import compare, store
from trace_truth import write_bytes_since_commit

pytestmark = [
    pytest.mark.root,
    pytest.mark.tracefs,
    pytest.mark.skipif(fuse.daemon_binary(fuse.SQLWA_DAEMON) is None, reason="run ./scripts/setup (sqlwa-fuse)"),
]

# SQLite's documented per-commit xSync sequence (docs/reference/sqlite-commit-syncs.md),
# as tests/e2e/test_run_cli.py checks it without layers: WAL + FULL syncs the WAL once.
WAL_FULL_SYNCS = 1


def sqlwa_owned(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run sqlwa, then hold it to having left nothing of its own (lab names carry its pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqlwa", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate(timeout=timeout)
    assert leftovers_after_release(proc.pid) == []
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def sdcard_run(out: Path, *args: str) -> dict:
    proc = sqlwa_owned("run", "--profile", "android-sdcard", "--image-size", "64M", "-j", "wal", "--sync", "full",
                       "-n", "10", "--warmup", "1", "-o", str(out), *args)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "summary.json").read_text())


def test_android_sdcard_puts_passthrough_fuse_over_encrypted_android_ext4(tmp_path: Path) -> None:
    summary = sdcard_run(tmp_path / "sdcard")
    cfg = summary["config"]
    lab = cfg["lab"]
    assert cfg["profile"]["name"] == "android-sdcard" and cfg["profile"]["overridden"] == []
    assert "FuseDaemon.cpp" in cfg["profile"]["source"] and cfg["profile"]["why"]
    # the kernel's mount table and encryption policy: android-ext4's /data
    assert cfg["fs"] == "ext4" and {"nodev", "noatime", "nosuid"} <= set(cfg["mount_options"].split(","))
    assert lab["encryption"]["policy"] == {"version": 2, "contents_mode": 1, "filenames_mode": 4, "flags": 3}
    # what the kernel granted the daemon at FUSE_INIT: passthrough, no writeback cache
    assert cfg["fuse"] == "passthrough-kernel"
    assert lab["fuse"]["granted"]["passthrough"] is True and lab["fuse"]["granted"]["writeback_cache"] is False
    assert lab["fuse"]["lower"] == str(Path(lab["mountpoint"]) / "data")  # FUSE in front of the encrypted dir
    # SQLite's side is what SQLite documents; its writes went past the daemon, to the lower file
    pc = summary["per_commit"]
    assert pc["vfs_sync_calls"] == WAL_FULL_SYNCS and pc["pwrite_calls"] > 0
    assert pc["fuse_pwrite_calls"] == 0 and pc["fuse_fdatasync_calls"] + pc["fuse_fsync_calls"] > 0


def test_an_explicit_fuse_layer_overrides_the_profiles_and_says_so(tmp_path: Path) -> None:
    summary = sdcard_run(tmp_path / "mine", "--fuse", "passthrough")
    cfg = summary["config"]
    assert cfg["fuse"] == "passthrough" and cfg["profile"]["overridden"] == ["fuse"]
    assert cfg["lab"]["fuse"]["granted"]["passthrough"] is False
    assert summary["per_commit"]["fuse_pwrite_calls"] > 0  # every write through the daemon now


# ----------------------------------------------------------------------------- a sweep over the layers

TXNS = 20
LAYERED_AXES = (
    "--encrypt",
    "none,fscrypt,fscrypt-adiantum",
    "--fuse",
    "none,passthrough",
    "-j",
    "wal",
    "--sync",
    "full",
)


def matrix_into(out: Path, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    proc = sqlwa_owned("matrix", "--image-size", "64M", "-n", str(TXNS), "--warmup", "1", "--out", str(out), *args)
    assert proc.returncode == expect, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def layered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stack-axes") / "m"
    matrix_into(out, *LAYERED_AXES)
    return out


def stored_runs(out: Path) -> dict[tuple[str, str], dict]:
    """The store's rows by (encrypt, fuse), read with sqlite3 itself, not through sqlwa."""
    conn = sqlite3.connect(out / "results.sqlite")
    conn.row_factory = sqlite3.Row
    try:
        return {(r["encrypt"], r["fuse"]): dict(r) for r in conn.execute("SELECT * FROM runs")}
    finally:
        conn.close()


def summary_of(out: Path, row: dict) -> dict:
    return json.loads((out / row["run_dir"] / "summary.json").read_text())


def test_every_cell_of_the_sweep_ran_with_its_layers_and_says_so_in_the_store(layered: Path) -> None:
    rows = stored_runs(layered)
    measured = [(e, f) for e in ("none", "fscrypt") for f in ("none", "passthrough")]
    assert set(rows) == {*measured, ("fscrypt-adiantum", "none"), ("fscrypt-adiantum", "passthrough")}
    for encrypt, layer in measured:
        row = rows[(encrypt, layer)]
        assert row["status"] == "ok" and (row["fs"], row["profile"], row["journal"], row["sync"]) == (
            "ext4", "none", "wal", "full"
        )  # fmt: skip
        cfg = summary_of(layered, row)["config"]
        assert (cfg["encrypt"], cfg["fuse"]) == (encrypt, layer)
        # what the kernel's FS_IOC_GET_ENCRYPTION_POLICY_EX said of the database's directory
        policy = (cfg["lab"]["encryption"] or {}).get("policy")
        assert policy == (
            {"version": 2, "contents_mode": 1, "filenames_mode": 4, "flags": 3} if encrypt != "none" else None
        )
        if layer != "none":  # the daemon served the (encrypted) data directory
            lower = Path(cfg["lab"]["mountpoint"]) / ("data" if encrypt != "none" else "")
            assert Path(cfg["lab"]["fuse"]["lower"]) == lower and cfg["lab"]["fuse"]["pid"]
    names = sorted(p.name for p in (layered / "runs").iterdir())
    assert names == [
        "mobibench-insert-ext4+fscrypt+fuse-passthrough-wal-full-r1",
        "mobibench-insert-ext4+fscrypt-wal-full-r1",
        "mobibench-insert-ext4+fuse-passthrough-wal-full-r1",
        "mobibench-insert-ext4-wal-full-r1",
    ]  # a skipped cell leaves no directory


def test_sqlites_syncs_follow_its_documented_sequence_through_every_layer(layered: Path) -> None:
    conn = sqlite3.connect(layered / "results.sqlite")
    try:
        per_run = conn.execute(
            "SELECT r.encrypt, r.fuse, count(*), sum(c.vfs_sync_calls), sum(c.fsync_calls) FROM commits c "
            "JOIN runs r ON r.id = c.run_id WHERE NOT c.warmup GROUP BY r.id"
        ).fetchall()
    finally:
        conn.close()
    assert len(per_run) == 4
    for encrypt, layer, commits, xsyncs, fsyncs in per_run:
        assert commits == TXNS and xsyncs == fsyncs == WAL_FULL_SYNCS * TXNS, (encrypt, layer)


def test_a_cipher_the_kernel_lacks_is_a_skipped_cell_with_its_reason_and_fix(layered: Path) -> None:
    rows = stored_runs(layered)
    adiantum = [rows[("fscrypt-adiantum", layer)] for layer in ("none", "passthrough")]
    if all(row["status"] == "ok" for row in adiantum):  # a kernel with Adiantum: it is measured instead
        policy = summary_of(layered, adiantum[0])["config"]["lab"]["encryption"]["policy"]
        assert policy["contents_mode"] == policy["filenames_mode"] == 9
        return
    for row in adiantum:
        assert row["status"] == "skipped" and row["run_dir"] is None
        assert "has no adiantum(xchacha12,aes) (ENOPKG)" in row["reason"] and "(fix: " in row["reason"]


def test_fscrypt_on_xfs_is_skipped_before_anything_is_made(tmp_path: Path) -> None:
    out = tmp_path / "m"
    proc = matrix_into(
        out, "--fs", "xfs", "--image-size", "300M", "--encrypt", "fscrypt", "-j", "wal", "--sync", "full"
    )
    [row] = stored_runs(out).values()
    assert row["status"] == "skipped" and row["fs"] == "xfs" and row["encrypt"] == "fscrypt"
    assert row["reason"].startswith("--encrypt fscrypt: xfs has no file-based encryption")
    assert "1 cell(s) skipped" in proc.stdout and not (out / "runs").exists()


def test_a_missing_dev_fuse_is_a_skipped_cell_with_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: False if p == "/dev/fuse" else real_exists(p))
    axes = matrix.Axes(fuses=("passthrough",), journals=("wal",), syncs=("full",))
    plan = matrix.MatrixPlan(tmp_path / "m", axes, settings=RunSettings(length=Length(txns=2)))
    [result] = matrix.run_matrix(plan).results
    assert result.status == "skipped"
    assert result.reason == "--fuse passthrough: there is no /dev/fuse (fix: create it: mknod /dev/fuse c 10 229)"
    assert [row["status"] for row in stored_runs(tmp_path / "m").values()] == ["skipped"]
    assert leftovers_after_release(os.getpid()) == []


def test_a_policy_scoped_to_a_fuse_layer_holds_only_its_configurations(layered: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rule]]\nname = "through FUSE"\nfuse = "passthrough"\nmax_fsync_calls_per_commit = 0.5\n')
    proc = sqlwa_owned("check", "--policy", str(policy), str(layered))
    assert proc.returncode == 1, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [
        "FAIL mobibench-insert ext4+fscrypt+fuse:passthrough wal/full: max_fsync_calls_per_commit measured 1.000, "
        "limit 0.5 [rule: through FUSE]",
        "FAIL mobibench-insert ext4+fuse:passthrough wal/full: max_fsync_calls_per_commit measured 1.000, "
        "limit 0.5 [rule: through FUSE]",
    ]
    policy.write_text('[[rule]]\nfuse = "bindfs"\nencrypt = "fscrypt"\nmax_fsync_calls_per_commit = 9\n')
    nothing = sqlwa_owned("check", "--policy", str(policy), str(layered))
    assert nothing.returncode == 2 and "fuse = bindfs; the results have fuse none/passthrough" in nothing.stderr


def test_compare_matches_configurations_by_their_layers(layered: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    matrix_into(other, "--encrypt", "fscrypt,none", "-j", "wal", "--sync", "full")
    rows = compare.compare(store.load_results(layered), store.load_results(other))
    kib = {
        r["config"]: (r["a"], r["b"])
        for r in rows.filter(pl.col("metric") == "write_kib_per_commit").iter_rows(named=True)
    }
    a, b = stored_runs(layered), stored_runs(other)
    side = lambda runs, key: runs[key]["write_kib_per_commit"] if key in runs else None  # noqa: E731
    assert kib == {
        "mobibench-insert ext4 wal/full": (side(a, ("none", "none")), side(b, ("none", "none"))),
        "mobibench-insert ext4+fscrypt wal/full": (side(a, ("fscrypt", "none")), side(b, ("fscrypt", "none"))),
        "mobibench-insert ext4+fuse:passthrough wal/full": (side(a, ("none", "passthrough")), None),
        "mobibench-insert ext4+fscrypt+fuse:passthrough wal/full": (side(a, ("fscrypt", "passthrough")), None),
    }


def amortized_kib_from_the_trace(out: Path, row: dict) -> float:
    """A run's block KiB per commit from the first measured commit on, tallied from its raw
    trace.txt with the tests' own expressions (trace_truth), not from sqlwa's figures."""
    run = out / row["run_dir"]
    dev = summary_of(out, row)["config"]["lab"]["dev"].replace(":", ",")
    measured = pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup"))
    return write_bytes_since_commit(run / "trace.txt", dev, measured["index"].min()) / measured.height / 1024


def report_figure(page: Path, plot_id: str) -> list[dict]:
    """The traces the page hands Plotly.newPlot for ``plot_id``."""
    html = page.read_text()
    call = re.search(r'Plotly\.newPlot\(\s*"' + re.escape(plot_id) + r'",\s*', html)
    assert call, f"no figure {plot_id}"
    return json.JSONDecoder().raw_decode(html, call.end())[0]


def test_the_report_sets_each_stack_beside_its_plain_filesystem(layered: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert sqlwa_owned("report", str(layered), "-o", str(page)).returncode == 0
    html = page.read_text()
    assert (
        "what each layer costs" in html and 'id="layer-costs"' in html and "CPU ms" in html
    )  # the CPU column: runs record it
    # one bar per stack in the ext4 panel, not four stacks drawn as one "wal/full"
    names = {x for trace in report_figure(page, "plot-categories") for x in trace["x"]}
    assert names == {"ext4 wal/full", "ext4+fuse:passthrough wal/full", "ext4+fscrypt wal/full",
                     "ext4+fscrypt+fuse:passthrough wal/full"}  # fmt: skip
    rows = stored_runs(layered)
    plain = rows[("none", "none")]
    bars = {trace["name"]: dict(zip(trace["x"], trace["y"])) for trace in report_figure(page, "plot-layer-costs")}
    assert set(bars) == {
        "ext4+fuse:passthrough wal/full",
        "ext4+fscrypt wal/full",
        "ext4+fscrypt+fuse:passthrough wal/full",
    }
    for (encrypt, layer), row in rows.items():
        if row["status"] != "ok" or (encrypt, layer) == ("none", "none"):
            continue
        name = config_label(row).removeprefix("mobibench-insert ")
        truth = amortized_kib_from_the_trace(layered, row) / amortized_kib_from_the_trace(layered, plain)
        assert bars[name]["block KiB"] == pytest.approx(truth), name
        assert bars[name]["fsync"] == row["fsync_calls_per_commit"] / plain["fsync_calls_per_commit"] == 1.0
        assert bars[name]["flushes"] == pytest.approx(row["flushes_per_commit"] / plain["flushes_per_commit"])


def test_the_api_selects_a_run_by_its_layers(layered: Path) -> None:
    matrix_api = sqlwa.load(layered)
    run = matrix_api.run(encrypt="fscrypt", fuse="passthrough")
    assert run.label == "mobibench-insert ext4+fscrypt+fuse:passthrough wal/full"
    assert run.config["lab"]["encryption"]["policy"]["contents_mode"] == 1
    assert set(matrix_api.commits.filter(pl.col("fuse") == "passthrough")["encrypt"]) == {"none", "fscrypt"}


def test_resuming_with_another_layer_axis_is_another_plan(layered: Path) -> None:
    axes = [arg if arg != "none,passthrough" else "none" for arg in LAYERED_AXES]
    proc = matrix_into(layered, *axes, "--resume", expect=2)
    assert "holds a matrix of another plan: --fuse none (it was started with none,passthrough)" in proc.stderr
    again = matrix_into(layered, *LAYERED_AXES, "--resume")
    assert again.stderr.count("done-earlier") == 4 and again.stderr.count("skipped") == 2
