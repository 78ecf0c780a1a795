//! Perfetto traces (`adb shell perfetto` on a phone) → the ftrace text the kernel would
//! have printed for their events, in time order, for the crate's one ftrace reader.
//!
//! A Perfetto trace is a run of length-delimited `TracePacket`s. Its ftrace data source
//! records the kernel tracepoints sqlwa captures through tracefs, as typed fields in
//! per-CPU `FtraceEventBundle`s. [`render`] reads the packets in place (field numbers from
//! Perfetto's published protos, `schema.rs`), prints each event as its tracefs line
//! (`lines.rs`), puts all CPUs' lines in one time order by an external sort (`order.rs`),
//! and writes them, with each line's packet offset, to two files; what the packets say
//! around the events (task names, losses, the machine) comes back as a [`Reading`]. The
//! text then goes through the crate's ftrace reader, so RWBS dialects, flags, bytes and syscall
//! arguments mean exactly what they mean for a tracefs capture.
//!
//! Memory: one run of the sort (`order::RUN_ROWS` rows) and the mapped trace's pages as
//! they are read; disk: the sort's runs and the text, ~110 bytes an event.
pub(crate) mod lines;
pub(crate) mod order;
pub(crate) mod schema;
#[cfg(test)]
mod tests;
pub(crate) mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use prost::encoding::decode_varint;

use crate::error::{Location, ParseError};
use crate::input::Input;
use lines::{Call, Syscall, SyscallNames};
pub use lines::{SyscallTables, UNNAMED};
use order::{Body, Row, Sorter, RUN_ROWS, SYSCALL_SEQ};
use schema::{Schema, Shape, START_OF_TRACE};
use wire::{fields, push_ints, Malformed, Value};

/// A Trace message has one field, `repeated TracePacket packet = 1`: every record starts
/// with the tag of field 1, length-delimited.
pub(crate) const PACKET_TAG: u8 = 0x0a;

/// What the packets said besides the events.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    /// The trace's machine (`system_info`), if it says.
    pub machine: Option<String>,
    /// pid → name from the process tree and task events (a negative pid names no task).
    pub names: HashMap<u32, String>,
    /// pid → name seen in scheduling events (the fallback).
    pub sched_names: HashMap<u32, String>,
    /// cpu → overrun + dropped events at the trace's start (`ftrace_stats`).
    pub overrun_start: BTreeMap<u64, u64>,
    /// cpu → overrun + dropped events at the trace's end.
    pub overrun_end: BTreeMap<u64, u64>,
    /// Event bundles the trace flags as having lost events.
    pub lost_bundles: u64,
    /// Per-CPU ftrace event bundles read.
    pub bundles: u64,
    /// The CPUs that had bundles.
    pub cpus: BTreeSet<u64>,
    /// ftrace events read, of every type.
    pub ftrace_events: u64,
    /// Of those, block tracepoint events.
    pub block_events: u64,
    /// Trace packets read.
    pub packets: u64,
    /// Rows rendered (lines written).
    pub rows: u64,
    /// Packets that could not be read (`lenient`).
    pub bad_records: u64,
    /// The first 20 of their errors.
    pub bad_messages: Vec<String>,
    /// The machine whose syscall table the numbers were named with.
    pub syscall_machine: String,
    /// Syscall events whose number that table does not list.
    pub unknown_syscalls: u64,
}

impl Reading {
    /// Events the kernel's ring buffer lost: per CPU, overrun + dropped at the end of the
    /// trace minus at its start; or the bundles flagged lost, where those are more (a
    /// trace cut off before its last stats).
    pub fn lost_events(&self) -> u64 {
        let counted: u64 = self
            .overrun_end
            .iter()
            .map(|(cpu, end)| end.saturating_sub(*self.overrun_start.get(cpu).unwrap_or(&0)))
            .sum();
        counted.max(self.lost_bundles)
    }
}

/// Where [`render`] writes: the text, each line's packet offset (8 bytes, little-endian,
/// per line), and the directory for the sort's runs (an anonymous file).
pub struct Output<'a> {
    /// The ftrace text, one line per event.
    pub text: &'a Path,
    /// Each text line's packet offset in the trace, 8 bytes little-endian per line.
    pub origins: &'a Path,
    /// Where the sort's runs go (an anonymous file, removed when closed).
    pub sort_dir: &'a Path,
}

/// Told how far a long render has got; an error from it stops the render (Ctrl-C).
pub type Progress<'a> = dyn FnMut(&str) -> Result<(), ParseError> + 'a;

