"""The lab run's analysis in bounded memory: commit windows and trace events walked
together in time order, chunk by chunk.

The commits are cut into chunks of :data:`CHUNK_COMMITS` windows; chunk k holds the
events from its first window's start to the next chunk's first window's start (the first
chunk from the trace's start, the last to its end), read from a scan of events.parquet
(sorted by time, so each chunk's filter reads only its row groups). An event's window is
the latest one starting at or before it, so every event finds its window in its own
chunk. What reaches over a chunk's edge is carried, never the whole run:

* a request's completion (the first C after its D with the same key) is looked for in its
  own chunk and the next; the rare request still in flight after that is looked up
  alone in the rest of the trace; its queue event (the latest Q at its sector) and a
  write's submitter (likewise) are found among the chunk's Q events and the latest Q of
  every (operation, sector) before the chunk (bounded by the device's size, not the run);
* the requests in flight at the chunk's edge (for the device's busy time);
* the last sync marker (a sync begun in the chunk before);
* the files' ownership spans (:func:`sqlwa.analysis.attribution.ownership_spans`), from
  a first pass over the ``extents`` markers: consecutive markers of one range and file
  collapse into one span, so they are a few rows per range, not per commit.

Per-commit rows and attributed writes are written per chunk into Parquet parts and joined
into their files; the run's figures (totals, quantiles) are summed as the chunks go or
read back from those files. The result equals :func:`sqlwa.measure.analyse.analyse_events`
on the whole table, frame for frame (tests/lab/test_streamed_analysis.py, with chunks
of a few commits). Runs through dm-crypt, dm-delay, FUSE or eCryptfs are analysed whole
(:func:`streamable`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import polars as pl

from sqlwa.analysis import attribution, device_time, metrics, phases, windows
from sqlwa.analysis.schema import Amortized
from sqlwa.analysis.summary import ColumnFrame
from sqlwa.catalogue import DATABASE_FILE_KINDS

#: Commit windows per chunk (``SQLWA_ANALYSIS_CHUNK_COMMITS``: tests make it a few, so that
#: chunk edges are crossed many times in a short run).
CHUNK_COMMITS = 10_000


def chunk_commits() -> int:
    return max(int(os.environ.get("SQLWA_ANALYSIS_CHUNK_COMMITS", CHUNK_COMMITS)), 1)


def streamable(context: Any) -> bool:
    """Runs whose writes are followed through another device, or attributed by the sync
    that wrote them, or that have a FUSE daemon, are analysed whole."""
    return (
        context is not None
        and context.mapped_dev is None
        and context.mapped_offset is None
        and not context.files_by_sync
        and context.fuse is None
    )


@dataclass
class Chunk:
    """One chunk: its windows, its commits' index range and its events' time range."""

    wins: pl.DataFrame
    first_index: int | None  # commits from this index on (None: from the first)
    next_index: int | None  # up to this one (None: to the last)
    lo: int | None  # events from this time on (None: the trace's start)
    hi: int | None  # events before this time (None: to the trace's end)
    after: int | None  # the next chunk's ``hi`` (the lookahead for completions)


def time_range(events: pl.LazyFrame, lo: int | None, hi: int | None) -> pl.LazyFrame:
    t = pl.col("time_ns")
    if lo is not None:
        events = events.filter(t >= lo)
    if hi is not None:
        events = events.filter(t < hi)
    return events


def chunks(wins: pl.LazyFrame, size: int) -> Iterator[Chunk]:
    """The windows (in time order) cut into chunks of ``size`` (one chunk, all events,
    without windows); each chunk's windows read when it comes."""
    edges = wins.select("win_start_ns", "index").gather_every(size).collect()
    starts, firsts = edges["win_start_ns"].to_list(), edges["index"].to_list()
    if not starts:
        yield Chunk(wins.collect(), None, None, None, None, None)
        return
    for k in range(len(starts)):
        lo = starts[k] if k else None
        hi = starts[k + 1] if k + 1 < len(starts) else None
        after = starts[k + 2] if k + 2 < len(starts) else None
        first = firsts[k] if k else None
        following = firsts[k + 1] if k + 1 < len(starts) else None
        yield Chunk(wins.slice(k * size, size).collect(), first, following, lo, hi, after)


