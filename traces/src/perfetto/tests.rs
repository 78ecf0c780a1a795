//! Traces built with prost-reflect's encoder from the same published protos (by field
//! name: no field number is typed here), rendered, and compared with the lines the
//! kernel's tracepoints print (their TP_printk formats).
use std::path::Path;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, Value as V};

use super::*;

fn pool() -> DescriptorPool {
    DescriptorPool::decode(&include_bytes!("../../proto/perfetto_trace.desc")[..]).unwrap()
}

fn message(pool: &DescriptorPool, name: &str) -> MessageDescriptor {
    pool.get_message_by_name(&format!("perfetto.protos.{name}"))
        .unwrap()
}

/// A message with `fields` set by name.
fn build(desc: &MessageDescriptor, fields: &[(&str, V)]) -> DynamicMessage {
    let mut m = DynamicMessage::new(desc.clone());
    for (name, value) in fields {
        m.set_field_by_name(name, value.clone());
    }
    m
}

struct Trace {
    pool: DescriptorPool,
    bytes: Vec<u8>,
}

impl Trace {
    fn new() -> Trace {
        Trace {
            pool: pool(),
            bytes: Vec::new(),
        }
    }

    fn packet(&mut self, field: &str, value: DynamicMessage) -> usize {
        let packet = build(
            &message(&self.pool, "TracePacket"),
            &[(field, V::Message(value))],
        );
        let offset = self.bytes.len();
        self.bytes.push(PACKET_TAG);
        packet.encode_length_delimited(&mut self.bytes).unwrap();
        offset
    }

    fn event(&self, ts: u64, pid: u32, kind: &str, fields: &[(&str, V)]) -> V {
        let event = message(&self.pool, "FtraceEvent");
        let body_desc = event
            .get_field_by_name(kind)
            .unwrap()
            .kind()
            .as_message()
            .unwrap()
            .clone();
        let body = build(&body_desc, fields);
        V::Message(build(
            &event,
            &[
                ("timestamp", V::U64(ts)),
                ("pid", V::U32(pid)),
                (kind, V::Message(body)),
            ],
        ))
    }

    fn bundle(&mut self, cpu: u32, events: Vec<V>) -> usize {
        let bundle = build(
            &message(&self.pool, "FtraceEventBundle"),
            &[("cpu", V::U32(cpu)), ("event", V::List(events))],
        );
        self.packet("ftrace_events", bundle)
    }
}

fn s(text: &str) -> V {
    V::String(text.into())
}

fn tables() -> SyscallTables {
    SyscallTables {
        numbers: [("aarch64".to_string(), [(82, "fsync".to_string())].into())].into(),
        arguments: [("fsync".to_string(), vec!["fd".to_string()])].into(),
        default_machine: "aarch64".into(),
    }
}

/// The trace rendered with runs of `run_rows`: (reading, text lines, packet offsets).
fn render_trace(
    bytes: &[u8],
    lenient: bool,
    run_rows: usize,
) -> Result<(Reading, Vec<String>, Vec<u64>), ParseError> {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.perfetto-trace");
    std::fs::write(&trace, bytes).unwrap();
    let (text, origins) = (dir.path().join("trace.txt"), dir.path().join("origins"));
    let out = Output {
        text: &text,
        origins: &origins,
        sort_dir: dir.path(),
    };
    let mut said = Vec::new();
    let tuning = Tuning {
        run_rows,
        lines_per_report: 1,
    };
    let reading = render(&trace, &out, lenient, &tables(), tuning, &mut |m: &str| {
        said.push(m.to_string());
        Ok(())
    })?;
    let lines = std::fs::read_to_string(&text)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let offsets = std::fs::read(&origins)
        .unwrap()
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // Progress: the reading, then a report per line written (lines_per_report 1).
    let total = reading.rows;
    let read = said
        .iter()
        .position(|m| m.starts_with("read the trace"))
        .expect("the reading reported");
    let written: Vec<String> = (1..=total)
        .map(|n| format!("put {n} of {total} events in time order"))
        .collect();
    assert_eq!(said[read + 1..], written[..]);
    Ok((reading, lines, offsets))
}

