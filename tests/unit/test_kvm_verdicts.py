"""The VM lab remembers a KVM that could not boot its guest (sqlwa.vm.machine): kept per
host kernel, qemu and guest kernel, in the user's cache, and never a reason to fail."""

from __future__ import annotations

import os

import pytest

from sqlwa.vm import machine


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "sqlwa"


def test_a_verdict_is_kept_for_its_host_only(cache):
    assert machine.remembered_kvm_failure("host A") is None
    machine.remember_kvm_failure("host A", "KVM could not boot the guest (it printed nothing in 30 s)")
    machine.remember_kvm_failure("host B", "KVM could not boot the guest (MSR)")
    assert machine.remembered_kvm_failure("host A") == "KVM could not boot the guest (it printed nothing in 30 s)"
    assert machine.remembered_kvm_failure("host C") is None
    assert sorted(p.name for p in cache.iterdir()) == [machine.KVM_VERDICTS_FILE]  # no staged file left


@pytest.mark.parametrize(
    "text",
    ["{not json", "[1, 2]", '{"host A": 3}', "[" * 100_000, '{"host A": "' + "x" * (2 << 20) + '"}'],
    ids=["not-json", "a-list", "not-a-note", "nested-too-deep", "too-large"],
)
def test_a_damaged_verdicts_file_means_no_verdict(cache, text):
    cache.mkdir()
    (cache / machine.KVM_VERDICTS_FILE).write_text(text)
    assert machine.remembered_kvm_failure("host A") is None
    machine.remember_kvm_failure("host A", "why")  # and it is replaced
    assert machine.remembered_kvm_failure("host A") == "why"


def test_a_fifo_in_place_of_the_verdicts_is_not_waited_on(cache):
    """Nothing writes to it: a read would block for good. It is no verdict, and is replaced."""
    cache.mkdir()
    os.mkfifo(cache / machine.KVM_VERDICTS_FILE)
    assert machine.remembered_kvm_failure("host A") is None
    machine.remember_kvm_failure("host A", "why")
    assert machine.remembered_kvm_failure("host A") == "why"


def test_an_unwritable_cache_costs_nothing_but_the_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache cannot be made below a file
    machine.remember_kvm_failure("host A", "why")
    assert machine.remembered_kvm_failure("host A") is None
    assert list(tmp_path.iterdir()) == [blocker]
