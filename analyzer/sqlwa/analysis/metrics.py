"""Figures derived from the per-commit table: write amplification per layer boundary,
latency quantiles and frame-budget misses, WAL checkpoints, and the cross-layer
consistency check (findings). Inputs are the joined per-commit frame (VFS, syscall and
block columns) and, for checkpoints, the attributed block writes.
"""

from __future__ import annotations

from typing import cast

import polars as pl

from sqlwa.analysis import windows
from sqlwa.catalogue import DEFAULT_FRAME_BUDGET_MS as DEFAULT_FRAME_BUDGET_MS  # readers take it from here

LATENCY_QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p99.9": 0.999}


# ------------------------------------------------------------------ write amplification


def ratio(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    """numerator / denominator, null when the denominator is 0 (no division by zero)."""
    return pl.when(denominator > 0).then(numerator.cast(pl.Float64) / denominator.cast(pl.Float64))


def with_waf(commits: pl.DataFrame) -> pl.DataFrame:
    """Per-commit ``waf_vfs_over_logical`` and, with the block level, ``waf_block_over_vfs``
    and ``waf_block_over_logical`` (in-window block bytes)."""
    cols = [ratio(pl.col("vfs_write_bytes"), pl.col("logical_bytes")).alias("waf_vfs_over_logical")]
    if "write_bytes" in commits.columns:
        cols += [
            ratio(pl.col("write_bytes"), pl.col("vfs_write_bytes")).alias("waf_block_over_vfs"),
            ratio(pl.col("write_bytes"), pl.col("logical_bytes")).alias("waf_block_over_logical"),
        ]
    return commits.with_columns(cols)


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


def run_waf(measured: pl.DataFrame, amortized_bytes: int | None = None) -> dict:
    """Per-run WAF: ratios of sums over measured commits (not means of ratios).

    ``block_over_vfs`` and ``block_over_logical`` are of the block bytes the run reports:
    the amortized ones (every byte from the first measured commit to the end, deferred
    writeback and checkpoints included) when the run has them, as the store's metrics of
    the same name; ``block_bytes`` says which. (In-window bytes alone made WAL/NORMAL,
    whose writes all land after its commits, show an amplification of 0.) The in-window
    ratios stay as ``in_window_block_over_*``."""
    logical = float(measured["logical_bytes"].sum())
    vfs = float(measured["vfs_write_bytes"].sum())
    out: dict = {"vfs_over_logical": _div(vfs, logical)}
    if "write_bytes" not in measured.columns:
        return out
    in_window = float(measured["write_bytes"].sum())
    block = in_window if amortized_bytes is None else float(amortized_bytes)
    out.update(
        block_bytes="in_window" if amortized_bytes is None else "amortized",
        block_over_vfs=_div(block, vfs),
        block_over_logical=_div(block, logical),
        in_window_block_over_vfs=_div(in_window, vfs),
        in_window_block_over_logical=_div(in_window, logical),
    )
    if amortized_bytes is not None:  # the names of earlier versions, kept for their readers
        out.update(
            amortized_block_over_vfs=out["block_over_vfs"], amortized_block_over_logical=out["block_over_logical"]
        )
    return out


# ------------------------------------------------------------------ latency


def latency_ms(measured: pl.DataFrame) -> dict[str, float]:
    if measured.height == 0:
        return {name: 0.0 for name in (*LATENCY_QUANTILES, "max")}
    ms = measured["latency_ns"].cast(pl.Float64) / 1e6
    # a Float64 series of at least one value: its quantiles and maximum are numbers
    figures = {
        name: float(cast(float, ms.quantile(q, interpolation="linear"))) for name, q in LATENCY_QUANTILES.items()
    }
    figures["max"] = float(cast(float, ms.max()))
    return figures


def cpu_ms(measured: pl.DataFrame) -> dict[str, float]:
    """The SQL thread's CPU time per commit (user + system): quantiles and maximum as
    :func:`latency_ms`'s, the means of user and system time, and the CPU time's share of
    the commits' latency (sums over the run: the rest is waiting, for the device, a lock
    or a CPU)."""
    if measured.height == 0:
        return {name: 0.0 for name in (*LATENCY_QUANTILES, "max", "user_mean", "sys_mean", "share_of_latency")}
    ms = measured["cpu_ns"].cast(pl.Float64) / 1e6
    figures = {
        name: float(cast(float, ms.quantile(q, interpolation="linear"))) for name, q in LATENCY_QUANTILES.items()
    }
    latency = float(measured["latency_ns"].sum())
    return {
        **figures,
        "max": float(cast(float, ms.max())),
        "user_mean": float(cast(float, measured["cpu_user_ns"].mean())) / 1e6,
        "sys_mean": float(cast(float, measured["cpu_sys_ns"].mean())) / 1e6,
        "share_of_latency": float(measured["cpu_ns"].sum()) / latency if latency else 0.0,
    }


def frame_budget_misses(measured: pl.DataFrame, budget_ms: float) -> dict:
    """Share of commits longer than one frame: a commit on the UI thread that takes
    longer drops a frame. ``dropped_frames``: the frames such commits drop, a commit of
    latency L ceil(L / budget) - 1 of them (it starts at a frame's start and the frame's
    other work takes no time: a lower bound), also per 1,000 measured commits as a
    frame-pacing tool counts them."""
    if measured.height == 0:
        return {
            "budget_ms": budget_ms,
            "commits": 0,
            "share": 0.0,
            "dropped_frames": 0,
            "dropped_frames_per_1000_commits": 0.0,
        }
    latency = measured["latency_ns"].cast(pl.Float64)
    misses = int((latency > budget_ms * 1e6).sum())
    frames = (latency / (budget_ms * 1e6)).ceil() - 1
    dropped = int(frames.clip(lower_bound=0).sum())
    return {
        "budget_ms": budget_ms,
        "commits": misses,
        "share": misses / measured.height,
        "dropped_frames": dropped,
        "dropped_frames_per_1000_commits": dropped * 1000 / measured.height,
    }


# ------------------------------------------------------------------ checkpoints


def checkpoints(
    events: pl.DataFrame | pl.LazyFrame, attributed: pl.DataFrame | None, journal_mode: str
) -> pl.DataFrame:
    """WAL checkpoints: every db sync in WAL mode is one (SQLite syncs the database only
    when it checkpoints). ``time_ns``, ``commit`` (-1: outside transactions, e.g. at
    close), ``bytes`` (checkpoint-category writes issued during that sync)."""
    marks = windows.markers(events)
    wal = pl.lit(journal_mode == "wal")  # in rollback modes every commit syncs the database
    syncs = marks.filter(wal & (pl.col("event") == "sync_begin") & pl.col("text").str.contains(r"\bkind=db\b"))
    ends = marks.filter((pl.col("event") == "sync_end") & pl.col("text").str.contains(r"\bkind=db\b"))
    found = syncs.select(pl.col("time_ns"), windows.marker_field("i").alias("commit")).sort("time_ns")
    found = found.join_asof(
        ends.select(pl.col("time_ns").alias("end_ns")).sort("end_ns"),
        left_on="time_ns",
        right_on="end_ns",
        strategy="forward",
    )
    if attributed is None or found.height == 0:
        return found.with_columns(pl.lit(None, pl.Int64).alias("bytes"))
    owner = checkpoint_bytes_by_start(attributed, found)
    return found.join(owner.rename({"cp_start": "time_ns"}), on="time_ns", how="left").with_columns(
        pl.col("bytes").fill_null(0).cast(pl.Int64)
    )


def checkpoint_bytes_by_start(attributed: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """``cp_start``, ``bytes``: the checkpoint-category writes issued during each of the
    checkpoints ``found`` (``time_ns`` to ``end_ns``), summed by the checkpoint's start."""
    cp = attributed.filter(pl.col("category") == "checkpoint").select("time_ns", "bytes").sort("time_ns")
    owner = cp.join_asof(
        found.select("time_ns", "end_ns").rename({"time_ns": "cp_start"}),
        left_on="time_ns",
        right_on="cp_start",
        strategy="backward",
    )
    return owner.filter(pl.col("time_ns") <= pl.col("end_ns")).group_by("cp_start").agg(pl.col("bytes").sum())


def with_charged_checkpoint_bytes(commits: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """``commits`` with ``checkpoint_bytes``: each checkpoint of ``found`` charged to the
    commit that ran it (0 for the others)."""
    charged = (
        found.filter(pl.col("commit") >= 0).group_by("commit").agg(pl.col("bytes").sum().alias("checkpoint_bytes"))
    )
    out = commits.join(charged.rename({"commit": "index"}), on="index", how="left")
    return out.with_columns(pl.col("checkpoint_bytes").fill_null(0).cast(pl.Int64))


def with_checkpoint_columns(commits: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """``checkpoint_bytes``: charged to the commit that ran the checkpoint;
    ``checkpoint_spread_bytes``: each checkpoint's bytes divided evenly over the commits
    it covered (those since the previous checkpoint, up to and including its own)."""
    out = with_charged_checkpoint_bytes(commits, found)
    if found.height == 0:
        return out.with_columns(pl.lit(0.0).alias("checkpoint_spread_bytes"))
    # each commit is covered by the first checkpoint that starts after it began
    cps = found.select(pl.col("time_ns").alias("cp_ns"), pl.col("bytes").alias("cp_bytes")).sort("cp_ns")
    covered = (
        out.select("index", "start_ns")
        .sort("start_ns")
        .join_asof(cps, left_on="start_ns", right_on="cp_ns", strategy="forward")
    )
    covered = covered.with_columns(pl.len().over("cp_ns").alias("covered"))
    spread = covered.select(
        "index",
        (pl.col("cp_bytes").cast(pl.Float64) / pl.col("covered")).fill_null(0.0).alias("checkpoint_spread_bytes"),
    )
    return out.join(spread, on="index", how="left")


def checkpoint_summary(found: pl.DataFrame, measured: pl.DataFrame, journal_mode: str) -> dict:
    """Counts always; bytes only when the block level was captured (else None, not 0)."""
    in_commits = found.filter(pl.col("commit") >= 0)
    has_bytes = "checkpoint_bytes" in measured.columns
    return {
        "applies": journal_mode == "wal",
        "count": found.height,
        "in_commits": in_commits.height,
        "outside_commits": found.height - in_commits.height,
        "commits_that_ran_one": sorted(in_commits["commit"].unique().to_list()),
        "bytes_total": int(found["bytes"].fill_null(0).sum()) if has_bytes else None,
        "charged_per_commit": float(cast(float, measured["checkpoint_bytes"].mean()) or 0.0) if has_bytes else None,
        "spread_per_commit": float(cast(float, measured["checkpoint_spread_bytes"].mean()) or 0.0)
        if has_bytes
        else None,
    }


# ------------------------------------------------------------------ consistency


def consistency_findings(measured: pl.DataFrame, sync_mode: str, barriers: bool = True) -> list[dict]:
    """Per-commit disagreements between layers, each listed with how many commits and
    which (up to 10). Expected: every xSync is one fsync-family syscall, plus one
    directory sync per journal or WAL (re)opened in the commit, plus (synchronous=EXTRA)
    one per unlink; every fsync reaches the device as at least one cache flush."""
    if "fsync_calls" not in measured.columns:
        return []
    dir_syncs = pl.col("vfs_journal_open_calls") + pl.col("vfs_wal_open_calls")
    if sync_mode == "extra":
        dir_syncs = dir_syncs + pl.col("vfs_journal_delete_calls")
    checks = {
        "xsync_without_fsync": (
            pl.col("fsync_calls") < pl.col("vfs_sync_calls"),
            "fewer fsync-family syscalls than SQLite xSync calls",
        ),
        "fsync_without_xsync": (
            pl.col("fsync_calls") > pl.col("vfs_sync_calls") + dir_syncs,
            "more fsync-family syscalls than xSync calls plus expected directory syncs",
        ),
    }
    if "flush_requests" in measured.columns:
        checks["fsync_flushed_nothing"] = (
            (pl.col("fsync_calls") > 0) & (pl.col("flush_requests") == 0) & pl.lit(barriers),
            "fsync returned without any cache flush reaching the device (no durability on power loss)",
        )
        checks["flush_without_fsync"] = (
            (pl.col("fsync_calls") == 0) & (pl.col("flush_requests") > 0),
            "cache flushes in a commit that made no fsync (a journal timer commit or writeback ran inside it)",
        )
        checks["more_fsyncs_than_flushes"] = (
            (pl.col("flush_requests") > 0) & (pl.col("flush_requests") < pl.col("fsync_calls")),
            "fewer cache flushes than fsyncs (some fsyncs found nothing to flush, or were merged)",
        )
    findings = []
    for name, (condition, what) in checks.items():
        hits = measured.filter(condition)
        if hits.height:
            findings.append(
                {
                    "check": name,
                    "what": what,
                    "commits": hits.height,
                    "share": hits.height / measured.height,
                    "examples": hits["index"].head(10).to_list(),
                }
            )
    return findings