/// How [`render`] splits its work; the defaults suit any trace (tests make both small).
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Rows per sorted run (the memory of the sort).
    pub run_rows: usize,
    /// Lines written between two progress reports.
    pub lines_per_report: u64,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            run_rows: RUN_ROWS,
            lines_per_report: 1 << 16,
        }
    }
}

/// Every event of the Perfetto trace `path` as an ftrace line, in time order, into
/// `out`. A packet that does not decode is an error naming its byte offset (`lenient`:
/// counted in [`Reading::bad_records`] instead); a broken frame (a wrong tag, a length past the
/// end: a truncated trace) ends the read, since nothing after it can be framed.
pub fn render(
    path: &Path,
    out: &Output,
    lenient: bool,
    syscalls: &SyscallTables,
    tuning: Tuning,
    progress: &mut Progress,
) -> Result<Reading, ParseError> {
    let input = Input::open(path)?;
    let schema = Schema::load();
    let io_err = |e: std::io::Error| ParseError::io(out.sort_dir, e);
    let mut sorter = Sorter::new(tuning.run_rows, out.sort_dir);
    let mut reading = Reading::default();
    let data = input.bytes();
    let step = (data.len() / 100).max(1);
    let mut said = 0;
    let mut found = Found::default();
    for framed in packets(data) {
        let (offset, packet) = match framed {
            Ok(framed) => framed,
            Err((offset, reason)) => {
                note_bad(path, offset, reason, lenient, &mut reading)?;
                break;
            }
        };
        if offset >= said + step {
            said = offset;
            input.release_before(offset);
            progress(&format!(
                "read {}% of the trace, {} events",
                100 * said / data.len(),
                thousands(reading.rows)
            ))?;
        }
        reading.packets += 1;
        found.clear();
        match found.read_packet(&schema, packet, offset as u64) {
            Ok(()) => {
                for row in found.absorb_into(&mut reading) {
                    sorter.push(row).map_err(io_err)?;
                }
            }
            Err(Malformed(why)) => {
                let reason = format!("a packet that does not decode ({why})");
                note_bad(path, offset, reason, lenient, &mut reading)?;
            }
        }
    }
    progress(&format!(
        "read the trace, {} events",
        thousands(reading.rows)
    ))?;
    let sorted = sorter.sorted().map_err(io_err)?;
    let mut names = SyscallNames::new(syscalls, reading.machine.as_deref());
    write_lines(
        sorted,
        out,
        (reading.rows, tuning.lines_per_report),
        &mut names,
        progress,
    )?;
    reading.syscall_machine = names.machine;
    reading.unknown_syscalls = names.unknown;
    Ok(reading)
}

fn write_lines(
    rows: impl Iterator<Item = std::io::Result<Row>>,
    out: &Output,
    (total, lines_per_report): (u64, u64),
    names: &mut SyscallNames,
    progress: &mut Progress,
) -> Result<(), ParseError> {
    let create = |p: &Path| {
        std::fs::File::create(p)
            .map(|f| BufWriter::with_capacity(1 << 20, f))
            .map_err(|e| ParseError::io(p, e))
    };
    let (mut text, mut origins) = (create(out.text)?, create(out.origins)?);
    let mut written = 0u64;
    for row in rows {
        let row = row.map_err(|e| ParseError::io(out.sort_dir, e))?;
        let line = match &row.body {
            Body::Line(line) => text.write_all(line),
            Body::Syscall(call) => text.write_all(&names.line(row.ts, call)),
        };
        line.map_err(|e| ParseError::io(out.text, e))?;
        origins
            .write_all(&row.packet.to_le_bytes())
            .map_err(|e| ParseError::io(out.origins, e))?;
        written += 1;
        if written % lines_per_report == 0 {
            progress(&format!(
                "put {} of {} events in time order",
                thousands(written),
                thousands(total)
            ))?;
        }
    }
    text.flush().map_err(|e| ParseError::io(out.text, e))?;
    origins.flush().map_err(|e| ParseError::io(out.origins, e))
}

fn note_bad(
    path: &Path,
    offset: usize,
    reason: String,
    lenient: bool,
    reading: &mut Reading,
) -> Result<(), ParseError> {
    let bad = ParseError::bad(path, Location::ByteOffset(offset as u64), reason);
    if !lenient {
        return Err(bad);
    }
    reading.bad_records += 1;
    if reading.bad_messages.len() < crate::report::MAX_BAD_MESSAGES {
        reading.bad_messages.push(bad.to_string());
    }
    Ok(())
}

