"""A long run's capture kept in parts as it is drained (sqlwa.capture.drain): the parts'
event table and parse report are those of the whole trace parsed at once.

The traces are recorded lab runs' trace.txt (traces/samples/sqlwa-runs), cut into segments
at line ends as the drain cuts them (after a burst of whole lines); the truth is the
Rust parser's own parse of the uncut file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sqlwa.analysis import traceformat, traceparse
from sqlwa.capture import drain
from sqlwa.errors import UsageError
from sqlwa.measure import analyse
from sqlwa.results import rundir

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples" / "sqlwa-runs"


def segments(text: bytes, count: int) -> list[bytes]:
    """``text`` cut into ``count`` pieces at line ends."""
    cuts, size = [0], len(text) // count
    for k in range(1, count):
        cuts.append(text.index(b"\n", max(cuts[-1], k * size)) + 1)
    cuts.append(len(text))
    return [text[a:b] for a, b in zip(cuts, cuts[1:])]


@pytest.mark.parametrize("run", ["ext4-wal", "ext4-delete"])
@pytest.mark.parametrize("count", [1, 2, 7])
def test_parts_are_the_whole_trace(run, count, tmp_path):
    whole = SAMPLES / run / "trace.txt"
    expected, expected_report = traceparse.parse(whole, format="ftrace", lenient=True)
    trace = tmp_path / "trace.txt"
    pieces = segments(whole.read_bytes(), count)
    for number, piece in enumerate(pieces[:-1]):  # as the drain does, segment after segment
        trace.write_bytes(piece)
        drain.convert_segment(trace, drain.part_path(trace, number))
    trace.write_bytes(pieces[-1])
    assert len(drain.parts_of(trace)) == count - 1
    report = analyse.parse_capture(trace, tmp_path / "events.parquet")
    assert_frame_equal(pl.read_parquet(tmp_path / "events.parquet"), expected)
    assert {k: v for k, v in report.items() if k != "files"} == {
        k: v for k, v in expected_report.items() if k != "files"
    }
    if count > 1:  # the parts and the text after them are gone: their events are in the table
        assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet"]
    assert expected.height > 1000


def test_a_short_run_keeps_its_text(tmp_path):
    trace = tmp_path / "trace.txt"
    shutil.copy(SAMPLES / "ext4-wal" / "trace.txt", trace)
    analyse.parse_capture(trace, tmp_path / "events.parquet")
    assert trace.read_bytes() == (SAMPLES / "ext4-wal" / "trace.txt").read_bytes()


def test_reports_merge_as_one_parse():
    parts = [
        {"events": 3, "bad_records": 1, "per_action": {"D": 2}, "bad_messages": ["a"], "time_base_ns": None},
        {"events": 4, "bad_records": 0, "per_action": {"D": 1, "C": 5}, "bad_messages": ["b"], "time_base_ns": 7},
    ]
    merged = traceformat.merge_reports(parts)
    assert merged == {
        "events": 7,
        "bad_records": 1,
        "per_action": {"D": 3, "C": 5},
        "bad_messages": ["a", "b"],
        "time_base_ns": 7,
    }


def test_a_new_run_removes_an_unfinished_runs_parts(tmp_path):
    """An interrupted long run leaves parts of its capture; a new run into the directory
    removes them with the rest of that run (they would be joined into its own events),
    and nothing else."""
    rundir.begin(tmp_path)  # the interrupted run's mark
    (tmp_path / rundir.TRACE_FILE).write_text("x\n")
    parts = [tmp_path / "trace.00000.parquet", tmp_path / "trace.00000.report.json", tmp_path / "trace.00001.parquet"]
    for part in parts:
        part.write_text("part\n")
    mine = tmp_path / "trace.1.parquet"
    mine.write_text("the user's\n")
    rundir.begin(tmp_path)
    assert not any(p.exists() for p in parts) and not (tmp_path / rundir.TRACE_FILE).exists()
    assert mine.read_text() == "the user's\n"
    assert drain.parts_of(tmp_path / rundir.TRACE_FILE) == []


def cut_capture(tmp_path: Path, numbers: list[int]) -> Path:
    """The ext4-wal sample's trace.txt as parts with these numbers, and the text after them."""
    trace = tmp_path / "trace.txt"
    pieces = segments((SAMPLES / "ext4-wal" / "trace.txt").read_bytes(), len(numbers) + 1)
    for number, piece in zip(numbers, pieces):
        trace.write_bytes(piece)
        drain.convert_segment(trace, drain.part_path(trace, number))
    trace.write_bytes(pieces[-1])
    return trace


def test_a_gap_in_the_parts_numbers_overwrites_none(tmp_path):
    """Parts 0 and 2 (1 missing): the text after them becomes part 3, not a second part 2."""
    expected, _ = traceparse.parse(SAMPLES / "ext4-wal" / "trace.txt", format="ftrace", lenient=True)
    trace = cut_capture(tmp_path, [0, 2])
    analyse.parse_capture(trace, tmp_path / "events.parquet")
    assert_frame_equal(pl.read_parquet(tmp_path / "events.parquet"), expected)


@pytest.mark.parametrize("damaged", ["part", "report"])
def test_a_damaged_part_is_one_line(tmp_path, damaged):
    trace = cut_capture(tmp_path, [0])
    part = drain.part_path(trace, 0)
    (part if damaged == "part" else drain.report_path(part)).write_bytes(b"\x00garbled")
    with pytest.raises(UsageError, match="damaged or not sqlwa's"):
        analyse.parse_capture(trace, tmp_path / "events.parquet")
