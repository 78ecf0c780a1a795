"""``sqlwa device list``'s headline latency per profile, and the profiles whose source did
not state whether its writes were synced, checked against the profile data files
themselves (analyzer/sqlwa/device/published), read here with tomllib, not sqlwa."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import polars as pl
import pytest

from helpers import sqlwa_in_process
from sqlwa import device

PUBLISHED = Path(device.__file__).with_name("published")
FILES = sorted(PUBLISHED.glob("*.toml"))


def raw(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def synced_write_ms(data: dict) -> tuple[str, float]:
    """The file's synced 4 KiB write figure: the durable write's median where stated,
    else its mean (the first level: the shipped profiles have one)."""
    durable = data["levels"][0]["durable_write"]
    median = durable.get("percentiles_ms", {}).get("50")
    return ("p50", median) if median is not None else ("mean", durable["mean_ms"])


def sync_unstated_by_source() -> set[str]:
    """Profiles whose own notes say whether the writes were synced is not stated, and
    those derived from one of them (their source names it)."""
    unstated = {
        data["name"]
        for data in map(raw, FILES)
        if any(re.search(r"synced .* not stated", note) for note in data.get("notes", []))
    }
    derived = {data["name"] for data in map(raw, FILES) if any(name in data["source"] for name in unstated)}
    return unstated | derived


def list_entries() -> dict[str, list[str]]:
    """``sqlwa device list`` read back: each profile's lines, by name."""
    result = sqlwa_in_process("device", "list")
    assert result.returncode == 0, result.stderr
    entries: dict[str, list[str]] = {}
    name = ""
    for line in result.stdout.splitlines():
        if not line.startswith(" "):
            name = line.split()[0]
        entries.setdefault(name, []).append(line.strip())
    return entries


def test_the_nexus_6_profiles_are_the_ones_whose_source_left_syncing_unstated() -> None:
    assert sync_unstated_by_source() == {"nexus6-encrypted", "nexus6-unencrypted"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_device_list_shows_each_profiles_synced_write_latency_from_its_file(path: Path) -> None:
    data = raw(path)
    statistic, ms = synced_write_ms(data)
    lines = list_entries()[data["name"]]
    headline = [line for line in lines if "4 KiB write" in line]
    assert len(headline) == 1, lines
    assert f"{statistic} {ms:.3g} ms" in headline[0]
    unstated = data["name"] in sync_unstated_by_source()
    assert ("did not say" in headline[0]) == unstated
    assert headline[0].startswith("synced") != unstated


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_profile_says_it_in_every_prediction_when_its_source_did_not_state_syncing(path: Path) -> None:
    from sqlwa.device.predict import predict_runs

    profile = device.resolve(path.stem)
    # the notes every prediction on the profile carries (no run needed: they are the profile's)
    notes = [note for note in predict_runs(pl.DataFrame(), profile).notes if "synced" in note]
    if path.stem in sync_unstated_by_source():
        assert len(notes) == 1 and "did not state whether the writes it measured were synced" in notes[0]
    else:
        assert notes == []