const EMMC: u64 = 179 << 20;

#[test]
fn block_events_print_as_their_tracepoints_do() {
    let mut t = Trace::new();
    let rq = |sector: u64| {
        [
            ("dev", V::U64(EMMC)),
            ("sector", V::U64(sector)),
            ("nr_sector", V::U32(8)),
        ]
    };
    let events = vec![
        t.event(
            1,
            7,
            "block_rq_issue",
            &[
                &rq(2048)[..],
                &[
                    ("bytes", V::U32(4096)),
                    ("rwbs", s("WS")),
                    ("comm", s("db]x")),
                    ("cmd", s("")),
                ],
            ]
            .concat(),
        ),
        t.event(
            2,
            0,
            "block_rq_complete",
            &[&rq(2048)[..], &[("rwbs", s("WS")), ("error", V::I32(-5))]].concat(),
        ),
        t.event(
            3,
            0,
            "block_rq_requeue",
            &[&rq(8)[..], &[("rwbs", s("W")), ("errors", V::I32(0))]].concat(),
        ),
        t.event(
            4,
            7,
            "block_bio_queue",
            &[&rq(16)[..], &[("rwbs", s("R")), ("comm", s("a\nb"))]].concat(),
        ),
        t.event(
            5,
            0,
            "block_bio_complete",
            &[&rq(16)[..], &[("rwbs", s("R")), ("error", V::I32(0))]].concat(),
        ),
        t.event(
            6,
            7,
            "block_bio_remap",
            &[
                &rq(96)[..],
                &[
                    ("rwbs", s("WM")),
                    ("old_dev", V::U64((254 << 20) | 40)),
                    ("old_sector", V::U64(4)),
                ],
            ]
            .concat(),
        ),
        t.event(
            7,
            7,
            "block_split",
            &[
                ("dev", V::U64(EMMC)),
                ("sector", V::U64(0)),
                ("new_sector", V::U64(8)),
                ("rwbs", s("W")),
                ("comm", s("k")),
            ],
        ),
        t.event(
            8,
            7,
            "block_rq_issue",
            &[
                ("dev", V::U64(EMMC)),
                ("sector", V::U64(u64::MAX)),
                ("rwbs", s("FF")),
            ],
        ),
    ];
    let first = t.bundle(2, events);
    let (reading, lines, offsets) = render_trace(&t.bytes, false, 1 << 10).unwrap();
    let at = |n: u64, pid: u32, name: &str, body: &str| {
        format!(" <...>-{pid} [002] ..... 0.{n:09}: {name}: {body}")
    };
    assert_eq!(
        lines,
        [
            at(1, 7, "block_rq_issue", "179,0 WS 4096 () 2048 + 8 [db)x]"),
            at(2, 0, "block_rq_complete", "179,0 WS () 2048 + 8 [-5]"),
            at(3, 0, "block_rq_requeue", "179,0 W () 8 + 8 [0]"),
            at(4, 7, "block_bio_queue", "179,0 R 16 + 8 [a b]"),
            at(5, 0, "block_bio_complete", "179,0 R 16 + 8 [0]"),
            at(6, 7, "block_bio_remap", "179,0 WM 96 + 8 <- (254,40) 4"),
            at(7, 7, "block_split", "179,0 W 0 / 8 [k]"),
            at(
                8,
                7,
                "block_rq_issue",
                "179,0 FF 0 () 18446744073709551615 + 0"
            ),
        ]
    );
    assert_eq!(offsets, vec![first as u64; 8]);
    assert_eq!(
        (reading.block_events, reading.ftrace_events, reading.bundles),
        (8, 8, 1)
    );
}

#[test]
fn cpus_merge_in_time_with_syscalls_last_among_equal_times_across_spilled_runs() {
    let mut t = Trace::new();
    let fsync = |t: &Trace, ts| {
        t.event(
            ts,
            9,
            "sys_enter",
            &[
                ("id", V::I64(82)),
                ("args", V::List(vec![V::U64(3), V::U64(0)])),
            ],
        )
    };
    let print = |t: &Trace, ts, text: &str| t.event(ts, 9, "print", &[("buf", s(text))]);
    let a = vec![
        fsync(&t, 10),
        print(&t, 10, "S|1|x\n"),
        print(&t, 30, "late"),
        t.event(
            40,
            9,
            "sys_exit",
            &[("id", V::I64(999)), ("ret", V::I64(-4))],
        ),
    ];
    let b = vec![
        print(&t, 5, "early"),
        print(&t, 10, "tie"),
        print(&t, 20, "mid"),
    ];
    t.bundle(0, a);
    t.bundle(1, b);
    for run_rows in [1, 2, 1 << 10] {
        let (reading, lines, _) = render_trace(&t.bytes, false, run_rows).unwrap();
        let bodies: Vec<&str> = lines
            .iter()
            .map(|l| l.split(": ").skip(1).collect::<Vec<_>>().join(": ").leak() as &str)
            .collect();
        assert_eq!(
            bodies,
            [
                "tracing_mark_write: early",
                "tracing_mark_write: S|1|x",
                "tracing_mark_write: tie",
                "sys_fsync(fd: 0x3)",
                "tracing_mark_write: mid",
                "tracing_mark_write: late",
                "sys_999 -> 0xfffffffffffffffc"
            ],
            "runs of {run_rows}"
        );
        assert_eq!(
            (reading.syscall_machine.as_str(), reading.unknown_syscalls),
            ("aarch64", 1)
        );
    }
}

#[test]
fn a_truncated_trace_names_the_byte_and_lenient_keeps_what_came_before() {
    let mut t = Trace::new();
    let ev = vec![t.event(
        1,
        1,
        "block_rq_issue",
        &[("dev", V::U64(EMMC)), ("rwbs", s("W"))],
    )];
    t.bundle(0, ev.clone());
    let second = t.bundle(0, ev);
    let cut = &t.bytes[..t.bytes.len() - 3];
    let err = render_trace(cut, false, 4).unwrap_err().to_string();
    assert!(
        err.contains(&format!("at byte offset {second}: a packet of")) && err.contains("truncated"),
        "{err}"
    );
    let (reading, lines, _) = render_trace(cut, true, 4).unwrap();
    assert_eq!(
        (lines.len(), reading.bad_records, reading.bad_messages.len()),
        (1, 1, 1)
    );
}

#[test]
fn a_packet_that_does_not_decode_adds_nothing() {
    let mut t = Trace::new();
    let ev = vec![t.event(
        1,
        1,
        "block_rq_issue",
        &[("dev", V::U64(EMMC)), ("rwbs", s("W"))],
    )];
    t.bundle(0, ev.clone());
    let bad = t.bytes.len();
    // A packet whose bundle holds one good event, then a field cut short: a frame that
    // is whole around a message that is not.
    let good_bundle = {
        let mut b = Trace::new();
        b.bundle(3, ev.clone());
        b.bytes
    };
    let mut body = good_bundle[2..].to_vec(); // the TracePacket's fields (tag, length of 1 byte)
    body.extend_from_slice(&[0x0a, 0x05, 0x01]);
    t.bytes.push(PACKET_TAG);
    prost::encoding::encode_varint(body.len() as u64, &mut t.bytes);
    t.bytes.extend_from_slice(&body);
    let broken_end = t.bytes.len();
    t.bundle(0, ev);
    let err = render_trace(&t.bytes, false, 4).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "at byte offset {bad}: a packet that does not decode"
        )),
        "{err}"
    );
    let (reading, lines, _) = render_trace(&t.bytes, true, 4).unwrap();
    assert_eq!(
        (
            lines.len(),
            reading.bad_records as usize,
            reading.bundles,
            reading.cpus.len()
        ),
        (2, 1, 2, 1)
    );
    // Many such packets: every one counted, the first MAX_BAD_MESSAGES said.
    let broken = &t.bytes[bad..broken_end];
    let mut many = t.bytes[..bad].to_vec();
    (0..25).for_each(|_| many.extend_from_slice(broken));
    let (reading, _, _) = render_trace(&many, true, 4).unwrap();
    assert_eq!(reading.bad_records, 25);
    assert_eq!(reading.bad_messages.len(), crate::report::MAX_BAD_MESSAGES);
}

#[test]
fn compact_sched_names_and_other_events_as_fields() {
    let mut t = Trace::new();
    let compact = build(
        &message(&t.pool, "FtraceEventBundle.CompactSched"),
        &[
            (
                "intern_table",
                V::List(vec![s("swapper/0"), s("f2fs_ckpt")]),
            ),
            ("switch_timestamp", V::List(vec![V::U64(100), V::U64(3)])),
            ("switch_next_pid", V::List(vec![V::I32(400), V::I32(0)])),
            ("switch_prev_state", V::List(vec![V::I64(0), V::I64(1)])),
            ("switch_next_prio", V::List(vec![V::I32(120), V::I32(120)])),
            (
                "switch_next_comm_index",
                V::List(vec![V::U32(1), V::U32(0)]),
            ),
        ],
    );
    let newtask = t.event(
        101,
        1,
        "task_newtask",
        &[
            ("pid", V::I32(500)),
            ("comm", s("worker")),
            ("clone_flags", V::U64(0)),
        ],
    );
    let ext4 = t.event(
        102,
        1,
        "ext4_sync_file_enter",
        &[
            ("dev", V::U64(EMMC)),
            ("ino", V::U64(12)),
            ("datasync", V::I32(1)),
        ],
    );
    let bundle = build(
        &message(&t.pool, "FtraceEventBundle"),
        &[
            ("cpu", V::U32(0)),
            ("event", V::List(vec![newtask, ext4])),
            ("compact_sched", V::Message(compact)),
        ],
    );
    t.packet("ftrace_events", bundle);
    let (reading, lines, _) = render_trace(&t.bytes, false, 4).unwrap();
    assert_eq!(
        lines,
        [
            " <...>-0 [000] ..... 0.000000100: sched_switch: prev_pid=0 prev_state=0 ==> next_comm=f2fs_ckpt next_pid=400 next_prio=120",
            " <...>-1 [000] ..... 0.000000101: task_newtask: pid=500 comm=worker clone_flags=0",
            " <...>-1 [000] ..... 0.000000102: ext4_sync_file_enter: dev=187695104 ino=12 datasync=1",
            " <...>-400 [000] ..... 0.000000103: sched_switch: prev_pid=400 prev_state=1 ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        ]
    );
    assert_eq!(reading.names.get(&500).map(String::as_str), Some("worker"));
    assert_eq!(
        reading.sched_names.get(&400).map(String::as_str),
        Some("f2fs_ckpt")
    );
    let _ = Path::new("");
}

#[test]
fn compressed_packets_read_as_the_packets_they_hold() {
    use std::io::Write as _;
    let mut plain = Trace::new();
    let events = |t: &Trace, cpu_ts: u64| {
        vec![t.event(
            cpu_ts,
            3,
            "block_rq_issue",
            &[
                ("dev", V::U64(EMMC)),
                ("rwbs", s("W")),
                ("bytes", V::U32(4096)),
            ],
        )]
    };
    let (a, b) = (events(&plain, 20), events(&plain, 10));
    plain.bundle(0, a);
    plain.bundle(1, b);
    let (reading, lines, _) = render_trace(&plain.bytes, false, 4).unwrap();
    // The same packets, deflated into one packet's `compressed_packets` (zlib, as
    // Perfetto's service writes them), after a plain packet.
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    zlib.write_all(&plain.bytes).unwrap();
    let mut packed = Trace::new();
    let lead = vec![packed.event(5, 3, "print", &[("buf", s("first"))])];
    packed.bundle(2, lead);
    let at = packed.bytes.len();
    let packet = build(
        &message(&packed.pool, "TracePacket"),
        &[(
            "compressed_packets",
            V::Bytes(zlib.finish().unwrap().into()),
        )],
    );
    packed.bytes.push(PACKET_TAG);
    packet.encode_length_delimited(&mut packed.bytes).unwrap();
    let (got, got_lines, offsets) = render_trace(&packed.bytes, false, 4).unwrap();
    assert_eq!(got_lines[1..], lines[..]);
    assert_eq!(offsets[1..], [at as u64, at as u64]);
    assert_eq!(
        (got.bundles, got.block_events, got.cpus.len()),
        (reading.bundles + 1, 2, 3)
    );
    // A stream that does not inflate is a packet that does not decode.
    let mut broken = packed.bytes[..at].to_vec();
    let bad = build(
        &message(&packed.pool, "TracePacket"),
        &[(
            "compressed_packets",
            V::Bytes(vec![0x78, 0x9c, 1, 2, 3].into()),
        )],
    );
    broken.push(PACKET_TAG);
    bad.encode_length_delimited(&mut broken).unwrap();
    let err = render_trace(&broken, false, 4).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "at byte offset {at}: a packet that does not decode (compressed packets"
        )),
        "{err}"
    );
}

