"""sqlwa.traceparse and ``sqlwa parse``: the Rust trace parser as Python sees it."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlwa as sqlwa_api
from helpers import REPO, sqlwa
from sqlwa import _native, api
from sqlwa.analysis import traceparse
from sqlwa.errors import SqlwaError, TraceParseError

SAMPLES = REPO / "traces" / "samples"
KEKS = SAMPLES / "blktrace-keks" / "keks"
NVME = SAMPLES / "blkparse-nvme-dmcrypt" / "nvme0n1.blktrace.txt"
FTRACE = SAMPLES / "ftrace-loop-ext4" / "trace.txt"


def test_native_returns_arrow_table_and_report():
    table, report = _native.parse_trace([str(KEKS)])
    assert isinstance(table, pa.Table)
    assert table.num_rows == 2398 == report["events"]
    assert report["per_action"] == {"C": 1206, "D": 1192}
    assert set(traceparse.COLUMNS) == set(table.column_names)
    assert list(traceparse.COLUMNS) == table.column_names


def test_blktrace_base_name_matches_blkparse_counts():
    events, report = traceparse.parse(KEKS)
    assert events.height == 2398
    assert report["files"][0][1] == "blktrace"
    assert report["time_base_ns"] == events["time_ns"].min()
    flushes = events.filter((pl.col("operation") == "flush") & (pl.col("action") == "D"))
    assert flushes.height > 0 and flushes["preflush"].all()
    assert events.filter(pl.col("operation") == "discard")["rwbs"].cast(pl.String).unique().to_list() == ["DS"]


def test_blkparse_text_sample_parses_completely():
    events, report = traceparse.parse([NVME], format="blkparse")
    assert report["events"] == 1364 and report["bad_records"] == 0
    remaps = events.filter(pl.col("action") == "A")
    assert remaps.height == 473 and remaps["remap_dev_major"].null_count() == 0
    assert events.filter(pl.col("action") != "A")["remap_dev_major"].null_count() == 1364 - 473
    fwfs = events.filter(pl.col("rwbs") == "FWFS")
    assert fwfs.height > 0 and fwfs["preflush"].all() and fwfs["fua"].all()


def test_ftrace_sample_has_markers_and_syscalls():
    events, report = traceparse.parse(FTRACE)
    assert report["per_kind"]["marker"] == 8
    markers = events.filter(pl.col("kind") == "marker")
    assert markers["text"][0].startswith("sqlwa run_begin pid=")
    assert "txn_begin" in markers["name"].cast(pl.String).to_list()
    fsync = events.filter((pl.col("kind") == "syscall_enter") & (pl.col("name") == "fsync"))
    assert fsync.height == 4 and fsync["fd"].null_count() == 0
    exits = events.filter(pl.col("kind") == "syscall_exit")
    assert exits["ret"].null_count() == 0


def test_bad_input_raises_trace_parse_error(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("  8,0  1  1  0.000000000  1  D  W 8 + 8 [x]\nnot a trace line\n")
    with pytest.raises(TraceParseError, match=r"bad.txt line 2"):
        traceparse.parse(bad, format="blkparse")
    events, report = traceparse.parse(bad, format="blkparse", lenient=True)
    assert (events.height, report["bad_records"]) == (1, 1)
    with pytest.raises(TraceParseError, match="unknown trace format"):
        traceparse.parse(bad, format="xml")
    with pytest.raises(SqlwaError):
        traceparse.parse(tmp_path / "missing")


def test_cli_writes_parquet_and_summary(tmp_path):
    out = tmp_path / "events.parquet"
    proc = sqlwa("parse", str(KEKS), "-o", str(out))
    assert "2,398 events" in proc.stdout
    assert "flush" in proc.stdout and "discard" in proc.stdout
    back = pl.read_parquet(out)
    assert back.height == 2398
    assert back.columns == list(traceparse.COLUMNS)


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01\x02 not a trace")
    proc = sqlwa("parse", str(junk), check=False)
    assert proc.returncode == 2
    assert "unrecognised trace format" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = sqlwa("parse", str(NVME), "--format", "ftrace", check=False)
    assert proc.returncode == 2 and "line " in proc.stderr


def blktrace_write_issue(sequence: int, time_ns: int) -> bytes:
    """One little-endian ``struct blk_io_trace`` (include/uapi/linux/blktrace_api.h): magic
    | version 7, sequence, time, sector, bytes, action (``__BLK_TA_ISSUE`` with the
    BLK_TC_ISSUE and BLK_TC_WRITE category bits above BLK_TC_SHIFT = 16), pid, device
    (major << 20 | minor), cpu, error, pdu_len; written here from the kernel's layout, not
    with the parser's own writer."""
    magic, issue, tc_write, tc_issue = 0x65617400 | 7, 7, 1 << 1, 1 << 6
    action = issue | (tc_write | tc_issue) << 16
    return struct.pack("<IIQQIIIIIHH", magic, sequence, time_ns, 2048, 4096, action, 42, 8 << 20, 0, 0, 0)


