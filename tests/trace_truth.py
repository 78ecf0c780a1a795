"""Independent truth from a capture's raw ftrace text (``trace.txt``), read with regular
expressions of its own, never with sqlwa's parser: commit windows from the engine's
markers, block requests from the kernel's ``block_rq_issue`` lines."""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

MARKER = re.compile(r"sqlwa (txn_begin|txn_end|txn_void) i=(\d+)")  # txn_void: wrote nothing, no window


def in_commit_windows(records: Iterable[tuple[str, str]], marker_in: Callable[[str, str], re.Match | None]):
    """(commit index, name, rest) of every (name, rest) record between a txn_begin marker
    and its txn_end; ``marker_in(name, rest)`` finds the marker in a record (the marker
    records themselves are not yielded)."""
    current = None
    for name, rest in records:
        marker = marker_in(name, rest)
        if marker:
            current = int(marker.group(2)) if marker.group(1) == "txn_begin" else None
        elif current is not None:
            yield current, name, rest


TRACE_LINE = re.compile(
    r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+): (?P<event>\w+): (?P<body>.*)$"
)
ISSUE_BODY = re.compile(r"^(?P<dev>\d+,\d+) (?P<rwbs>\S+) (?P<bytes>\d+) \(")


@functools.lru_cache(maxsize=8)
def trace_records(trace: Path) -> list[re.Match]:
    """Every event line of an ftrace text capture, matched by TRACE_LINE; read once per
    file (a test asks several questions of the same capture)."""
    return [m for line in trace.read_text(errors="replace").splitlines() if (m := TRACE_LINE.match(line))]


def time_ns(record: re.Match) -> int:
    """A line's timestamp in ns of the trace clock (printed with µs resolution, truncated)."""
    seconds, micros = record["ts"].split(".")
    return (int(seconds) * 1_000_000 + int(micros)) * 1000


def tally_block_per_commit(trace: Path, dev: str) -> dict[int, Counter]:
    """Per commit window: write requests, write bytes and flushes issued on ``dev``."""
    events = (m.group("event", "body") for m in trace_records(trace))
    marker_in = lambda event, body: MARKER.match(body) if event == "tracing_mark_write" else None  # noqa: E731
    tallies: dict[int, Counter] = defaultdict(Counter)
    for current, event, body in in_commit_windows(events, marker_in):
        rq = ISSUE_BODY.match(body) if event == "block_rq_issue" else None
        if not rq or rq.group("dev") != dev:
            continue
        rwbs = rq.group("rwbs")
        if rwbs.startswith("F"):  # FF = flush request; F + op = preflush
            tallies[current]["flush"] += 1
        if "W" in rwbs:
            tallies[current]["writes"] += 1
            tallies[current]["bytes"] += int(rq.group("bytes"))
    return tallies


def write_bytes_since_commit(trace: Path, dev: str, index: int) -> int:
    """Write bytes issued on ``dev`` from commit ``index``'s txn_begin marker to the end of
    the trace (the final syncfs included)."""
    start = marker_times_ns(trace)[("txn_begin", index)]
    issues = (
        ISSUE_BODY.match(m["body"])
        for m in trace_records(trace)
        if m["event"] == "block_rq_issue" and time_ns(m) >= start
    )
    return sum(int(rq["bytes"]) for rq in issues if rq and rq["dev"] == dev and "W" in rq["rwbs"])


def marker_times_ns(trace: Path) -> dict[tuple[str, int], int]:
    """The kernel's own timestamp of every marker line, keyed (``txn_begin``/``txn_end``,
    commit index), in ns of the trace clock."""
    return {
        (mk.group(1), int(mk.group(2))): time_ns(m)
        for m in trace_records(trace)
        if m["event"] == "tracing_mark_write" and (mk := MARKER.match(m["body"]))
    }


EXTENTS = re.compile(r"^sqlwa extents i=-?\d+ kind=(?P<kind>\w+) at=\w+ ranges=(?P<ranges>\S+)")
ISSUE_SECTOR = re.compile(r"\) (?P<sector>\d+) \+ \d+")
FIRST_MEASURED = re.compile(r"^sqlwa txn_begin i=\d+ warmup=0 ")


