"""A device profile: how long one storage device takes for each kind of request, at one
or more fill levels — measured here with fio (``sqlwa device probe``), imported from a
phone's own fio run (``sqlwa device import``) or transcribed from published figures
(shipped in ``sqlwa/device/published/``).

A profile is TOML::

    schema_version = 1
    name = "pixel-2016"
    kind = "published"                  # measured | imported | published
    description = "..."
    source = "who measured it, where it was published"
    notes = ["what the figures are, what they leave out"]
    sync_stated = false                 # only where the source did not say whether its
                                        # writes were synced (absent: they were)

    [device]                            # what the probe found (any keys; free text)
    filesystem = "ext4"

    [[levels]]
    fill_pct = 26.3                     # how full the filesystem was (absent: not stated)
    seq_write_mib_s = 410.2             # 1 MiB sequential O_DIRECT writes
    queue_depth = 1                     # requests it serves at once (IOPS at 8 / IOPS at 1)
    write_iops_qd1 = 2100.5
    write_iops_qd8 = 2050.1

    [levels.write]                      # one measure: a latency distribution, ms
    samples = 1230
    mean_ms = 0.153
    min_ms = 0.066
    max_ms = 3.38
    [levels.write.percentiles_ms]
    "50" = 0.115
    "99" = 1.2

Measures (:data:`MEASURES`): ``write``, ``flush``, ``durable_write``, ``fua_write``,
``read``. How a profile prices each kind of block request is :class:`LevelModel`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlwa import inputs
from sqlwa.errors import UsageError

if TYPE_CHECKING:  # numpy is imported where a profile draws: reading one (the CLI) needs none
    import numpy as np

SCHEMA_VERSION = 1
KINDS = ("measured", "imported", "published")
#: What each measure of a level is (the fio job that measures it: sqlwa.device.fio).
MEASURES = {
    "write": "a 4 KiB random write with O_DIRECT, into the device's cache (fio: write_fdatasync, its writes)",
    "flush": "the fdatasync after each such write: a cache flush holding one 4 KiB write (fio: write_fdatasync, "
    "its syncs)",
    "durable_write": "a 4 KiB random write with O_DSYNC: the write and its flush in one call, or one FUA write "
    "where the device has FUA (fio: write_dsync); the figure phones are compared by",
    "fua_write": "a FUA write: the durable write on a device with FUA",
    "read": "a 4 KiB random read with O_DIRECT (fio: read)",
}
PAGE = 4096


@dataclass
class Distribution:
    """A latency distribution as percentiles (ms), with its mean, extremes and sample
    count where known. A published figure may be a median or a mean alone."""

    percentiles_ms: dict[float, float] = field(default_factory=dict)
    mean_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    samples: int | None = None

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1) where the profile states it."""
        return self.percentiles_ms.get(round(q * 100, 4))

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities, ms) of the inverse CDF: the percentiles, with the minimum and
        maximum as its ends where known."""
        import numpy as np

        probs = sorted(self.percentiles_ms)
        qs = [p / 100 for p in probs]
        values = [self.percentiles_ms[p] for p in probs]
        if self.min_ms is not None and qs and qs[0] > 0:
            qs, values = [0.0, *qs], [min(self.min_ms, values[0]), *values]
        if self.max_ms is not None and qs and qs[-1] < 1:
            qs, values = [*qs, 1.0], [*values, max(self.max_ms, values[-1])]
        if not qs:  # a mean alone: every draw is the mean
            return np.array([0.0, 1.0]), np.array([self.mean_ms or 0.0] * 2)
        # values must not fall with the probability (a rounded published figure might)
        return np.asarray(qs), np.maximum.accumulate(np.asarray(values))

    def draw(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` samples: uniform probabilities through the piecewise-linear inverse CDF."""
        import numpy as np

        qs, values = self.points()
        return np.interp(rng.random(size), qs, values)

    @property
    def single_figure(self) -> bool:
        """Only one number is known (a median or a mean): no spread to draw from."""
        return len(self.percentiles_ms) + (self.min_ms is not None) + (self.max_ms is not None) <= 1

    def headline(self) -> str:
        """p50 / p99 / p99.9 as known, for tables."""
        parts = [f"p{p:g} {v:.3g}" for p, v in sorted(self.percentiles_ms.items()) if p in (50, 90, 99, 99.9)]
        if not parts and self.mean_ms is not None:
            parts = [f"mean {self.mean_ms:.3g}"]
        return " · ".join(parts) + " ms"


@dataclass
class Level:
    """The device at one fill level."""

    fill_pct: float | None = None
    measures: dict[str, Distribution] = field(default_factory=dict)
    seq_write_mib_s: float | None = None
    queue_depth: int | None = None
    write_iops_qd1: float | None = None
    write_iops_qd8: float | None = None