/// `1234567` as `1,234,567`, as the progress line prints counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Each packet's byte offset and bytes; a broken frame is the last item, as an error.
fn packets(data: &[u8]) -> impl Iterator<Item = Result<(usize, &[u8]), (usize, String)>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= data.len() {
            return None;
        }
        let offset = pos;
        let framed = frame(data, pos);
        pos = match &framed {
            Ok(packet) => packet.as_ptr() as usize - data.as_ptr() as usize + packet.len(),
            Err(_) => data.len(),
        };
        Some(
            framed
                .map(|packet| (offset, packet))
                .map_err(|reason| (offset, reason)),
        )
    })
}

fn frame(data: &[u8], pos: usize) -> Result<&[u8], String> {
    if data[pos] != PACKET_TAG {
        return Err(format!(
            "byte 0x{:02x} where a packet's tag (0x0a) belongs",
            data[pos]
        ));
    }
    let mut rest = &data[pos + 1..];
    let length = decode_varint(&mut rest)
        .map_err(|_| "a packet's length is cut off (the trace is truncated)".to_string())?;
    if length > rest.len() as u64 {
        return Err(format!(
            "a packet of {length} bytes with {} left in the file (the trace is truncated)",
            rest.len()
        ));
    }
    Ok(&rest[..length as usize])
}

/// The most bytes one `compressed_packets` may inflate to; a stream that inflates past it
/// is refused as a decompression bomb (4 MB of them inflated to 4 GiB), not held. Perfetto
/// sets no such bound where it reads (trace processor's `DecompressToBuffer`,
/// src/trace_processor/util/decompressor.cc, doubles its buffer for as long as the stream
/// goes on); where it writes, its service deflates what one read of its buffers returns
/// (`ZlibCompressFn` over `ReadBuffers`' packets, src/tracing/service), and a read into the
/// trace file stops once `kWriteIntoFileChunkSize` (1 MiB, tracing_service_impl.h) is
/// gathered: 1 MiB plus the last packet read. 64 MiB is that with room for a large last
/// packet, and bounds the memory of one packet's inflated bytes and the rows made of them.
pub const MAX_INFLATED: u64 = 64 << 20;

/// A zlib stream's bytes, refused once they pass `limit`.
fn inflate(compressed: &[u8], limit: u64) -> Result<Vec<u8>, Malformed> {
    let mut inflated = Vec::with_capacity(compressed.len().saturating_mul(4).min(limit as usize));
    flate2::read::ZlibDecoder::new(compressed)
        .take(limit + 1)
        .read_to_end(&mut inflated)
        .map_err(|e| Malformed(format!("compressed packets that do not inflate: {e}")))?;
    if inflated.len() as u64 > limit {
        return Err(Malformed(format!(
            "compressed packets that inflate past {} MiB, where Perfetto writes about 1 MiB \
             in one (a decompression bomb)",
            limit >> 20
        )));
    }
    Ok(inflated)
}

/// What one packet holds, kept apart until the whole packet has decoded: a packet that
/// does not decode adds nothing (as a protobuf library's parse of it would not).
#[derive(Default)]
struct Found {
    rows: Vec<Row>,
    /// (pid, name, whether it replaces a name already known)
    names: Vec<(i64, String, bool)>,
    sched_names: Vec<(i64, String)>,
    /// (start of trace?, per cpu: overrun + dropped)
    stats: Vec<(bool, Vec<(u64, u64)>)>,
    machine: Option<String>,
    /// Per bundle: (cpu, lost_events, events in it, block events in it)
    bundles: Vec<(u64, bool, u64, u64)>,
}

impl Found {
    fn clear(&mut self) {
        self.rows.clear();
        self.names.clear();
        self.sched_names.clear();
        self.stats.clear();
        self.bundles.clear();
        self.machine = None;
    }