def file_sectors(trace: Path, chunks: list) -> list[tuple[int, int]]:
    """[start, end) device sectors of every range any ``extents`` marker names for the
    database's files (db, journal, wal, shm), at any time; btrfs logical sectors are moved
    onto the device through the DATA chunks of ``chunks`` ([logical, sectors, type,
    [physical, ...]], as layout.json has them)."""
    data = [(c[0], c[0] + c[1], c[3][0] - c[0]) for c in chunks if c[2].startswith("DATA") and c[3]]
    out = []
    for m in trace_records(trace):
        mark = EXTENTS.match(m["body"]) if m["event"] == "tracing_mark_write" else None
        if not mark or mark["kind"] not in ("db", "journal", "wal", "shm") or "+" not in mark["ranges"]:
            continue
        for item in mark["ranges"].split(","):
            start, count = map(int, item.split("+"))
            shift = next((s for lo, hi, s in data if lo <= start < hi), 0)
            out.append((start + shift, start + shift + count))
    return out


def unattributed_write_bytes(trace: Path, dev: str, layout: dict) -> int:
    """Write bytes issued on ``dev`` from the first measured commit's txn_begin marker to
    the end of the trace whose first sector lies in no file range of any ``extents``
    marker and in none of the layout's ``fs_journal``/``fs_metadata`` regions, and that
    are not flagged META (``M`` in rwbs): what no rule could give a cause."""
    records = trace_records(trace)
    start = next(time_ns(m) for m in records if m["event"] == "tracing_mark_write" and FIRST_MEASURED.match(m["body"]))
    known = file_sectors(trace, layout.get("chunks", []))
    known += [(a, a + n) for a, n in layout.get("fs_journal", []) + layout.get("fs_metadata", [])]
    total = 0
    for m in records:
        rq = ISSUE_BODY.match(m["body"]) if m["event"] == "block_rq_issue" else None
        if not rq or rq["dev"] != dev or "W" not in rq["rwbs"] or "M" in rq["rwbs"] or time_ns(m) < start:
            continue
        sector = int(ISSUE_SECTOR.search(m["body"])["sector"])
        if not any(a <= sector < b for a, b in known):
            total += int(rq["bytes"])
    return total


SYSCALL_LINE = re.compile(r"^\s*.+?-\d+\s+\[\d+\]\s+\S+\s+\d+\.\d+: sys_(?P<name>\w+)\((?P<args>.*)\)$")
TRUNCATED_TO_ZERO = re.compile(r"\blength: (?:0x)?0+$")


def tally_per_transaction(trace: Path, dev: str) -> list[Counter]:
    """Per rollback-journal transaction of a TRUNCATE-mode trace (SQLite ends each commit
    by truncating the journal to 0 bytes): fsync-family calls, block write requests,
    write bytes and flushes issued on ``dev``. A transaction runs from the previous one's
    ftruncate(…, 0) to its own; everything after the last one is left out. Needs only the
    block_rq_issue lines and the workload's sys_enter lines, no markers: it reads a
    program sqlwa did not run the same way as sqlwa's own trace."""
    tallies: list[Counter] = [Counter()]
    for line in trace.read_text(errors="replace").splitlines():
        call = SYSCALL_LINE.match(line)
        if call and call["name"] in ("fsync", "fdatasync", "sync_file_range"):
            tallies[-1]["fsync"] += 1
        elif call and call["name"] == "ftruncate" and TRUNCATED_TO_ZERO.search(call["args"]):
            tallies.append(Counter())
        record = TRACE_LINE.match(line) if not call else None
        rq = ISSUE_BODY.match(record["body"]) if record and record["event"] == "block_rq_issue" else None
        if rq and rq["dev"] == dev:
            tallies[-1]["flush"] += rq["rwbs"].startswith("F")
            if "W" in rq["rwbs"]:
                tallies[-1]["writes"] += 1
                tallies[-1]["bytes"] += int(rq["bytes"])
    return tallies[:-1]


# ------------------------------------------------------------------------- strace truth

SYNC_NAMES = ("fsync", "fdatasync", "sync_file_range")

STRACE_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)")
MARKER_IN_WRITE = re.compile(r'"' + MARKER.pattern)


PWRITE_COUNT = re.compile(r",\s*(\d+),\s*\d+\)\s*=")  # pwrite64(fd, buf, COUNT, offset) = ...


