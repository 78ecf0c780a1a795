"""The plan a matrix's store keeps stays what sqlwa wrote before a cell became one value
(#45, item 3: Cell a StackSpec and RunSettings, MatrixPlan in parts): key for key, so a
store written before resumes, and only with the options it was started with.

The records below are what sqlwa at 9c14577 (before that change) kept in ``matrix_plan``
for each command line, printed by its ``plan_record`` and copied here as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import sqlwa
from sqlwa.cli import matrix as matrix_cli
from sqlwa.errors import UsageError
from sqlwa.measure import matrix, shard
from sqlwa.results import store

VFS = ("--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "3", "--repeat", "2")
RECORDED = {
    VFS: """{"cell_keys": ["mobibench-insert/none/delete/full/r1", "mobibench-insert/none/delete/full/r2",
        "mobibench-insert/none/wal/full/r1", "mobibench-insert/none/wal/full/r2"], "crypts": ["none"],
        "device_delay_ms": null, "encrypts": ["none"], "filesystems": ["none"], "frame_rate": null, "from_db": null,
        "fuses": ["none"], "image_size": null, "journal_txns": null, "journals": ["delete", "wal"],
        "kernel": "debian", "lab": false, "profile_overrides": [], "profiles": ["none"], "repeat": 2,
        "scenarios": ["mobibench-insert"], "shard": null, "strict": false, "syncs": ["full"], "timing": null,
        "txns": 3, "vm": false, "warmup": null}""",
    ("--vm", "--device-delay", "3", "--fs", "ext4,f2fs", "-j", "wal", "--frame-rate", "90", "--image-size", "300M"): """
        {"cell_keys": ["mobibench-insert/ext4/wal/normal/r1", "mobibench-insert/ext4/wal/full/r1",
        "mobibench-insert/f2fs/wal/normal/r1", "mobibench-insert/f2fs/wal/full/r1"], "crypts": ["none"],
        "device_delay_ms": 3, "encrypts": ["none"], "filesystems": ["ext4", "f2fs"], "frame_rate": 90,
        "from_db": null, "fuses": ["none"], "image_size": "300M", "journal_txns": null, "journals": ["wal"],
        "kernel": "debian", "lab": true, "profile_overrides": [], "profiles": ["none"], "repeat": 1,
        "scenarios": ["mobibench-insert"], "shard": null, "strict": false, "syncs": ["normal", "full"],
        "timing": null, "txns": null, "vm": true, "warmup": null}""",
    ("--profile", "android-sdcard", "--fuse", "passthrough", "-j", "wal", "--sync", "full"): """
        {"cell_keys": ["mobibench-insert/ext4+fscrypt+fuse-passthrough+profile-android-sdcard/wal/full/r1"],
        "crypts": ["none"], "device_delay_ms": null, "encrypts": ["none"], "filesystems": ["ext4"],
        "frame_rate": null, "from_db": null, "fuses": ["passthrough"], "image_size": "1G", "journal_txns": null,
        "journals": ["wal"], "kernel": "debian", "lab": true, "profile_overrides": ["fuse"],
        "profiles": ["android-sdcard"], "repeat": 1, "scenarios": ["mobibench-insert"], "shard": null,
        "strict": false, "syncs": ["full"], "timing": null, "txns": null, "vm": false, "warmup": null}""",
    ("--warmup", "1", "--timing", "back-to-back", "--strict", "-j", "wal", "--shard", "1/3"): """
        {"cell_keys": ["mobibench-insert/ext4/wal/full/r1"], "crypts": ["none"], "device_delay_ms": null,
        "encrypts": ["none"], "filesystems": ["ext4"], "frame_rate": null, "from_db": null, "fuses": ["none"],
        "image_size": "1G", "journal_txns": null, "journals": ["wal"], "kernel": "debian", "lab": true,
        "matrix_cell_keys": ["mobibench-insert/ext4/wal/normal/r1", "mobibench-insert/ext4/wal/full/r1"],
        "profile_overrides": [], "profiles": ["none"], "repeat": 1, "scenarios": ["mobibench-insert"],
        "shard": "1/3", "strict": true, "syncs": ["normal", "full"], "timing": "back-to-back", "txns": null,
        "vm": false, "warmup": 1}""",
}
# `sqlwa demo` (its own -n per journal mode: WAL's 500).
DEMO_RECORDED = """{"cell_keys": ["mobibench-insert/ext4/delete/normal/r1", "mobibench-insert/ext4/delete/full/r1",
    "mobibench-insert/ext4/truncate/normal/r1", "mobibench-insert/ext4/truncate/full/r1",
    "mobibench-insert/ext4/persist/normal/r1", "mobibench-insert/ext4/persist/full/r1",
    "mobibench-insert/ext4/wal/normal/r1", "mobibench-insert/ext4/wal/full/r1"], "crypts": ["none"],
    "device_delay_ms": null, "encrypts": ["none"], "filesystems": ["ext4"], "frame_rate": null, "from_db": null,
    "fuses": ["none"], "image_size": "1G", "journal_txns": "wal=500", "journals": ["delete", "truncate", "persist",
    "wal"], "kernel": "debian", "lab": true, "profile_overrides": [], "profiles": ["none"], "repeat": 1,
    "scenarios": ["mobibench-insert"], "shard": null, "strict": false, "syncs": ["normal", "full"], "timing": null,
    "txns": 100, "vm": false, "warmup": null}"""


def parsed_plan(args: tuple[str, ...]) -> matrix.MatrixPlan:
    """The plan `sqlwa matrix ARGS --out m` runs, made by the command's own option parsing."""
    context = matrix_cli.matrix_command.make_context("matrix", [*args, "--out", "m"])
    with context:
        options = dict(context.params)
        for name in ("out_dir", "resume", "as_json", "show_plan", "shard_text", "shard_base"):
            options.pop(name)
        text = context.params["shard_text"]
        part = shard.parse(text, int(context.params["shard_base"])) if text else None
        return matrix_cli.plan_of(Path("m"), options, check_out=False, part=part)


