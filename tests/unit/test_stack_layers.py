"""The layers between SQLite and the lab filesystem as parts of a configuration (#17):
labels that tell them apart, cell names that stay unique, profiles that explicit options
override, sweeps that resume only with the same layers, and a layer a filesystem cannot
have refused as unsupported (a sweep skips it). Pure functions: no root, nothing made."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import polars as pl
import pytest

import sqlwa
from helpers import REPO
from sqlwa import catalogue
from sqlwa.catalogue import NO_LAYER, config_label, layers_of
from sqlwa.errors import UnsupportedFilesystem, UsageError, hint_of
from sqlwa.lab import devmapper, encryption, filesystem, fuse, profiles
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import matrix
from sqlwa.measure.engine import Length, RunSettings
from sqlwa.results import layers, store

PLAIN = {"scenario": "mobibench-insert", "fs": "ext4", "journal": "wal", "sync": "full"}


def test_a_plain_configuration_keeps_its_short_label_and_layers_are_told_apart():
    assert config_label({**PLAIN, **layers_of({})}) == "mobibench-insert ext4 wal/full"
    assert config_label(PLAIN) == "mobibench-insert ext4 wal/full"  # a row from before the layers
    both = {**PLAIN, "encrypt": "fscrypt", "fuse": "passthrough", "profile": NO_LAYER}
    assert config_label(both) == "mobibench-insert ext4+fscrypt+fuse:passthrough wal/full"
    sdcard = {**PLAIN, "encrypt": "fscrypt", "fuse": "passthrough-kernel", "profile": "android-sdcard"}
    assert config_label(sdcard) == "mobibench-insert android-sdcard (ext4+fscrypt+fuse:passthrough-kernel) wal/full"
    # dm-crypt lies under the filesystem, fscrypt in it: the label reads from the disk up
    fde = {**PLAIN, **layers_of({"crypt": "dm-crypt"})}
    assert config_label(fde) == "mobibench-insert ext4+dm-crypt wal/full"
    assert config_label({**fde, "encrypt": "fscrypt"}) == "mobibench-insert ext4+dm-crypt+fscrypt wal/full"


def test_every_combination_of_layers_has_its_own_label_key_and_directory():
    combos = list(
        itertools.product(
            filesystem.FILESYSTEMS, encryption.CHOICES, fuse.CHOICES, (NO_LAYER, *profiles.PROFILES), devmapper.CHOICES
        )
    )
    cells = [
        wal_cell(fs=fs, encrypt=encrypt, fuse=layer, profile=None if profile == NO_LAYER else profile, crypt=crypt)
        for fs, encrypt, layer, profile, crypt in combos
    ]
    for name in ("label", "key", "dirname"):
        values = [getattr(cell, name) for cell in cells]
        assert len(set(values)) == len(cells), name
    for cell in cells:
        assert "/" not in cell.dirname and " " not in cell.dirname and ":" not in cell.dirname
    assert wal_cell(fs="ext4").dirname == "mobibench-insert-ext4-wal-full-r1"
    assert wal_cell().dirname == "mobibench-insert-none-wal-full-r1"  # no lab filesystem: fs none
    fde = wal_cell(fs="ext4", crypt="dm-crypt")
    assert fde.dirname == "mobibench-insert-ext4+dm-crypt-wal-full-r1"
    sdcard = wal_cell(fs="ext4", encrypt="fscrypt", fuse="passthrough-kernel", profile="android-sdcard")
    assert sdcard.dirname == "mobibench-insert-ext4+fscrypt+fuse-passthrough-kernel+profile-android-sdcard-wal-full-r1"
    assert sdcard.row == {
        "scenario": "mobibench-insert", "fs": "ext4", "encrypt": "fscrypt", "fuse": "passthrough-kernel",
        "profile": "android-sdcard", "crypt": "none", "journal": "wal", "sync": "full", "repeat": 1,
    }  # fmt: skip


def wal_cell(**stack) -> matrix.Cell:
    """A cell of mobibench-insert in WAL mode, sync full, on this stack."""
    return matrix.Cell("mobibench-insert", StackSpec.from_flat(**stack), RunSettings(journal="wal", sync="full"))


def test_layers_a_summary_does_not_record_are_none():
    assert layers_of({"fs": "none"}) == {"encrypt": "none", "fuse": "none", "profile": "none", "crypt": "none"}
    summary_config = {
        "encrypt": "fscrypt",
        "fuse": "bindfs",
        "profile": {"name": "android-ext4", "fs": "ext4"},
        "crypt": "dm-crypt-luks2",
    }
    expected = {"encrypt": "fscrypt", "fuse": "bindfs", "profile": "android-ext4", "crypt": "dm-crypt-luks2"}
    assert layers_of(summary_config) == expected
    assert set(catalogue.LAYER_KEYS) <= set(catalogue.CONFIG_KEYS)


def test_a_filesystem_without_fscrypt_is_unsupported_not_a_usage_error():
    """A sweep skips what this filesystem cannot have (with the fix) instead of failing it."""
    for fs in ("xfs", "btrfs", "tmpfs"):
        with pytest.raises(UnsupportedFilesystem, match=f"--encrypt fscrypt: {fs} has no file-based encryption"):
            encryption.check_encryption("fscrypt", fs, filesystem.FILESYSTEMS[fs].kernel_type)
    with pytest.raises(UsageError) as refused:
        encryption.check_encryption("rot13", "ext4", "ext4")
    assert not isinstance(refused.value, UnsupportedFilesystem)
    try:
        encryption.check_encryption("fscrypt", "xfs", "xfs")
    except UnsupportedFilesystem as exc:
        assert hint_of(exc) == "use --fs ext4, or leave --encrypt out"


def test_a_profile_fills_in_what_was_not_given_and_records_what_was():
    spec = StackSpec.from_flat(profile="android-sdcard", fuse="passthrough", profile_overrides=("fuse",)).with_profile()
    assert (spec.volume.fs, spec.volume.mkfs_opts, spec.volume.mount_opts, spec.layers.encrypt, spec.layers.fuse) == (
        "ext4", "", "nodev,noatime,nosuid", "fscrypt", "passthrough"
    )  # fmt: skip
    assert (spec.profile_record() or {})["overridden"] == ["fuse"]
    same = StackSpec.from_flat(
        fs="ext4", encrypt="fscrypt", profile="android-sdcard", profile_overrides=("fs", "encrypt")
    )
    assert (same.with_profile().profile_record() or {})["overridden"] == []  # given, but what the profile says


def test_android_sdcard_is_android_ext4_behind_a_fuse_layer_sqlwa_has():
    data, sdcard = profiles.profile("android-ext4"), profiles.profile("android-sdcard")
    for key in ("fs", "mkfs_opts", "mount_opts", "encrypt"):
        assert getattr(sdcard.options, key) == getattr(data.options, key), key
    assert data.options.fuse == fuse.NO_FUSE and sdcard.options.fuse in fuse.LAYERS
    assert "FuseDaemon.cpp" in sdcard.provenance.source and "writeback" in sdcard.provenance.why
    assert set(data.provenance.departures) < set(sdcard.provenance.departures)


def plan(
    vm: bool = False,
    device_delay_ms: int | None = None,
    profile_overrides: tuple[str, ...] = (),
    lab: bool = True,
    lab_unavailable: str | None = None,
    **axes,
) -> matrix.MatrixPlan:
    stack = StackSpec.from_flat(vm=vm, device_delay_ms=device_delay_ms, profile_overrides=profile_overrides)
    every = matrix.Axes(**{"journals": ("wal",), "syncs": ("full",), **axes})
    return matrix.MatrixPlan(Path("/nonexistent/m"), every, stack, lab=lab, lab_unavailable=lab_unavailable)


def test_a_profile_cell_takes_the_profiles_layers_unless_an_axis_was_given():
    cells = plan(profiles=("none", "android-sdcard")).cells()
    assert [(c.stack.volume.fs, c.stack.layers.encrypt, c.stack.layers.fuse, c.stack.profile) for c in cells] == [
        ("ext4", "none", "none", None),
        ("ext4", "fscrypt", "passthrough-kernel", "android-sdcard"),
    ]
    assert [c.row["profile"] for c in cells] == ["none", "android-sdcard"]  # the store's column
    given = plan(profiles=("android-sdcard",), fuses=("passthrough",), profile_overrides=("fuse",)).cells()
    stacks = [c.stack for c in given]
    assert [(s.layers.fuse, (s.profile_record() or {})["overridden"]) for s in stacks] == [("passthrough", ["fuse"])]
    assert stacks[0].volume.mount_opts == "nodev,noatime,nosuid"  # the profile's, though no axis of a sweep


def test_a_cell_reaches_its_run_and_the_store_as_it_was_made(tmp_path):
    """The run request gets the cell's own stack and settings, and the store's columns
    are the cell's: nothing is rebuilt between the option parsing and the store."""
    sweep = plan(profiles=("android-ext4",), fuses=("bindfs",), profile_overrides=("fuse",), vm=True)
    sweep = dataclasses.replace(
        sweep,
        settings=RunSettings(length=Length(txns=7, warmup=2)),
        runs=matrix.Runs(journal_txns=(("wal", 9),), frame_rate=120),
    )
    [cell] = sweep.cells()
    request = matrix.request_for(cell, sweep, tmp_path / "r")
    assert request.stack is cell.stack and request.settings is cell.settings
    assert (request.settings.journal, request.settings.sync, request.settings.length.txns) == ("wal", "full", 9)
    assert request.settings.length.warmup == 2 and request.frame_budget_ms == catalogue.FRAME_RATES[120]
    stack = cell.stack
    assert (stack.volume.fs, stack.layers.encrypt, stack.layers.fuse, stack.machine.vm) == (
        "ext4", "fscrypt", "bindfs", True
    )  # fmt: skip
    record = cell.record(tmp_path / "r")
    row = store.record_row(record, None, None, tmp_path)
    assert {key: row[key] for key in (*catalogue.CONFIG_KEYS, "cell", "repeat", "txns", "run_key")} == {
        "scenario": "mobibench-insert", "fs": "ext4", "encrypt": "fscrypt", "fuse": "bindfs",
        "profile": "android-ext4", "crypt": "none", "journal": "wal", "sync": "full",
        "cell": "mobibench-insert/ext4+fscrypt+fuse-bindfs+profile-android-ext4/wal/full", "repeat": 1, "txns": 9,
        "run_key": "mobibench-insert/ext4+fscrypt+fuse-bindfs+profile-android-ext4/wal/full/r1",
    }  # fmt: skip
    assert row["run_dir"] == "r" and row["status"] == "ok" and row["reason"] is None


