"""Traces made to exhaust memory (issue #32): runs joined into one trace, whose commit
markers repeat or run backwards, and a Perfetto trace whose compressed packets inflate to
4 GiB. Each is parsed by ``sqlwa parse`` in a subprocess under
a 1 GB address-space limit (``prlimit --as``): it must refuse in one line (+ hint, exit 2)
or, with --lenient, count what it skipped, never grow until the kernel kills it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from helpers import REPO, sqlwa_in_process
from sqlwa.results import rundir

RUNS = REPO / "traces" / "samples" / "sqlwa-runs"
ADDRESS_SPACE = 1 << 30
COPIES = 40


def txn_markers(trace_txt: Path) -> int:
    """The run's txn_begin/txn_end marker lines, counted in its raw ftrace text."""
    return len(re.findall(rb"tracing_mark_write: sqlwa txn_(?:begin|end) ", trace_txt.read_bytes()))


def parse_limited(*args: str) -> subprocess.CompletedProcess:
    """``sqlwa parse ARGS`` with its address space limited to 1 GB."""
    argv = ["prlimit", f"--as={ADDRESS_SPACE}", sys.executable, "-m", "sqlwa", "parse", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def joined(path: Path, parts: list[Path]) -> Path:
    path.write_bytes(b"".join(p.read_bytes() for p in parts))
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "wal.perfetto-trace"
    proc = sqlwa_in_process("export", str(RUNS / "ext4-wal"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def joined_traces(name: str, tmp_path: Path, exported: Path) -> tuple[Path, int, int]:
    """The hostile trace, its transaction markers and the commits its first run made
    (independent counts: the runs' own trace.txt and commits.parquet)."""
    wal, delete = RUNS / "ext4-wal", RUNS / "ext4-delete"
    commits = rundir.commits(wal).height
    if name == "perfetto copies":
        return (
            joined(tmp_path / "x.perfetto-trace", [exported] * COPIES),
            COPIES * txn_markers(wal / "trace.txt"),
            commits,
        )
    if name == "ftrace copies":
        return (
            joined(tmp_path / "x.txt", [wal / "trace.txt"] * COPIES),
            COPIES * txn_markers(wal / "trace.txt"),
            commits,
        )
    parts = [wal / "trace.txt", delete / "trace.txt"]
    return joined(tmp_path / "two.txt", parts), sum(txn_markers(p) for p in parts), commits


HOSTILE = ["perfetto copies", "ftrace copies", "two runs' trace.txt"]


@pytest.mark.parametrize("name", HOSTILE)
def test_joined_runs_are_refused_in_one_line(name, tmp_path, exported):
    path, markers, commits = joined_traces(name, tmp_path, exported)
    proc = parse_limited(str(path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    message, hint = proc.stderr.strip().splitlines()
    skipped = markers - 2 * commits
    assert message.startswith(f"sqlwa: error: {skipped:,} of the trace's {markers:,} transaction markers repeat or run")
    assert "--lenient" in hint


@pytest.mark.parametrize("name", HOSTILE)
def test_lenient_keeps_one_run_s_commits_and_counts_the_rest(name, tmp_path, exported):
    path, markers, commits = joined_traces(name, tmp_path, exported)
    proc = parse_limited(str(path), "--lenient", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)["commits"]
    assert found["count"] == commits
    assert found["skipped_markers"] == markers - 2 * commits


BOMB_CHUNK = 64 << 20
BOMB_CHUNKS = 64


def zlib_bomb() -> bytes:
    """A zlib stream of 4 GiB of zero bytes in about 4 MB, made in a second: deflated once
    per 64 MiB with a full flush between, which restarts the compressor, so every chunk after
    the first deflates to the same bytes and is repeated; then the final empty block and the
    Adler-32 of all of it (zeros leave a = 1 and add 1 to b for each byte)."""
    chunk = bytes(BOMB_CHUNK)
    deflate = zlib.compressobj(9)
    first = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    final_empty_block = deflate.flush(zlib.Z_FINISH)[:-4]
    adler = ((BOMB_CHUNK * BOMB_CHUNKS) % 65521) << 16 | 1
    return first + again * (BOMB_CHUNKS - 1) + final_empty_block + adler.to_bytes(4, "big")


def test_a_decompression_bomb_is_refused_in_one_line(tmp_path, exported):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    bomb = zlib_bomb()
    # What the stream is, read by zlib itself: its first 65 MiB inflate, zeros (the whole
    # 4 GiB takes seconds more, and past the limit nothing is read).
    assert zlib.decompressobj().decompress(bomb, 65 << 20) == bytes(65 << 20)
    assert len(bomb) < 5 << 20
    packet = pb.Trace(packet=[pb.TracePacket(compressed_packets=bomb)]).SerializeToString()
    path = joined(tmp_path / "bomb.perfetto-trace", [exported])
    path.write_bytes(path.read_bytes() + packet)
    proc = parse_limited(str(path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1
    assert f"at byte offset {exported.stat().st_size}: a packet that does not decode (compressed packets that " in (
        proc.stderr
    )
    assert "inflate past 64 MiB, where Perfetto writes about 1 MiB in one (a decompression bomb)" in proc.stderr
    lenient = parse_limited(str(path), "--lenient", "--json")
    assert lenient.returncode == 0, lenient.stderr[-2000:]
    report = json.loads(lenient.stdout)
    assert report["bad_records"] == 1 and "decompression bomb" in report["bad_messages"][0]
    assert report["commits"]["count"] == rundir.commits(RUNS / "ext4-wal").height
