"""Device profiles: the shipped ones hold the published figures (typed in here from their
sources), a profile survives writing and reading, a bad one is one line, draws follow
the stated percentiles, requests are priced as documented, and fio's JSON is read as
fio wrote it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sqlwa import device
from sqlwa.device import fio
from sqlwa.device.profile import (
    Distribution,
    Level,
    LevelModel,
    Profile,
    Provenance,
    dumps,
    load,
    pricing_notes,
    save,
)
from sqlwa.errors import UsageError

RNG = np.random.default_rng(1)


# ------------------------------------------------------------------ shipped profiles


def test_the_published_medians_of_pixel_and_moto_z() -> None:
    # Taras Glek: "Moto Z median value is around 0.5ms, Pixel is 7x that at 3.3ms"
    pixel, moto = device.resolve("pixel-2016"), device.resolve("moto-z-2016")
    assert pixel.kind == moto.kind == "published"
    assert pixel.level().measures["durable_write"].percentiles_ms == {50.0: 3.3}
    assert moto.level().measures["durable_write"].percentiles_ms == {50.0: 0.5}
    assert "taras.glek.net" in pixel.provenance.source and "taras.glek.net" in moto.provenance.source


def test_the_nexus_6_pair_follows_from_the_published_throughputs_and_losses() -> None:
    # Tom's Hardware, AndEBench Pro, Nexus 6 on 5.0 (encrypted): 4KBRW 5951 KB/s, 4KBRR 7449 KB/s;
    # AnandTech: encryption costs 50.5% of random-write and 62.9% of random-read performance
    encrypted, plain = device.resolve("nexus6-encrypted").level(), device.resolve("nexus6-unencrypted").level()
    write_ms, read_ms = 4 / 5951 * 1000, 4 / 7449 * 1000
    assert encrypted.measures["durable_write"].mean_ms == pytest.approx(write_ms, abs=5e-5)
    assert encrypted.measures["read"].mean_ms == pytest.approx(read_ms, abs=5e-5)
    assert plain.measures["durable_write"].mean_ms == pytest.approx(write_ms * (1 - 0.505), abs=1e-4)
    assert plain.measures["read"].mean_ms == pytest.approx(read_ms * (1 - 0.629), abs=1e-4)


def test_every_shipped_profile_loads_names_itself_and_says_where_it_is_from() -> None:
    shipped = device.shipped()
    assert {"pixel-2016", "moto-z-2016", "nexus6-encrypted", "nexus6-unencrypted"} <= set(shipped)
    for name, path in shipped.items():
        profile = load(path)
        assert profile.name == name and profile.provenance.source.strip() and profile.kind == "published"


def test_an_unknown_device_names_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="neither a profile file nor a shipped profile") as err:
        device.resolve("pixel-2099")
    assert "pixel-2016" in str(err.value.args[1])
    with pytest.raises(UsageError, match="is a directory"):
        device.resolve(str(tmp_path))


# ------------------------------------------------------------------ reading and writing


def sample_profile() -> Profile:
    write = Distribution({50.0: 0.2, 99.0: 1.5, 99.9: 4.0}, mean_ms=0.3, min_ms=0.1, max_ms=5.0, samples=1000)
    flush = Distribution({50.0: 1.0, 90.0: 1.4, 99.0: 3.0}, mean_ms=1.2, min_ms=0.8, max_ms=9.0, samples=1000)
    level = Level(
        fill_pct=42.5, measures={"write": write, "flush": flush}, seq_write_mib_s=200.0, queue_depth=4,
        write_iops_qd1=1000.0, write_iops_qd8=4100.0,
    )  # fmt: skip
    about = Provenance("a test", "here", ["one", "two"])
    return Profile('lab "disk"', "measured", about, {"fua": False, "model": "X"}, [level])


def test_a_profile_reads_back_as_it_was_written(tmp_path: Path) -> None:
    profile = sample_profile()
    save(profile, tmp_path / "p.toml")
    again = load(tmp_path / "p.toml")
    again.provenance.path = None
    assert again == profile
    assert not list(tmp_path.glob(".*"))  # the temporary file was renamed into place


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("schema_version = 1", "schema_version is 2"),
        ('kind = "measured"', "kind must be one of"),
        ("queue_depth = 4", "queue_depth must be a positive number"),
        ("fill_pct = 42.5", "fill_pct 142.5 is more than 100"),
        ('"99.9" = 4.0', "percentile '100.5' is not between 0 and 100"),
        ("seq_write_mib_s = 200.0", "unknown key 'seq_write_gib_s'"),
    ],
)
def test_a_mistake_in_a_profile_is_one_line_naming_it(tmp_path: Path, change: str, message: str) -> None:
    text = dumps(sample_profile())
    assert change in text, change
    broken = {
        "schema_version = 1": "schema_version = 2",
        'kind = "measured"': 'kind = "guessed"',
        "queue_depth = 4": "queue_depth = -4",
        "fill_pct = 42.5": "fill_pct = 142.5",
        '"99.9" = 4.0': '"100.5" = 4.0',
        "seq_write_mib_s = 200.0": "seq_write_gib_s = 200.0",
    }[change]
    (tmp_path / "p.toml").write_text(text.replace(change, broken, 1))
    with pytest.raises(UsageError, match=message):
        load(tmp_path / "p.toml")


def test_a_level_that_cannot_price_a_sync_is_refused(tmp_path: Path) -> None:
    profile = sample_profile()
    del profile.levels[0].measures["flush"]
    (tmp_path / "p.toml").write_text(dumps(profile))
    with pytest.raises(UsageError, match="needs flush or durable_write"):
        load(tmp_path / "p.toml")


@pytest.mark.parametrize("content", [b"\xff\xfe not text", b"[[levels]\n", b"x" * (1 << 20) + b"y"])
def test_what_is_not_a_profile_is_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "p.toml").write_bytes(content)
    with pytest.raises(UsageError, match="profile"):
        load(tmp_path / "p.toml")


# ------------------------------------------------------------------ drawing and pricing


def test_draws_follow_the_stated_percentiles_and_stay_within_the_extremes() -> None:
    dist = Distribution({10.0: 1.0, 50.0: 2.0, 90.0: 4.0, 99.0: 10.0}, min_ms=0.5, max_ms=20.0)
    draws = dist.draw(400_000, RNG)
    for pct, ms in dist.percentiles_ms.items():
        assert np.percentile(draws, pct) == pytest.approx(ms, rel=0.03)
    assert draws.min() >= 0.5 and draws.max() <= 20.0


def test_a_single_figure_is_drawn_as_itself() -> None:
    assert set(Distribution({50.0: 3.3}).draw(100, RNG)) == {3.3}
    assert set(Distribution(mean_ms=0.67).draw(100, RNG)) == {0.67}


def test_a_measured_level_prices_a_write_with_its_bytes_past_4_kib_at_the_bandwidth() -> None:
    level = Level(
        measures={"write": Distribution(mean_ms=1.0), "flush": Distribution(mean_ms=3.0)}, seq_write_mib_s=100
    )
    model = LevelModel(level)
    assert model.service_ms("write", 4096, 3, RNG).tolist() == [1.0] * 3
    # 1 MiB more at 100 MiB/s is 10 ms
    assert model.service_ms("write", 4096 + (1 << 20), 1, RNG)[0] == pytest.approx(11.0)
    assert model.service_ms("flush", 0, 1, RNG)[0] == 3.0
    # no FUA figure: the write and the flush the kernel would send instead
    assert model.service_ms("fua_write", 4096, 1, RNG)[0] == pytest.approx(4.0)
    assert model.service_ms("discard", 1 << 20, 1, RNG)[0] == 0.0
    assert model.service_ms("read", 4096, 1, RNG)[0] == 0.0 and model.unpriced == {"read"}


def test_a_published_durable_write_is_charged_to_each_flush_and_fua_write() -> None:
    model = LevelModel(Level(measures={"durable_write": Distribution({50.0: 3.3})}))
    assert model.service_ms("flush", 0, 1, RNG)[0] == 3.3
    assert model.service_ms("fua_write", 4096, 1, RNG)[0] == 3.3
    assert model.service_ms("write", 16384, 1, RNG)[0] == 0.0  # no bandwidth published
    assert model.queue_depth == 1
    notes = " ".join(pricing_notes(model.level))
    assert "durable" in notes and "one figure only" in notes and "one at a time" in notes


def test_the_nearest_fill_level_is_chosen() -> None:
    levels = [Level(fill_pct=p, measures={"flush": Distribution(mean_ms=p)}) for p in (10.0, 50.0, 90.0)]
    profile = Profile("x", "measured", levels=levels)
    assert profile.level().fill_pct == 10.0
    assert profile.level(80).fill_pct == 90.0 and profile.level(35).fill_pct == 50.0


# ------------------------------------------------------------------ fio


def fio_side(n: int, mean_us: float, pcts: dict[str, float] | None = None) -> dict:
    stats = {"min": 100_000, "max": 9_000_000, "mean": mean_us * 1000, "stddev": 1.0, "N": n}
    if pcts is not None:
        stats["percentile"] = {k: int(v * 1000) for k, v in pcts.items()}
    return stats


def fio_document() -> dict:
    """fio 3.33's JSON shape, trimmed to what matters, with numbers chosen here."""
    pcts = {"50.000000": 200.0, "99.000000": 1500.0, "99.900000": 4000.0}

    def job(name: str, **sides) -> dict:
        empty = {"iops": 0, "bw_bytes": 0, "lat_ns": {"N": 0}, "clat_ns": {"N": 0}}
        return {"jobname": name, "error": 0, "read": empty, "write": empty, "sync": {"lat_ns": {"N": 0}}, **sides}

    return {
        "fio version": "fio-3.33",
        "jobs": [
            job("layout", write={"iops": 10, "bw_bytes": 1, "lat_ns": fio_side(64, 900)}),
            job("write_fdatasync", write={"lat_ns": fio_side(1000, 300, pcts)}, sync={"lat_ns": fio_side(999, 1100, pcts)}),
            job("write_dsync", write={"lat_ns": fio_side(800, 1500), "clat_ns": fio_side(800, 1490, pcts)}),
            job("read", read={"lat_ns": fio_side(5000, 90, pcts)}),
            job("write_qd1", write={"iops": 1000.0, "lat_ns": fio_side(100, 1000)}),
            job("write_qd8", write={"iops": 3600.0, "lat_ns": fio_side(100, 2000)}),
            job("seq_write", write={"iops": 200.0, "bw_bytes": 209715200, "lat_ns": fio_side(100, 5000)}),
        ],
        "disk_util": [{"name": "sda"}],
    }  # fmt: skip