def test_a_blktrace_time_past_the_signed_range_is_a_bad_record(tmp_path):
    # 2^63 ns is 292 years: no clock's. Accepted, it failed every signed-time figure later
    # (requests(), timeline(): polars' u64 -> i64 cast) instead of the parse.
    trace = tmp_path / "top.blktrace.0"
    trace.write_bytes(b"".join(blktrace_write_issue(n, t) for n, t in [(1, 1000), (2, 1 << 63), (3, 2000)]))
    proc = sqlwa("parse", str(trace), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0].endswith(
        f"{trace} at byte offset 48: time 9223372036854775808 ns is 2^63 ns (292 years) or more: a corrupt record"
    )
    with pytest.raises(TraceParseError, match="at byte offset 48: time 9223372036854775808 ns"):
        sqlwa_api.parse(trace)
    lenient = sqlwa_api.parse(trace, lenient=True)
    assert lenient.report["bad_records"] == 1
    assert lenient.requests()["ms"].to_list() == [0.0]  # the rest of the file is skipped
    assert lenient.request_mix().height == 5 and lenient.by_process()["requests"].to_list() == [1]


@pytest.mark.skipif(shutil.which("blkparse") is None, reason="blkparse (Debian package blktrace) not installed")
def test_against_blkparse_live(tmp_path):
    for f in KEKS.parent.glob("keks.blktrace.*"):
        shutil.copy(f, tmp_path / f.name)
    text = subprocess.run(["blkparse", "-q", "-i", "keks"], cwd=tmp_path, capture_output=True, check=True).stdout
    (tmp_path / "ref.txt").write_bytes(text)
    ours, report = traceparse.parse(tmp_path / "keks")
    theirs, _ = traceparse.parse(tmp_path / "ref.txt", format="blkparse")
    cols = ["dev_major", "dev_minor", "cpu", "sequence", "pid", "action", "rwbs", "sector", "sectors"]
    ours_rel = ours.with_columns(pl.col("time_ns") - report["time_base_ns"])
    assert (
        ours_rel.select(cols + ["time_ns"])
        .cast({"action": pl.String, "rwbs": pl.String})
        .equals(theirs.select(cols + ["time_ns"]).cast({"action": pl.String, "rwbs": pl.String}))
    )


BLKPARSE_EVENT = re.compile(
    r"^\s*\d+,\d+\s+\d+\s+\d+\s+[\d.]+\s+\d+\s+(?P<action>[A-Z]+)\s+\S+\s+(?:\d+ \+ (?P<sectors>\d+))?"
)
# A row of the stages table: "│ 259,0  │ Q queued   │    248 │ 1,181,696 │" (the device
# on its first row only).
PRINTED_STAGE = re.compile(r"│ (?:\d+,\d+)?\s+│ (?P<key>\S+)[^│]*│\s+(?P<events>[\d,]+) │\s+(?P<bytes>[\d,]+) │")


