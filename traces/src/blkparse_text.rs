//! blkparse default text output:
//! `maj,min cpu seq sec.nsec pid action rwbs body`, plus header comments and the
//! trailing per-CPU / total summary blocks, which are skipped and counted.
use std::path::Path;

use crate::error::ParseError;
use crate::report::ParseReport;
use crate::rwbs::{parse_rwbs, sized_operation};
use crate::table::{Action, Event, EventTable, RecordKind, RowWriter};
use crate::text::{
    parse_body, parse_dev, parse_i64, parse_time_ns, parse_u32, parse_u64, reject_line,
    request_bytes, word_end, Cursor, Lines, SegmentReader,
};

pub fn read(
    path: &Path,
    lenient: bool,
    table: &mut EventTable,
    report: &mut ParseReport,
) -> Result<(), ParseError> {
    let reader = FileReader::new(path, lenient, wrapped_reach(path)?);
    crate::text::read_whole(path, reader, table, report)
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
    let reader = FileReader::new(path, lenient, wrapped_reach(path)?);
    crate::text::read_in_chunks(path, reader, report, rows, sink)
}

/// What reading one file carries from one segment of its lines to the next.
struct FileReader<'p> {
    path: &'p Path,
    lenient: bool,
    in_summary: bool,
    /// How far blkparse's wrapped times reach before its first event ([`wrapped_reach`]):
    /// every time is moved on by it, so that the earliest event is at 0.
    reach: u64,
    /// Events whose wrapped time was unwrapped.
    unwrapped: u64,
}

impl<'p> FileReader<'p> {
    fn new(path: &'p Path, lenient: bool, reach: u64) -> Self {
        FileReader {
            path,
            lenient,
            in_summary: false,
            reach,
            unwrapped: 0,
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
        let mut rows = table.writer();
        for (line_no, line) in lines {
            match classify(line, &mut self.in_summary) {
                LineKind::Skip => {
                    report.skipped_lines += 1;
                    continue;
                }
                LineKind::Event => {}
            }
            match parse_event_line(line, &mut rows, self.reach) {
                Ok(unwrapped) => self.unwrapped += u64::from(unwrapped),
                Err(_) if self.in_summary => report.skipped_lines += 1,
                Err(reason) => reject_line(
                    self.path,
                    line_no,
                    line,
                    "a blkparse event line",
                    reason,
                    self.lenient,
                    report,
                )?,
            }
        }
        Ok(())
    }

    fn finish(self, report: &mut ParseReport) {
        report.unwrapped_times += self.unwrapped;
        report.time_shift_ns = report.time_shift_ns.max(self.reach);
    }
}

enum LineKind {
    Skip,
    Event,
}

/// Comment, blank and summary lines are not events; summary begins at `CPUn (dev):`,
/// `Total (dev):` or (`blkparse -s`) the first process's `NAME (PID)` and lasts to the
/// end of the output.
fn classify(line: &[u8], in_summary: &mut bool) -> LineKind {
    let trimmed = line.trim_ascii_start();
    // `Input file NAME added` is what blkparse says about each file it opened.
    if trimmed.is_empty() || trimmed[0] == b'#' || trimmed.starts_with(b"Input file ") {
        return LineKind::Skip;
    }
    if starts_with_device(trimmed) {
        return LineKind::Event;
    }
    if line.starts_with(b"CPU") || line.starts_with(b"Total (") || process_stats_header(line) {
        *in_summary = true;
    }
    if *in_summary {
        LineKind::Skip
    } else {
        LineKind::Event
    }
}

/// Whether a line starts with `maj,min`, as every event line does.
fn starts_with_device(trimmed: &[u8]) -> bool {
    let first = &trimmed[..word_end(trimmed, 0)];
    first.contains(&b',') && first.iter().all(|&c| c.is_ascii_digit() || c == b',')
}

/// `blkparse -s` heads each process's statistics with `NAME (PID)` at the start of a line.
fn process_stats_header(line: &[u8]) -> bool {
    let Some(inner) = line.strip_suffix(b")") else {
        return false;
    };
    let Some(open) = memchr::memrchr(b'(', inner) else {
        return false;
    };
    let pid = &inner[open + 1..];
    open > 1
        && inner[open - 1] == b' '
        && !line[0].is_ascii_whitespace()
        && !pid.is_empty()
        && pid.iter().all(u8::is_ascii_digit)
}

/// Reads one event line into `table`; whether its time was a wrapped one, unwrapped.
fn parse_event_line(
    line: &[u8],
    table: &mut RowWriter<'_>,
    reach: u64,
) -> Result<bool, &'static str> {
    let mut c = Cursor::new(line);
    let (dev_major, dev_minor) = c.word().and_then(parse_dev).ok_or("bad device")?;
    let cpu = c.word().and_then(parse_u32).ok_or("bad cpu")?;
    let sequence = c.word().and_then(parse_u64).ok_or("bad sequence")?;
    let printed = c.word().and_then(parse_time_ns).ok_or("bad time")?;
    let wrapped = wrapped_negative(printed);
    let time_ns = match wrapped {
        // A pre-scan that did not run (the file is no regular file) found no reach.
        true if reach == 0 => return Err(WRAPPED_TIME),
        true => reach - (WRAPPED_ZERO_NS - printed),
        false => printed + reach,
    };
    let pid = c.word().and_then(parse_u32).ok_or("bad pid")?;
    let letters = c.word().ok_or("missing action")?;
    let action = Action::from_letters(letters).ok_or("unknown action")?;
    let rwbs = c.word().ok_or("missing RWBS")?;
    let e = Event {
        time_ns,
        dev_major,
        dev_minor,
        cpu,
        sequence,
        pid,
        ..Event::default()
    };
    push_block_event(table, e, action, rwbs, c.rest(), b"", 0)?;
    Ok(wrapped)
}

