"""How big a lab run's capture will be: printed before a long run, which is refused
when the output's filesystem has less room than that (:func:`check_capture_room`)."""

from __future__ import annotations

import sys
from pathlib import Path

from sqlwa import _system
from sqlwa.capture import drain
from sqlwa.errors import UsageError

#: A lab run of this many transactions or more is long: its capture's size is estimated
#: and checked against the free space before it starts.
LONG_RUN_TXNS = 100_000
#: Trace events per commit, with a margin (measured: 20.6 for WAL/FULL on ext4, the most of
#: the built-in settings), and bytes per event of the capture's Parquet parts (6.7).
EVENTS_PER_COMMIT = 25
PART_BYTES_PER_EVENT = 8
TEXT_BYTES_PER_EVENT = 115  # trace.txt (measured 112.7)


def capture_estimate(txns: int) -> tuple[int, int]:
    """The events and the disk bytes a lab run of ``txns`` transactions is expected to
    capture: the text (a segment at most, see :class:`sqlwa.capture.drain.Drain`), the
    parts, and events.parquet while it is joined from them."""
    events = txns * EVENTS_PER_COMMIT
    text = min(events * TEXT_BYTES_PER_EVENT, drain.SEGMENT_BYTES + drain.READ_SIZE)
    return events, text + 2 * events * PART_BYTES_PER_EVENT


def check_capture_room(txns: int | None, out_dir: Path, duration_s: float | None = None) -> None:
    """Before a long run: print its capture's estimated size, and refuse it when the
    output's filesystem has less room than that. A ``--duration`` run's commits are not
    known before it runs: its capture's bytes a commit and how many commits the free space
    holds are printed instead (the progress line then watches the disk as it fills)."""
    if txns is None and duration_s is None or txns is not None and txns < LONG_RUN_TXNS:
        return
    existing = next(p for p in [out_dir, *out_dir.absolute().parents] if p.exists())
    free, _ = _system.mounts.free_space(str(existing))
    mib = 2**20
    if txns is None:
        per_commit = capture_estimate(1_000_000)[1] / 1_000_000
        print(
            f"sqlwa: capture estimate: ~{EVENTS_PER_COMMIT} trace events, ~{per_commit:,.0f} B a commit in "
            f"{out_dir}; its {free / mib:,.0f} MiB free hold ~{free / per_commit:,.0f} commits",
            file=sys.stderr,
        )
        return
    events, need = capture_estimate(txns)
    print(
        f"sqlwa: capture estimate: ~{events:,} trace events, ~{need / mib:,.0f} MiB in {out_dir} "
        f"({free / mib:,.0f} MiB free)",
        file=sys.stderr,
    )
    if free < need:
        raise UsageError(
            f"{out_dir} has {free / mib:,.0f} MiB free, and this run's capture needs about {need / mib:,.0f} MiB",
            "make room there, choose another --out, or run fewer transactions (-n)",
        )