def blkparse_line(seq: int, action: str, rwbs: str, body: str) -> str:
    """A line as blkparse prints it (blkparse_fmt.c: "%3d,%-3d %2d %8d %5d.%09lu %5u %2s %3s ")."""
    return f"{179:3d},{0:<3d} {0:2d} {seq:8d} {seq:5d}.{0:09d} {120:5d} {action:>2s} {rwbs:>3s} {body}"


def test_an_old_emmc_trace_counts_its_barriers_and_bytes(tmp_path):
    # A kernel before 2.6.37 prints a barrier as B (jbd2's commit block WBS, the empty
    # barrier that flushes the cache WBS with no sectors); one of 3.x prints the block
    # tracepoints' bytes field as 0 for filesystem requests. Truth: the text's own
    # sectors x 512 and letters, by regex.
    blkparse = tmp_path / "emmc.blkparse.txt"
    blkparse.write_text(
        "\n".join(
            [
                blkparse_line(1, "D", "W", "4717960 + 16 [mmcqd/0]"),
                blkparse_line(2, "D", "WBS", "4717976 + 8 [jbd2/mmcblk0p2-]"),
                blkparse_line(3, "D", "WBS", "[jbd2/mmcblk0p2-]"),
                blkparse_line(4, "C", "WBS", "0 [0]"),
            ]
        )
        + "\n"
    )
    ftrace = tmp_path / "emmc.ftrace.txt"
    ftrace.write_text(
        "         mmcqd/0-123   [000] ...1   100.000001: block_rq_issue: 179,0 WFS 0 () 4717976 + 8 [mmcqd/0]\n"
        "         mmcqd/0-123   [000] ...1   100.000002: block_rq_issue: 179,0 W 0 () 4717984 + 24 [mmcqd/0]\n"
        "         mmcqd/0-123   [000] ...1   100.000003: block_rq_issue: 179,0 FWS 0 () 0 + 0 [mmcqd/0]\n"
    )
    issue = re.compile(r"\s(?:D|block_rq_issue: 179,0) +(?P<rwbs>[A-Z]+) (?:.*?(?P<sectors>\d+) \[)?")
    for path in (blkparse, ftrace):
        issued = [m for line in path.read_text().splitlines() if (m := issue.search(line))]
        sectors = [int(m["sectors"]) for m in issued if m["sectors"] and int(m["sectors"]) > 0]
        flushes = [m for m in issued if "B" in m["rwbs"] or m["rwbs"].startswith("F")]
        trace = api.parse(path)
        assert trace.report["bad_records"] == 0
        mix = {row["kind"]: row for row in trace.request_mix().iter_rows(named=True)}
        assert (mix["write"]["requests"], mix["write"]["bytes"]) == (2, sum(sectors) * 512), path.name
        assert len(sectors) == 2 and mix["flush"]["requests"] == len(flushes) > 0, path.name


def test_cli_stage_figures_equal_a_plain_tally_of_the_text():
    # Independent truth: events and sectors x 512 per action, read from blkparse's own
    # text with one regular expression (summary blocks at the end do not match).
    truth: dict[str, list[int]] = {}
    for line in NVME.read_text().splitlines():
        if m := BLKPARSE_EVENT.match(line):
            tally = truth.setdefault(m["action"], [0, 0])
            tally[0] += 1
            tally[1] += int(m["sectors"] or 0) * 512
    printed = sqlwa("parse", str(NVME)).stdout.split("stages per device")[1]
    rows = {
        m["key"]: [int(m["events"].replace(",", "")), int(m["bytes"].replace(",", ""))]
        for m in PRINTED_STAGE.finditer(printed)
    }
    assert len(truth) == 7 and rows == truth