/// blkparse prints an event's time `t - genesis_time` (u64 ns, genesis the earliest of
/// the records it had read when it began) as `%5T.%9t`: `(int) SECONDS(t)` and
/// `(int) NANO_SECONDS(t)`, SECONDS = t / 10^9 and NANO_SECONDS = t % 10^9 (blkparse_fmt.c).
/// An event d ns before the genesis (a CPU's records read in a later batch) is
/// t = 2^64 - d; its seconds, cut to 32 bits by the cast, are 18446744073 - 4 * 2^32 =
/// 1266874889 for d < 0.709551616 s. So the printed seconds.nanoseconds, read as ns, are
/// 2^64 - d - 4 * 2^32 * 10^9 = WRAPPED_ZERO_NS - d exactly, and d = WRAPPED_ZERO_NS -
/// printed.
const WRAPPED_ZERO_NS: u64 = 1_266_874_889_709_551_616;

/// How far before the first event a wrapped time is still recognised: a day (a real
/// relative time never comes within 40 years of `WRAPPED_ZERO_NS`).
const WRAP_WINDOW_NS: u64 = 86_400_000_000_000;

const WRAPPED_TIME: &str = "a time before the trace's first event, which blkparse printed \
    wrapped around to about 40 years, in a file that cannot be read twice to unwrap it; \
    give the text as a regular file, or parse the blktrace binary files themselves";

/// How far the wrapped times of the blkparse text `path` reach before its first event:
/// the largest d of them (0 when none wraps, or when `path` is no regular file and cannot
/// be read twice). Found by a scan for their seconds, `12667…`/`12668…` (the window
/// of a day below 1266874889), each hit's line then read as an event line.
fn wrapped_reach(path: &Path) -> Result<u64, ParseError> {
    let file = std::fs::File::open(path).map_err(|e| ParseError::io(path, e))?;
    let Some(map) = crate::input::map_file(&file) else {
        return Ok(0);
    };
    let data = &map[..];
    let hits = memchr::memmem::find_iter(data, b" 12667")
        .chain(memchr::memmem::find_iter(data, b" 12668"));
    let mut reach = 0;
    for hit in hits {
        let start = memchr::memrchr(b'\n', &data[..hit]).map_or(0, |i| i + 1);
        let end = memchr::memchr(b'\n', &data[hit..]).map_or(data.len(), |i| hit + i);
        if let Some(printed) = event_time(&data[start..end]).filter(|&t| wrapped_negative(t)) {
            reach = reach.max(WRAPPED_ZERO_NS - printed);
        }
    }
    Ok(reach)
}

/// The printed time of an event line (device, cpu, sequence, time), or None.
fn event_time(line: &[u8]) -> Option<u64> {
    let mut c = Cursor::new(line);
    c.word().and_then(parse_dev)?;
    c.word().and_then(parse_u32)?;
    c.word().and_then(parse_u64)?;
    c.word().and_then(parse_time_ns)
}

/// Whether a printed time is blkparse's wrap of a negative one.
fn wrapped_negative(time_ns: u64) -> bool {
    (WRAPPED_ZERO_NS - WRAP_WINDOW_NS..WRAPPED_ZERO_NS).contains(&time_ns)
}

