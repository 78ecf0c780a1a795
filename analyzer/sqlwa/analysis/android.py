"""Commit windows of an Android app's SQLite, from the slices its framework traces.

With the atrace category ``database`` on, ``android.database.sqlite.SQLiteConnection``
traces every operation of a connection as an async slice (AOSP frameworks/base,
core/java/android/database/sqlite/SQLiteConnection.java, ``OperationLog.beginOperation``
→ ``Trace.asyncTraceBegin(Trace.TRACE_TAG_DATABASE, operation.getTraceMethodName(),
operation.mCookie)`` and ``endOperationDeferLogLocked`` → ``Trace.asyncTraceEnd`` with the
same name and cookie). The name is ``mKind + " " + mSql``, cut to 256 characters: e.g.
``execute BEGIN EXCLUSIVE;``, ``executeForLastInsertedRowId INSERT INTO …``. atrace writes
them into the trace as ``print`` events ``S|<pid>|<name>|<cookie>`` and
``F|<pid>|<name>|<cookie>``, from the thread that runs the operation.

A transaction is what ``SQLiteSession`` runs between ``beginTransactionUnchecked``
(``mConnection.execute("BEGIN;" | "BEGIN IMMEDIATE;" | "BEGIN EXCLUSIVE;")``) and
``endTransactionUnchecked`` (``mConnection.execute("COMMIT;")``, or ``"ROLLBACK;"``)
on that thread (AOSP core/java/android/database/sqlite/SQLiteSession.java). Its commit
window runs from the start of the BEGIN slice to the end of the COMMIT slice; a rolled
back one is no commit. A writing statement outside every transaction (``db.insert()``
without ``beginTransaction()``) is SQLite's autocommit: a commit window of its own.
"""

from __future__ import annotations

import polars as pl

# `S|pid|name|cookie`: the name may itself hold `|` (SQL text), the pid and cookie not.
ASYNC_SLICE = r"^([SF])\|(\d+)\|(.*)\|(-?\d+)$"
BEGIN = r"^execute BEGIN( DEFERRED| IMMEDIATE| EXCLUSIVE)?;?$"
TRANSACTION_END = ("execute COMMIT;", "execute ROLLBACK;")
WRITE_STATEMENT = r"(?i)^execute(ForChangedRowCount|ForLastInsertedRowId)? +(INSERT|UPDATE|DELETE|REPLACE)\b"


def database_slices(events: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The async slices of the print events: ``tid``, ``name``, ``start_ns``, ``end_ns``
    (an S paired with the next F of the same process, name and cookie)."""
    prints = events.lazy().filter(pl.col("kind") == "marker")
    marks = prints.filter(pl.col("text").str.starts_with("S|")).select("time_ns", "pid", "text").collect()
    ends = prints.filter(pl.col("text").str.starts_with("F|")).select("time_ns", "text").collect()
    parts = pl.col("text").str.extract_groups(ASYNC_SLICE)
    key = [
        parts.struct.field("2").alias("tgid"),
        parts.struct.field("3").alias("name"),
        parts.struct.field("4").alias("cookie"),
    ]
    begins = marks.select(pl.col("pid").alias("tid"), pl.col("time_ns").alias("start_ns"), *key).drop_nulls("name")
    finishes = ends.select(pl.col("time_ns").alias("end_ns"), *key).drop_nulls("name")
    if begins.height == 0:
        return pl.DataFrame(schema={"tid": pl.UInt32, "name": pl.String, "start_ns": pl.UInt64, "end_ns": pl.UInt64})
    paired = begins.sort("start_ns").join_asof(
        finishes.sort("end_ns"),
        left_on="start_ns",
        right_on="end_ns",
        by=["tgid", "name", "cookie"],
        strategy="forward",
        check_sortedness=False,
    )
    return paired.drop_nulls("end_ns").select("tid", "name", "start_ns", "end_ns")


def commit_windows(events: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """One row per commit of the trace's SQLite slices: ``index`` (in time order),
    ``warmup`` (False), ``win_start_ns``, ``win_end_ns``, ``tid`` (the thread that ran it)
    and ``statement`` (``transaction`` or the autocommit statement's slice name)."""
    slices = database_slices(events)
    transactions = transaction_spans(slices)
    commits = transactions.filter(pl.col("committed")).select(
        "tid", "win_start_ns", "win_end_ns", pl.lit("transaction").alias("statement")
    )
    autocommits = autocommit_statements(slices, transactions)
    windows = pl.concat([commits, autocommits]).sort("win_start_ns")
    return windows.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("index"),
        pl.lit(False).alias("warmup"),
        pl.col("win_start_ns").cast(pl.UInt64),
        pl.col("win_end_ns").cast(pl.UInt64),
        pl.col("tid").cast(pl.UInt32),
        "statement",
    )


def transaction_spans(slices: pl.DataFrame) -> pl.DataFrame:
    """Each COMMIT or ROLLBACK slice with the latest BEGIN before it on its thread:
    ``tid``, ``win_start_ns``, ``win_end_ns``, ``committed``."""
    begins = slices.filter(pl.col("name").str.contains(BEGIN)).select("tid", pl.col("start_ns").alias("win_start_ns"))
    ends = slices.filter(pl.col("name").is_in(TRANSACTION_END)).select(
        "tid",
        "start_ns",
        pl.col("end_ns").alias("win_end_ns"),
        (pl.col("name") == "execute COMMIT;").alias("committed"),
    )
    spans = ends.sort("start_ns").join_asof(
        begins.sort("win_start_ns"),
        left_on="start_ns",
        right_on="win_start_ns",
        by="tid",
        strategy="backward",
        check_sortedness=False,
    )
    return spans.drop_nulls("win_start_ns").select("tid", "win_start_ns", "win_end_ns", "committed")


def autocommit_statements(slices: pl.DataFrame, transactions: pl.DataFrame) -> pl.DataFrame:
    """Writing statements outside every transaction of their thread."""
    writes = slices.filter(pl.col("name").str.contains(WRITE_STATEMENT)).sort("start_ns")
    spans = transactions.select("tid", "win_start_ns", pl.col("win_end_ns").alias("span_end")).sort("win_start_ns")
    placed = writes.join_asof(
        spans, left_on="start_ns", right_on="win_start_ns", by="tid", strategy="backward", check_sortedness=False
    )
    outside = placed.filter(pl.col("span_end").is_null() | (pl.col("start_ns") > pl.col("span_end")))
    return outside.select(
        "tid",
        pl.col("start_ns").alias("win_start_ns"),
        pl.col("end_ns").alias("win_end_ns"),
        pl.col("name").alias("statement"),
    )