/// A zlib stream of `n` zero bytes.
fn deflated_zeros(n: usize) -> Vec<u8> {
    use std::io::Write as _;
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    zlib.write_all(&vec![0; n]).unwrap();
    zlib.finish().unwrap()
}

#[test]
fn a_stream_inflating_past_the_limit_is_refused_as_a_bomb() {
    let limit = 1 << 20;
    assert_eq!(
        inflate(&deflated_zeros(limit), limit as u64).unwrap().len(),
        limit
    );
    let Malformed(why) = inflate(&deflated_zeros(limit + 1), limit as u64).unwrap_err();
    assert_eq!(
        why,
        "compressed packets that inflate past 1 MiB, where Perfetto writes about 1 MiB in one \
         (a decompression bomb)"
    );
}

#[test]
fn a_bomb_in_a_trace_names_its_packet_and_lenient_skips_it() {
    let mut t = Trace::new();
    let at = t.bytes.len();
    let bomb = build(
        &message(&t.pool, "TracePacket"),
        &[(
            "compressed_packets",
            V::Bytes(deflated_zeros(MAX_INFLATED as usize + 1).into()),
        )],
    );
    t.bytes.push(PACKET_TAG);
    bomb.encode_length_delimited(&mut t.bytes).unwrap();
    let err = render_trace(&t.bytes, false, 4).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "at byte offset {at}: a packet that does not decode (compressed packets that inflate past 64 MiB"
        )),
        "{err}"
    );
    let (reading, _, _) = render_trace(&t.bytes, true, 4).unwrap();
    assert_eq!((reading.packets, reading.bad_records), (1, 1));
}

#[test]
fn compressed_packets_inside_compressed_packets_do_not_decode() {
    use std::io::Write as _;
    let t = Trace::new();
    let packet_of = |compressed: Vec<u8>| {
        let mut framed = vec![PACKET_TAG];
        build(
            &message(&t.pool, "TracePacket"),
            &[("compressed_packets", V::Bytes(compressed.into()))],
        )
        .encode_length_delimited(&mut framed)
        .unwrap();
        framed
    };
    let deflate = |bytes: &[u8]| {
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zlib.write_all(bytes).unwrap();
        zlib.finish().unwrap()
    };
    let inner = packet_of(deflate(b""));
    let nested = packet_of(deflate(&inner));
    let err = render_trace(&nested, false, 4).unwrap_err().to_string();
    assert!(
        err.contains("compressed packets inside compressed packets"),
        "{err}"
    );
}