def commits_of(commits: pl.DataFrame | pl.LazyFrame, chunk: Chunk) -> pl.DataFrame:
    rows = commits.lazy()
    if chunk.first_index is not None:
        rows = rows.filter(pl.col("index") >= chunk.first_index)
    if chunk.next_index is not None:
        rows = rows.filter(pl.col("index") < chunk.next_index)
    return rows.collect()


# ------------------------------------------------------------------ the first pass: markers


def marker_rows(events: pl.LazyFrame, names: tuple[str, ...]) -> pl.DataFrame:
    return (
        events.filter((pl.col("kind") == "marker") & pl.col("name").cast(pl.String).is_in(names))
        .select("time_ns", pl.col("name").cast(pl.String).alias("event"), "text")
        .collect()
    )


@dataclass
class Markers:
    """What the whole run's markers give, gathered chunk by chunk: the windows, the SQL
    thread, the files' ownership spans and the checkpoints (their syncs of the database)."""

    wins: pl.LazyFrame  # a scan of the windows' file, in time order
    tid: int | None
    owners: pl.DataFrame
    checkpoints: pl.DataFrame


def first_pass(events: pl.LazyFrame, context: Any, size: int, work_dir: Path) -> Markers:
    """The markers' figures, each read by a query that keeps only numbers (the windows'
    time, index and warm-up flag) or few rows (the run's begin, the database's syncs in
    WAL mode); the extents read a chunk at a time and folded into ownership spans as they
    come (consecutive markers of a span collapse: its first and last are kept)."""
    marker, name = pl.col("kind") == "marker", pl.col("name").cast(pl.String)
    wins = windows_in_slices(events, size * EVENTS_PER_COMMIT, work_dir / WINDOWS_FILE)
    begin = (
        events.filter(marker & (name == "run_begin"))
        .select(windows.marker_field("tid"))
        .head(1)
        .collect(engine="streaming")
    )
    tid = begin.item(0, 0) if begin.height else None
    db_syncs = pl.DataFrame(schema={"time_ns": pl.UInt64, "event": pl.String, "text": pl.String})
    if context.journal == "wal":  # elsewhere every commit syncs the database, and none is a checkpoint
        db = marker & name.is_in(["sync_begin", "sync_end"]) & pl.col("text").str.contains(r"\bkind=db\b")
        db_syncs = events.filter(db).select("time_ns", name.alias("event"), "text").collect(engine="streaming")
    found = checkpoints_of(db_syncs, context.journal)
    owners = pl.DataFrame(schema={"mark_ns": pl.Int64, "file": pl.String, "start": pl.Int64, "end": pl.Int64})
    for chunk in chunks(wins, size):
        rows = time_range(events, chunk.lo, chunk.hi)
        marks = rows.filter(marker & (name == "extents")).select("time_ns", name.alias("event"), "text").collect()
        ranges = attribution.ranges_of_marks(marks)
        if context.fs_type == "btrfs":
            ranges = attribution.translate_chunks(ranges, context.layout.get("chunks", []))
        owners = span_rows(attribution.ownership_spans(pl.concat([owners, ranges.cast(owners.schema)])))
    spans = attribution.ownership_spans(owners) if owners.height else owners_schema()
    return Markers(wins, tid, spans, found)


def span_rows(spans: pl.DataFrame) -> pl.DataFrame:
    """Ownership spans as marker rows again (their first and last), to fold in more."""
    first = spans.select(pl.col("first_ns").alias("mark_ns"), "file", "start", "end")
    last = spans.select(pl.col("last_ns").alias("mark_ns"), "file", "start", "end")
    return pl.concat([first, last]).cast({"mark_ns": pl.Int64}).unique(maintain_order=True)