@dataclass
class Provenance:
    """Where a profile's figures came from and what a reader must know of them: what a
    prediction on the profile repeats beside its figures (``sqlwa device show``, the
    JSON of ``sqlwa predict``, a check's detail), none of which prices a request."""

    description: str = ""
    source: str = ""
    notes: list[str] = field(default_factory=list)
    path: str | None = None  # where it was read from
    # False where the source did not say whether its writes were synced: the figure sqlwa
    # prices a cache flush with may be a write into the device's cache.
    sync_stated: bool = True


@dataclass
class Profile:
    name: str
    kind: str
    provenance: Provenance = field(default_factory=Provenance)
    device: dict[str, Any] = field(default_factory=dict)
    levels: list[Level] = field(default_factory=list)

    def level(self, fill_pct: float | None = None) -> Level:
        """The level nearest ``fill_pct`` (None: the emptiest, or the first stated)."""
        stated = [lv for lv in self.levels if lv.fill_pct is not None]
        if fill_pct is None or not stated:
            return min(stated, key=lambda lv: lv.fill_pct or 0.0) if stated else self.levels[0]
        return min(stated, key=lambda lv: abs((lv.fill_pct or 0.0) - fill_pct))

    def model(self, fill_pct: float | None = None) -> LevelModel:
        return LevelModel(self.level(fill_pct))

    def headline(self, fill_pct: float | None = None) -> Headline | None:
        """The figure profiles are compared by: one synced 4 KiB write at the level
        (:meth:`level`), its median where stated, else its mean."""
        measures = self.level(fill_pct).measures
        for name in ("durable_write", "fua_write"):
            dist = measures.get(name)
            if dist is None:
                continue
            median = dist.quantile(0.5)
            if median is not None:
                return Headline(name, "p50", median, self.provenance.sync_stated)
            if dist.mean_ms is not None:
                return Headline(name, "mean", dist.mean_ms, self.provenance.sync_stated)
        return None


@dataclass(frozen=True)
class Headline:
    """A profile's synced 4 KiB write latency, as ``sqlwa device list`` shows it."""

    measure: str  # durable_write or fua_write
    statistic: str  # "p50" or "mean"
    ms: float
    sync_stated: bool

    def text(self) -> str:
        if not self.sync_stated:
            return f"4 KiB write, synced or not (the source did not say): {self.statistic} {self.ms:.3g} ms"
        return f"synced 4 KiB write: {self.statistic} {self.ms:.3g} ms"


# ------------------------------------------------------------------ pricing requests