def test_fios_json_becomes_a_level_with_fios_numbers() -> None:
    data = fio.read_json("note: a warning fio printed first\n" + json.dumps(fio_document()), "x.json")
    level = fio.level_from_jobs(fio.jobs_by_name(data, "x.json"), fua=False, fill_pct=12.0)
    assert set(level.measures) == {"write", "flush", "durable_write", "read"}
    assert level.measures["write"].percentiles_ms == {50.0: 0.2, 99.0: 1.5, 99.9: 4.0}
    assert level.measures["flush"].samples == 999 and level.measures["flush"].mean_ms == pytest.approx(1.1)
    # write_dsync has percentiles only for the completion latency: those are taken
    assert level.measures["durable_write"].percentiles_ms[50.0] == 0.2
    assert level.measures["read"].min_ms == 0.1 and level.measures["read"].max_ms == 9.0
    assert level.queue_depth == 4  # 3600 / 1000 IOPS, rounded
    assert level.seq_write_mib_s == pytest.approx(200.0) and level.fill_pct == 12.0
    assert fio.disk_names(data) == ["sda"]


def test_on_a_fua_device_the_durable_write_is_the_fua_write() -> None:
    data = fio_document()
    level = fio.level_from_jobs(fio.jobs_by_name(data, "x"), fua=True, fill_pct=None)
    assert level.measures["fua_write"] == level.measures["durable_write"]


def test_what_is_not_fios_json_or_not_sqlwas_jobs_is_refused() -> None:
    with pytest.raises(UsageError, match="not fio's JSON output"):
        fio.read_json("fio: engine libaio not loadable", "x.json")
    with pytest.raises(UsageError, match="not fio's JSON output"):
        fio.read_json(json.dumps({"jobs": []}), "x.json")
    other = {"fio version": "fio-3.33", "jobs": [{"jobname": "mine", "error": 0}]}
    with pytest.raises(UsageError, match="holds none of sqlwa's fio jobs"):
        fio.jobs_by_name(other, "x.json")
    failed = fio_document()
    failed["jobs"][1]["error"] = 22
    with pytest.raises(UsageError, match="write_fdatasync failed with error 22"):
        fio.jobs_by_name(failed, "x.json")


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_the_job_file_is_one_fio_accepts(tmp_path: Path) -> None:
    (tmp_path / "p.fio").write_text(fio.job_file(2, 16))
    done = subprocess.run(["fio", "--parse-only", "p.fio"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [
        line.strip("[]")
        for line in (tmp_path / "p.fio").read_text().splitlines()
        if line.startswith("[") and line != "[global]"
    ] == list(fio.JOB_NAMES)
    assert not (tmp_path / fio.DATA_FILE).exists()