/// Fills a block event from its action, RWBS and body text and appends it. Used by the
/// blkparse reader and by ftrace's block tracepoints and `blk` tracer lines.
/// `fallback_comm` names the task when the body has no `[comm]` group. A message record
/// (`m N <text>`, action Notify) becomes a message row whose text is the body.
pub fn push_block_event(
    table: &mut RowWriter<'_>,
    mut e: Event,
    action: Action,
    rwbs: &[u8],
    body_text: &[u8],
    fallback_comm: &[u8],
    name: u32,
) -> Result<(), &'static str> {
    if action == Action::Notify {
        // The message text is kept, not interpreted.
        let mut text = Cursor::new(body_text);
        text.skip_spaces();
        e.kind = RecordKind::Message;
        e.action = action;
        let comm_code = table.comms().intern(fallback_comm);
        let rwbs_code = table.rwbs_values().intern(rwbs);
        table.push(&e, comm_code, rwbs_code, name, text.rest());
        return Ok(());
    }
    let (operation, flags) = parse_rwbs(rwbs).ok_or("bad RWBS")?;
    let body = parse_body(body_text)?;
    e.kind = RecordKind::Block;
    e.action = action;
    e.flags = flags;
    e.sector = body.sector.unwrap_or(0);
    e.sectors = body.sectors.unwrap_or(0);
    e.bytes = request_bytes(body.bytes, e.sectors);
    e.operation = sized_operation(operation, flags, e.bytes);
    let mut comm = fallback_comm;
    if let Some(b) = body.bracket {
        if matches!(action, Action::Complete | Action::Requeue) {
            e.error = parse_i64(b)
                .and_then(|v| i32::try_from(v).ok())
                .ok_or("bad error code")?;
        } else {
            comm = b;
        }
    }
    // blkparse's rendering of a pid no process-notify record named (printf of a NULL
    // name): empty, as the binary reader leaves such a pid's rows.
    if comm == b"(null)" {
        comm = b"";
    }
    e.remap = body.remap;
    e.aux = match action {
        Action::Split => body.split_to.unwrap_or(0),
        Action::Unplug | Action::UnplugTimer => body.trailing.unwrap_or(0),
        _ => 0,
    };
    let comm_code = table.comms().intern(comm);
    let rwbs_code = table.rwbs_values().intern(rwbs);
    table.push(&e, comm_code, rwbs_code, name, b"");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{flags, Operation};

    fn parse_lines(text: &str) -> EventTable {
        let mut t = EventTable::new();
        let mut summary = false;
        for line in text.lines() {
            if let LineKind::Event = classify(line.as_bytes(), &mut summary) {
                parse_event_line(line.as_bytes(), &mut t.writer(), 0).unwrap();
            }
        }
        t
    }

    /// Lines of an eMMC trace of a kernel before 2.6.37, which prints a barrier as `B`
    /// (`blk_fill_rwbs`: the operation, then A B S M): jbd2's commit block, a barrier
    /// write, and the empty barrier that is the cache flush alone, in both forms blkparse
    /// versions print a request without sectors.
    #[test]
    fn barriers_of_old_kernels() {
        let t = parse_lines(
            "179,0    0      101     1.000000000   120  Q WBS 4717976 + 8 [jbd2/mmcblk0p2-]\n\
             179,0    0      102     1.000000100   120  D WBS 4717976 + 8 [jbd2/mmcblk0p2-]\n\
             179,0    0      103     1.000000200   120  Q WBS 0 + 0 [jbd2/mmcblk0p2-]\n\
             179,0    0      104     1.000000300   120  D  WB [jbd2/mmcblk0p2-]\n\
             179,0    0      105     1.000000400     0  C WBS 0 [0]\n",
        );
        let p = flags::PREFLUSH;
        let rows: Vec<_> = (0..t.len())
            .map(|i| (t.rwbs_at(i), t.operation_at(i), t.flags[i], t.bytes[i]))
            .collect();
        assert_eq!(
            rows,
            [
                ("WBS", Operation::Write, p | flags::SYNC, 4096),
                ("WBS", Operation::Write, p | flags::SYNC, 4096),
                ("WBS", Operation::Flush, p | flags::SYNC, 0),
                ("WB", Operation::Flush, p, 0),
                ("WBS", Operation::Flush, p | flags::SYNC, 0),
            ]
        );
    }

    /// What blkparse 1.2 printed for per-CPU files whose second CPU's second record is 4 ms
    /// before the first record of all, and for pids no process-notify record named.
    #[test]
    fn wrapped_times_are_refused_and_unnamed_pids_are_empty() {
        let mut t = EventTable::new();
        let wrapped = b"  8,0    1        2 1266874889.705551616     2  D   W 32 + 8 [(null)]";
        assert_eq!(
            parse_event_line(wrapped, &mut t.writer(), 0),
            Err(WRAPPED_TIME)
        );
        let t = parse_lines("  8,0    1        1     0.000000000     2  D   W 24 + 8 [(null)]\n");
        assert_eq!(t.comm_at(0), "");
        assert!(!t.comms.values.iter().any(|name| name == "(null)"));
    }

    /// The same line, in a file whose wrapped times reach 5 ms before its first event: the
    /// event was 4 ms before it (1266874889.709551616 - 1266874889.705551616), so 1 ms
    /// after the earliest; an unwrapped event moves on by the reach.
    #[test]
    fn wrapped_times_unwrap_by_the_reach() {
        let mut t = EventTable::new();
        let wrapped = b"  8,0    1        2 1266874889.705551616     2  D   W 32 + 8 [x]";
        let plain = b"  8,0    0        1     0.000000007     2  D   W 24 + 8 [x]";
        assert_eq!(
            parse_event_line(wrapped, &mut t.writer(), 5_000_000),
            Ok(true)
        );
        assert_eq!(
            parse_event_line(plain, &mut t.writer(), 5_000_000),
            Ok(false)
        );
        assert_eq!(t.time_ns, [1_000_000, 5_000_007]);
    }

    /// `blkparse -s` (keks): the per-process statistics come before the per-CPU ones.
    #[test]
    fn per_process_statistics_are_summary() {
        let t = parse_lines(
            "  8,52   3     1196     6.113487427     0  C   W 1000214240 + 8 [0]\n\
             alertmanager (9463)\n \
             Reads Queued:           0,        0KiB\t Writes Queued:           0,        0KiB\n\
             scheduler.rb:73 (1052093)\n \
             Read Dispatches:        0,        0KiB\t Write Dispatches:        0,        0KiB\n\
             CPU0 (keks):\n",
        );
        assert_eq!(t.len(), 1);
        let mut summary = false;
        assert!(matches!(
            classify(b"  8,52   3 1 6.1 0 C W 1 + 8 [0]", &mut summary),
            LineKind::Event
        ));
        assert!(!summary);
        for line in [&b"0anacron (77)"[..], b"kworker/u8:2 (12)"] {
            let mut summary = false;
            assert!(matches!(classify(line, &mut summary), LineKind::Skip) && summary);
        }
    }

    #[test]
    fn every_body_form() {
        let t = parse_lines(
            "259,0    3        1     0.000000000  1867  A   W 746579600 + 8 <- (253,3) 578805392\n\
             259,0    3        5     0.000005809  1867  P   N [dmcrypt_write/2]\n\
             259,0    3       11     0.023558761     0  C   W 763360912 + 16 [0]\n\
             259,0    3       12     1.000000001   100  C  FN 0 [-5]\n\
             259,0    3       13     1.000000002   100  U   N [kworker/1:1] 4\n\
             259,0    3       14     1.000000003   100  X   W 100 / 108 [fio]\n\
             8,0      1       15     1.000000004   100  D FWFS 8 + 8 [jbd2/sda1-8]\n\
             8,0      1        0     1.000000005     0  m   N cfq workload slice:100\n",
        );
        assert_eq!(t.len(), 8);
        assert_eq!(t.action_at(0), Action::Remap);
        assert_eq!(t.remap_at(0), Some((253, 3, 578805392)));
        assert_eq!(t.comm_at(1), "dmcrypt_write/2");
        assert_eq!(
            (t.sector[2], t.sectors[2], t.bytes[2], t.error[2]),
            (763360912, 16, 8192, 0)
        );
        assert_eq!((t.operation_at(3), t.error[3]), (Operation::Flush, -5));
        assert_eq!((t.action_at(4), t.aux_at(4)), (Action::Unplug, 4));
        assert_eq!((t.action_at(5), t.aux_at(5)), (Action::Split, 108));
        assert_eq!(t.flags[6], flags::PREFLUSH | flags::FUA | flags::SYNC);
        assert_eq!(t.comm_at(6), "jbd2/sda1-8");
        assert_eq!(t.kind_at(7), RecordKind::Message);
        assert_eq!(t.text_at(7), "cfq workload slice:100");
        assert_eq!(t.time_ns[4], 1_000_000_002);
    }
}