@pytest.mark.parametrize("args", list(RECORDED), ids=" ".join)
def test_the_stored_plan_is_key_for_key_what_was_stored_before(args):
    assert matrix.plan_record(parsed_plan(args)) == json.loads(RECORDED[args])


def test_the_demos_stored_plan_is_what_it_was():
    context = matrix_cli.demo_command.make_context("demo", ["--out", "m"])
    with context:
        options = {k: v for k, v in context.params.items() if k not in ("out_dir", "report_path")}
        plan = matrix_cli.demo_plan(Path("m"), options, check_out=False)
    assert matrix.plan_record(plan) == json.loads(DEMO_RECORDED)


def test_a_plan_stored_before_resumes_only_with_its_own_options(tmp_path):
    conn = store.connect(tmp_path / store.STORE_FILE)
    try:
        store.record_plan(conn, json.loads(RECORDED[VFS]))
        matrix.check_resumed_plan(conn, parsed_plan(VFS))  # the same sweep: nothing to say
        with pytest.raises(UsageError, match=r"another plan: -n 4 \(it was started with 3\)"):
            matrix.check_resumed_plan(conn, parsed_plan((*VFS, "-n", "4")))
    finally:
        store.close(conn)


def test_a_matrix_whose_store_holds_the_plan_stored_before_resumes(tmp_path):
    """A sweep of today whose stored plan is replaced by the one sqlwa wrote before for the
    same command line: --resume takes it as its own and finds every cell done."""
    out = tmp_path / "m"
    sqlwa("matrix", *VFS, "--out", str(out))
    conn = store.connect(out / store.STORE_FILE)
    try:
        store.record_plan(conn, json.loads(RECORDED[VFS]))
    finally:
        store.close(conn)
    resumed = sqlwa("matrix", *VFS, "--out", str(out), "--resume")
    assert resumed.stderr.count("done-earlier") == 4, resumed.stderr
    runs = store.load_results(out)
    assert sorted(runs["run_key"]) == json.loads(RECORDED[VFS])["cell_keys"]
    assert set(runs["status"]) == {"ok"} and set(runs["fs"]) == {"none"} and set(runs["profile"]) == {"none"}
