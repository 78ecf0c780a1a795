"""Block traces → one Polars event table, through the Rust parser (blktrace-parse).

The table arrives from Rust as Arrow memory and becomes a Polars frame without copying
columns. One row per event; see :data:`COLUMNS` for what each column holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike

import polars as pl
import pyarrow as pa

from sqlwa import _native
from sqlwa.analysis import perfetto, traceformat
from sqlwa.catalogue import TRACE_FORMATS

FORMATS = TRACE_FORMATS

#: Column name → meaning, in table order.
COLUMNS = {
    "kind": "block, marker, syscall_enter, syscall_exit, message or other",
    "time_ns": "trace clock, ns (blktrace: raw; subtract report['time_base_ns'] for blkparse's times)",
    "dev_major": "device major (0 for rows without a device)",
    "dev_minor": "device minor",
    "cpu": "CPU that recorded the event",
    "sequence": "blktrace per-device sequence number (0 in ftrace)",
    "pid": "process id",
    "comm": "process name; empty where the trace does not name the process (blkparse prints '(null)')",
    "action": "blkparse action letter: Q G I D C M F A X B S R P U UT T, 'm' on message rows, "
    "'?' for other block tracepoints, '' for other non-block rows",
    "operation": "read, write, discard, secure_erase, write_zeroes, flush or none",
    "rwbs": "the RWBS string as the trace printed it",
    "flags": "bit set: 1 preflush (or barrier B), 2 fua, 4 sync, 8 meta, 16 readahead, 32 pc, 64 atomic",
    "preflush": "the request asked for a cache flush before it",
    "fua": "force unit access",
    "sync": "synchronous request",
    "meta": "metadata request",
    "readahead": "readahead request",
    "sector": "first sector (512 B); the API (load, parse, scan) shows null for a flush, which has none",
    "sectors": "length in sectors",
    "bytes": "length in bytes: the trace's bytes field where nonzero, else sectors x 512 (older kernels print 0)",
    "error": "completion error (negative errno), 0 otherwise",
    "remap_dev_major": "remap (A): source device major, null otherwise",
    "remap_dev_minor": "remap (A): source device minor, null otherwise",
    "remap_sector": "remap (A): source sector, null otherwise",
    "aux": "U/UT: unplug depth; X: sector where the second half starts; syscalls: count argument",
    "cgroup_id": "blktrace cgroup id (0 when absent)",
    "name": "tracepoint name (ftrace block rows), syscall name, or the sqlwa marker event word",
    "fd": "syscall fd argument, null when absent",
    "ret": "syscall return value (sys_exit rows), null otherwise",
    "text": "raw marker text, raw syscall arguments, message text, or unparsed body",
}


def parse(
    paths: str | PathLike | Iterable[str | PathLike],
    format: str = "auto",
    lenient: bool = False,
) -> tuple[pl.DataFrame, dict]:
    """Parse block traces into ``(events, report)``.

    ``paths``: ftrace or blkparse text files, blktrace per-CPU files, or a blktrace base
    name (``NAME`` for ``NAME.blktrace.0 …``). Binary per-CPU files are merged by time.
    ``lenient`` skips unparsable records and counts them in ``report['bad_records']``
    instead of raising :class:`sqlwa.errors.TraceParseError`. A Perfetto trace
    (``format="perfetto"``, or detected by ``auto``) is read by
    :mod:`sqlwa.analysis.perfetto`, one file on its own.
    """
    paths = traceformat.as_list(paths)
    if traceformat.is_perfetto(paths, format):
        return perfetto.parse(paths[0], lenient)
    table, report = _native.parse_trace([str(p) for p in paths], format, lenient)
    # A dict of its own: the Python layer's report may carry more (Perfetto's adds keys).
    return to_polars(table), dict(report)


def to_polars(table: pa.Table) -> pl.DataFrame:
    """Arrow table → Polars; dictionary columns become Categorical."""
    frame = pl.from_arrow(table, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame
