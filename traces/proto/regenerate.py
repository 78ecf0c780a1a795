"""Write perfetto_trace.desc: Perfetto's published trace protos (perfetto_trace.proto, as
compiled into the pinned ``perfetto`` package of requirements.lock) as a serialized
FileDescriptorSet, the schema blktrace-parse reads Perfetto traces with.

Run it with the project's interpreter after changing the pinned ``perfetto`` version:
    .venv/bin/python traces/proto/regenerate.py
tests/unit/test_perfetto_import.py checks that the file is the pinned package's."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2
from perfetto.protos.perfetto.trace import perfetto_trace_pb2

DESCRIPTOR_FILE = Path(__file__).with_name("perfetto_trace.desc")


def descriptor_set() -> bytes:
    files = descriptor_pb2.FileDescriptorSet()
    perfetto_trace_pb2.DESCRIPTOR.CopyToProto(files.file.add())
    return files.SerializeToString(deterministic=True)


if __name__ == "__main__":
    DESCRIPTOR_FILE.write_bytes(descriptor_set())
    print(f"wrote {DESCRIPTOR_FILE} ({DESCRIPTOR_FILE.stat().st_size:,} bytes)")