def owners_schema() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"file": pl.String, "start": pl.Int64, "end": pl.Int64, "first_ns": pl.Int64, "last_ns": pl.Int64}
    )


#: Events read at a time for the windows, per commit of a chunk (about 21 in WAL/FULL).
EVENTS_PER_COMMIT = 25
WINDOWS_FILE = ".windows.parquet"


def windows_in_slices(events: pl.LazyFrame, rows: int, target: Path) -> pl.LazyFrame:
    """:func:`sqlwa.analysis.windows.checked_windows` of the run's transaction markers,
    read ``rows`` events at a time and kept as numbers, into the file ``target`` (a
    ``txn_begin`` at a slice's end waits for its ``txn_end`` in the next); markers that
    fit no window raise :class:`MarkersOutOfOrder` (analysed whole, which says where)."""
    marker, name = pl.col("kind") == "marker", pl.col("name").cast(pl.String)
    total = events.select(pl.len()).collect().item()
    carry = pl.DataFrame(
        schema={"time_ns": pl.UInt64, "begin": pl.Boolean, "void": pl.Boolean, "index": pl.Int64, "warmup": pl.Boolean}
    )
    highest, markers, kept, parts = -1, 0, 0, []
    for k, offset in enumerate(range(0, max(total, 1), rows)):
        txn = (
            events.slice(offset, rows)
            .filter(marker & name.is_in(windows.TXN_MARKERS))
            .select(
                "time_ns",
                (name == "txn_begin").alias("begin"),
                (name == "txn_void").alias("void"),
                windows.marker_field("i").alias("index"),
                (windows.marker_field("warmup") == 1).alias("warmup"),
            )
            .collect()
        )
        txn = pl.concat([carry, txn.cast(carry.schema)]).with_row_index("row").sort("time_ns", "row").drop("row")
        last = offset + rows >= total
        carry = txn.tail(1).filter(pl.col("begin")) if not last else carry.clear()
        if carry.height:
            txn = txn.head(txn.height - 1)
        markers += txn.height
        followed = txn.with_columns(
            pl.col("begin").shift(-1).alias("next_begin"),
            pl.col("void").shift(-1).alias("next_void"),
            pl.col("index").shift(-1).alias("next_index"),
            pl.col("time_ns").shift(-1).alias("win_end_ns"),
        )
        ended = pl.col("begin") & ~pl.col("next_begin") & (pl.col("index") == pl.col("next_index"))
        pairs = followed.filter(ended & ~pl.col("next_void"))
        # a transaction that wrote nothing (txn_void) is no window, its markers in order
        markers -= 2 * followed.filter(ended & pl.col("next_void")).height
        before = pl.max_horizontal(pl.col("index").cum_max().shift(1).fill_null(-1), pl.lit(highest))
        found = pairs.filter(pl.col("index") > before)
        if pairs.height:
            highest = max(highest, int(cast(int, pairs["index"].max())))
        kept += found.height
        parts.append(
            part(
                found.select("index", "warmup", pl.col("time_ns").alias("win_start_ns"), "win_end_ns"),
                target.parent,
                "windows",
                k,
            )
        )
    if markers != 2 * kept:
        for path in parts:
            path.unlink()
        raise MarkersOutOfOrder
    sink(parts, target)
    for path in parts:
        path.unlink()
    return pl.scan_parquet(target)


class MarkersOutOfOrder(Exception):
    """The run's markers fit no windows here: analysed whole, which says where."""


def checkpoints_of(db_syncs: pl.DataFrame, journal: str) -> pl.DataFrame:
    """:func:`sqlwa.analysis.metrics.checkpoints` without their bytes."""
    if db_syncs.height == 0:
        db_syncs = pl.DataFrame(schema={"time_ns": pl.UInt64, "event": pl.String, "text": pl.String})
    marks = db_syncs.select("time_ns", pl.col("event").alias("name"), "text", kind=pl.lit("marker"))
    found = metrics.checkpoints(marks, None, journal)
    return found.drop("bytes")


