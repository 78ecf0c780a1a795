"""A layer added to the lab by its module and one registry line (tests/passthrough_layer.py):
the lab sets it up after the layers before it in the registry, the workload's directory
becomes its own, sync and teardown reach it while the filesystem is still mounted, and
summary.json's config.lab describes it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from passthrough_layer import PassthroughLayer

from sqlwa.lab import layers, stack
from sqlwa.lab.stack import StackSpec

pytestmark = pytest.mark.root


def test_a_layer_needs_only_its_module_and_one_registry_line(monkeypatch):
    monkeypatch.setattr(layers, "KINDS", (*layers.KINDS, PassthroughLayer))  # the one line
    stages: list[str] = []
    lab = stack.lab_filesystem(StackSpec.from_flat(fs="tmpfs", image_size="16M", fill_pct=10), progress=stages.append)
    passthrough = lab.layer(PassthroughLayer)
    assert passthrough is not None
    with lab as mounted:
        assert mounted.data_dir == os.path.join(lab.lab_dir, "passthrough")
        (Path(mounted.data_dir) / "through").write_text("x")
        assert (Path(lab.mountpoint) / "through").read_text() == "x"  # it passes through
        mounted.sync()
        facts = mounted.describe()
    assert facts["passthrough"] == {"mountpoint": mounted.data_dir, "lower": lab.mountpoint}
    assert facts["fill"] is not None and facts["fill"]["target_pct"] == 10 and facts["fuse"] is None
    assert stages == ["mount", "fill", "passthrough", "ready", "teardown"]
    # set up and synced on the mounted filesystem; torn down before it is unmounted
    assert passthrough.calls == [("open", True), ("sync", True), ("teardown", True)]
    assert not os.path.exists(lab.lab_dir)


def test_a_layer_set_up_cut_short_is_still_torn_down_by_its_name(monkeypatch):
    class Failing(PassthroughLayer):
        key = "failing"
        stage = "failing"

        def open(self, mountpoint, data_dir, critical):
            super().open(mountpoint, data_dir, critical)
            raise RuntimeError("set-up fails once mounted")

    monkeypatch.setattr(layers, "KINDS", (*layers.KINDS, Failing))
    lab = stack.lab_filesystem(StackSpec.from_flat(fs="tmpfs", image_size="16M"))
    with pytest.raises(RuntimeError, match="set-up fails"):
        with lab:
            pass
    failing = lab.layer(Failing)
    assert failing is not None and [call for call, _ in failing.calls] == ["open", "teardown"]
    assert not os.path.exists(lab.lab_dir)  # its bind mount went, so the lab directory could
