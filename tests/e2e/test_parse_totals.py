"""``sqlwa parse`` totals per device: what completed, with the stages apart (#44, item 6).

The parse report used to add every stage of a request (queued, inserted, issued,
completed) into its bytes per operation: the keks sample's "write" bytes were exactly its
C + D bytes, an ftrace capture's four times what completed. A blktrace user reads per
device the completed requests and bytes first, as blkparse's "Total (dev):" block prints
them. Independent truth here: that block, printed by blkparse itself (live on the binary
sample; in the blkparse text sample, the summary blkparse wrote at its end), and for
ftrace text a tally of the kernel's own completion lines, read with a regular expression
of this file's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from helpers import REPO, sqlwa, sqlwa_in_process

SAMPLES = REPO / "traces" / "samples"
KEKS = SAMPLES / "blktrace-keks" / "keks"
NVME_TEXT = SAMPLES / "blkparse-nvme-dmcrypt" / "nvme0n1.blktrace.txt"
FTRACE_SAMPLES = [
    SAMPLES / "ftrace-loop-ext4" / "trace.txt",
    SAMPLES / "ftrace-loop-ext4" / "trace-tgid-noirq.txt",
    *sorted((SAMPLES / "sqlwa-runs").glob("*/trace.txt")),
]

# blkparse counts a request as a write when the kernel set its write bit (op_is_write: the
# writes, discards, secure erases, write-zeroes), and every other one as a read (the
# reads, cache flushes, requests that move no data). sqlwa names the operation itself.
BLKPARSE_WRITES = {"write", "discard", "secure_erase", "write_zeroes"}
BLKPARSE_READS = {"read", "flush", "none"}


def parse_json(*args: str) -> dict:
    proc = sqlwa_in_process("parse", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# --------------------------------------------------------------- blkparse's own summary

# " Reads Completed:       48,        0KiB	 Writes Completed:     1158,    12960KiB"
COMPLETED = re.compile(
    r"Reads Completed:\s+(?P<reads>[\d,]+),\s+(?P<read_size>[\d,]+)(?P<read_unit>[KMGP])iB\s+"
    r"Writes Completed:\s+(?P<writes>[\d,]+),\s+(?P<write_size>[\d,]+)(?P<write_unit>[KMGP])iB"
)
# An event line: "  8,52   3        1     0.000000000  3719  D   W 1050624 + 8 [kworker/u16:1]"
EVENT_DEVICE = re.compile(r"^\s*(\d+,\d+)\s+\d+\s+\d+\s+\d+\.\d+\s")


def blkparse_totals(text: str) -> dict[str, dict[str, tuple[int, str]]]:
    """Per device, blkparse's "Total (…):" completed reads and writes: (requests, size
    as blkparse printed it, "12960K"). blkparse names that block after the trace, not the
    device, so the trace must hold one device, taken from its event lines."""
    devices = {m.group(1) for line in text.splitlines() if (m := EVENT_DEVICE.match(line))}
    assert len(devices) == 1, f"blkparse's summary is per trace; this one has devices {devices}"
    total = text[text.index("\nTotal (") :]
    m = COMPLETED.search(total)
    assert m, "no Completed line in blkparse's Total block"

    def number(key: str) -> int:
        return int(m.group(key).replace(",", ""))

    return {
        devices.pop(): {
            "reads": (number("reads"), f"{number('read_size')}{m.group('read_unit')}"),
            "writes": (number("writes"), f"{number('write_size')}{m.group('write_unit')}"),
        }
    }


def blkparse_size(n_bytes: int) -> str:
    """Bytes as blkparse's summary prints a size (size_cnv in blkparse.c): KiB, divided by
    1024 while above 1024 * 1024, each division rounding down."""
    units, num = "KMGP", n_bytes >> 10
    unit = 0
    while num > 1024 * 1024:
        unit, num = unit + 1, num // 1024
    return f"{num}{units[unit]}"


def sqlwa_as_blkparse(completed: dict) -> dict[str, dict[str, tuple[int, str]]]:
    """sqlwa's completed requests per device, added up by blkparse's direction."""
    out = {}
    for device, per_op in completed.items():
        assert set(per_op) <= BLKPARSE_WRITES | BLKPARSE_READS, per_op
        out[device] = {
            side: (
                sum(per_op[op]["requests"] for op in ops if op in per_op),
                blkparse_size(sum(per_op[op]["bytes"] for op in ops if op in per_op)),
            )
            for side, ops in (("reads", BLKPARSE_READS), ("writes", BLKPARSE_WRITES))
        }
    return out


def run_blkparse(base: Path, tmp_path: Path) -> str:
    if shutil.which("blkparse") is None:
        pytest.skip("blkparse (Debian package blktrace) is not installed")
    for part in base.parent.glob(base.name + ".blktrace.*"):
        shutil.copy(part, tmp_path / part.name)
    printed = tmp_path / "blkparse.txt"
    subprocess.run(
        ["blkparse", "-i", base.name, "-D", str(tmp_path), "-o", str(printed)], capture_output=True, check=True
    )
    return printed.read_text()


def test_binary_sample_completed_per_device_equals_blkparse_summary(tmp_path):
    truth = blkparse_totals(run_blkparse(KEKS, tmp_path))
    report = parse_json(str(KEKS))
    assert sqlwa_as_blkparse(report["completed"]) == truth
    # The figures themselves, as blkparse 1.2.0 prints them for this sample.
    assert truth == {"8,52": {"reads": (48, "0K"), "writes": (1158, "12960K")}}


def test_blkparse_text_sample_completed_per_device_equals_its_own_summary():
    report = parse_json(str(NVME_TEXT))
    assert sqlwa_as_blkparse(report["completed"]) == blkparse_totals(NVME_TEXT.read_text())


def test_completed_bytes_are_not_every_stage_added():
    """The headline of the report: on keks the completed writes are C's alone, where the
    per-operation bytes add D's (blkparse: 13208 KiB dispatched, 12960 KiB completed)."""
    report = parse_json(str(KEKS))
    completed = report["completed"]["8,52"]
    stages = report["stages"]["8,52"]
    written = completed["write"]["bytes"] + completed["discard"]["bytes"]
    assert written == stages["C"]["bytes"] < report["bytes_per_operation"]["write"]
    assert {stage: n["events"] for stage, n in stages.items()} == {"C": 1206, "D": 1192}


# ------------------------------------------------------------- ftrace, a tally of its own

# "block_rq_complete: 7,0 WS () 1234 + 8 be,0,4 [0]" (the ioprio token from 6.x on); a
# flush: "254,0 FF () 18446744073709551615 + 0 none,0,0 [0]".
COMPLETE_LINE = re.compile(
    r": block_(?:rq|bio)_complete: (?P<dev>\d+,\d+) (?P<rwbs>[A-Z]+) (?:\(.*?\) )?\d+ \+ (?P<sectors>\d+) "
)
ISSUE_LINE = re.compile(r": block_rq_issue: (?P<dev>\d+,\d+) ")
QUEUE_LINE = re.compile(r": block_bio_queue: (?P<dev>\d+,\d+) ")


def kernel_operation(rwbs: str, sectors: int) -> str:
    """The operation the kernel's blk_fill_rwbs letters say: an optional preflush F, then
    the operation letter (W R D F N; DE a secure erase); a preflush moving no data is the
    cache flush itself. Only the letters these captures hold are named; any other fails."""
    op = rwbs[1:] if len(rwbs) > 1 and rwbs[0] == "F" and rwbs[1] in "WRDFN" else rwbs
    preflush = op is not rwbs
    assert re.fullmatch(r"(DE|[WRDFN])[FASM]*", op), f"letters this tally does not know: {rwbs}"
    if preflush and sectors == 0:
        return "flush"
    name = {"W": "write", "R": "read", "D": "discard", "F": "flush", "N": "none"}[op[0]]
    return "secure_erase" if op.startswith("DE") else name


