//! ftrace text (`trace` and `trace_pipe`), with or without the tgid and irq-flags columns:
//! `comm-pid [cpu] flags secs.frac: event: body`. Block tracepoints and `blk` tracer lines
//! become block rows; sqlwa's `tracing_mark_write` markers and syscall tracepoints get
//! their own record kinds on the same timeline; any other event is kept as `other`.
//!
//! Every line is read by the general grammar (`parse_line`), or by a fast path that takes
//! the usual shapes and answers as the general one would (`parse_line_fast`):
//! - `header`: what every line starts with, `comm-pid [cpu] flags secs.frac:`, the
//!   comment and `[LOST n EVENTS]` lines, and the `perf script` lines refused;
//! - `prefix`: the fast path's scan of a line's start, and its memo of starts seen;
//! - `block`: block tracepoints and `blk` tracer lines;
//! - `syscall`: syscall tracepoints, in both print formats;
//! - `marker`: `tracing_mark_write` markers;
//! - `scan`: byte-level helpers (digits eight at a time, blanks skipped backwards).
//!
//! The strings rows repeat go through the table's dictionaries (`crate::intern`).
mod block;
mod header;
mod marker;
mod prefix;
mod scan;
mod syscall;
#[cfg(test)]
mod tests;

use std::path::Path;

use crate::error::{Location, ParseError};
use crate::intern::Decoded;
use crate::report::ParseReport;
use crate::table::{Action, Event, EventTable, Operation, RecordKind, RowWriter};
use crate::text::{reject_line, skip_blanks, word_end, Cursor, Lines, SegmentReader};
use block::{fast_block, push_blk_tracer_line, push_block_tracepoint};
use header::{fast_header, non_event_line, parse_header, perf_script_line, Header, Losses};
use marker::push_marker;
use prefix::PrefixMemo;
use scan::load;
use syscall::{read_syscall_text, syscall_print_format, syscall_tracepoint, SyscallText};

pub fn read(
    path: &Path,
    lenient: bool,
    table: &mut EventTable,
    report: &mut ParseReport,
) -> Result<(), ParseError> {
    crate::text::read_whole(path, FileReader::new(path, lenient), table, report)
}

/// Reads `path` as [`read`] does into tables of about `rows` rows (whole segments of the
/// file), each handed to `sink` as it fills, the counts of its rows added to `report`.
pub fn read_in_chunks(
    path: &Path,
    lenient: bool,
    report: &mut ParseReport,
    rows: usize,
    sink: &mut dyn FnMut(EventTable) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    crate::text::read_in_chunks(path, FileReader::new(path, lenient), report, rows, sink)
}

/// What reading one file carries from one segment of its lines to the next.
struct FileReader<'p> {
    path: &'p Path,
    lenient: bool,
    fast: FastPath,
    counts: LineCounts,
}

impl<'p> FileReader<'p> {
    fn new(path: &'p Path, lenient: bool) -> Self {
        FileReader {
            path,
            lenient,
            fast: FastPath::default(),
            counts: LineCounts::default(),
        }
    }
}

impl SegmentReader for FileReader<'_> {
    fn read(
        &mut self,
        lines: &mut Lines<'_>,
        table: &mut EventTable,
        report: &mut ParseReport,
    ) -> Result<(), ParseError> {
        // Text rows have no sequence numbers and few errors: leave those columns untouched.
        table.defer_zero_columns();
        let mut rows = table.writer();
        for (line_no, line) in lines {
            match parse_line_fast(line, &mut rows, &mut self.counts, &mut self.fast) {
                Ok(()) => {}
                Err(_) if perf_script_line(line) => {
                    return Err(ParseError::bad(
                        self.path,
                        Location::Line(line_no),
                        PERF_SCRIPT,
                    ))
                }
                Err(reason) => reject_line(
                    self.path,
                    line_no,
                    line,
                    "an ftrace line",
                    reason,
                    self.lenient,
                    report,
                )?,
            }
        }
        Ok(())
    }

    /// The fast path's RWBS memo holds the table's dictionary codes.
    fn new_table(&mut self) {
        self.fast = FastPath::default();
    }

    /// The file's skipped lines and losses into `report`.
    fn finish(self, report: &mut ParseReport) {
        report.skipped_lines += self.counts.skipped_lines;
        report.lost_events += self.counts.losses.total();
    }
}

