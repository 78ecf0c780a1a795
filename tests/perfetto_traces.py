"""Perfetto traces for the tests, written and read with Perfetto's own Python package
(``TraceProtoBuilder``, ``perfetto_trace_pb2``) and never with sqlwa's code: the
independent side of the import and export tests."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

EMMC = (179, 0)  # a phone's eMMC, mmcblk0


def kdev(major: int, minor: int) -> int:
    """The kernel's internal dev_t (include/linux/kdev_t.h: MINORBITS 20)."""
    return (major << 20) | minor


class Bundle:
    """One FtraceEventBundle being filled."""

    def __init__(self, builder: TraceProtoBuilder, cpu: int) -> None:
        self.bundle = builder.add_packet().ftrace_events
        self.bundle.cpu = cpu

    def event(self, ts: int, task: int, name: str, **fields):
        """An event ``name`` at ``ts`` by the task ``task`` with ``fields`` set."""
        event = self.bundle.event.add()
        event.timestamp = ts
        event.pid = task
        body = getattr(event, name)
        for key, value in fields.items():
            if isinstance(value, list):
                getattr(body, key).extend(value)
            else:
                setattr(body, key, value)
        if not fields:
            body.SetInParent()
        return event

    def block(self, ts: int, task: int, name: str, dev=EMMC, **fields):
        return self.event(ts, task, name, dev=kdev(*dev), **fields)


@dataclass
class SliceRecord:
    track: str
    name: str
    start: int
    end: int
    args: dict = field(default_factory=dict)


def annotation_value(annotation):
    which = annotation.WhichOneof("value")
    return getattr(annotation, which) if which else None


def read_trace(data: bytes) -> pb.Trace:
    trace = pb.Trace()
    trace.ParseFromString(data)
    return trace


def track_slices(trace: pb.Trace) -> tuple[dict[int, str], list[SliceRecord], list[SliceRecord]]:
    """Track names by uuid, the slices (begin/end pairs per track, nested by a stack) and
    the instants of a trace's track events."""
    names: dict[int, str] = {}
    open_slices: dict[int, list] = defaultdict(list)
    slices: list[SliceRecord] = []
    instants: list[SliceRecord] = []
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            names[packet.track_descriptor.uuid] = packet.track_descriptor.name
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        args = {a.name: annotation_value(a) for a in event.debug_annotations}
        track = names[event.track_uuid]
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            open_slices[event.track_uuid].append(SliceRecord(track, event.name, packet.timestamp, -1, args))
        elif event.type == pb.TrackEvent.TYPE_SLICE_END:
            record = open_slices[event.track_uuid].pop()
            record.end = packet.timestamp
            slices.append(record)
        elif event.type == pb.TrackEvent.TYPE_INSTANT:
            instants.append(SliceRecord(track, event.name, packet.timestamp, packet.timestamp, args))
    assert not any(open_slices.values()), "a slice was never ended"
    return names, slices, instants


def ftrace_events(trace: pb.Trace) -> list[tuple[int, int, int, str, object]]:
    """(timestamp, cpu, pid, event name, event body) of every ftrace event."""
    found = []
    for packet in trace.packet:
        if packet.HasField("ftrace_events"):
            for event in packet.ftrace_events.event:
                name = event.WhichOneof("event")
                found.append((event.timestamp, packet.ftrace_events.cpu, event.pid, name, getattr(event, name)))
    return found
