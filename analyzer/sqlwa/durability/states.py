"""Crash states drawn from a write log (CrashMonkey's model of a volatile write cache).

The log is in the order data became durable: a group of writes, then the flush that made
them durable (the target splices every write that completed before the flush was sent in
front of it), FUA writes on their own, marks as they were sent. For each flush (and the
end of the log, where writes no flush covered wait), a crash just before the flush
completed may leave, on top of everything durable before the group:

* none of the group's writes (``none``), or all of them (``flush``: the image at that
  persistence point);
* any subset of them, in any order (``subset``): a seeded sample, or every subset when
  the group is small;
* with ``torn``, a subset in which one write of several 4 KiB blocks reached the disk
  only in part (``torn``): some of its blocks, the rest as they were.

Every commit whose mark precedes the flush had been acknowledged by then: its data must
be in the state, or the state lost it. Writes that completed after the flush was sent
belong to the next group and are not mixed in: the reorderings explored are those within
one flush interval.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations

from sqlwa.durability.writelog import END_MARK, Entry

TXN_MARK = re.compile(r"sqlwa-txn-(\d+)")
SETUP_MARK = "sqlwa-setup"
READY_MARK = "sqlwa-lab-ready"  # sqlwa.lab.devmapper.READY_MARK: the lab's filesystem is mounted
BLOCK = 4096
KINDS = ("flush", "none", "subset", "torn")


@dataclass(frozen=True)
class Acked:
    """What SQLite had acknowledged by a crash point: the schema, and how many commits."""

    setup: bool = False
    commits: int = 0


@dataclass(frozen=True)
class CrashState:
    kind: str  # one of KINDS
    point: int  # the entry index of the flush (or end mark) the crash came just before
    durable: int  # every write entry with a smaller index is on the disk
    extra: tuple[int, ...]  # entries of the group that reached the disk too
    acked: Acked
    torn: tuple[int, tuple[int, ...]] | None = None  # (entry, 4 KiB blocks of it that reached the disk)


@dataclass(frozen=True)
class Group:
    point: int  # the flush or end mark
    start: int  # first entry of the group (== point when it is empty)
    writes: tuple[int, ...]
    acked: Acked


def groups(entries: list[Entry]) -> Iterator[Group]:
    """The flush intervals of a log: the writes spliced before each flush (or before the
    end mark) and what had been acknowledged by then."""
    acked = Acked()
    for entry in entries:
        if entry.mark is not None:
            if entry.mark == END_MARK:
                yield _group_before(entries, entry.index, acked)
            acked = _after_mark(acked, entry.mark)
        elif entry.is_flush:
            yield _group_before(entries, entry.index, acked)


def _group_before(entries: list[Entry], point: int, acked: Acked) -> Group:
    start = point
    while start > 0 and _in_group(entries[start - 1]):
        start -= 1
    return Group(point, start, tuple(range(start, point)), acked)


def _in_group(entry: Entry) -> bool:
    # FUA writes are durable where they stand; flushes and marks end a group
    return (entry.is_write or entry.is_discard) and not (entry.is_fua or entry.is_flush)


def _after_mark(acked: Acked, mark: str) -> Acked:
    if mark == SETUP_MARK:
        return Acked(True, acked.commits)
    if m := TXN_MARK.fullmatch(mark):
        return Acked(acked.setup, max(acked.commits, int(m.group(1)) + 1))
    return acked


def crash_states(entries: list[Entry], samples: int, seed: int, torn: bool, sectorsize: int) -> Iterator[CrashState]:
    """Every group's ``none`` and ``flush`` states, up to ``samples`` subsets each (all of
    them when fewer exist) and, with ``torn``, as many torn states; in log order, so the
    durable image only ever grows."""
    rng = random.Random(seed)
    ready = next((e.index for e in entries if e.mark == READY_MARK), -1)
    for group in groups(entries):
        if group.point < ready:
            continue  # the filesystem was still being made
        yield CrashState("none", group.point, group.start, (), group.acked)
        for subset in _subsets(group.writes, samples, rng):
            yield CrashState("subset", group.point, group.start, subset, group.acked)
        if torn:
            yield from _torn_states(entries, group, samples, rng, sectorsize)
        if group.writes:
            yield CrashState("flush", group.point, group.point + 1, (), group.acked)


def _subsets(writes: tuple[int, ...], samples: int, rng: random.Random) -> list[tuple[int, ...]]:
    """Proper, non-empty subsets of the group: all of them if there are at most
    ``samples``, else a seeded sample of distinct ones (each write kept with a
    probability drawn per subset, so small and large subsets both occur)."""
    n = len(writes)
    if n < 2 or samples <= 0:
        return []
    if 2**n - 2 <= samples:
        return [c for size in range(1, n) for c in combinations(writes, size)]
    chosen: set[tuple[int, ...]] = set()
    for _ in range(samples * 4):
        if len(chosen) == samples:
            break
        keep = rng.random()
        subset = tuple(w for w in writes if rng.random() < keep)
        if 0 < len(subset) < n:
            chosen.add(subset)
    return sorted(chosen)


def _torn_states(
    entries: list[Entry], group: Group, samples: int, rng: random.Random, sectorsize: int
) -> Iterator[CrashState]:
    per_block = BLOCK // sectorsize
    tearable = [w for w in group.writes if entries[w].is_write and entries[w].sectors >= 2 * per_block]
    for _ in range(min(samples, len(tearable))):
        victim = rng.choice(tearable)
        blocks = entries[victim].sectors // per_block
        kept = tuple(sorted(rng.sample(range(blocks), rng.randrange(1, blocks))))
        others = tuple(w for w in group.writes if w != victim and rng.random() < 0.5)
        yield CrashState("torn", group.point, group.start, others, group.acked, (victim, kept))


def groups_by_point(entries: list[Entry]) -> dict[int, tuple[int, ...]]:
    """Each flush interval's writes, by the entry that ends it."""
    return {group.point: group.writes for group in groups(entries)}