# ------------------------------------------------------------------ the running state


@dataclass
class Carried:
    """What one chunk hands the next."""

    queued: pl.DataFrame | None = None  # the latest Q of each (operation, sector)
    bios: pl.DataFrame | None = None  # the latest Q of each sector, with its submitter
    flights: pl.DataFrame | None = None  # requests in flight at the edge: issue_ns, complete_ns
    sync_mark: pl.DataFrame | None = None  # the last sync marker
    rows: int = 0  # write requests so far (the attributed writes' ``row``)


@dataclass
class Totals:
    """The run's figures summed chunk by chunk."""

    amortized: dict = field(
        default_factory=lambda: dict.fromkeys(("write_bytes", "write_requests", "flush_requests"), 0)
    )
    foreground: dict = field(default_factory=dict)
    amortized_total: dict = field(default_factory=dict)
    run_total: dict = field(default_factory=dict)
    writeback: dict = field(default_factory=dict)
    checkpoint_bytes: dict = field(default_factory=dict)  # checkpoint start → bytes
    covered: dict = field(default_factory=dict)  # checkpoint start → commits it covers


def add(into: dict, more: dict) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0) + value


def latest_by(frame: pl.DataFrame, time_name: str, keys: list[str]) -> pl.DataFrame:
    return frame.sort(time_name).group_by(keys, maintain_order=True).last().select(frame.columns)


# ------------------------------------------------------------------ the walk


@dataclass
class Streamed:
    commits: pl.LazyFrame
    writes: pl.LazyFrame | None
    amortized: Amortized | None
    sections: dict


def analyse(
    events: pl.LazyFrame,
    commits: pl.DataFrame | pl.LazyFrame,
    dev: tuple[int, int],
    levels: list[str],
    context: Any,
    work_dir: Path,
    commits_path: Path,
    writes_path: Path | None,
    size: int | None = None,
    phases_of: str | None = None,
) -> Streamed:
    """The analysis of :func:`sqlwa.measure.analyse.analyse_events`, chunk by chunk, into
    ``commits_path`` (and the attributed writes into ``writes_path``); with ``phases_of``
    (the journal mode) its ``phase`` column too (:func:`sqlwa.analysis.phases.with_phases`)."""
    size = size or chunk_commits()
    marks = first_pass(events, context, size, work_dir)
    wins, tid = marks.wins, marks.tid
    measured, start = wins.filter(~pl.col("warmup")).select(pl.len(), pl.col("win_start_ns").min()).collect().row(0)
    first = int(start) if measured else None
    carried, totals = Carried(), Totals()
    parts, write_parts, request_parts = [], [], []
    block = "block" in levels
    for k, chunk in enumerate(chunks(wins, size)):
        rows = time_range(events, chunk.lo, chunk.hi)
        joined = commits_of(commits, chunk)
        joined = joined.join(chunk.wins.drop("warmup"), on="index", how="left")
        cw = chunk.wins
        if "syscall" in levels:
            joined = joined.join(windows.syscalls_per_commit(rows, cw, tid), on="index", how="left")
        if block:
            issued = windows.block_issues(rows, dev, windows.TALLIED)
            joined = joined.join(
                windows.per_window(issued, cw, windows.block_tallies(), blk_columns()), on="index", how="left"
            )
            if first is not None:
                add(totals.amortized, amortized_of(issued, first))
            reqs = chunk_requests(events, rows, chunk, dev, carried)
            flights = pl.concat([f for f in (carried.flights, flights_of(reqs)) if f is not None])
            joined = joined.join(device_time.busy_per_commit(flights, cw), on="index", how="left")
            if chunk.hi is not None:
                carried.flights = flights.filter(pl.col("complete_ns") > chunk.hi)
            inside = requests_inside(reqs, cw, joined)
            request_parts.append(part(inside, work_dir, "requests", k))
            attributed = attribute_chunk(rows, cw, dev, tid, context, marks.owners, carried)
            write_parts.append(part(attributed, work_dir, "writes", k))
            per_commit = attribution.bytes_per_commit(attributed, cw)
            joined = joined.join(per_commit, on="index", how="left")
            tally_attribution(totals, attributed, per_commit, cw.filter(~pl.col("warmup")), first)
            add(totals.checkpoint_bytes, checkpoint_bytes(attributed, marks.checkpoints))
        add(totals.covered, covered(joined, marks.checkpoints))
        parts.append(part(joined, work_dir, "commits", k))
    sections: dict[str, Any] = {}
    amortized: Amortized | None = None
    found = finished_checkpoints(marks.checkpoints, totals, block)
    finish_commits(parts, found, block, commits_path, work_dir, phases_of)
    result = pl.scan_parquet(commits_path)
    if block:
        amortized = cast(Amortized, {**{k: int(v) for k, v in totals.amortized.items()}, "commits": measured})
        sections["device_time"] = device_section(request_parts, result)
        sections["bytes_by_category"] = attribution_section(totals, measured)
    measured = result.filter(~pl.col("warmup"))
    sections["checkpoint"] = checkpoint_summary(found, measured, context.journal, block)
    sections["findings"] = findings(measured, context.sync)
    writes = None
    if block and writes_path is not None:
        sink(write_parts, writes_path)
        writes = pl.scan_parquet(writes_path)
    for p in [*request_parts, *write_parts, work_dir / WINDOWS_FILE]:
        p.unlink(missing_ok=True)
    return Streamed(result, writes, amortized, sections)


def blk_columns() -> list[str]:
    from sqlwa.catalogue import BLOCK_COMMIT_COLUMNS

    return list(BLOCK_COMMIT_COLUMNS)


def part(frame: pl.DataFrame, work_dir: Path, name: str, k: int) -> Path:
    path = work_dir / f".{name}.{k:06d}.parquet"
    frame.write_parquet(path)
    return path


#: Rows per row group of the files joined from parts (the sink buffers one: bounded).
ROW_GROUP = 1 << 14


def sink(paths: list[Path], target: Path) -> None:
    pl.scan_parquet(paths).sink_parquet(target, row_group_size=ROW_GROUP)


def amortized_of(issued: pl.DataFrame, first: int) -> dict:
    totals = issued.filter(pl.col("time_ns") >= first).select(windows.block_tallies()).row(0, named=True)
    return {name: int(totals[name] or 0) for name in ("write_bytes", "write_requests", "flush_requests")}


# ------------------------------------------------------------------ device time


def chunk_requests(
    events: pl.LazyFrame, rows: pl.LazyFrame, chunk: Chunk, dev: tuple[int, int], carried: Carried
) -> pl.DataFrame:
    """:func:`sqlwa.analysis.device_time.requests` of the requests issued in the chunk."""
    issued = device_time.keyed_rows(rows, dev, "D")
    completed = device_time.keyed_rows(time_range(events, chunk.lo, chunk.after), dev, "C")
    queued = device_time.keyed_rows(rows, dev, "Q")
    if carried.queued is not None:
        queued = pl.concat([carried.queued, queued]).sort("queue_ns")
    reqs = device_time.matched_requests(issued, completed, queued)
    if chunk.after is not None:
        open_ = reqs.filter(pl.col("complete_ns").is_null())
        if open_.height:  # still in flight a chunk later: its completion from the rest of the trace
            later = device_time.keyed_rows(time_range(events, chunk.after, None), dev, "C")
            later = later.join(
                open_.select("operation", "sector", "sectors").unique(),
                on=["operation", "sector", "sectors"],
                how="semi",
            )
            done = device_time.matched_requests(open_.select(issued.columns), later, queued)
            reqs = pl.concat([reqs.filter(pl.col("complete_ns").is_not_null()), done]).sort(
                "issue_ns", maintain_order=True
            )
    carried.queued = latest_by(queued, "queue_ns", ["operation", "sector"])
    return reqs


