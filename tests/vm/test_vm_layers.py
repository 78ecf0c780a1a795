"""The VM lab's encryption layers under and over the filesystem, against independent truth:
``--crypt dm-crypt`` / ``dm-crypt-luks2`` (ext4 on dm-crypt on the loop device) and
``--fs ecryptfs`` (eCryptfs over ext4), in a guest with Debian's kernel.

- fsyncs: SQLite's documented per-commit sequence (tests/helpers.py);
- block: the tests' own tally of the raw trace.txt on the disk, the loop device
  (tests/trace_truth.py), per commit window; the bytes of every category add up to that
  total, and almost none is unattributed;
- dm-crypt: the offset between the disk's and the filesystem's sectors in the kernel's
  ``block_bio_remap`` lines is the one ``dmsetup table`` recorded; the disk never sees the
  filesystem's threads, attribution does;
- eCryptfs: the files a write was given by the xSync it happened in are those the lower
  files' FIEMAP extents say;
- encryption: a known string the scenario writes is in the disk image of plain ext4 and
  in neither the dm-crypt's nor the eCryptfs's (the image copied out with --keep-image);
- this host has no device-mapper: --crypt without --vm is refused in one line.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from helpers import DIRECTORY_SYNCS, VFS_SYNCS
from sqlwa import _system
from sqlwa.analysis import attribution, schema, traceparse, windows
from trace_truth import EXTENTS, tally_block_per_commit, trace_records, write_bytes_since_commit
from vm_guest import vm_runs

pytestmark = [pytest.mark.vm, pytest.mark.slow]

COMMITS = 30
# (layer, journal) → the run's options; synchronous FULL, 128 MiB image
LAYER_RUNS = {
    ("dm-crypt", "delete"): ["--crypt", "dm-crypt", "-j", "delete"],
    ("dm-crypt-luks2", "wal"): ["--crypt", "dm-crypt-luks2", "-j", "wal"],
    ("ecryptfs", "delete"): ["--fs", "ecryptfs", "-j", "delete"],
    ("ecryptfs", "wal"): ["--fs", "ecryptfs", "-j", "wal"],
}
DM_RUNS = [key for key in LAYER_RUNS if key[0].startswith("dm-crypt")]
ECRYPTFS_HEADER = 8192  # eCryptfs's metadata in front of every lower file
CANARY = "SQLWA-PLAINTEXT-CANARY-7f3e9a1c"


CANARY_RUNS = {  # layer → its options, and whether the known string is readable on the disk
    "ext4": (["--fs", "ext4"], True),  # the control: without encryption the string is on the disk
    "dm-crypt": (["--crypt", "dm-crypt"], False),
    "dm-crypt-luks2": (["--crypt", "dm-crypt-luks2"], False),
    "ecryptfs": (["--fs", "ecryptfs"], False),
}


@pytest.fixture(scope="module")
def guest_runs(tmp_path_factory) -> dict[tuple[str, str, str], Path]:
    """The layer runs and the canary runs, each as `sqlwa run --vm` parses its command
    line, all in one guest (a fresh lab each: tests/vm_guest.py)."""
    share = tmp_path_factory.mktemp("vm-layers")
    runs = {
        ("layer", layer, journal): (
            "run",
            ["--vm", *options, "--image-size", "128M", "--sync", "full", "-n", str(COMMITS)],
        )
        for (layer, journal), options in LAYER_RUNS.items()
    }
    scenario = canary_scenario(share)
    for layer, (options, _) in CANARY_RUNS.items():
        args = ["--vm", *options, "-s", str(scenario), "--image-size", "32M", "--keep-image", "-n", "5"]
        runs["canary", layer, ""] = ("run", args)
    return vm_runs(share, runs)


@pytest.fixture(scope="module")
def layer_runs(guest_runs) -> dict[tuple[str, str], Path]:
    return {(layer, journal): out for (kind, layer, journal), out in guest_runs.items() if kind == "layer"}


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def measured(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "commits.parquet").filter(~pl.col("warmup"))


def disk_of(out: Path) -> str:
    """The disk as trace lines name it ("7,0"): the loop device, under dm-crypt too."""
    return summary_of(out)["config"]["lab"]["dev"].replace(":", ",")


@pytest.mark.parametrize("run", list(LAYER_RUNS), ids="-".join)
def test_fsyncs_follow_sqlites_documented_sequence(layer_runs, run):
    commits = measured(layer_runs[run])
    journal = run[1]
    assert commits["vfs_sync_calls"].to_list() == [VFS_SYNCS[journal]] * COMMITS
    assert commits["fsync_calls"].to_list() == [VFS_SYNCS[journal] + DIRECTORY_SYNCS[journal]] * COMMITS


@pytest.mark.parametrize("run", list(LAYER_RUNS), ids="-".join)
def test_block_per_commit_on_the_disk_equals_independent_tally(layer_runs, run):
    out = layer_runs[run]
    truth = tally_block_per_commit(out / "trace.txt", disk_of(out))
    for row in measured(out).iter_rows(named=True):
        tally = truth[row["index"]]
        got = (row["write_requests"], row["write_bytes"], row["flush_requests"])
        assert got == (tally["writes"], tally["bytes"], tally["flush"]), row["index"]
    assert sum(t["writes"] for t in truth.values()) > 0


@pytest.mark.parametrize("run", list(LAYER_RUNS), ids="-".join)
def test_every_byte_on_the_disk_keeps_a_cause(layer_runs, run):
    """The categories add up to every byte the trace shows written on the disk since the
    first measured commit, and at most 5 % of them are unattributed."""
    out = layer_runs[run]
    section = summary_of(out)["bytes_by_category"]
    first = measured(out)["index"].min()
    assert sum(section["amortized_total"].values()) == write_bytes_since_commit(out / "trace.txt", disk_of(out), first)
    assert section["unattributed_share"] <= 0.05, section


REMAP = re.compile(r"^(?P<disk>\d+,\d+) \S+ (?P<to>\d+) \+ (?P<n>\d+) <- \((?P<dm>\d+,\d+)\) (?P<from>\d+)$")


@pytest.mark.parametrize("run", DM_RUNS, ids="-".join)
def test_the_disk_lies_at_the_tables_offset_under_the_filesystem(layer_runs, run):
    """Every remap of data the kernel traced moves a bio by the offset of `dmsetup table`
    (0 for plain dm-crypt, LUKS2's header; a cache flush's empty bio stays at 0); the
    writes attribution followed moved by it too."""
    out = layer_runs[run]
    crypt = summary_of(out)["config"]["lab"]["crypt"]
    table = crypt["table"].split()
    assert table[2:4] == ["crypt", "aes-xts-plain64"]
    offset = int(table[7])
    assert offset == (32768 if run[0] == "dm-crypt-luks2" else 0)
    remaps = [REMAP.match(m["body"]) for m in trace_records(out / "trace.txt") if m["event"] == "block_bio_remap"]
    assert remaps and all(r is not None and r["disk"] == disk_of(out) for r in remaps)
    assert {int(r["to"]) - int(r["from"]) for r in remaps if r and int(r["n"])} == {offset}
    assert {r["dm"] for r in remaps if r} == {crypt["dev"].replace(":", ",")}
    writes = pl.read_parquet(out / "writes.parquet").drop_nulls("sector")
    assert (writes["disk_sector"] - writes["sector"]).unique().to_list() == [offset]


@pytest.mark.parametrize("run", DM_RUNS, ids="-".join)
def test_attribution_sees_through_dm_crypts_writer(layer_runs, run):
    """The disk's queue events name dm-crypt's writer thread for every write; attribution
    names the thread that wrote to the filesystem (the SQL thread, jbd2)."""
    out = layer_runs[run]
    disk = disk_of(out)
    queued_on_disk = {
        m["task"]
        for m in trace_records(out / "trace.txt")
        if m["event"] == "block_bio_queue" and m["body"].startswith(f"{disk} W")
    }
    assert queued_on_disk and all(t.startswith(("dmcrypt_write", "kworker")) for t in queued_on_disk)
    submitters = set(pl.read_parquet(out / "writes.parquet")["submitter"].to_list())
    assert not any(s.startswith(("dmcrypt_write", "kcryptd")) for s in submitters), submitters
    assert any(s.startswith("jbd2/dm-") for s in submitters), submitters


def test_the_run_records_which_cipher_and_driver_served_it(layer_runs):
    crypt = summary_of(layer_runs["dm-crypt", "delete"])["config"]
    assert crypt["crypt"] == "dm-crypt"
    assert crypt["lab"]["crypt"]["cipher"] == "aes-xts-plain64" and "aes" in crypt["lab"]["crypt"]["driver"]
    ecryptfs = summary_of(layer_runs["ecryptfs", "delete"])["config"]
    assert ecryptfs["fs"] == "ecryptfs" and ecryptfs["lab"]["fs_type"] == "ext4"
    assert "ecryptfs_cipher=aes" in ecryptfs["lab"]["ecryptfs"]["mount_options"]
    assert "aes" in ecryptfs["lab"]["ecryptfs"]["driver"]


def test_ecryptfs_files_given_by_their_xsync_are_those_fiemap_maps(layer_runs, tmp_path):
    """WAL on eCryptfs: the database and the WAL keep their blocks for the whole run (the
    WAL is rewritten from its start, never truncated), so their lower files' extents —
    FIEMAP after the last transaction and after the final syncfs, the trace's `at=end` and
    `at=syncfs` markers — say which disk sectors are whose. With those markers taken out,
    attribution has only the xSync each write happened in: it must give every write the
    file FIEMAP names. (The only other file it may name is the rollback journal of the
    schema's set-up, before WAL mode: gone by the end, so not mapped, and before the
    first transaction.)"""
    out = layer_runs["ecryptfs", "wal"]
    trace = (out / "trace.txt").read_text().splitlines()
    owners = fiemap_owners(trace)
    assert {"db", "wal"} <= set(owners.values())
    stripped = tmp_path / "trace.txt"
    stripped.write_text("\n".join(line for line in trace if not FINAL_MAPPING.search(line)) + "\n")
    writes = reattribute(stripped, out)
    by_sync = writes.filter(pl.col("file").is_not_null())
    assert set(by_sync["file"]) >= {"db", "wal"}
    first_txn = min(m["ts"] for m in trace_records(out / "trace.txt") if "sqlwa txn_begin i=0 " in m["body"])
    for sector, file, time_ns in by_sync.select("sector", "file", "time_ns").iter_rows():
        if file == "journal":
            assert sector not in owners and time_ns < float(first_txn) * 1e9, (sector, time_ns)
        else:
            assert owners.get(sector) == file, (sector, file)
    # and the other way: every write to those files from the SQL thread inside an xSync got it
    sql_thread = pl.col("submitter_pid") == summary_of(out)["config"]["tid"]
    owned = writes.filter(pl.col("sector").is_in(list(owners)) & pl.col("in_sync") & sql_thread)
    assert owned["file"].null_count() == 0


FINAL_MAPPING = re.compile(r"sqlwa extents .* at=(end|syncfs) ")


def fiemap_owners(trace: list[str]) -> dict[int, str]:
    """Disk sector (of each 4 KiB block) → file, from the `at=end` and `at=syncfs` extents lines."""
    owners = {}
    for line in trace:
        body = line.split("tracing_mark_write: ", 1)[-1]
        mark = EXTENTS.match(body) if FINAL_MAPPING.search(line) else None
        if mark is None or "+" not in mark["ranges"]:
            continue
        for item in mark["ranges"].split(","):
            start, count = map(int, item.split("+"))
            owners.update({sector: mark["kind"] for sector in range(start, start + count, 8)})
    return owners


def reattribute(trace: Path, out: Path) -> pl.DataFrame:
    summary = summary_of(out)
    events, _ = traceparse.parse(trace, format="ftrace")
    dev = tuple(int(x) for x in summary["config"]["lab"]["dev"].split(":"))
    layout = json.loads((out / "layout.json").read_text())
    wins = windows.commit_windows(events)
    tid = windows.run_tid(events)
    return attribution.attribute(events, wins, dev, tid, "wal", "ext4", layout, files_by_sync=True)  # type: ignore[arg-type]


def test_every_ecryptfs_journal_carries_its_header(layer_runs):
    """DELETE on eCryptfs: the rollback journal is a new file every commit, so each commit
    writes at least its 8 KiB eCryptfs header as journal bytes."""
    commits = measured(layer_runs["ecryptfs", "delete"])
    assert commits["bytes_journal"].min() >= ECRYPTFS_HEADER


# ----------------------------------------------------------------------- encryption


def canary_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "canary.toml"
    path.write_text(
        'name = "canary"\ndescription = "one known string per commit"\n'
        "txns = 5\nwarmup = 0\nseed = 1\nautocommit = true\n\n[pragmas]\npage_size = 4096\n\n"
        '[[table]]\nname = "notes"\ncolumns = ["id INTEGER PRIMARY KEY", "body TEXT NOT NULL"]\n\n'
        f'[[txn]]\nop = "insert"\ntable = "notes"\nvalues = {{ body = {{ kind = "literal", value = "{CANARY}" }} }}\n'
    )
    return path


@pytest.mark.parametrize("layer", list(CANARY_RUNS))
def test_a_known_string_reaches_the_disk_only_unencrypted(guest_runs, layer):
    out = guest_runs["canary", layer, ""]
    image = (out / "lab.img").read_bytes()
    assert len(image) == 32 << 20
    assert (CANARY.encode() in image) == CANARY_RUNS[layer][1]


# ----------------------------------------------------------------------- the host


@pytest.mark.skipif(_system.dm.device_mapper_available(), reason="this host has device-mapper")
def test_crypt_without_the_vm_is_refused_in_one_line_on_a_host_without_device_mapper(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "--crypt", "dm-crypt", "-n", "5", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["sqlwa: error: --crypt needs device-mapper, which this kernel lacks; add --vm"]
    assert not out.exists()


@pytest.mark.skipif(_system.dm.device_mapper_available(), reason="this host has device-mapper")
def test_a_crypt_axis_without_the_vm_is_refused_in_one_line_on_a_host_without_device_mapper(tmp_path):
    out = tmp_path / "m"
    cmd = [sys.executable, "-m", "sqlwa", "matrix", "--crypt", "none,dm-crypt", "-j", "wal", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["sqlwa: error: --crypt needs device-mapper, which this kernel lacks; add --vm"]
    assert not out.exists()


# ----------------------------------------------------------------------- dm-crypt as a layer


def test_dm_crypt_is_a_layer_of_the_configuration_in_a_vm_matrix(tmp_path):
    """`matrix --vm --crypt none,dm-crypt`: two configurations, not two repeats of one. The
    store (read with sqlite3) keeps crypt in its own column and the cell names it; the
    dm-crypt cell's run really was on a dm-crypt target (its table), the plain one on the
    loop device alone; a resume with another --crypt axis is refused in one line."""
    out = tmp_path / "m"
    base = [sys.executable, "-m", "sqlwa", "matrix", "--vm", "-j", "wal", "--sync", "full", "-n", "10"]
    base += ["--image-size", "64M", "--out", str(out)]
    proc = subprocess.run([*base, "--crypt", "none,dm-crypt"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(out / "results.sqlite") as conn:
        rows = conn.execute("SELECT cell, crypt, status, run_dir FROM runs ORDER BY crypt").fetchall()
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 7  # crypt has its column from schema 7
    assert [(cell, crypt, status) for cell, crypt, status, _ in rows] == [
        ("mobibench-insert/ext4+dm-crypt/wal/full", "dm-crypt", "ok"),
        ("mobibench-insert/ext4/wal/full", "none", "ok"),
    ]
    fde, plain = (summary_of(out / run_dir)["config"] for *_, run_dir in rows)
    assert fde["crypt"] == "dm-crypt" and fde["lab"]["crypt"]["table"].split()[2] == "crypt"
    assert fde["lab"]["fs_device"].startswith("/dev/mapper/sqlwa-lab-")
    assert plain["crypt"] == "none" and plain["lab"]["crypt"] is None
    assert plain["lab"]["fs_device"] == plain["lab"]["loop_device"]
    assert "mobibench-insert ext4+dm-crypt wal/full" in proc.stdout
    again = subprocess.run([*base, "--crypt", "dm-crypt", "--resume"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 2
    [error] = [line for line in again.stderr.splitlines() if line.startswith("sqlwa: error:")]
    assert error.endswith("holds a matrix of another plan: --crypt dm-crypt (it was started with none,dm-crypt)")


def test_every_run_is_of_the_summary_schema(guest_runs) -> None:
    """dm-crypt's config.lab.crypt and remap, eCryptfs's config.lab.ecryptfs, config.vm."""
    for name, out in guest_runs.items():
        assert schema.check_summary(json.loads((out / "summary.json").read_text())) == [], name