/// Why `perf script` text is refused, even with `lenient`: every line of it would be.
const PERF_SCRIPT: &str = "this is `perf script` output, which sqlwa does not read; capture \
    the block events with blktrace (`blktrace -d /dev/DEV`, then give sqlwa the \
    DEV.blktrace.* files or blkparse's text of them) or read tracefs's own text (`cat \
    /sys/kernel/tracing/trace` with the block events enabled)";

/// What the lines of one file that carry no event add up to.
#[derive(Debug, Default, PartialEq)]
struct LineCounts {
    /// Comment and `[LOST …]` lines.
    skipped_lines: u64,
    losses: Losses,
}

/// A line by the general grammar: a comment or `[LOST n EVENTS]` line (counted), else a
/// header and an event.
fn parse_line(
    line: &[u8],
    table: &mut RowWriter<'_>,
    counts: &mut LineCounts,
) -> Result<(), &'static str> {
    if let Some(losses) = non_event_line(line) {
        counts.losses.add(losses);
        counts.skipped_lines += 1;
        return Ok(());
    }
    let h = parse_header(line)?;
    push_line(table, h)
}

/// What the fast path remembers across lines of one file.
#[derive(Default)]
struct FastPath {
    /// Line starts up to the timestamp.
    starts: PrefixMemo,
    /// Each RWBS string's operation and flags, by its code.
    rwbs: Decoded<(Operation, u16)>,
}

/// `parse_line` with the fast path: lines of the common shape are read in one forward
/// scan (`fast_header`, `push_line_fast`) with what earlier lines taught (`FastPath`);
/// anything else, and anything the fast path is not sure about, goes the general way with
/// the same result.
fn parse_line_fast(
    line: &[u8],
    table: &mut RowWriter<'_>,
    counts: &mut LineCounts,
    fast: &mut FastPath,
) -> Result<(), &'static str> {
    match fast_header(line, &mut fast.starts) {
        Some(h) => push_line_fast(table, h, &mut fast.rwbs),
        None => parse_line(line, table, counts),
    }
}

/// `push_line` for block tracepoints of the usual shape (`fast_block`) and sqlwa markers;
/// everything else goes to `push_line`.
#[inline]
fn push_line_fast(
    table: &mut RowWriter<'_>,
    h: Header<'_>,
    rwbs_decoded: &mut Decoded<(Operation, u16)>,
) -> Result<(), &'static str> {
    let rest = h.rest;
    let mut p = 0;
    skip_blanks(rest, &mut p);
    // Other whitespace, and syscalls in their print format: the general way.
    if rest.get(p).is_none_or(|c| c.is_ascii_whitespace()) || rest[p..].starts_with(b"sys_") {
        return push_line(table, h);
    }
    let Some((name, kind)) = event_name(rest, p) else {
        return push_line(table, h);
    };
    let mut q = p + name.len() + 1;
    skip_blanks(rest, &mut q);
    let body = &rest[q..];
    match kind {
        NameKind::Block(action) if fast_block(table, rwbs_decoded, &h, action, name, body) => {
            Ok(())
        }
        NameKind::Marker => {
            push_marker(table, h.event(RecordKind::Marker), h.comm, body);
            Ok(())
        }
        _ => push_line(table, h),
    }
}