def flights_of(reqs: pl.DataFrame) -> pl.DataFrame:
    return reqs.filter(pl.col("complete_ns").is_not_null()).select("issue_ns", "complete_ns")


def requests_inside(reqs: pl.DataFrame, cw: pl.DataFrame, joined: pl.DataFrame) -> pl.DataFrame:
    """The chunk's requests issued inside measured commits (as :func:`device_time.section`)."""
    measured = joined.filter(~pl.col("warmup"))
    spans = cw.filter(pl.col("index").is_in(measured["index"].implode()))
    inside = windows.assign_windows(reqs.rename({"issue_ns": "time_ns"}), spans).filter(pl.col("commit").is_not_null())
    return inside.select("operation", "q2d_ns", "d2c_ns")


def device_section(request_parts: list[Path], commits: pl.LazyFrame) -> dict:
    """summary.json's ``device_time`` from the requests written per chunk and the commits."""
    inside = pl.scan_parquet(request_parts)
    count = inside.select(pl.len()).collect().item()
    operations = sorted(inside.select(pl.col("operation").unique()).collect()["operation"].to_list())
    by_operation = {op: device_time.phase_figures(inside.filter(pl.col("operation") == op)) for op in operations}
    measured = commits.filter(~pl.col("warmup") & pl.col("win_start_ns").is_not_null())
    length = (pl.col("win_end_ns").cast(pl.Int64) - pl.col("win_start_ns").cast(pl.Int64)).alias("length")
    shares = measured.select(length, "device_busy_ns").collect()
    per_commit = shares.select(
        pl.when(pl.col("length") > 0).then(pl.col("device_busy_ns") / pl.col("length")).alias("share")
    )["share"]
    total = int(shares["length"].sum())
    return {
        "requests": count,
        **device_time.phase_figures(inside),
        "by_operation": by_operation,
        "device_share": {
            "of_all_commits": int(shares["device_busy_ns"].sum()) / total if total else None,
            **device_time._share_quantiles(per_commit),
        },
    }


# ------------------------------------------------------------------ attribution


def attribute_chunk(
    rows: pl.LazyFrame,
    cw: pl.DataFrame,
    dev: tuple[int, int],
    tid: int | None,
    context: Any,
    owners: pl.DataFrame,
    carried: Carried,
) -> pl.DataFrame:
    """:func:`sqlwa.analysis.attribution.attribute` of the chunk's writes."""
    kept = ["time_ns", "pid", "comm", "sector", "sectors", "bytes", "meta", "preflush", "fua"]
    writes = windows.block_issues(rows, dev, [*kept, "operation"]).filter(pl.col("operation") == "write")
    writes = writes.select(kept).sort("time_ns").with_row_index("row", offset=carried.rows)
    carried.rows += writes.height
    writes = writes.join(attribution.files_of_owners(writes, owners), on="row", how="left")
    bios = attribution.queued_bios(rows, dev)
    if carried.bios is not None:
        bios = pl.concat([carried.bios, bios])
    writes = attribution.with_queued_submitter(writes, bios)
    carried.bios = latest_by(bios, "q_ns", ["sector"])
    marks = marker_rows(rows, ("sync_begin", "sync_end")).select("time_ns", "event")
    if carried.sync_mark is not None:
        marks = pl.concat([carried.sync_mark, marks])
    if marks.height:
        carried.sync_mark = marks.sort("time_ns").tail(1)
    writes = attribution.flag_inside(writes, attribution.spans_of(marks, "sync_begin", "sync_end"), "in_sync")
    commit_spans = cw.select(pl.col("win_start_ns").alias("span_start"), pl.col("win_end_ns").alias("span_end"))
    writes = attribution.flag_inside(writes, commit_spans, "in_commit")
    writes = windows.assign_windows(writes, cw)
    category = attribution.category_expr(context.journal, context.fs_type, tid, context.layout, None)
    return writes.with_columns(category.cast(pl.Enum(attribution.CATEGORIES)).alias("category")).sort("row")


