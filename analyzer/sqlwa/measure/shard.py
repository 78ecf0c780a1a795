"""A sweep split over machines: the cells of a matrix as data, each with a stable id, and
the part of them one shard runs (``sqlwa matrix --plan``, ``--shard K/N``).

A cell's id is derived from its own settings (scenario, stack, journal, sync, repeat),
never from its position: the same cell has the same id whatever order the axes were
given in, on every machine. The split is deterministic and balanced: the cells sorted by
id are dealt out in turn, the first to shard 1, the second to shard 2 … so shard K of N
holds the same cells wherever and whenever it runs, and every cell is in exactly one.

K counts from 1 (``--shard 1/4`` … ``--shard 4/4``), as GNU parallel's ``{#}``, a Slurm
array declared ``--array=1-4`` and a CI matrix listing 1 … 4 give it; a 0-based index
(Kubernetes' ``JOB_COMPLETION_INDEX``, ``--array=0-3``) is taken as it comes with
``--shard-base 0``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sqlwa.errors import UsageError


class Identified(Protocol):
    """What a cell's id is made of (sqlwa.measure.matrix.Cell, which imports this module:
    not named here): its settings as the store's row names them."""

    @property
    def row(self) -> Mapping[str, str | int]: ...


#: A matrix's cell.
Cell = TypeVar("Cell", bound=Identified)

#: The cell settings its id is made of, in this order (a new axis is appended, with its
#: default left out of the id, so the ids of existing cells stay what they were).
ID_FIELDS = ("scenario", "fs", "encrypt", "fuse", "profile", "crypt", "journal", "sync", "repeat")
ID_DEFAULTS = {"encrypt": "none", "fuse": "none", "profile": "none", "crypt": "none"}
ID_LENGTH = 12  # hex digits: 48 bits, no collision among any sweep's cells in practice

SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
MAX_SHARDS = 100_000


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def cell_id(cell: Identified) -> str:
    """The cell's stable id: a hash of its settings (not of its place in the sweep)."""
    settings = cell.row
    key = {name: settings[name] for name in ID_FIELDS if settings[name] != ID_DEFAULTS.get(name)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return digest[:ID_LENGTH]


def parse(text: str, base: int = 1) -> Shard:
    """``K/N`` as a :class:`Shard`; K counts from ``base`` (1, or 0 for a 0-based index)."""
    match = SHARD_RE.match(text)
    if match is None:
        raise UsageError(f"--shard {text!r} is not K/N", "give the shard as K/N, e.g. --shard 2/4")
    given, count = int(match[1]), int(match[2])
    if not 1 <= count <= MAX_SHARDS:
        raise UsageError(f"--shard {text}: N must be 1 to {MAX_SHARDS:,}", "give the number of shards as N")
    last = count - 1 + base
    if not base <= given <= last:
        other = (
            "for a 0-based index (Kubernetes' JOB_COMPLETION_INDEX, a Slurm --array=0-N) add --shard-base 0"
            if base == 1
            else "for a 1-based index (GNU parallel's {#}, a Slurm --array=1-N) leave --shard-base out"
        )
        raise UsageError(f"--shard {text}: K counts from {base} here, so it is {base} to {last}", other)
    return Shard(given - base + 1, count)


def part(cells: Sequence[Cell], shard: Shard | None) -> list[Cell]:
    """The cells of ``shard`` (all of them without one), in the sweep's own order."""
    if shard is None:
        return list(cells)
    ids = [cell_id(cell) for cell in cells]
    shards = shards_by_id(ids, shard.count)
    return [cell for cell, cid in zip(cells, ids, strict=True) if shards[cid] == shard.index]


def shards_by_id(ids: Sequence[str], count: int) -> dict[str, int]:
    """Which of ``count`` shards (1-based) runs each cell, by id: the cells sorted by id
    dealt out in turn (the one rule of the split)."""
    return {cid: i % count + 1 for i, cid in enumerate(sorted(ids))}