def strace_per_commit(log: Path, tid: int) -> dict[int, Counter]:
    """Per commit: fsync-family calls, pwrite64 calls and the bytes they asked to write, of
    ``tid`` between its txn_begin and txn_end marker writes."""
    calls = (
        m.group(2, 3)
        for line in log.read_text(errors="replace").splitlines()
        if (m := STRACE_LINE.match(line)) and int(m.group(1)) == tid
    )
    marker_in = lambda name, rest: MARKER_IN_WRITE.search(rest) if name == "write" else None  # noqa: E731
    per_commit: dict[int, Counter] = defaultdict(Counter)
    for current, name, rest in in_commit_windows(calls, marker_in):
        if name in SYNC_NAMES:
            per_commit[current]["fsync_calls"] += 1
        elif name == "pwrite64":
            per_commit[current]["pwrite_calls"] += 1
            per_commit[current]["pwrite_bytes"] += int(PWRITE_COUNT.search(rest).group(1))
    return per_commit


ANY_LINE = re.compile(r"^\s*.+?-(?P<pid>\d+)\s+\[\d+\]\s+\S+\s+\d+\.\d+: (?P<what>.*)$")
SYNC_ENTER = re.compile(r"^sys_(?:fsync|fdatasync|sync_file_range)\(")
SYNC_EXIT = re.compile(r"^sys_(?:fsync|fdatasync|sync_file_range) -> ")
ISSUE_LINE = re.compile(r"^block_rq_issue: (?P<dev>\d+,\d+) (?P<rwbs>\S+) ")
MARKER_LINE = re.compile(r"^tracing_mark_write: sqlwa (txn_begin|txn_end|txn_void) i=(\d+)")


def requests_issued_in_syncs(trace: Path, dev: str, tid: int) -> dict[int, Counter]:
    """Per commit window: the write requests (``writes``) and cache flushes (``flushes``)
    issued on ``dev`` while thread ``tid`` was inside a sync syscall (from its
    ``sys_fdatasync(`` line to its ``sys_fdatasync ->`` line): what a commit waits for."""
    tallies: dict[int, Counter] = defaultdict(Counter)
    current, in_sync = None, False
    for line in trace.read_text(errors="replace").splitlines():
        m = ANY_LINE.match(line)
        if not m:
            continue
        what, mine = m["what"], int(m["pid"]) == tid
        if marker := MARKER_LINE.match(what):
            current = int(marker.group(2)) if marker.group(1) == "txn_begin" else None
        elif mine and SYNC_ENTER.match(what):
            in_sync = True
        elif mine and SYNC_EXIT.match(what):
            in_sync = False
        elif in_sync and current is not None and (rq := ISSUE_LINE.match(what)) and rq["dev"] == dev:
            tallies[current]["flushes" if rq["rwbs"] == "FF" else "writes"] += 1
    return tallies


REQUEST_LINE = re.compile(
    r"^\s*.+?-\d+\s+\[\d+\]\s+\S+\s+(?P<ts>\d+\.\d+): block_rq_(?P<what>issue|complete): (?P<dev>\d+,\d+) "
    r"(?P<rwbs>\S+) (?:\d+ )?\(\) (?P<sector>\d+) \+ (?P<sectors>\d+)"
)


def served_one_at_a_time_ms(trace: Path, dev: str) -> list[tuple[str, int, float]]:
    """(rwbs, bytes, ms) of every request on ``dev`` as a device that serves one request
    at a time served it: from its issue, or the previous completion if that was later,
    to its completion. Requests pair with their completion by operation and sector in
    order; the zero-length completions the flush machinery adds are not requests."""
    pending: dict[tuple[str, str], list[int]] = defaultdict(list)
    served, last_done = [], 0
    for line in trace.read_text(errors="replace").splitlines():
        m = REQUEST_LINE.match(line)
        if not m or m["dev"] != dev:
            continue
        seconds, micros = m["ts"].split(".")
        t = int(seconds) * 1_000_000 + int(micros)
        flush = m["rwbs"] == "FF"
        key = (m["rwbs"].lstrip("F") or "F", "flush" if flush else m["sector"])
        if m["what"] == "issue":
            pending[key].append(t)
        elif (flush or m["sectors"] != "0") and pending[key]:
            issued = pending[key].pop(0)
            served.append((m["rwbs"], int(m["sectors"]) * 512, (t - max(issued, last_done)) / 1000))
            last_done = t
    return served