def tally_attribution(
    totals: Totals, attributed: pl.DataFrame, per_commit: pl.DataFrame, measured_wins: pl.DataFrame, first: int | None
) -> None:
    fg = per_commit.join(measured_wins.select("index"), on="index", how="semi")
    add(totals.foreground, {c: int(fg[f"bytes_{c}"].sum()) for c in attribution.CATEGORIES})
    since_first = attributed.filter(pl.col("time_ns") >= first) if first is not None else attributed.clear()
    add(totals.amortized_total, attribution.totals(since_first))
    add(totals.run_total, attribution.totals(attributed))
    writeback = (
        since_first.filter(pl.col("category") == "writeback")
        .group_by(pl.col("file").fill_null("other"))
        .agg(pl.col("bytes").sum())
    )
    add(totals.writeback, dict(zip(writeback["file"].to_list(), map(int, writeback["bytes"].to_list()))))


def attribution_section(totals: Totals, measured: int) -> dict:
    """:func:`sqlwa.analysis.attribution.summary_section` of the sums."""
    count = max(measured, 1)
    amortized = {c: int(totals.amortized_total.get(c, 0)) for c in attribution.CATEGORIES}
    total = sum(amortized.values())
    return {
        "per_commit": {c: float(totals.foreground.get(c, 0)) / count for c in attribution.CATEGORIES},
        "amortized_total": amortized,
        "amortized_per_commit": {c: v / count for c, v in amortized.items()},
        "total_bytes": total,
        "unattributed_share": amortized["unattributed"] / total if total else 0.0,
        "writeback_by_file": dict(totals.writeback),
        "run_total": {c: int(totals.run_total.get(c, 0)) for c in attribution.CATEGORIES},
    }


# ------------------------------------------------------------------ checkpoints


def checkpoint_bytes(attributed: pl.DataFrame, found: pl.DataFrame) -> dict:
    """Checkpoint-category bytes of the chunk's writes, by the checkpoint (its start) they
    were issued in (:func:`sqlwa.analysis.metrics.checkpoints`)."""
    if found.height == 0:
        return {}
    owner = metrics.checkpoint_bytes_by_start(attributed, found)
    return dict(zip(owner["cp_start"].to_list(), owner["bytes"].to_list()))


def covered(joined: pl.DataFrame, found: pl.DataFrame) -> dict:
    """How many of the chunk's commits each checkpoint covers (the first starting after them)."""
    if found.height == 0:
        return {}
    cps = found.select(pl.col("time_ns").alias("cp_ns")).sort("cp_ns")
    rows = (
        joined.select("start_ns")
        .sort("start_ns")
        .join_asof(cps, left_on="start_ns", right_on="cp_ns", strategy="forward")
    )
    counts = rows.group_by("cp_ns").len()
    return dict(zip(counts["cp_ns"].to_list(), counts["len"].to_list()))


def finished_checkpoints(found: pl.DataFrame, totals: Totals, block: bool) -> pl.DataFrame:
    """The checkpoints with their bytes and the commits each covers (``covered``)."""
    counts = pl.DataFrame(
        {"time_ns": list(totals.covered), "covered": list(totals.covered.values())},
        schema={"time_ns": found.schema["time_ns"], "covered": pl.UInt32},
    )
    found = found.join(counts, on="time_ns", how="left")
    if not block or found.height == 0:
        return found.with_columns(pl.lit(None, pl.Int64).alias("bytes"))
    sums = pl.DataFrame(
        {"time_ns": list(totals.checkpoint_bytes), "bytes": list(totals.checkpoint_bytes.values())},
        schema={"time_ns": found.schema["time_ns"], "bytes": pl.Int64},
    )
    return found.join(sums, on="time_ns", how="left").with_columns(pl.col("bytes").fill_null(0).cast(pl.Int64))