def test_json_per_operation_figures_equal_a_plain_tally_of_the_text():
    # Independent truth, as above: events and sectors x 512 per operation, the operation
    # read from blkparse's RWBS column by the letters the kernel prints (W, R, D, a
    # leading F alone for a flush, N for none); a write with preflush and no data (the
    # empty FWS of kernels 2.6.37-4.7) is the flush alone.
    def operation(rwbs: str, sectors: str | None) -> str:
        if rwbs.startswith("FW") and not int(sectors or 0):
            return "flush"
        for letter, name in (("W", "write"), ("R", "read"), ("D", "discard")):
            if letter in rwbs:
                return name
        return "flush" if rwbs.startswith("F") else "none"

    truth: dict[str, list[int]] = {}
    for line in NVME.read_text().splitlines():
        if m := BLKPARSE_EVENT.match(line):
            tally = truth.setdefault(operation(line.split()[6], m["sectors"]), [0, 0])
            tally[0] += 1
            tally[1] += int(m["sectors"] or 0) * 512
    # Every stage's events added (what per_operation and bytes_per_operation count; what
    # completed is the report's "completed", tests/e2e/test_parse_totals.py).
    report = json.loads(sqlwa("parse", str(NVME), "--json").stdout)
    rows = {op: [n, report["bytes_per_operation"][op]] for op, n in report["per_operation"].items()}
    assert set(truth) == {"write", "flush", "none"} and rows == truth