def test_unknown_layers_and_layers_without_a_lab_are_refused_before_any_cell():
    with pytest.raises(UsageError, match=r"unknown FUSE layer 'sshfs' \(--fuse\)"):
        matrix.check_axes(plan(fuses=("none", "sshfs")))
    with pytest.raises(UsageError, match=r"unknown profile 'iphone' \(--profile\)"):
        matrix.check_axes(plan(profiles=("iphone",)))
    with pytest.raises(UsageError, match=r"--vfs-only has no lab filesystem, and ext4\+fscrypt needs one"):
        matrix.check_axes(plan(encrypts=("none", "fscrypt"), lab=False))
    # without root the lab is off for a reason: layered cells are kept, to be skipped with it
    no_root = plan(encrypts=("none", "fscrypt"), lab=False, lab_unavailable="needs root")
    matrix.check_axes(no_root)
    plain, layered = no_root.cells()
    assert plain.stack.volume.fs is None and plain.row["fs"] == "none" and matrix.without_lab(plain, no_root) is None
    assert layered.stack.volume.fs == "ext4" and "ext4+fscrypt needs a lab filesystem" in str(
        matrix.without_lab(layered, no_root)
    )


def test_two_scenario_files_of_one_name_are_refused(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "app.toml").write_text("")
    duplicate = plan(scenarios=(str(tmp_path / "a" / "app.toml"), str(tmp_path / "b" / "app.toml")))
    with pytest.raises(UsageError, match="two cells would write the same directory runs/app-ext4-wal-full-r1"):
        matrix.check_dirnames(duplicate)