def finish_commits(
    parts: list[Path], found: pl.DataFrame, block: bool, target: Path, work_dir: Path, phases_of: str | None
) -> None:
    """The per-commit parts with the checkpoint and WAF columns (and the phases), joined
    into ``target``."""
    done = []
    checkpointed_before = False  # a checkpoint ran in an earlier chunk's commit (phases)
    for k, path in enumerate(parts):
        joined = pl.read_parquet(path)
        if block:
            joined = with_checkpoint_columns(joined, found)
        joined = metrics.with_waf(joined)
        if phases_of is not None:
            joined, checkpointed_before = with_phases(joined, phases_of, checkpointed_before)
        done.append(part(joined, work_dir, "final", k))
        path.unlink()
    sink(done, target)
    for path in done:
        path.unlink()


def with_phases(commits: pl.DataFrame, journal: str, before: bool) -> tuple[pl.DataFrame, bool]:
    """:func:`sqlwa.analysis.phases.with_phases` of a chunk, the commits before it having
    checkpointed (``before``) or not; and whether any up to its end did."""
    out = phases.with_phases(commits, journal, checkpointed_before=before)
    return out, before or (journal == "wal" and phases.checkpointed(commits))


def with_checkpoint_columns(commits: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """:func:`sqlwa.analysis.metrics.with_checkpoint_columns` of a chunk, with the
    checkpoints' commit counts of the whole run (``found.covered``)."""
    out = metrics.with_charged_checkpoint_bytes(commits, found)
    if found.height == 0:
        return out.with_columns(pl.lit(0.0).alias("checkpoint_spread_bytes"))
    cps = found.select(pl.col("time_ns").alias("cp_ns"), pl.col("bytes").alias("cp_bytes"), "covered").sort("cp_ns")
    rows = (
        out.select("index", "start_ns")
        .sort("start_ns")
        .join_asof(cps, left_on="start_ns", right_on="cp_ns", strategy="forward")
    )
    spread = rows.select(
        "index",
        (pl.col("cp_bytes").cast(pl.Float64) / pl.col("covered")).fill_null(0.0).alias("checkpoint_spread_bytes"),
    )
    return out.join(spread, on="index", how="left")


def checkpoint_summary(found: pl.DataFrame, measured: pl.LazyFrame, journal: str, block: bool) -> dict:
    in_commits = found.filter(pl.col("commit") >= 0)
    means: tuple = (None, None)
    if block:  # each column whole, in one chunk, as the frame's: a float mean depends on the chunks
        columns = [
            measured.select(c).collect().to_series().rechunk() for c in ("checkpoint_bytes", "checkpoint_spread_bytes")
        ]
        means = tuple(column.mean() for column in columns)
    return {
        "applies": journal == "wal",
        "count": found.height,
        "in_commits": in_commits.height,
        "outside_commits": found.height - in_commits.height,
        "commits_that_ran_one": sorted(in_commits["commit"].unique().to_list()),
        "bytes_total": int(found["bytes"].fill_null(0).sum()) if block else None,
        "charged_per_commit": float(means[0] or 0.0) if block else None,
        "spread_per_commit": float(means[1] or 0.0) if block else None,
    }


def findings(measured: pl.LazyFrame, sync: str) -> list[dict]:
    """:func:`sqlwa.analysis.metrics.consistency_findings` of the per-commit file, read a
    column (and the commits each check hits) at a time."""
    return metrics.consistency_findings(cast(pl.DataFrame, ColumnFrame(measured)), sync)


__all__ = ["DATABASE_FILE_KINDS", "analyse", "streamable"]
