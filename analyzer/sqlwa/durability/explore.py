"""A run's crash states, each built, mounted and judged: summary.json's ``durability``."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlwa import _system
from sqlwa.durability import reference, replay, states, verdict, writelog

ProgressFn = Callable[[int, int], None]
STATE_TIMEOUT_S = 60  # a state's mount, SQLite's look and the unmount: 1-2 s under TCG
METHOD = (
    "dm-log-writes under the filesystem; crash states per flush interval as CrashMonkey's model of a "
    "volatile write cache: none, all, and sampled subsets (all when few) of the writes a flush covered"
)


@dataclass(frozen=True)
class CrashOptions:
    """How crash states are drawn (``sqlwa crash`` options)."""

    samples: int = 4  # subsets per flush interval (every subset when there are at most this many)
    seed: int = 0
    torn: bool = False  # also tear writes of several 4 KiB blocks
    keep_log: bool = False  # copy the write log into OUT/writes.log before the states are tried


def explore(
    log_path: Path,
    device_bytes: int,
    target: verdict.Target,
    ref: reference.Reference,
    options: CrashOptions,
    workdir: Path,
    progress: ProgressFn | None = None,
) -> dict:
    """Build and judge every crash state of the log at ``log_path``; ``workdir`` (empty,
    on a filesystem with holes) takes the images, one at a time."""
    started = time.monotonic()
    log = writelog.read(log_path)
    drawn = list(states.crash_states(log.entries, options.samples, options.seed, options.torn, log.sectorsize))
    unique = _distinct(drawn, log.entries)
    replayer = replay.Replayer(log, device_bytes, workdir)
    bench = Bench(workdir, device_bytes)
    inspected: dict[tuple, verdict.Inspection] = {}
    judged: list[tuple[states.CrashState, verdict.Verdict]] = []
    try:
        for number, state in enumerate(unique, 1):
            key = _image_key(state, log.entries)
            if key not in inspected:
                replayer.image(state, bench.image)
                inspected[key] = bench.inspect(target, ref)
            judged.append((state, verdict.judge(state, inspected[key])))
            if progress is not None:
                progress(number, len(unique))
    finally:
        replayer.close()
        bench.close()
    return summarise(judged, log, options, len(inspected), time.monotonic() - started, ref.warmup)


class Bench:
    """Where states are looked at: an image file behind one loop device, a mountpoint.
    Each look runs in a child process given :data:`STATE_TIMEOUT_S`: a kernel whose
    recovery hangs on a state (seen with Debian's 6.1 on ext4 without barriers) costs
    that state, not the run. The hung mount keeps its loop device and mountpoint, so the
    next state gets new ones."""

    def __init__(self, workdir: Path, device_bytes: int) -> None:
        self.workdir = workdir
        self.device_bytes = device_bytes
        self.round = 0
        self.stuck: list[str] = []  # mountpoints a hung child left behind
        self._new_round()

    def _new_round(self) -> None:
        self.round += 1
        self.mountpoint = self.workdir / f"mnt-{self.round}"
        self.mountpoint.mkdir()
        self.image = self.workdir / f"state-{self.round}.img"
        with open(self.image, "xb") as f:
            f.truncate(self.device_bytes)
        # one loop device for many states: its page cache goes with each unmount (last close)
        self.device = _system.loops.attach_loop(str(self.image))

    def inspect(self, target: verdict.Target, ref: reference.Reference) -> verdict.Inspection:
        found = _system.processes.call_in_child(
            STATE_TIMEOUT_S, verdict.inspect, self.device, self.mountpoint, target, ref
        )
        if found is not None:
            return found
        self.stuck.append(str(self.mountpoint))
        self._new_round()
        return verdict.Inspection(
            verdict.HUNG, None, f"no verdict within {STATE_TIMEOUT_S} s (the kernel's recovery hung)"
        )

    def close(self) -> None:
        for mountpoint in self.stuck:  # best effort: a mount stuck in the kernel may refuse
            _system.tools.try_tool(["umount", "-l", mountpoint], timeout=10)
        for image in self.workdir.glob("state-*.img"):
            for loop in _system.loops.loops_backed_by(str(image)):
                _system.tools.try_tool(["losetup", "-d", loop.device], timeout=10)
        self.device = ""


def _image_key(state: states.CrashState, entries: list[writelog.Entry]) -> tuple:
    """Two states with equal keys have the same image: the same writes below the durable
    point (marks and empty flushes change nothing) and the same extra writes."""
    return (_writes_below(entries, state.durable), state.extra, state.torn)


def _writes_below(entries: list[writelog.Entry], index: int) -> int:
    position = index
    while position > 0 and not (entries[position - 1].is_write or entries[position - 1].is_discard):
        position -= 1
    return position


def _distinct(drawn: list[states.CrashState], entries: list[writelog.Entry]) -> list[states.CrashState]:
    seen: set[tuple] = set()
    unique = []
    for state in drawn:
        key = (*_image_key(state, entries), state.acked)
        if key not in seen:
            seen.add(key)
            unique.append(state)
    return unique


def summarise(
    judged: list[tuple[states.CrashState, verdict.Verdict]],
    log: writelog.WriteLog,
    options: CrashOptions,
    images: int,
    seconds: float,
    warmup: int,
) -> dict:
    """summary.json's ``durability``; ``warmup``: how many of the run's first commits
    were warm-up, so that every count of acknowledged commits says what they were."""
    outcomes = Counter(v.outcome for _, v in judged)
    sound = [v.lost for _, v in judged if v.outcome in (verdict.LOST, verdict.DURABLE)]
    writes = sum(1 for e in log.entries if e.is_write)
    return {
        "states": len(judged),
        "images_mounted": images,
        "acknowledged": _acknowledged_by_end(judged, warmup),
        "outcomes": {name: outcomes.get(name, 0) for name in verdict.OUTCOMES},
        "lost_commits": {
            "max": max(sound, default=0),
            "states_losing": sum(1 for lost in sound if lost),
            "distribution": {str(k): n for k, n in sorted(Counter(sound).items())},
        },
        "corrupt_states": outcomes.get(verdict.CORRUPT, 0) + outcomes.get(verdict.NOT_A_COMMIT, 0),
        "unmountable_states": outcomes.get(verdict.UNMOUNTABLE, 0) + outcomes.get(verdict.HUNG, 0),
        "first": _firsts(judged, log, warmup),
        "by_kind": {kind: sum(1 for s, _ in judged if s.kind == kind) for kind in states.KINDS},
        "log": {
            "entries": len(log.entries),
            "writes": writes,
            "flushes": sum(1 for e in log.entries if e.is_flush),
            "fua_writes": sum(1 for e in log.entries if e.is_fua and e.is_write),
            "discards": sum(1 for e in log.entries if e.is_discard),
            "sectorsize": log.sectorsize,
        },
        "options": asdict(options),
        "seconds": seconds,
        "states_per_minute": len(judged) / seconds * 60 if seconds > 0 else None,
        "method": METHOD,
    }


def by_phase(acked: states.Acked, warmup: int) -> dict[str, int]:
    """Acknowledged commits by what they were: the schema's (0 or 1), warm-up, measured."""
    warm = min(acked.commits, warmup)
    return {"schema": int(acked.setup), "warmup": warm, "measured": acked.commits - warm}


def lost_by_phase(acknowledged: dict[str, int], lost: int) -> dict[str, int]:
    """Which acknowledged commits ``lost`` are: a state holds the rows of one commit, so
    it lost the last ones, measured commits before warm-up ones before the schema's."""
    out = {}
    for phase in ("measured", "warmup", "schema"):
        out[phase] = min(lost, acknowledged[phase])
        lost -= out[phase]
    return {phase: out[phase] for phase in acknowledged}


def _acknowledged_by_end(judged: list[tuple[states.CrashState, verdict.Verdict]], warmup: int) -> dict[str, int]:
    """What SQLite had acknowledged by the log's last crash point (acknowledgements only grow)."""
    last = max((s.acked for s, _ in judged), key=verdict.acknowledged, default=states.Acked())
    return {"commits": verdict.acknowledged(last), **by_phase(last, warmup)}


def _firsts(judged: list[tuple[states.CrashState, verdict.Verdict]], log: writelog.WriteLog, warmup: int) -> dict:
    """The first state (in log order) of each bad outcome, and what made the difference:
    the writes of its flush interval that did not reach the disk (or the torn one).
    Counts are of acknowledged commits, the schema's counted as one, said by phase."""
    firsts: dict[str, dict] = {}
    for state, v in judged:
        if v.outcome == verdict.DURABLE or v.outcome in firsts:
            continue
        phases = by_phase(state.acked, warmup)
        firsts[v.outcome] = {
            "kind": state.kind,
            "before_entry": state.point,
            "acknowledged_commits": v.acknowledged,
            "acknowledged": phases,
            "held": v.held,
            "lost": v.lost,
            "lost_of": lost_by_phase(phases, v.lost),
            "detail": v.detail,
            "writes_missing": _missing(state, log)[:8],
            "torn": _describe(log, state.torn[0]) | {"blocks_kept": list(state.torn[1])} if state.torn else None,
        }
    return firsts


def _missing(state: states.CrashState, log: writelog.WriteLog) -> list[dict]:
    group = states.groups_by_point(log.entries).get(state.point, ())
    if state.kind == "flush":
        return []
    return [_describe(log, i) for i in group if i not in state.extra]


def _describe(log: writelog.WriteLog, index: int) -> dict:
    entry = log.entries[index]
    return {
        "entry": index,
        "offset": entry.sector * log.sectorsize,
        "bytes": entry.sectors * log.sectorsize,
        "fua": entry.is_fua,
        "discard": entry.is_discard,
    }