    fn read_packet(&mut self, s: &Schema, packet: &[u8], offset: u64) -> Result<(), Malformed> {
        for field in fields(packet) {
            match field? {
                (n, Value::Bytes(b)) if n == s.packet.ftrace_events => {
                    self.read_bundle(s, b, offset)?
                }
                (n, Value::Bytes(b)) if n == s.packet.process_tree => {
                    self.read_process_tree(s, b)?
                }
                (n, Value::Bytes(b)) if n == s.packet.ftrace_stats => self.read_stats(s, b)?,
                (n, Value::Bytes(b)) if n == s.packet.system_info => self.read_system_info(s, b)?,
                (n, Value::Bytes(b)) if n == s.packet.compressed_packets => {
                    self.read_compressed_packets(s, b, offset)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `compressed_packets` (a TraceConfig's `compression_type: COMPRESSION_TYPE_DEFLATE`):
    /// a zlib stream of packets framed as in the file, read as if they stood there (their
    /// errors are said at the enclosing packet's offset). A packet in it that is itself
    /// compressed does not decode: Perfetto's service deflates only the packets it read
    /// from its buffers, and trace processor inflates one level (proto_trace_tokenizer.h;
    /// its parser CHECKs that an inflated packet holds no `compressed_packets`).
    fn read_compressed_packets(
        &mut self,
        s: &Schema,
        compressed: &[u8],
        offset: u64,
    ) -> Result<(), Malformed> {
        let inflated = inflate(compressed, MAX_INFLATED)?;
        for framed in packets(&inflated) {
            let (_, packet) = framed.map_err(|(at, why)| {
                Malformed(format!("byte {at} of its inflated packets: {why}"))
            })?;
            if fields(packet).any(|f| matches!(f, Ok((n, _)) if n == s.packet.compressed_packets)) {
                return Err(Malformed(
                    "compressed packets inside compressed packets (Perfetto deflates once)".into(),
                ));
            }
            self.read_packet(s, packet, offset)?;
        }
        Ok(())
    }

    /// The rows, numbered in reading order; the rest goes into `reading`.
    fn absorb_into(&mut self, reading: &mut Reading) -> std::vec::Drain<'_, Row> {
        for (cpu, lost, events, block) in self.bundles.drain(..) {
            reading.bundles += 1;
            reading.cpus.insert(cpu);
            reading.lost_bundles += u64::from(lost);
            reading.ftrace_events += events;
            reading.block_events += block;
        }
        let task = |pid: i64| u32::try_from(pid).ok();
        for (pid, name, replaces) in self.names.drain(..) {
            let Some(pid) = task(pid) else { continue };
            if replaces {
                reading.names.insert(pid, name);
            } else {
                reading.names.entry(pid).or_insert(name);
            }
        }
        for (pid, name) in self.sched_names.drain(..) {
            let Some(pid) = task(pid) else { continue };
            reading.sched_names.entry(pid).or_insert(name);
        }
        for (start, cpus) in self.stats.drain(..) {
            let target = if start {
                &mut reading.overrun_start
            } else {
                &mut reading.overrun_end
            };
            target.extend(cpus);
        }
        if let Some(machine) = self.machine.take() {
            reading.machine = Some(machine);
        }
        for row in &mut self.rows {
            // Reading order; the syscalls' after every other row's.
            row.seq = reading.rows
                + if row.seq == SYSCALL_SEQ {
                    SYSCALL_SEQ
                } else {
                    0
                };
            reading.rows += 1;
        }
        self.rows.drain(..)
    }

    fn read_bundle(&mut self, s: &Schema, bundle: &[u8], offset: u64) -> Result<(), Malformed> {
        let (mut cpu, mut lost, mut events, mut block) = (0, false, 0, 0);
        let mut compact = None;
        let mut event_bodies = Vec::new();
        for field in fields(bundle) {
            match field? {
                (n, v) if n == s.bundle.cpu => cpu = v.uint(),
                (n, v) if n == s.bundle.lost_events => lost = v.uint() != 0,
                (n, Value::Bytes(b)) if n == s.bundle.event => event_bodies.push(b),
                (n, Value::Bytes(b)) if n == s.bundle.compact_sched => compact = Some(b),
                _ => {}
            }
        }
        for event in event_bodies {
            events += 1;
            block += u64::from(self.read_event(s, event, cpu, offset)?);
        }
        if let Some(compact) = compact {
            self.read_compact_sched(s, compact, cpu, offset)?;
        }
        self.bundles.push((cpu, lost, events, block));
        Ok(())
    }

    /// One FtraceEvent; whether it was a block event.
    fn read_event(
        &mut self,
        s: &Schema,
        event: &[u8],
        cpu: u64,
        offset: u64,
    ) -> Result<bool, Malformed> {
        let (mut ts, mut pid, mut body) = (0, 0, None);
        for field in fields(event) {
            match field? {
                (n, v) if n == s.event_timestamp => ts = v.uint(),
                (n, v) if n == s.event_pid => pid = v.uint() as u32 as i64,
                (n, Value::Bytes(b)) => {
                    if let Some(kind) = s.event_type(n) {
                        body = Some((kind, b));
                    }
                }
                _ => {}
            }
        }
        let Some((kind, body)) = body else {
            return Ok(false); // an event type newer than the protos: nothing to print
        };
        let mut add = |name: &str, text: &[u8]| {
            self.rows.push(Row {
                ts,
                seq: 0,
                packet: offset,
                body: Body::Line(lines::line(ts, cpu, pid, name, ": ", text)),
            })
        };
        match &kind.shape {
            Shape::Block(shape, block_fields) => {
                add(&kind.name, &lines::block_body(*shape, block_fields, body)?);
                return Ok(true);
            }
            Shape::Print { buf } => {
                let mut text = &[][..];
                for field in fields(body) {
                    match field? {
                        (n, v) if n == *buf => text = v.bytes(),
                        _ => {}
                    }
                }
                text = text.strip_suffix(b"\n").unwrap_or(text);
                let mut clean = Vec::with_capacity(text.len());
                lines::push_clean(&mut clean, text);
                add("tracing_mark_write", &clean);
            }
            Shape::Syscall { enter, id, values } => {
                let (mut number, mut read) = (0, Vec::with_capacity(6));
                for field in fields(body) {
                    match field? {
                        (n, v) if n == *id => number = v.int(),
                        (n, v) if n == *values => push_ints(v, &mut read)?,
                        _ => {}
                    }
                }
                let call = match enter {
                    true => Call::Enter(read),
                    false => Call::Exit(read.first().map_or(0, |&ret| ret as i64)),
                };
                let syscall = Syscall {
                    cpu,
                    pid,
                    number,
                    call,
                };
                self.push_syscall(ts, offset, syscall);
            }
            Shape::Naming {
                pid: pid_field,
                name,
            } => {
                let (mut named, mut text) = (0, Vec::new());
                for field in fields(body) {
                    match field? {
                        (n, v) if n == *pid_field => named = v.int() as i32 as i64,
                        (n, v) if n == *name => text = v.bytes().to_vec(),
                        _ => {}
                    }
                }
                add(&kind.name, &lines::fields_body(&kind.message, body)?);
                self.names
                    .push((named, String::from_utf8_lossy(&text).into_owned(), true));
            }
            Shape::Other => add(&kind.name, &lines::fields_body(&kind.message, body)?),
        }
        Ok(false)
    }

    fn push_syscall(&mut self, ts: u64, offset: u64, call: Syscall) {
        let body = Body::Syscall(Box::new(call));
        self.rows.push(Row {
            ts,
            seq: SYSCALL_SEQ,
            packet: offset,
            body,
        });
    }

    /// The compact encoding: timestamps delta-encoded within the bundle, task names as
    /// indices into its intern table. A switch does not repeat the previous task; it is
    /// the one the CPU switched to before (unknown, 0, for the bundle's first switch).
    fn read_compact_sched(
        &mut self,
        s: &Schema,
        compact: &[u8],
        cpu: u64,
        offset: u64,
    ) -> Result<(), Malformed> {
        let c = &s.compact;
        let mut names: Vec<&[u8]> = Vec::new();
        let mut columns: HashMap<u32, Vec<u64>> = HashMap::new();
        for field in fields(compact) {
            match field? {
                (n, v) if n == c.intern_table => names.push(v.bytes()),
                (n, v) => push_ints(v, columns.entry(n).or_default())?,
            }
        }
        let column = |n: u32| columns.get(&n).map(Vec::as_slice).unwrap_or_default();
        let at = |n: u32, i: usize| column(n).get(i).copied().unwrap_or(0);
        let name_at = |n: u32, i: usize| -> &[u8] {
            column(n)
                .get(i)
                .and_then(|&k| names.get(k as usize))
                .copied()
                .unwrap_or_default()
        };
        let (mut ts, mut prev) = (0u64, 0i64);
        for (i, delta) in column(c.switch_timestamp).iter().enumerate() {
            ts = ts.wrapping_add(*delta);
            let next_pid = at(c.switch_next_pid, i) as i32 as i64;
            let comm = name_at(c.switch_next_comm_index, i);
            self.sched_names
                .push((next_pid, String::from_utf8_lossy(comm).into_owned()));
            let mut body = format!(
                "prev_pid={prev} prev_state={} ==> next_comm=",
                at(c.switch_prev_state, i) as i64
            )
            .into_bytes();
            lines::push_clean(&mut body, comm);
            let _ = write!(
                body,
                " next_pid={next_pid} next_prio={}",
                at(c.switch_next_prio, i) as i32
            );
            self.push_line(ts, cpu, prev, "sched_switch", &body, offset);
            prev = next_pid;
        }
        ts = 0;
        for (i, delta) in column(c.waking_timestamp).iter().enumerate() {
            ts = ts.wrapping_add(*delta);
            let pid = at(c.waking_pid, i) as i32 as i64;
            let comm = name_at(c.waking_comm_index, i);
            self.sched_names
                .push((pid, String::from_utf8_lossy(comm).into_owned()));
            let mut body = b"comm=".to_vec();
            lines::push_clean(&mut body, comm);
            let _ = write!(
                body,
                " pid={pid} prio={} target_cpu={:03}",
                at(c.waking_prio, i) as i32,
                at(c.waking_target_cpu, i) as i32
            );
            self.push_line(ts, cpu, 0, "sched_waking", &body, offset);
        }
        Ok(())
    }

    fn push_line(&mut self, ts: u64, cpu: u64, pid: i64, name: &str, body: &[u8], offset: u64) {
        let line = lines::line(ts, cpu, pid, name, ": ", body);
        self.rows.push(Row {
            ts,
            seq: 0,
            packet: offset,
            body: Body::Line(line),
        });
    }

    fn read_process_tree(&mut self, s: &Schema, tree: &[u8]) -> Result<(), Malformed> {
        let t = &s.tree;
        for field in fields(tree) {
            match field? {
                (n, Value::Bytes(process)) if n == t.processes => {
                    let (mut pid, mut first) = (0, None);
                    for field in fields(process) {
                        match field? {
                            (n, v) if n == t.process_pid => pid = v.int() as i32 as i64,
                            (n, v) if n == t.process_cmdline && first.is_none() => {
                                first = Some(v.bytes())
                            }
                            _ => {}
                        }
                    }
                    if let Some(cmdline) = first.filter(|c| !c.is_empty()) {
                        // cmdline[0] is a path for native daemons, the package name for apps.
                        let base = cmdline
                            .rsplit(|&b| b == b'/')
                            .next()
                            .filter(|b| !b.is_empty());
                        let name = String::from_utf8_lossy(base.unwrap_or(cmdline)).into_owned();
                        self.names.push((pid, name, false));
                    }
                }
                (n, Value::Bytes(thread)) if n == t.threads => {
                    let (mut tid, mut name) = (0, &[][..]);
                    for field in fields(thread) {
                        match field? {
                            (n, v) if n == t.thread_tid => tid = v.int() as i32 as i64,
                            (n, v) if n == t.thread_name => name = v.bytes(),
                            _ => {}
                        }
                    }
                    if !name.is_empty() {
                        self.names
                            .push((tid, String::from_utf8_lossy(name).into_owned(), true));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn read_stats(&mut self, s: &Schema, stats: &[u8]) -> Result<(), Malformed> {
        let (mut start, mut cpus) = (false, Vec::new());
        for field in fields(stats) {
            match field? {
                (n, v) if n == s.stats.phase => start = v.uint() == START_OF_TRACE,
                (n, Value::Bytes(cpu_stats)) if n == s.stats.cpu_stats => {
                    let (mut cpu, mut lost) = (0, 0u64);
                    for field in fields(cpu_stats) {
                        match field? {
                            (n, v) if n == s.stats.cpu => cpu = v.uint(),
                            (n, v) if n == s.stats.overrun || n == s.stats.dropped_events => {
                                lost = lost.wrapping_add(v.uint())
                            }
                            _ => {}
                        }
                    }
                    cpus.push((cpu, lost));
                }
                _ => {}
            }
        }
        self.stats.push((start, cpus));
        Ok(())
    }

    fn read_system_info(&mut self, s: &Schema, info: &[u8]) -> Result<(), Malformed> {
        for field in fields(info) {
            if let (n, Value::Bytes(utsname)) = field? {
                if n != s.packet.utsname {
                    continue;
                }
                for field in fields(utsname) {
                    if let (n, Value::Bytes(machine)) = field? {
                        if n == s.packet.machine && !machine.is_empty() {
                            self.machine = Some(String::from_utf8_lossy(machine).into_owned());
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