/// The event name at `p` (without its colon) and what it stands for; the commonest
/// names are told by their first sixteen bytes, without a scan for their end. `None` if
/// the word at `p` does not end in a colon.
#[inline(always)]
fn event_name(rest: &[u8], p: usize) -> Option<(&[u8], NameKind)> {
    let word = |i: usize| rest.get(p + i..p + i + 8).map(load);
    let common = match (word(0), word(8)) {
        (Some(BLOCK_RQ), Some(ISSUE)) => Some((14, NameKind::Block(Action::Issue))),
        (Some(BLOCK_RQ), Some(COMPLET)) if rest.get(p + 16..p + 19) == Some(b"e: ") => {
            Some((17, NameKind::Block(Action::Complete)))
        }
        (Some(TRACING), Some(MARK_WRI)) if rest.get(p + 16..p + 20) == Some(b"te: ") => {
            Some((18, NameKind::Marker))
        }
        _ => None,
    };
    if let Some((len, kind)) = common {
        return Some((&rest[p..p + len], kind));
    }
    let name = rest[p..word_end(rest, p)].strip_suffix(b":")?;
    Some((name, name_kind(name)))
}

const BLOCK_RQ: u64 = u64::from_le_bytes(*b"block_rq");
const ISSUE: u64 = u64::from_le_bytes(*b"_issue: ");
const COMPLET: u64 = u64::from_le_bytes(*b"_complet");
const TRACING: u64 = u64::from_le_bytes(*b"tracing_");
const MARK_WRI: u64 = u64::from_le_bytes(*b"mark_wri");

/// What an event name stands for, as far as the fast path cares.
#[derive(Clone, Copy)]
enum NameKind {
    Block(Action),
    Marker,
    Other,
}

fn name_kind(name: &[u8]) -> NameKind {
    match Action::from_tracepoint(name) {
        Some(action) => NameKind::Block(action),
        None if name == b"tracing_mark_write" => NameKind::Marker,
        None => NameKind::Other,
    }
}

/// Everything after the header: a syscall in its print format, else `push_event_line`.
fn push_line(table: &mut RowWriter<'_>, h: Header<'_>) -> Result<(), &'static str> {
    let mut e = h.event(RecordKind::Block);
    let rest = h.rest.trim_ascii_start();
    if rest.starts_with(b"sys_") {
        if let Some(SyscallText { name, body }) = syscall_print_format(&mut e, rest)? {
            push_text_row(table, &e, h.comm, name, body);
            return Ok(());
        }
    }
    push_event_line(table, e, &h)
}

/// A line that is not a syscall in its print format: `event: body` or a `blk` tracer line.
fn push_event_line(
    table: &mut RowWriter<'_>,
    e: Event,
    h: &Header<'_>,
) -> Result<(), &'static str> {
    let mut c = Cursor::new(h.rest);
    let first = c.word().ok_or("nothing after the timestamp")?;
    if let Some(name) = first.strip_suffix(b":") {
        c.skip_spaces();
        push_named_event(table, e, name, c.rest(), h.comm)
    } else {
        push_blk_tracer_line(table, e, h.rest, h.comm)
    }
}

/// `event: body`: a block tracepoint, a marker, a syscall tracepoint or any other event.
fn push_named_event(
    table: &mut RowWriter<'_>,
    mut e: Event,
    name: &[u8],
    body: &[u8],
    comm: &[u8],
) -> Result<(), &'static str> {
    if let Some(action) = Action::from_tracepoint(name) {
        return push_block_tracepoint(table, e, action, name, body, comm);
    }
    if name == b"tracing_mark_write" {
        e.kind = RecordKind::Marker;
        push_marker(table, e, comm, body);
        return Ok(());
    }
    let (kind, name) = syscall_tracepoint(name).unwrap_or((RecordKind::Other, name));
    e.kind = kind;
    // Interned before the text is read: a syscall exit rejected for its return value
    // still leaves its name in the dictionary, as it always has.
    let name_code = table.names().intern(name);
    read_syscall_text(&mut e, body)?;
    let comm_code = table.comms().intern(comm);
    table.push(&e, comm_code, 0, name_code, body);
    Ok(())
}

/// A row without RWBS: its name and process name interned (in that order, as on every
/// path, so the fast and general paths number them alike), `text` kept as is.
fn push_text_row(table: &mut RowWriter<'_>, e: &Event, comm: &[u8], name: &[u8], text: &[u8]) {
    let name_code = table.names().intern(name);
    let comm_code = table.comms().intern(comm);
    table.push(e, comm_code, 0, name_code, text);
}
