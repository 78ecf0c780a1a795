"""The layer registry's order is the lab's: set-up walks sqlwa.lab.layers.KINDS (block
layers under the filesystem first), teardown walks it back in named steps around the
lab's own (the unmount between the two kinds, loop devices and files last)."""

from __future__ import annotations

import pytest

from sqlwa.errors import LabError, UsageError
from sqlwa.lab import filesystem, layers
from sqlwa.lab.layer import BlockLayer, DirectoryLayer
from sqlwa.lab.stack import StackSpec

EVERY_LAYER = StackSpec.from_flat(
    fs="ecryptfs", crypt="dm-crypt", device_delay_ms=5, encrypt="fscrypt", fill_pct=10, fuse="passthrough"
)


def test_the_registry_lists_block_layers_before_directory_layers_and_fuse_last():
    kinds = list(layers.KINDS)
    blocks = [kind for kind in kinds if issubclass(kind, BlockLayer)]
    overs = [kind for kind in kinds if issubclass(kind, DirectoryLayer)]
    assert kinds == blocks + overs
    assert [kind.stage for kind in kinds] == ["crypt", "delay", "log-writes", "encrypt", "ecryptfs", "fill", "fuse"]
    assert len({kind.key for kind in kinds}) == len(kinds)


def test_a_stack_asks_for_its_layers_in_registry_order(tmp_path):
    asked = layers.asked(EVERY_LAYER, "ecryptfs", tmp_path / "writes.log")
    assert [type(layer) for layer in asked] == list(layers.KINDS)
    assert layers.asked(StackSpec.from_flat(fs="ext4")) == []


def test_teardown_walks_the_layers_back_around_the_lab_s_own_steps(tmp_path, monkeypatch):
    for kind in layers.KINDS:  # every layer at once: their checks would refuse the combination
        monkeypatch.setattr(kind, "check", lambda self, ground, others: None)
    asked = layers.asked(EVERY_LAYER, "ecryptfs", tmp_path / "writes.log")
    lab = filesystem.LabFilesystem("ecryptfs", filesystem.LabOptions(image_size="64M", workdir=tmp_path), asked)
    assert [name for name, _ in lab.teardown_steps()] == [
        "stop_fuse",
        "unmount_ecryptfs",
        "remove_key",
        "unmount",
        "close_log_writes",
        "keep_write_log",
        "remove_dm_target",  # dm-delay
        "remove_dm_target",  # dm-crypt
        "detach_loops",
        "copy_image",
        "remove_files",
    ]


def test_a_stacked_filesystem_without_its_layer_is_refused(tmp_path):
    with pytest.raises(LabError, match="ecryptfs over ext4: give its layer"):
        filesystem.LabFilesystem("ecryptfs", filesystem.LabOptions(image_size="64M", workdir=tmp_path))


def test_the_early_checks_are_the_layers_own():
    """targets.host_lab.preflight_lab and the matrix reach the dm refusals through layers.check."""
    with pytest.raises(UsageError, match="two device-mapper layers"):
        layers.check(StackSpec.from_flat(fs="ext4", crypt="dm-crypt", device_delay_ms=5), has_device=True, host=False)
    with pytest.raises(UsageError, match="must be 0 to"):
        layers.check(StackSpec.from_flat(fs="ext4", device_delay_ms=10**6), has_device=True, host=False)
    # the guest checks its kernel
    layers.check(StackSpec.from_flat(fs="ext4", crypt="dm-crypt"), has_device=True, host=False)
