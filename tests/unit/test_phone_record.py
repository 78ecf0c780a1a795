"""The TraceConfig a phone run records with, read by Perfetto's own protos."""

from __future__ import annotations

from google.protobuf import text_format
from perfetto.protos.perfetto.trace import perfetto_trace_pb2

from sqlwa.phone import record


def test_the_config_is_a_trace_config_perfetto_reads_with_every_event():
    config = text_format.Parse(record.trace_config(90_000), perfetto_trace_pb2.TraceConfig())
    assert config.duration_ms == 90_000
    [buffer] = config.buffers
    assert (
        buffer.size_kb == record.BUFFER_KB and buffer.fill_policy == perfetto_trace_pb2.TraceConfig.BufferConfig.DISCARD
    )
    [source] = config.data_sources
    ftrace = source.config.ftrace_config
    assert source.config.name == "linux.ftrace"
    assert list(ftrace.ftrace_events) == list(record.FTRACE_EVENTS)
    assert list(ftrace.syscall_events) == list(record.SYSCALL_EVENTS)
    assert {"ftrace/print", "block/block_rq_issue", "block/block_rq_complete"} <= set(ftrace.ftrace_events)