def ftrace_completions(trace: Path) -> dict[str, dict[str, dict[str, int]]]:
    """Per device and operation, the completion lines and their bytes (sectors x 512)."""
    out: dict = defaultdict(lambda: defaultdict(lambda: {"requests": 0, "bytes": 0}))
    for line in trace.read_text(errors="replace").splitlines():
        if m := COMPLETE_LINE.search(line):
            sectors = int(m.group("sectors"))
            done = out[m.group("dev")][kernel_operation(m.group("rwbs"), sectors)]
            done["requests"] += 1
            done["bytes"] += 512 * sectors
    return {dev: dict(ops) for dev, ops in out.items()}


def ftrace_lines_per_device(trace: Path, pattern: re.Pattern) -> Counter:
    return Counter(
        m.group("dev") for line in trace.read_text(errors="replace").splitlines() if (m := pattern.search(line))
    )


@pytest.mark.parametrize("trace", FTRACE_SAMPLES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_ftrace_completed_per_device_equals_a_tally_of_its_completion_lines(trace):
    report = parse_json(str(trace))
    truth = ftrace_completions(trace)
    assert truth, "the capture has completions"
    assert report["completed"] == truth
    # The stages apart, per device: issues (D) and queued bios (Q), line for line.
    for stage, pattern in (("D", ISSUE_LINE), ("Q", QUEUE_LINE)):
        counted = {dev: n[stage]["events"] for dev, n in report["stages"].items() if stage in n}
        assert counted == dict(ftrace_lines_per_device(trace, pattern)), stage


def test_loop_sample_completed_writes_are_a_quarter_of_every_stage_added():
    """The issue's figure in small: the sample's per-operation write bytes add Q, G, I, D
    and C (and merges); the loop device's completed writes are what reached it."""
    trace = FTRACE_SAMPLES[0]
    report = parse_json(str(trace))
    completed = sum(ops.get("write", {}).get("bytes", 0) for ops in report["completed"].values())
    assert completed == sum(ops.get("write", {}).get("bytes", 0) for ops in ftrace_completions(trace).values())
    assert report["bytes_per_operation"]["write"] > 4 * completed


# ----------------------------------------------------------------------- what is printed


def test_terminal_leads_with_completed_per_device(tmp_path):
    """The first table the terminal shows is what each device completed, per operation,
    with blkparse's figures for the sample (1,153 writes + 5 discards completed, 12960 KiB
    together); the stages come after it."""
    printed = sqlwa("parse", str(KEKS), env={**os.environ, "COLUMNS": "160"}).stdout
    lines = printed.splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith("completed"))
    stages_table = next(i for i, line in enumerate(lines) if line.startswith("stages"))
    assert first_table < stages_table
    assert not any(line.startswith("per ") for line in lines[:first_table])
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines[first_table:stages_table]]
    rows = {tuple(row[:2]): row[2:] for row in cells if len(row) == 4}
    assert rows[("8,52", "write")] == ["1,153", "13,058,048"]
    assert rows[("", "discard")] == ["5", "212,992"]
    assert (13_058_048 + 212_992) >> 10 == 12960


@pytest.mark.parametrize("trace", [KEKS, NVME_TEXT, *FTRACE_SAMPLES[:2]], ids=lambda p: p.name)
def test_streamed_parse_counts_what_the_whole_parse_counts(tmp_path, trace):
    """With -o the trace is read and counted row group by row group (binary and text
    readers of their own): the totals are those of the parse read whole."""
    whole = parse_json(str(trace))
    streamed = parse_json(str(trace), "-o", str(tmp_path / "events.parquet"))
    assert (streamed["completed"], streamed["stages"]) == (whole["completed"], whole["stages"])
