"""``import sqlwa`` asks Polars' allocator (its own jemalloc, configured from
``_RJEM_MALLOC_CONF`` when Polars loads) to return freed pages within a second, unless
the user configured it: without, a lab run's peak RSS grew with its length (see
docs/findings.md). Each case in a fresh interpreter: the setting is read once. Polars
puts its own defaults in front of whatever it finds; jemalloc takes the last of a key."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SHOW = "import os, sqlwa, polars; print(os.environ.get('_RJEM_MALLOC_CONF'))"


def conf_seen(env_value: str | None) -> dict[str, str]:
    """The options jemalloc takes from the variable once Polars is loaded (the last of each key)."""
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if env_value is not None:
        env["_RJEM_MALLOC_CONF"] = env_value
    done = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, check=True)
    return dict(item.split(":") for item in done.stdout.strip().split(","))


def test_sqlwa_sets_a_decaying_background_purge() -> None:
    conf = conf_seen(None)
    assert conf["background_thread"] == "true"
    assert int(conf["dirty_decay_ms"]) <= 1000


@pytest.mark.parametrize("mine", ["dirty_decay_ms:0", "narenas:1"])
def test_the_users_own_setting_wins(mine: str) -> None:
    key, value = mine.split(":")
    conf = conf_seen(mine)
    assert conf[key] == value
    assert "background_thread" not in conf  # not sqlwa's: the user chose