def test_a_resumed_sweep_must_have_the_same_layers():
    started = matrix.plan_record(plan(encrypts=("none", "fscrypt")))
    assert matrix.plan_differences(started, matrix.plan_record(plan(encrypts=("none", "fscrypt")))) == []
    assert matrix.plan_differences(started, matrix.plan_record(plan(encrypts=("none",)))) == [
        "--encrypt none (it was started with none,fscrypt)"
    ]
    overridden = matrix.plan_record(plan(profiles=("android-ext4",), profile_overrides=("encrypt",)))
    assert matrix.plan_differences(matrix.plan_record(plan(profiles=("android-ext4",))), overridden) == [
        "--profile overridden by --encrypt (it was started with no axis)"
    ]
    # a plan recorded before sqlwa had layers was a plan without them
    older = {k: v for k, v in matrix.plan_record(plan()).items() if k not in matrix.PLAN_BEFORE_LAYERS}
    assert matrix.plan_differences(older, matrix.plan_record(plan())) == []
    assert matrix.plan_differences(older, matrix.plan_record(plan(fuses=("passthrough",)))) == [
        "--fuse passthrough (it was started with none)"
    ]
    # and one recorded before --crypt was an axis had none
    before_crypt = {k: v for k, v in matrix.plan_record(plan()).items() if k != "crypts"}
    assert matrix.plan_differences(before_crypt, matrix.plan_record(plan())) == []
    assert matrix.plan_differences(before_crypt, matrix.plan_record(plan(crypts=("none", "dm-crypt")))) == [
        "--crypt none,dm-crypt (it was started with none)"
    ]