class LevelModel:
    """Prices block requests from one level (:class:`sqlwa.analysis.prediction.ServiceModel`):

    * a write: a ``write`` draw, plus the bytes past the first 4 KiB at the sequential
      bandwidth; a profile without ``write`` (a published durable-write figure) charges
      a write its transfer time only, and the durable figure to the flush after it;
    * a flush: a ``flush`` draw, else a ``durable_write`` draw;
    * a FUA write: a ``fua_write`` draw (plus the bytes past 4 KiB), else the write and a
      flush the kernel would send instead, else a ``durable_write``;
    * a read: a ``read`` draw plus the bytes past 4 KiB at the sequential bandwidth;
    * a discard: nothing (a profile has no discard figure; they are counted).

    A kind the level cannot price is priced at 0 and named in :attr:`unpriced`.
    """

    def __init__(self, level: Level) -> None:
        self.level = level
        self.queue_depth = level.queue_depth or 1
        self.unpriced: set[str] = set()

    def _has(self, measure: str) -> bool:
        return measure in self.level.measures

    def _draw(self, measure: str, size: int, rng: np.random.Generator) -> np.ndarray:
        return self.level.measures[measure].draw(size, rng)

    def transfer_ms(self, nbytes: int) -> float:
        """The time for ``nbytes`` past the first 4 KiB at the sequential bandwidth."""
        bandwidth = self.level.seq_write_mib_s
        if not bandwidth or nbytes <= PAGE:
            return 0.0
        return (nbytes - PAGE) / (bandwidth * 1024 * 1024) * 1000

    def service_ms(self, kind: str, nbytes: int, size: int, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        if kind == "write":
            return self._write(nbytes, size, rng)
        if kind == "flush":
            return self._flush(size, rng)
        if kind == "fua_write":
            if self._has("fua_write"):
                return self._draw("fua_write", size, rng) + self.transfer_ms(nbytes)
            if self._has("write") and self._has("flush"):
                return self._write(nbytes, size, rng) + self._flush(size, rng)
            return self._flush(size, rng) + self.transfer_ms(nbytes)
        if kind == "read" and self._has("read"):
            return self._draw("read", size, rng) + self.transfer_ms(nbytes)
        if kind != "discard":
            self.unpriced.add(kind)
        return np.zeros(size)

    def _write(self, nbytes: int, size: int, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        if self._has("write"):
            return self._draw("write", size, rng) + self.transfer_ms(nbytes)
        return np.full(size, self.transfer_ms(nbytes + PAGE))  # the whole request's transfer

    def _flush(self, size: int, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        for measure in ("flush", "durable_write"):
            if self._has(measure):
                return self._draw(measure, size, rng)
        self.unpriced.add("flush")
        return np.zeros(size)


def sync_notes(profile: Profile) -> list[str]:
    """What every prediction on ``profile`` must say about what its figures are."""
    if profile.provenance.sync_stated:
        return []
    return [
        f"{profile.name}: its source did not state whether the writes it measured were synced, yet each cache "
        "flush and FUA write is priced as a synced write; if they were not synced, a real flush takes longer and the "
        "predicted latency is too low"
    ]


def pricing_notes(level: Level) -> list[str]:
    """What a reader of a prediction must know about how this level priced requests."""
    notes = []
    if "write" not in level.measures and "durable_write" in level.measures:
        notes.append(
            "the profile states only durable 4 KiB writes: each cache flush (and FUA write) is priced as one, "
            "a plain write as its transfer time"
        )
    single = [m for m, d in level.measures.items() if d.single_figure]
    if single:
        notes.append(
            f"{', '.join(single)}: one figure only (no spread), so every draw is that figure and the predicted "
            "tail comes from the commits' own structure and base times"
        )
    if level.queue_depth is None:
        notes.append("no queue depth measured: requests are served one at a time")
    return notes


# ------------------------------------------------------------------ reading


def load(path: Path) -> Profile:
    """A profile TOML file, checked; a mistake in it is one UsageError naming the file."""
    try:
        data = inputs.read_input(path, "profile", inputs.PROFILE_LIMIT)
    except OSError as exc:
        raise UsageError(f"cannot read profile {path}: {exc.strerror}", "pass a profile TOML file") from None
    try:
        raw = inputs.parse_toml(data)
    except ValueError as exc:
        raise UsageError(f"profile {path} is not valid TOML: {exc}", "pass a file written by sqlwa device") from None
    profile = from_dict(raw, str(path))
    profile.provenance.path = str(path)
    return profile


def _fail(where: str, problem: str) -> UsageError:
    return UsageError(f"profile {where}: {problem}", "see `sqlwa device --help` for the profile format")


def _positive(value: object, key: str, where: str, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):  # type: ignore[operator]
        raise _fail(where, f"{key} must be a {'non-negative' if allow_zero else 'positive'} number, not {value!r}")
    return float(value)  # type: ignore[arg-type]


def distribution_from(raw: object, where: str) -> Distribution:
    if not isinstance(raw, dict):
        raise _fail(where, "a measure must be a table")
    unknown = sorted(set(raw) - {"percentiles_ms", "mean_ms", "min_ms", "max_ms", "samples"})
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r}")
    percentiles = {}
    table = raw.get("percentiles_ms", {})
    if not isinstance(table, dict):
        raise _fail(where, "percentiles_ms must be a table of percentile = ms")
    for key, value in table.items():
        try:
            pct = float(key)
        except ValueError:
            raise _fail(where, f"percentile {key!r} is not a number") from None
        if not 0 < pct < 100:
            raise _fail(where, f"percentile {key!r} is not between 0 and 100")
        percentiles[round(pct, 4)] = _positive(value, f"percentile {key}", where, allow_zero=True)
    numbers = {
        k: _positive(raw[k], k, where, allow_zero=True) if k in raw else None for k in ("mean_ms", "min_ms", "max_ms")
    }
    dist = Distribution(
        percentiles_ms=percentiles, mean_ms=numbers["mean_ms"], min_ms=numbers["min_ms"], max_ms=numbers["max_ms"]
    )
    if "samples" in raw:
        dist.samples = int(_positive(raw["samples"], "samples", where))
    if not percentiles and dist.mean_ms is None:
        raise _fail(where, "a measure needs percentiles_ms or mean_ms")
    return dist


LEVEL_NUMBERS = ("fill_pct", "seq_write_mib_s", "queue_depth", "write_iops_qd1", "write_iops_qd8")


def level_from(raw: object, where: str) -> Level:
    if not isinstance(raw, dict):
        raise _fail(where, "levels must be [[levels]] tables")
    unknown = sorted(set(raw) - set(LEVEL_NUMBERS) - set(MEASURES))
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r} (measures: {', '.join(MEASURES)})")
    level = Level(measures={m: distribution_from(raw[m], f"{where}.{m}") for m in MEASURES if m in raw})
    for key in LEVEL_NUMBERS:
        if key in raw:
            setattr(level, key, _positive(raw[key], key, where, allow_zero=key == "fill_pct"))
    if level.fill_pct is not None and level.fill_pct > 100:
        raise _fail(where, f"fill_pct {level.fill_pct:g} is more than 100")
    if level.queue_depth is not None:
        level.queue_depth = max(1, round(level.queue_depth))
    if not level.measures:
        raise _fail(where, f"a level needs at least one measure ({', '.join(MEASURES)})")
    if "flush" not in level.measures and "durable_write" not in level.measures:
        raise _fail(where, "a level needs flush or durable_write: without either a commit's syncs cost nothing")
    return level


def from_dict(raw: dict, where: str) -> Profile:
    allowed = {"schema_version", "name", "kind", "description", "source", "notes", "sync_stated", "device", "levels"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r}")
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise _fail(where, f"schema_version is {raw.get('schema_version')!r}, this sqlwa reads {SCHEMA_VERSION}")
    for key in ("name", "kind", "description", "source"):
        if not isinstance(raw.get(key, ""), str):
            raise _fail(where, f"{key} must be a string")
    if not raw.get("name"):
        raise _fail(where, "it has no name")
    if raw.get("kind") not in KINDS:
        raise _fail(where, f"kind must be one of {', '.join(KINDS)}, not {raw.get('kind')!r}")
    notes = raw.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise _fail(where, "notes must be a list of strings")
    device = raw.get("device", {})
    if not isinstance(device, dict):
        raise _fail(where, "device must be a table")
    levels = raw.get("levels")
    if not isinstance(levels, list) or not levels:
        raise _fail(where, "it has no [[levels]]")
    sync_stated = raw.get("sync_stated", True)
    if not isinstance(sync_stated, bool):
        raise _fail(where, "sync_stated must be true or false")
    return Profile(
        name=raw["name"],
        kind=raw["kind"],
        provenance=Provenance(
            description=raw.get("description", ""),
            source=raw.get("source", ""),
            notes=list(notes),
            sync_stated=sync_stated,
        ),
        device=dict(device),
        levels=[level_from(lv, f"{where} level {i + 1}") for i, lv in enumerate(levels)],
    )


# ------------------------------------------------------------------ writing


def to_dict(profile: Profile) -> dict[str, Any]:
    levels = []
    for level in profile.levels:
        row: dict[str, Any] = {k: getattr(level, k) for k in LEVEL_NUMBERS if getattr(level, k) is not None}
        for name, dist in level.measures.items():
            table: dict[str, Any] = {
                k: getattr(dist, k) for k in ("samples", "mean_ms", "min_ms", "max_ms") if getattr(dist, k) is not None
            }
            if dist.percentiles_ms:
                table["percentiles_ms"] = {f"{p:g}": v for p, v in sorted(dist.percentiles_ms.items())}
            row[name] = table
        levels.append(row)
    return {
        "schema_version": SCHEMA_VERSION,
        "name": profile.name,
        "kind": profile.kind,
        "description": profile.provenance.description,
        "source": profile.provenance.source,
        "notes": profile.provenance.notes,
        **({} if profile.provenance.sync_stated else {"sync_stated": False}),
        "device": {k: v for k, v in profile.device.items() if v is not None},
        "levels": levels,
    }


def dumps(profile: Profile) -> str:
    """The profile as TOML (read back by :func:`load`)."""
    data = to_dict(profile)
    lines = ["# sqlwa device profile: service times of one storage device (see `sqlwa device --help`)"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in data.items() if k not in ("device", "levels")]
    lines += ["", "[device]", *[f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data["device"].items()]]
    for level in data["levels"]:
        lines += ["", "[[levels]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in level.items() if not isinstance(v, dict)]
        for name, table in ((k, v) for k, v in level.items() if isinstance(v, dict)):
            lines += [f"[levels.{name}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
            if "percentiles_ms" in table:
                lines += [f"[levels.{name}.percentiles_ms]"]
                lines += [f"{_toml_key(p)} = {_toml_value(v)}" for p, v in table["percentiles_ms"].items()]
    return "\n".join(lines) + "\n"


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else json.dumps(key)


def _toml_value(value: object) -> str:
    """A TOML scalar or list of scalars; JSON's string escapes are TOML's basic-string ones."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(round(value, 6)) if math.isfinite(value) else "nan"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def save(profile: Profile, path: Path) -> None:
    """Write the profile to ``path`` (a target :func:`sqlwa.outputs.check_file` passed),
    whole or not at all."""
    from sqlwa import outputs

    outputs.write_file(path, dumps(profile), "the profile")
