"""Which format a trace file is, and the streamed parse of the Rust parser's formats
straight into Parquet: what ``sqlwa parse -o`` needs, without Polars or pyarrow (a
quarter of a second of start-up on every command that imports them).

Perfetto's framing is here too (a Trace message is a run of length-delimited
TracePackets): reading a file's first packet is how a Perfetto trace is recognised.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable
from typing import IO, Any

from sqlwa import _native, _system, inputs


def parse_to_parquet(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    output: str | os.PathLike,
    format: str = "auto",
    lenient: bool = False,
) -> dict:
    """Parse blktrace, blkparse or ftrace files as :func:`sqlwa.analysis.traceparse.parse`
    does and write the event table to the Parquet file ``output``; returns the report.
    Traces are parsed and written row group by row group (2^18 rows), so a trace of any
    length takes the memory of a few row groups (about 200 MB here); only blktrace and
    text files given together are read whole first. The file reads back with ``parse``'s columns and dtypes.
    On an error no file is left behind. (A Perfetto trace: ``parse``, then write it.)
    The parse's freed buffers go back to the system (:func:`sqlwa._system.memory.release_freed`):
    a lab run parses its capture's segments while it runs, then analyses."""
    try:
        return dict(_native.parse_trace_to_parquet([str(p) for p in as_list(paths)], str(output), format, lenient))
    finally:
        _system.memory.release_freed()


def as_list(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str | os.PathLike]:
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def is_perfetto(paths: list[str | os.PathLike], format: str) -> bool:
    """Whether the paths name a Perfetto trace (asked for, or detected), which is read on its own."""
    if not (format == "perfetto" or (format == "auto" and any(looks_like_perfetto(p) for p in paths))):
        return False
    if len(paths) != 1:
        raise _native.TraceParseError(
            f"a Perfetto trace is read on its own, and {len(paths)} files were given: "
            + ", ".join(str(p) for p in paths[:3])
        )
    return True


def pb2() -> Any:
    """Perfetto's protos (imported on first use: a second of start-up otherwise)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


# ---------------------------------------------------------------- framing


def read_varint(data: bytes | memoryview | mmap.mmap, pos: int) -> tuple[int, int] | None:
    """The varint at ``pos`` → (value, position after it); None when the data ends first."""
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            return None
    return None


# A Trace message has one field: ``repeated TracePacket packet = 1``, so every record
# starts with the tag of field 1, length-delimited.
PACKET_TAG = 0x0A


def looks_like_perfetto(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts like a Perfetto trace: a packet's tag and length, and a
    first packet that decodes into fields Perfetto knows. Text never starts that way."""
    try:
        with inputs.open_input(path, "trace") as f:
            data, whole = read_first_packet(f)
    except OSError:
        return False
    return whole and first_packet_problem(data) is None


def read_first_packet(f: IO[bytes]) -> tuple[bytes, bool]:
    """A file's first bytes through its first packet, and whether they frame one (a tag,
    a length of at most MAX_FIRST_PACKET, that many bytes); else its first 16 bytes."""
    head = f.read(16)
    found = read_varint(head, 1) if head[:1] == bytes([PACKET_TAG]) else None
    if found is None or found[0] > MAX_FIRST_PACKET:
        return head, False
    data = head + f.read(max(0, found[1] + found[0] - len(head)))
    return data, len(data) >= found[1] + found[0]


# A first packet (clock snapshot, config, uuid, stats) is far smaller; a larger length
# means the first bytes only happen to look like a tag and a length.
MAX_FIRST_PACKET = 1 << 26


def first_packet_problem(data: bytes | mmap.mmap) -> str | None:
    """Why ``data`` is not a Perfetto trace, judged by its first packet; None when it is
    or may be (a first packet cut short is a truncated trace, for the reader to say)."""
    if len(data) == 0:
        return "it is empty"
    if data[0] != PACKET_TAG:
        return f"it starts with byte 0x{data[0]:02x}, not a TracePacket's tag (0x0a)"
    found = read_varint(data, 1)
    if found is None or found[1] + found[0] > len(data):
        return None
    length, start = found
    try:
        packet = pb2().TracePacket.FromString(data[start : start + length])
    except Exception:  # google.protobuf.message.DecodeError
        return "its first record is not a TracePacket"
    if not packet.ListFields():
        return "its first record holds no TracePacket field (another protobuf message)"
    return None


MAX_BAD_MESSAGES = 20  # as many as the parser keeps (traces/src/report.rs)


def merge_reports(reports: list[dict]) -> dict:
    """One parse report for consecutive parts of one trace, as a parse of the whole would
    give: counts added (per-key dicts key by key), lists joined (``files``; ``bad_messages``
    name lines of their part), other values the first part's that has one."""
    merged: dict = {}
    for report in reports:
        for key, value in report.items():
            merged[key] = _merged(merged.get(key), value)
    if "bad_messages" in merged:
        merged["bad_messages"] = merged["bad_messages"][:MAX_BAD_MESSAGES]
    return merged


def _merged(old: Any, new: Any) -> Any:
    if old is None:
        return new
    if isinstance(old, bool) or new is None:
        return old
    if isinstance(old, int) and isinstance(new, int):
        return old + new
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: _merged(old.get(k), new.get(k)) for k in {**old, **new}}
    if isinstance(old, list) and isinstance(new, list):
        return old + new
    return old