def means_row(encrypt: str = "none", fuse_layer: str = "none", journal: str = "wal", **figures: float | None) -> dict:
    layers = {"encrypt": encrypt, "fuse": fuse_layer, "profile": "none", "crypt": "none"}
    return {**PLAIN, "journal": journal, **layers, **figures}


def test_a_layers_cost_is_its_figure_beside_the_same_configuration_without_layers():
    means = pl.DataFrame(
        [
            means_row(fsync_calls_per_commit=1.0, write_kib_per_commit=40.0, p99_ms=2.0),
            means_row(journal="delete", fsync_calls_per_commit=4.0, write_kib_per_commit=64.0, p99_ms=0.0),
            means_row("fscrypt", fsync_calls_per_commit=1.0, write_kib_per_commit=50.0, p99_ms=3.0),
            means_row("fscrypt", journal="delete", fsync_calls_per_commit=4.0, write_kib_per_commit=64.0, p99_ms=1.0),
            means_row("none", "passthrough", journal="truncate", fsync_calls_per_commit=5.0),
        ]
    )
    costs = layers.layer_costs(means)
    by = {(r["config"], r["metric"]): r for r in costs.iter_rows(named=True)}
    wal = by[("mobibench-insert ext4+fscrypt wal/full", "write_kib_per_commit")]
    assert (wal["plain_config"], wal["layered"], wal["plain"], wal["ratio"]) == (
        "mobibench-insert ext4 wal/full", 50.0, 40.0, 1.25
    )  # fmt: skip
    assert by[("mobibench-insert ext4+fscrypt wal/full", "p99_ms")]["ratio"] == 1.5
    assert by[("mobibench-insert ext4+fscrypt delete/full", "p99_ms")]["ratio"] is None  # plain took 0
    assert by[("mobibench-insert ext4+fscrypt wal/full", "flushes_per_commit")]["ratio"] is None  # not measured
    alone = by[("mobibench-insert ext4+fuse:passthrough truncate/full", "fsync_calls_per_commit")]
    assert alone["plain_config"] is None and alone["plain"] is None and alone["ratio"] is None
    assert set(costs["metric"]) == {*layers.LAYER_COST_METRICS, "cpu_ms_per_commit"}
    cpu = by[("mobibench-insert ext4+fscrypt wal/full", "cpu_ms_per_commit")]
    assert cpu["ratio"] is None  # these runs recorded no CPU time: absent, not 0
    assert layers.layer_costs(pl.DataFrame([means_row(fsync_calls_per_commit=1.0)])).height == 0


def test_a_run_directory_from_before_the_layers_keeps_its_label():
    """The sample runs' summaries name no layer: their label and selection are as before."""
    samples = REPO / "traces" / "samples" / "sqlwa-runs"
    assert sqlwa.load(samples / "ext4-delete").label == "mobibench-insert ext4 delete/full"
    assert sqlwa.load(samples).run(journal="wal", fuse="none", profile="none").label == "mobibench-insert ext4 wal/full"
    assert catalogue.config_values({"scenario": "s"}) == {
        "scenario": "s", "fs": "?", "encrypt": "none", "fuse": "none", "profile": "none", "crypt": "none",
        "journal": "?", "sync": "?",
    }  # fmt: skip


