"""Where a run happens (#45, item 1): the runner chooses one target for a request and
hands the run over; a lab capture, with the lab's facts the analysis needs, goes from a
guest to the host as JSON and comes back whole."""

from __future__ import annotations

import json

import pytest

from sqlwa.lab.stack import StackSpec
from sqlwa.measure import lab_capture, report, runner
from sqlwa.measure.analyse import LabContext
from sqlwa.measure.engine import RunSettings
from sqlwa.measure.targets import host_dir, host_lab, vm_lab


@pytest.mark.parametrize(
    "stack, chosen",
    [
        (StackSpec(), host_dir.HostDir),
        (StackSpec.from_flat(fs="ext4"), host_lab.HostLab),
        (StackSpec.from_flat(fs="tmpfs", fuse="passthrough"), host_lab.HostLab),
        (StackSpec.from_flat(fs="ext4", vm=True), vm_lab.VmLab),
    ],
)
def test_the_runner_chooses_one_target_for_a_request(stack, chosen):
    request = runner.RunRequest(stack=stack)
    target = runner.target_for(request)
    assert type(target) is chosen and target.request is request


def test_a_vm_run_given_a_guest_boots_none():
    """A matrix's cells share its guest: the target is given it, and makes no kernel."""
    guest = object()
    target = runner.target_for(runner.RunRequest(stack=StackSpec.from_flat(fs="ext4", vm=True)), guest)
    assert isinstance(target, vm_lab.VmLab) and target.guest is guest
    with target.prepared() as kernel:
        assert kernel is None


def facts(**changes) -> lab_capture.LabFacts:
    values = {
        "fs_type": "ext4",
        "layout": {"journal": {"start": 1, "sectors": 8}},
        "dev": (7, 3),
        "mapped_dev": (253, 0),
        "mapped_offset": 2048,
        "fuse": None,
        "files_by_sync": False,
    }
    return lab_capture.LabFacts(**{**values, **changes})


@pytest.mark.parametrize("lab", [facts(), facts(dev=None, mapped_dev=None, mapped_offset=None, fs_type="tmpfs")])
def test_a_capture_goes_through_json_whole(lab):
    capture = lab_capture.LabCapture(
        records=lab_capture.EngineRecords(info={"scenario": "s"}, columns={"index": [0, 1]}),
        lab=lab,
        fs={"fs_type": lab.fs_type, "loop_device": "/dev/loop3", "mount_options": "rw"},
        trace=lab_capture.CapturedTrace(levels=["vfs", "block"], described={"events": 3}, path="/o/trace.txt"),
    )
    back = lab_capture.LabCapture.from_json(capture.to_json())
    assert back == capture
    assert lab_capture.LabCapture.from_dict(capture.as_dict()) == capture
    assert isinstance(back.lab, lab_capture.LabFacts) and back.lab.dev == lab.dev  # tuples, not lists


def test_a_captures_json_is_one_flat_object():
    """The guest's capture.json keeps the form it had as one flat dataclass: its parts'
    fields side by side, in this order."""
    capture = lab_capture.LabCapture(
        records=lab_capture.EngineRecords({"scenario": "s"}, {}, commits_file="/o/engine.parquet"),
        lab=facts(),
        fs={"fs_type": "ext4"},
        trace=lab_capture.CapturedTrace(["vfs"], {"events": 3}, "/o/trace.txt", loss={"message": "m", "hint": "h"}),
        daemon_cpu={"user_ms": 1.0},
    )
    sent = json.loads(capture.to_json())
    assert list(sent) == [
        "info",
        "columns",
        "lab",
        "fs",
        "levels",
        "trace",
        "trace_path",
        "loss",
        "daemon_cpu",
        "durability",
        "commits_file",
    ]
    assert (sent["trace"], sent["trace_path"], sent["commits_file"]) == (
        {"events": 3},
        "/o/trace.txt",
        "/o/engine.parquet",
    )
    assert sent["lab"]["dev"] == [7, 3] and sent["loss"] == {"message": "m", "hint": "h"}


def test_the_analysis_context_is_the_lab_facts_and_the_run_settings():
    context = LabContext.of(facts(), RunSettings(journal="delete", sync="normal"))
    assert (context.journal, context.sync, context.mapped_dev, context.fs_type) == (
        "delete",
        "normal",
        (253, 0),
        "ext4",
    )


def test_a_lab_describes_the_stack_asked_for_in_the_config():
    """The stack's choices, the lab made of them, and where it was: the keys a lab run's
    config has had (a VM lab's adds the guest's)."""
    stack = StackSpec.from_flat(fs="ext4", encrypt="fscrypt", device_delay_ms=5)
    described = {"loop_device": None, "mount_options": "rw,relatime"}
    place = report.lab_place(stack, described)
    assert place == {
        "fs": "ext4",
        "encrypt": "fscrypt",
        "profile": None,
        "fuse": "none",
        "crypt": "none",
        "device_delay_ms": 5,
        "fs_source": "lab: fresh tmpfs",
        "mount_options": "rw,relatime",
        "lab": described,
    }