def test_parse_shows_progress_only_on_a_terminal(tmp_path):
    # Piped (as here), stderr stays clean for scripts; on a terminal a spinner says what
    # is being parsed and written.
    proc = sqlwa("parse", str(NVME), "-o", str(tmp_path / "ev.parquet"))
    assert proc.stderr == "" and "1,364 events" in proc.stdout
    if shutil.which("script"):
        tty = subprocess.run(
            ["script", "-qec", f"{sys.executable} -m sqlwa parse {NVME} -o {tmp_path / 'ev2.parquet'}", "/dev/null"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        # Without the terminal's colours, and its long lines unwrapped.
        shown = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", tty.stdout).split())
        assert tty.returncode == 0 and "1,364 events" in shown
        assert f"parsing {NVME} into ev2.parquet" in shown


def interleaved_blktrace(base, events: int) -> None:
    """Two per-CPU files of write issues with interleaved times, written from the kernel's
    layout (:func:`blktrace_write_issue`), enough rows for several row groups."""
    for cpu in (0, 1):
        records = (blktrace_write_issue(n, 1_000 + 2 * n + cpu) for n in range(events // 2))
        (base.parent / f"{base.name}.blktrace.{cpu}").write_bytes(b"".join(records))


@pytest.mark.parametrize("trace", ["keks", "nvme", "ftrace", "generated"])
def test_parse_o_writes_the_table_parse_returns(tmp_path, trace):
    # The streamed writer (row group by row group) against the in-memory table that the
    # blkparse differential tests check: the same rows, columns and dtypes.
    from polars.testing import assert_frame_equal

    if trace == "generated":
        source = tmp_path / "big"
        interleaved_blktrace(source, 600_000)
    else:
        source = {"keks": KEKS, "nvme": NVME, "ftrace": FTRACE}[trace]
    out = tmp_path / "events.parquet"
    printed = sqlwa("parse", str(source), "-o", str(out), "--json").stdout
    events, report = traceparse.parse(source)
    back = pl.read_parquet(out)
    assert back.schema == events.schema
    assert_frame_equal(back, events, categorical_as_str=True)
    assert json.loads(printed)["per_action"] == report["per_action"]
    if trace == "generated":
        assert back.height == 600_000 and pq.ParquetFile(out).num_row_groups >= 2
        assert back["time_ns"].is_sorted()


def test_parse_to_parquet_in_the_api_then_scan(tmp_path):
    out = tmp_path / "events.parquet"
    report = sqlwa_api.parse_to_parquet(KEKS, out)
    assert report["events"] == 2398 == sqlwa_api.scan(out).select(pl.len()).collect().item()
    # Block bytes per action, as the report counts them, equal the table's sums.
    sums = sqlwa_api.scan(out).group_by("action").agg(pl.col("bytes").sum()).collect()
    assert report["bytes_per_action"] == dict(zip(sums["action"].cast(pl.String), sums["bytes"]))


def test_a_failed_streamed_parse_leaves_no_file_and_one_line(tmp_path):
    bad = tmp_path / "bad.blktrace.0"
    bad.write_bytes(blktrace_write_issue(1, 1_000) + b"\x00" * 20)
    out = tmp_path / "events.parquet"
    proc = sqlwa("parse", str(bad), "-o", str(out), check=False)
    assert proc.returncode == 2 and "truncated record" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2 and "Traceback" not in proc.stderr
    assert not out.exists()


def test_an_output_naming_the_trace_is_refused_and_the_trace_kept(tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_bytes(FTRACE.read_bytes())
    for command in (["-o", str(trace)], ["--commits", str(trace)]):
        proc = sqlwa("parse", str(trace), *command, check=False)
        assert proc.returncode == 2 and "would replace the capture" in proc.stderr
        assert "Traceback" not in proc.stderr
    with pytest.raises(SqlwaError):
        sqlwa_api.parse_to_parquet(trace, trace)
    assert trace.read_bytes() == FTRACE.read_bytes()


def test_a_failed_parse_keeps_the_file_already_at_the_output(tmp_path):
    out = tmp_path / "events.parquet"
    out.write_bytes(b"an earlier table")
    bad = tmp_path / "bad.blktrace.0"
    bad.write_bytes(blktrace_write_issue(1, 1_000) + b"\x00" * 20)
    assert sqlwa("parse", str(bad), "-o", str(out), check=False).returncode == 2
    assert out.read_bytes() == b"an earlier table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.blktrace.0", "events.parquet"]


def blkparse_time(v: int) -> str:
    """How blkparse prints a u64 time of ns (blkparse_fmt.c: ``(int) SECONDS(t)``, the
    seconds' low 32 bits as a signed int, and ``(int) NANO_SECONDS(t)``)."""
    seconds = (v // 10**9) & 0xFFFFFFFF
    seconds -= (seconds >> 31) << 32
    return f"{seconds:5d}.{v % 10**9:09d}"


def test_wrapped_blkparse_times_are_unwrapped(tmp_path):
    """The real NVMe trace printed as blkparse would have, had its genesis been the event
    at line 24 (its earlier events, before the genesis, wrap around 2^64 ns): read back, it
    is the trace blkparse printed from the true first event, every event in its order at
    its time, and the summary says so."""
    lines = NVME.read_text().splitlines(keepends=True)
    event = re.compile(r"^(\s*\d+,\d+\s+\d+\s+\d+\s+)(\d+)\.(\d{9})(\s.*)$", re.S)
    genesis = int("".join(event.match(lines[23]).group(2, 3)))
    rewritten, before = [], 0
    for line in lines:
        m = event.match(line)
        if m is None:
            rewritten.append(line)
            continue
        t = int(m.group(2)) * 10**9 + int(m.group(3))
        before += t < genesis
        rewritten.append(m.group(1) + blkparse_time((t - genesis) % 2**64) + m.group(4))
    wrapped = tmp_path / "wrapped.blkparse.txt"
    wrapped.write_text("".join(rewritten))
    assert sum(" 1266874889." in line for line in rewritten) == before > 0
    events, report = traceparse.parse(wrapped)
    truth, truth_report = traceparse.parse(NVME)
    assert events.equals(truth)
    assert (report["unwrapped_times"], report["time_shift_ns"]) == (before, genesis)
    assert truth_report["unwrapped_times"] == 0
    proc = sqlwa("parse", str(wrapped))
    said = " ".join(proc.stdout.split())
    assert f"{before} times blkparse printed wrapped around (events before its first) unwrapped" in said
    assert f"every time moved on by {genesis:,} ns, the earliest event at 0" in said
