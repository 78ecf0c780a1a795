"""RunSettings in groups (#45: no constructor over eight parameters), flat outside Python:
``as_dict`` and ``from_flat`` are each other's inverse, in summary.json's order, and
``replace`` takes the flat names as ``dataclasses.replace`` took the fields."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from sqlwa import _native
from sqlwa.measure import engine
from sqlwa.measure.engine import Instruments, Length, Pager, Replay, RunSettings

# A value for every setting, none of them its default, in as_dict()'s order: the order of
# summary.json's config.settings (not the engine's: think_time_ms before extra_pragmas).
CHANGED = {
    "journal": "wal",
    "sync": "normal",
    "txns": 7,
    "duration_s": 30.0,
    "warmup": 2,
    "seed": 11,
    "page_size": 8192,
    "cache_size": -4000,
    "wal_autocheckpoint": 0,
    "journal_size_limit": 65536,
    "locking_mode": "exclusive",
    "mmap_size": 1 << 20,
    "think_time_ms": 1.5,
    "extra_pragmas": ["busy_timeout=10000"],
    "count_vfs": False,
    "map_extents": True,
    "extents_from": "/lower",
    "dm_mark": "sqlwa-log",
    "snapshot_dir": "/snapshots",
    "from_db": "/app.db",
    "timing": "back-to-back",
    "strict": True,
}


def test_every_setting_has_a_changed_value_here():
    assert sorted(CHANGED) == sorted(_native.default_settings())
    assert all(CHANGED[name] != default for name, default in _native.default_settings().items())


@pytest.mark.parametrize("cls", [RunSettings, Length, Pager, Instruments, Replay])
def test_no_constructor_takes_more_than_eight(cls):
    assert len(inspect.signature(cls).parameters) <= 8


def test_the_flat_form_is_the_engines_order_and_reads_back():
    settings = RunSettings.from_flat(CHANGED)
    assert list(settings.as_dict()) == list(CHANGED) == [name for name, _ in engine.setting_fields()]
    assert settings.as_dict() == CHANGED and list(RunSettings().as_dict()) == list(CHANGED)
    assert RunSettings.from_flat(settings.as_dict()) == settings
    assert settings.length == Length(txns=7, duration_s=30.0, warmup=2, seed=11)
    assert settings.replay == Replay(from_db="/app.db", timing="back-to-back", strict=True)
    assert [settings.setting(name) for name in CHANGED] == list(CHANGED.values())
    engine.check_settings(settings)  # the engine takes it as it is


def test_a_setting_left_out_is_its_default_and_an_unknown_one_is_refused():
    assert RunSettings.from_flat({}) == RunSettings()
    assert RunSettings.from_flat({"txns": 3}) == RunSettings(length=Length(txns=3))
    with pytest.raises(TypeError, match="'length'"):
        RunSettings.from_flat({"length": Length()})
    with pytest.raises(TypeError, match="'nosuch'"):
        RunSettings().replace(nosuch=1)


def test_replace_changes_the_named_settings_only_and_shares_the_rest():
    settings = RunSettings(extra_pragmas=["a=1"], pager=Pager(page_size=4096))
    changed = settings.replace(sync="off", txns=5, dm_mark=None, snapshot_dir="/s")
    assert changed.as_dict() == {**settings.as_dict(), "sync": "off", "txns": 5, "snapshot_dir": "/s"}
    assert settings == RunSettings(extra_pragmas=["a=1"], pager=Pager(page_size=4096))  # not changed itself
    # as dataclasses.replace: what is not changed is the same object
    assert changed.pager is settings.pager and changed.extra_pragmas is settings.extra_pragmas
    assert changed.replay is settings.replay
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.length.txns = 6  # type: ignore[misc]