SYNC_MARKER = re.compile(r"sqlwa (sync_begin|sync_end) i=(-?\d+) kind=(\w+)")
BIO_QUEUED = re.compile(r"\s(?P<ts>\d+\.\d+): block_bio_queue: (?P<dev>\d+,\d+) (?P<rwbs>\S+) (?P<sector>\d+) \+")


def is_fua_write(rwbs: str) -> bool:
    """A write with FUA: blktrace's F after the W (an F before it is a preflush)."""
    return "W" in rwbs and "F" in rwbs[rwbs.index("W") :]


def syncs_with_uncovered_writes(trace: Path, dev: str) -> list[tuple[int, str]]:
    """(transaction, file kind) of every sync SQLite made (the engine's sync_begin/sync_end
    markers) in which a write request to the disk ``dev`` completed only after the last
    cache flush of the sync had been submitted — a bio with REQ_PREFLUSH queued on the
    device the filesystem is on (a device-mapper target above the disk, if there is one;
    the same flush reaches the disk later): a flush covers the writes completed before it
    is submitted (the block layer's contract, and dm-log-writes'), so such a write may
    still be in the device's volatile cache when the sync returns."""
    found = []
    window: tuple[int, str] | None = None
    issued: set[int] = set()  # sectors of the data writes issued to the disk in the sync
    completed: list[tuple[int, float]] = []
    fua: set[int] = set()  # sectors written with FUA, as the filesystem queued them (on any device)
    flushes: dict[str, list[float]] = defaultdict(list)  # device -> when flushes were queued on it
    for line in trace.read_text(errors="replace").splitlines():
        if sync := SYNC_MARKER.search(line):
            if sync.group(1) == "sync_begin":
                window, issued, completed, fua = (int(sync.group(2)), sync.group(3)), set(), [], set()
                flushes = defaultdict(list)
            elif window is not None:
                top = next((device for device in flushes if device != dev), dev)
                last_flush = flushes[top][-1] if flushes[top] else None
                if last_flush is not None and any(t > last_flush for sector, t in completed if sector not in fua):
                    found.append(window)
                window = None
        elif window is not None and (bio := BIO_QUEUED.search(line)):
            if bio["rwbs"].startswith("F"):
                flushes[bio["dev"]].append(float(bio["ts"]))
            if is_fua_write(bio["rwbs"]):  # durable when it completes (loop emulates it with a flush after)
                fua.add(int(bio["sector"]))
        elif window is not None and (rq := REQUEST_LINE.match(line)) and rq["dev"] == dev:
            if "W" not in rq["rwbs"] or rq["sectors"] == "0":  # a flush, or a flush's end of a FUA write
                continue
            if rq["what"] == "issue":
                issued.add(int(rq["sector"]))
            elif int(rq["sector"]) in issued:
                completed.append((int(rq["sector"]), float(rq["ts"])))
    return found


CLOSE_LINE = re.compile(r"^tracing_mark_write: sqlwa (close_begin|close_end) ")


def tally_in_close_windows(trace: Path, dev: str, tid: int) -> Counter:
    """Between each ``close_begin`` and its ``close_end`` marker: the sync syscalls
    (``fsync_calls``) thread ``tid`` entered, and the write requests (``writes``) and
    cache flushes (``flushes``, FF or a preflush) issued on ``dev``."""
    tally: Counter = Counter()
    inside = False
    for line in trace.read_text(errors="replace").splitlines():
        m = ANY_LINE.match(line)
        if not m:
            continue
        what = m["what"]
        if close := CLOSE_LINE.match(what):
            inside = close.group(1) == "close_begin"
        elif inside and int(m["pid"]) == tid and SYNC_ENTER.match(what):
            tally["fsync_calls"] += 1
        elif inside and (rq := ISSUE_LINE.match(what)) and rq["dev"] == dev:
            rwbs = rq["rwbs"]
            tally["flushes"] += rwbs.startswith("F")
            tally["writes"] += "W" in rwbs
    return tally
