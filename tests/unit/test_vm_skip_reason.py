"""The VM tests' skip reason on a machine without the VM lab's tools.

Before scripts/system-deps has run there is no qemu: collecting tests/vm must skip them
with the fix to apply, not crash pytest's collection (the hint travels in the error's
args, not as an attribute).
"""

from __future__ import annotations

import conftest
import pytest

from sqlwa.errors import UsageError
from sqlwa.vm import machine


def test_a_machine_without_qemu_is_told_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_qemu() -> str:
        raise UsageError("--vm needs qemu-system-x86_64, which this machine lacks", "install qemu-system-x86")

    monkeypatch.setattr(machine, "qemu_binary", no_qemu)
    reason = conftest.vm_lab_unavailable()
    assert reason == (
        "needs the VM lab's tools: --vm needs qemu-system-x86_64, which this machine lacks (install qemu-system-x86)"
    )