def test_a_device_delay_is_one_for_the_whole_sweep_and_part_of_its_plan():
    started = matrix.plan_record(plan(vm=True, device_delay_ms=10))
    assert matrix.plan_differences(started, matrix.plan_record(plan(vm=True, device_delay_ms=5))) == [
        "--device-delay 5 (it was started with 10)"
    ]
    before = {k: v for k, v in matrix.plan_record(plan()).items() if k != "device_delay_ms"}
    assert matrix.plan_differences(before, matrix.plan_record(plan())) == []  # a plan from before: none
    with pytest.raises(UsageError, match=r"--device-delay delays a lab filesystem's device, and this sweep has none"):
        matrix.check_device_delay(plan(lab=False, device_delay_ms=10))
    with pytest.raises(UsageError, match="--device-delay and --crypt dm-crypt are two device-mapper layers"):
        matrix.check_device_delay(plan(vm=True, crypts=("none", "dm-crypt"), device_delay_ms=10))
    matrix.check_device_delay(plan(vm=True, device_delay_ms=0))  # the control: the layer without delay
    delayed = plan(vm=True, device_delay_ms=7)
    assert matrix.request_for(delayed.cells()[0], delayed, Path("r")).stack.layers.device_delay_ms == 7


def test_every_stack_option_is_made_once_from_its_field_for_run_crash_and_matrix():
    from sqlwa.cli import crash, run
    from sqlwa.cli import matrix as matrix_cli
    from sqlwa.lab.stack import STACK_FIELDS, layer_of, stack_fields

    fields = {f.name: f for f in stack_fields()}
    for command in (run.run, crash.crash_command):
        by_name = {p.name: p for p in command.params}
        for name in STACK_FIELDS:
            layer = layer_of(fields[name])
            assert layer is not None and by_name[name].help == layer.help, name
    sweep = {p.name: p for p in matrix_cli.matrix_command.params}
    for name in STACK_FIELDS:
        layer = layer_of(fields[name])
        assert layer is not None
        if layer.sweep is not None:
            assert sweep[layer.sweep.axis or name].help == layer.sweep.help, name


def test_a_stack_crosses_to_the_guest_and_back_unchanged():
    spec = StackSpec.from_flat(fs="ext4", fill_pct=3.5, profile="android-sdcard", device_delay_ms=2, vm=True)
    spec = dataclasses.replace(spec, profile_overrides=("fuse",)).with_profile()
    assert StackSpec.from_dict(json.loads(json.dumps(spec.as_dict()))) == spec
    assert spec.layers.encrypt == "fscrypt" and spec.layers.fuse == "none"  # the profile's encryption; fuse as given
    assert (spec.profile_record() or {})["overridden"] == ["fuse"]


def test_a_stack_is_flat_outside_its_groups():
    """The command line, the guest's request and a matrix's plan name a stack's fields
    flat, in the order they had before StackSpec kept them in groups (#45)."""
    from sqlwa.lab.stack import stack_fields

    names = [
        "fs", "image_size", "mkfs_opts", "mount_opts", "fill_pct", "profile",
        "encrypt", "fuse", "crypt", "device_delay_ms", "vm", "kernel", "profile_overrides",
    ]  # fmt: skip
    assert [f.name for f in stack_fields()] == names
    spec = StackSpec.from_flat(fs="xfs", fill_pct=5.0, crypt="dm-crypt", vm=True)
    assert (spec.volume.fs, spec.volume.fill_pct, spec.layers.crypt, spec.machine.vm) == ("xfs", 5.0, "dm-crypt", True)
    assert list(spec.flat()) == names and list(spec.as_dict()) == names
    assert spec.replace(fs="ext4", kernel="k").flat() == {**spec.flat(), "fs": "ext4", "kernel": "k"}
    assert spec.replace(profile="android-ext4").layers is spec.layers  # a group not changed is the same value
    with pytest.raises(TypeError, match="StackSpec has no field 'journal'"):
        StackSpec.from_flat(journal="wal")
