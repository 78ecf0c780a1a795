//! ftrace text (`trace` and `trace_pipe`), with or without the tgid and irq-flags columns:
//! `comm-pid [cpu] flags secs.frac: event: body`. Block tracepoints and `blk` tracer lines
//! become block rows; sqlwa's `tracing_mark_write` markers and syscall tracepoints get
//! their own record kinds on the same timeline; any other event is kept as `other`.
use std::path::Path;

use crate::blkparse_text::push_block_event;
use crate::error::ParseError;
use crate::intern::{spread, Decoded};
use crate::report::ParseReport;
use crate::rwbs::parse_rwbs;
use crate::table::{Action, Event, EventTable, Operation, RecordKind, RowWriter};
use crate::text::{
    bytes_equal, for_each_line, is_blank, parse_dev, parse_hex, parse_i64, parse_time_ns,
    parse_u32, parse_u64, reject_line, scan, skip_blanks, word_end, Cursor,
};

pub fn read(
    path: &Path,
    lenient: bool,
    table: &mut EventTable,
    report: &mut ParseReport,
) -> Result<(), ParseError> {
    let mut fast = FastPath::default();
    // Text rows have no sequence numbers and few errors: leave those columns untouched.
    table.defer_zero_columns();
    let mut rows = table.writer();
    let result = for_each_line(path, |line_no, line| {
        match parse_line_fast(line, &mut rows, report, &mut fast) {
            Ok(()) => Ok(()),
            Err(reason) => reject_line(
                path,
                line_no,
                line,
                "an ftrace line",
                reason,
                lenient,
                report,
            ),
        }
    });
    drop(rows);
    table.undefer_zero_columns();
    result
}

/// The fields every ftrace line starts with.
struct Header<'a> {
    comm: &'a [u8],
    pid: u32,
    cpu: u32,
    time_ns: u64,
    /// Everything after the timestamp's colon.
    rest: &'a [u8],
}

impl Header<'_> {
    /// A row of `kind` with the header's time, CPU and pid, the rest left to the body.
    fn event(&self, kind: RecordKind) -> Event {
        Event {
            kind,
            time_ns: self.time_ns,
            cpu: self.cpu,
            pid: self.pid,
            ..Event::default()
        }
    }
}

fn parse_line(
    line: &[u8],
    table: &mut RowWriter<'_>,
    report: &mut ParseReport,
) -> Result<(), &'static str> {
    let trimmed = line.trim_ascii_start();
    if trimmed.is_empty() || trimmed[0] == b'#' {
        report.lost_events += overwritten_entries(trimmed);
        report.skipped_lines += 1;
        return Ok(());
    }
    if let Some(lost) = lost_events(trimmed) {
        report.lost_events += lost;
        report.skipped_lines += 1;
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
    report: &mut ParseReport,
    fast: &mut FastPath,
) -> Result<(), &'static str> {
    match fast_header(line, &mut fast.starts) {
        Some(h) => push_line_fast(table, h, &mut fast.rwbs),
        None => parse_line(line, table, report),
    }
}

/// `push_line` for the usual events: block tracepoints of the usual shape (`fast_block`),
/// syscalls in their print format and sqlwa markers; everything else goes to `push_line`.
#[inline]
fn push_line_fast(
    table: &mut RowWriter<'_>,
    h: Header<'_>,
    rwbs_decoded: &mut Decoded<(Operation, u16)>,
) -> Result<(), &'static str> {
    let rest = h.rest;
    let mut p = 0;
    skip_blanks(rest, &mut p);
    // Other whitespace (trimmed before the `sys_` test): the general way.
    if rest.get(p).is_none_or(|c| c.is_ascii_whitespace()) {
        return push_line(table, h);
    }
    if rest[p..].starts_with(b"sys_") {
        let mut e = h.event(RecordKind::Block);
        // Read once: what it is not, `push_event_line` takes, as `push_line` would.
        return match syscall_print_format(&mut e, &rest[p..])? {
            Some(syscall) => {
                push_syscall(table, &e, h.comm, syscall);
                Ok(())
            }
            None => push_event_line(table, e, &h),
        };
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
            let e = h.event(RecordKind::Marker);
            let name_code = table.names().intern(marker_event(body));
            let comm_code = table.comms().intern(h.comm);
            table.push(&e, comm_code, 0, name_code, body);
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

/// Everything after the header.
fn push_line(table: &mut RowWriter<'_>, h: Header<'_>) -> Result<(), &'static str> {
    let mut e = h.event(RecordKind::Block);
    let rest = h.rest.trim_ascii_start();
    if rest.starts_with(b"sys_") {
        if let Some(syscall) = syscall_print_format(&mut e, rest)? {
            push_syscall(table, &e, h.comm, syscall);
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

const BLOCK_RQ: u64 = u64::from_le_bytes(*b"block_rq");
const ISSUE: u64 = u64::from_le_bytes(*b"_issue: ");
const COMPLET: u64 = u64::from_le_bytes(*b"_complet");
const TRACING: u64 = u64::from_le_bytes(*b"tracing_");
const MARK_WRI: u64 = u64::from_le_bytes(*b"mark_wri");

/// The first eight bytes of `s` as a word, first byte lowest.
#[inline(always)]
fn load(s: &[u8]) -> u64 {
    u64::from_le_bytes(s[..8].try_into().expect("eight bytes"))
}

fn name_kind(name: &[u8]) -> NameKind {
    match Action::from_tracepoint(name) {
        Some(action) => NameKind::Block(action),
        None if name == b"tracing_mark_write" => NameKind::Marker,
        None => NameKind::Other,
    }
}

/// What an event name stands for, as far as the fast path cares.
#[derive(Clone, Copy)]
enum NameKind {
    Block(Action),
    Marker,
    Other,
}

/// The first `byte` in `s`: `memchr` costs more in its setup than in its search on the few
/// dozen bytes this looks through.
#[inline(always)]
fn find_byte(s: &[u8], byte: u8) -> Option<usize> {
    let at = scan(s, 0, |w| bytes_equal(w, byte), |c| c == byte);
    (at < s.len()).then_some(at)
}

/// `end` moved back over the ASCII whitespace before it, but not before `start`; runs of
/// spaces (the padding after `comm-pid`) eight at a time.
#[inline(always)]
fn skip_back_whitespace(line: &[u8], start: usize, mut end: usize) -> usize {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const SPACES: u64 = 0x2020_2020_2020_2020;
    while end >= start + 8 {
        let w = u64::from_le_bytes(line[end - 8..end].try_into().expect("eight bytes")) ^ SPACES;
        // High bit of each byte that is not a space, exactly.
        let not_space = (((w & LOW7) + LOW7) | w) & !LOW7;
        if not_space == 0 {
            end -= 8;
            continue;
        }
        end -= (not_space.leading_zeros() / 8) as usize;
        break;
    }
    while end > start && line[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    end
}

/// Digits from `*p` up to a blank or the end (at most 19, so no overflow) → the value,
/// with `*p` after them; `None` for anything else.
#[inline(always)]
fn number_word(s: &[u8], p: &mut usize) -> Option<u64> {
    let (v, n) = digits(s, p);
    (n > 0 && n <= 19 && s.get(*p).is_none_or(|&c| is_blank(c))).then_some(v)
}

/// The run of digits at `*p` → (value, how many), `*p` after them. The value wraps past
/// 19 digits; callers bound the count. Eight bytes at a time where the line has them.
#[inline(always)]
fn digits(s: &[u8], p: &mut usize) -> (u64, usize) {
    const POW10: [u64; 9] = [
        1,
        10,
        100,
        1_000,
        10_000,
        100_000,
        1_000_000,
        10_000_000,
        100_000_000,
    ];
    let start = *p;
    // Most numbers end within their first eight bytes: no loop, no scaling.
    if let Some(chunk) = s.get(start..start + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let n = leading_digits(w);
        if n < 8 {
            *p += n;
            return (
                if n == 0 {
                    0
                } else {
                    eight_digits(w << (8 * (8 - n)))
                },
                n,
            );
        }
    }
    let mut v = 0u64;
    while let Some(chunk) = s.get(*p..*p + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let n = leading_digits(w);
        if n > 0 {
            v = v
                .wrapping_mul(POW10[n])
                .wrapping_add(eight_digits(w << (8 * (8 - n))));
            *p += n;
        }
        if n < 8 {
            return (v, *p - start);
        }
    }
    while let Some(&c) = s.get(*p) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v.wrapping_mul(10).wrapping_add(d as u64);
        *p += 1;
    }
    (v, *p - start)
}

/// How many of the eight bytes of `w` (first byte lowest) lead with ASCII digits.
#[inline(always)]
fn leading_digits(w: u64) -> usize {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    // A byte is a digit iff its high nibble is 3 and adding 6 keeps it 3. Carries out of
    // a non-digit byte reach only later bytes, past the first non-digit.
    let bad = ((w & HIGH) ^ THREES) | ((w.wrapping_add(0x0606_0606_0606_0606) & HIGH) ^ THREES);
    (bad.trailing_zeros() / 8) as usize
}

/// The value of eight ASCII digits (first byte lowest; zero bytes count as leading zeros).
#[inline(always)]
fn eight_digits(w: u64) -> u64 {
    let w = (w & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561) >> 8;
    let w = (w & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601) >> 16;
    (w & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001) >> 32
}

/// What a line's bytes up to and including the CPU column's `[` say: where that `[` is,
/// the process name's range and the pid.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct TaskPrefix {
    /// Never 0 in a real prefix (a `[` at 0 has no ` ` before it): 0 marks an empty slot.
    open: usize,
    comm: (usize, usize),
    pid: u32,
}

/// `  comm-pid [` of a line of the usual shape, in one forward scan to the first `[` (which
/// must be the CPU column's, ` [`, as find_cpu_bracket would find) and back over the pid;
/// `None` for comments, `CPU` lines and any other shape. A function of the bytes up to
/// that `[` alone, which `PrefixMemo` relies on.
#[inline]
fn task_prefix(line: &[u8]) -> Option<TaskPrefix> {
    let mut start = 0;
    while line.get(start..start + 8).is_some_and(|w| w == b"        ") {
        start += 8;
    }
    start += line[start..]
        .iter()
        .position(|c| !c.is_ascii_whitespace())?;
    if line[start] == b'#' || line[start..].starts_with(b"CPU") {
        return None;
    }
    let open = start + find_byte(&line[start..], b'[')?;
    if open == 0 || line[open - 1] != b' ' {
        return None;
    }
    // `comm-pid` before it: the pid is the digits after the last dash.
    let end = skip_back_whitespace(line, start, open);
    let mut dash = end;
    let mut pid = 0u32;
    let mut scale = 1u32;
    while dash > start && line[dash - 1].is_ascii_digit() {
        if end - dash == 9 {
            return None;
        }
        pid += (line[dash - 1] - b'0') as u32 * scale;
        scale = scale.wrapping_mul(10);
        dash -= 1;
    }
    if dash == end || dash <= start || line[dash - 1] != b'-' {
        return None;
    }
    Some(TaskPrefix {
        open,
        comm: (start, dash - 1),
        pid,
    })
}

/// What a line's bytes before its timestamp say: `comm-pid`, the CPU and where the
/// timestamp starts.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct LinePrefix {
    task: TaskPrefix,
    cpu: u32,
    time_at: usize,
    /// Whether an irq-flags word stands between the CPU column and the timestamp.
    flags: bool,
}

/// `  comm-pid [cpu] flags ` of a line of the usual shape (flags optional); `None` for any
/// other (which `parse_header` then reads).
#[inline]
fn line_prefix(line: &[u8]) -> Option<LinePrefix> {
    let task = task_prefix(line)?;
    let mut p = task.open + 1;
    let (cpu, n) = digits(line, &mut p);
    if n == 0 || n > 9 || line.get(p) != Some(&b']') {
        return None;
    }
    // Optional irq-flags word, then `secs.frac:`.
    p += 1;
    skip_blanks(line, &mut p);
    let w = word_end(line, p);
    if w == p {
        return None;
    }
    let flags = line[w - 1] != b':';
    if flags {
        p = w;
        skip_blanks(line, &mut p);
    }
    Some(LinePrefix {
        task,
        cpu: cpu as u32,
        time_at: p,
        flags,
    })
}

/// Bytes a `PrefixMemo` compares: prefixes up to here are remembered.
const MEMO_BYTES: usize = 40;
const MEMO_WORDS: usize = MEMO_BYTES / 8;

/// The last `LinePrefix` of each of a few dozen distinct line starts. ftrace pads
/// `comm-pid` and the CPU to fixed widths, so one process's lines on one CPU start with
/// the same bytes up to the timestamp: five word compares replace the scan to `[`, the
/// walk back over the padding, the pid's and CPU's digits and the flags word. Two ways a
/// set: starts that share a set (one process on one CPU with two flag words, or a hash
/// collision) take turns in it without evicting each other.
#[derive(Clone)]
struct PrefixMemo {
    sets: Box<[[PrefixSlot; 2]; MEMO_SETS]>,
}

const MEMO_SETS: usize = 32;

impl Default for PrefixMemo {
    fn default() -> Self {
        PrefixMemo {
            sets: Box::new([[PrefixSlot::default(); 2]; MEMO_SETS]),
        }
    }
}

#[derive(Clone, Copy, Default)]
struct PrefixSlot {
    /// The prefix's bytes as words, first byte lowest, zero past its end.
    words: [u64; MEMO_WORDS],
    /// Which bytes of the words are the prefix's.
    masks: [u64; MEMO_WORDS],
    prefix: LinePrefix,
}

impl PrefixSlot {
    #[inline(always)]
    fn matches(&self, w: &[u64; MEMO_WORDS]) -> bool {
        let differ = (0..MEMO_WORDS).fold(0, |d, i| d | ((w[i] & self.masks[i]) ^ self.words[i]));
        differ == 0 && self.prefix.task.open != 0
    }
}

impl PrefixMemo {
    #[inline(always)]
    fn words(line: &[u8]) -> Option<[u64; MEMO_WORDS]> {
        let head = line.get(..MEMO_BYTES)?;
        Some(std::array::from_fn(|i| load(&head[8 * i..])))
    }

    /// A set from the first 36 bytes (comm-pid, the CPU and the flags on the usual lines),
    /// prefix or not: a shorter prefix then lands in a few sets (the bytes after it vary),
    /// which costs hits, never correctness.
    #[inline(always)]
    fn set(w: &[u64; MEMO_WORDS]) -> usize {
        spread(
            w[0] ^ w[1].rotate_left(17)
                ^ w[2].rotate_left(41)
                ^ w[3].rotate_left(29)
                ^ (w[4] & 0xFFFF_FFFF),
            MEMO_SETS.trailing_zeros(),
        )
    }

    #[inline(always)]
    fn find(&self, line: &[u8]) -> Option<LinePrefix> {
        let w = Self::words(line)?;
        let set = &self.sets[Self::set(&w)];
        set.iter()
            .find(|slot| slot.matches(&w))
            .map(|slot| slot.prefix)
    }

    /// Remembers a prefix that its bytes alone decide: with a flags word (without one, the
    /// timestamp's own colon told it apart) ended by a blank before `time_at`. Whether the
    /// blanks end at `time_at` is the next byte's to say: the timestamp's parse checks it.
    /// It takes its set's first way, the one there moving to the second.
    fn remember(&mut self, line: &[u8], prefix: LinePrefix) {
        let decided =
            prefix.flags && prefix.time_at <= MEMO_BYTES && is_blank(line[prefix.time_at - 1]);
        let Some(w) = Self::words(line).filter(|_| decided) else {
            return;
        };
        let masks: [u64; MEMO_WORDS] =
            std::array::from_fn(|i| match prefix.time_at.saturating_sub(8 * i) {
                0 => 0,
                n if n >= 8 => u64::MAX,
                n => (1u64 << (8 * n)) - 1,
            });
        let set = &mut self.sets[Self::set(&w)];
        set[1] = set[0];
        set[0] = PrefixSlot {
            words: std::array::from_fn(|i| w[i] & masks[i]),
            masks,
            prefix,
        };
    }
}

/// The header of a line of the usual shape, `  comm-pid [cpu] flags secs.frac: rest`
/// (flags optional), the start from `memo` where it has it, else in one forward scan
/// (`line_prefix`); `None` for anything else (comments, `CPU`
/// lines, the tgid column, counter clocks, odd digits), which `parse_header` then reads.
/// Where it answers, it answers as `parse_header` would.
#[inline]
fn fast_header<'a>(line: &'a [u8], memo: &mut PrefixMemo) -> Option<Header<'a>> {
    let prefix = match memo.find(line) {
        Some(prefix) => prefix,
        None => {
            let prefix = line_prefix(line)?;
            memo.remember(line, prefix);
            prefix
        }
    };
    let LinePrefix {
        task, cpu, time_at, ..
    } = prefix;
    let (pid, comm) = (task.pid, &line[task.comm.0..task.comm.1]);
    let mut p = time_at;
    let (secs, n) = digits(line, &mut p);
    if n == 0 || n > 10 || line.get(p) != Some(&b'.') {
        return None;
    }
    p += 1;
    let (frac, n) = digits(line, &mut p);
    if n == 0
        || n > 9
        || line.get(p) != Some(&b':')
        || line.get(p + 1).is_some_and(|&c| !is_blank(c))
    {
        return None;
    }
    const SCALE: [u64; 10] = [
        1_000_000_000,
        100_000_000,
        10_000_000,
        1_000_000,
        100_000,
        10_000,
        1_000,
        100,
        10,
        1,
    ];
    let time_ns = secs * 1_000_000_000 + frac * SCALE[n];
    Some(Header {
        comm,
        pid,
        cpu,
        time_ns,
        rest: &line[p + 1..],
    })
}

/// The blanks between two fields of a block body: with `SINGLE`, one space or the end of
/// the line (how the kernel prints them; the next field's own parse rejects a second
/// blank), otherwise any run of blanks, none included.
#[inline(always)]
fn gap<const SINGLE: bool>(s: &[u8], p: &mut usize) -> Option<()> {
    if !SINGLE {
        skip_blanks(s, p);
        return Some(());
    }
    match s.get(*p) {
        None => Some(()),
        Some(b' ') => {
            *p += 1;
            Some(())
        }
        Some(_) => None,
    }
}

/// The fields of a block tracepoint's body of the usual shape.
struct BlockBody<'a> {
    dev: (u32, u32),
    rwbs: &'a [u8],
    bytes: Option<u64>,
    sector: u64,
    sectors: u32,
    /// The `[...]` group ending the line, without its brackets.
    bracket: Option<&'a [u8]>,
}

/// `maj,min RWBS [bytes ()] sector + n [ioprio] [[comm]]`, fields apart by the kernel's
/// single spaces (`SINGLE`) or by any runs of blanks; `None` for any other shape.
#[inline(always)]
fn block_body<const SINGLE: bool>(b: &[u8]) -> Option<BlockBody<'_>> {
    let mut p = 0;
    let (maj, n) = digits(b, &mut p);
    if n == 0 || n > 9 || b.get(p) != Some(&b',') {
        return None;
    }
    p += 1;
    let (min, n) = digits(b, &mut p);
    if n == 0 || n > 9 || !b.get(p).is_some_and(|&c| is_blank(c)) {
        return None;
    }
    gap::<SINGLE>(b, &mut p)?;
    let rwbs_start = p;
    p = word_end(b, p);
    let rwbs = &b[rwbs_start..p];
    // `[bytes ]()`, then `sector + n`.
    gap::<SINGLE>(b, &mut p)?;
    let mut bytes = None;
    let mut first = None;
    if b.get(p).is_some_and(u8::is_ascii_digit) {
        first = Some(number_word(b, &mut p)?);
        gap::<SINGLE>(b, &mut p)?;
    }
    if b.get(p) == Some(&b'(') {
        bytes = first.take();
        // Usually `()`: no search needed.
        let close = if b.get(p + 1) == Some(&b')') {
            1
        } else {
            memchr::memchr(b')', &b[p..])?
        };
        p += close + 1;
        gap::<SINGLE>(b, &mut p)?;
        if !b.get(p).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        first = Some(number_word(b, &mut p)?);
        gap::<SINGLE>(b, &mut p)?;
    }
    let sector = first?;
    if b.get(p) != Some(&b'+') {
        return None;
    }
    p += 1;
    gap::<SINGLE>(b, &mut p)?;
    let sectors = u32::try_from(number_word(b, &mut p)?).ok()?;
    gap::<SINGLE>(b, &mut p)?;
    // An ioprio word (`be,0,4`), then a `[...]` group ending the line.
    if b.get(p).is_some_and(|&c| !matches!(c, b'[' | b'(' | b'<')) {
        let w = p;
        p = word_end(b, p);
        // A short word: a plain loop, not the memchr call `contains` makes.
        #[allow(clippy::manual_contains)]
        let has_comma = b[w..p].iter().any(|&c| c == b',');
        if !has_comma {
            return None;
        }
        gap::<SINGLE>(b, &mut p)?;
    }
    let mut bracket = None;
    if p < b.len() {
        if b[p] != b'[' || b[b.len() - 1] != b']' || b.len() - 1 <= p {
            return None;
        }
        bracket = Some(&b[p + 1..b.len() - 1]);
    }
    Some(BlockBody {
        dev: (maj as u32, min as u32),
        rwbs,
        bytes,
        sector,
        sectors,
        bracket,
    })
}

/// A block tracepoint whose body has the usual shape (`block_body`), pushed as
/// `push_block_tracepoint` would push it. `false` (and nothing pushed or interned) for any
/// other event or shape.
#[inline]
fn fast_block(
    table: &mut RowWriter<'_>,
    rwbs_decoded: &mut Decoded<(Operation, u16)>,
    h: &Header<'_>,
    action: Action,
    name: &[u8],
    body: &[u8],
) -> bool {
    if matches!(action, Action::Plug | Action::Unplug | Action::OtherBlock) {
        return false;
    }
    // The kernel's single spaces first: fewer checks than runs of blanks.
    let Some(BlockBody {
        dev: (maj, min),
        rwbs,
        bytes,
        sector,
        sectors,
        bracket,
    }) = block_body::<true>(body).or_else(|| block_body::<false>(body))
    else {
        return false;
    };
    let rwbs_code = table.rwbs_values().code(rwbs);
    let Some((operation, flags)) = rwbs_decoded.get(rwbs_code, rwbs, parse_rwbs) else {
        return false;
    };
    let mut error = 0;
    let mut comm = h.comm;
    if let Some(g) = bracket {
        if matches!(action, Action::Complete | Action::Requeue) {
            // Nearly always `[0]`.
            if g != b"0" {
                let Some(err) = parse_i64(g).and_then(|v| i32::try_from(v).ok()) else {
                    return false;
                };
                error = err;
            }
        } else {
            comm = g;
        }
    }
    let e = Event {
        dev_major: maj,
        dev_minor: min,
        action,
        operation,
        flags,
        sector,
        sectors,
        bytes: bytes.unwrap_or(sectors as u64 * 512),
        error,
        ..h.event(RecordKind::Block)
    };
    // Interned in the general path's order: name, process name, RWBS.
    let name_code = table.names().intern(name);
    let comm_code = table.comms().intern(comm);
    let rwbs_code = rwbs_code.unwrap_or_else(|| table.rwbs_values().intern(rwbs));
    table.push(&e, comm_code, rwbs_code, name_code, b"");
    true
}

/// The `trace` file's header `# entries-in-buffer/entries-written: 1578/1600` says 22
/// events were overwritten in the ring buffer before the file was read.
fn overwritten_entries(comment: &[u8]) -> u64 {
    let Some(rest) = comment.strip_prefix(b"# entries-in-buffer/entries-written: ") else {
        return 0;
    };
    let mut c = Cursor::new(rest);
    let Some(counts) = c.word() else { return 0 };
    let Some(slash) = memchr::memchr(b'/', counts) else {
        return 0;
    };
    match (parse_u64(&counts[..slash]), parse_u64(&counts[slash + 1..])) {
        (Some(kept), Some(written)) => written.saturating_sub(kept),
        _ => 0,
    }
}

/// `CPU:3 [LOST 123 EVENTS]` → 123.
fn lost_events(line: &[u8]) -> Option<u64> {
    if !line.starts_with(b"CPU") {
        return None;
    }
    let at = memchr::memmem::find(line, b"[LOST ")?;
    let mut c = Cursor::new(&line[at + 6..]);
    c.word().and_then(parse_u64)
}

fn parse_header(line: &[u8]) -> Result<Header<'_>, &'static str> {
    let (open, close) = find_cpu_bracket(line).ok_or("no [cpu] column")?;
    let cpu = parse_u32(&line[open + 1..close]).ok_or("bad cpu")?;
    let mut task = line[..open].trim_ascii();
    // With the tgid option: `comm-pid (  tgid)`.
    if task.ends_with(b")") {
        let paren = memchr::memrchr(b'(', task).ok_or("bad tgid column")?;
        task = task[..paren].trim_ascii_end();
    }
    let dash = memchr::memrchr(b'-', task).ok_or("no comm-pid")?;
    let pid = parse_u32(&task[dash + 1..]).ok_or("bad pid")?;
    let comm = task[..dash].trim_ascii_start();
    let mut c = Cursor::new(&line[close + 1..]);
    let mut word = c.word().ok_or("no timestamp")?;
    if !word.ends_with(b":") {
        // The irq-flags column (`d..1.`) precedes the timestamp.
        word = c.word().ok_or("no timestamp")?;
    }
    let stamp = word.strip_suffix(b":").ok_or("no timestamp")?;
    let time_ns = parse_time_ns(stamp).ok_or("bad timestamp")?;
    Ok(Header {
        comm,
        pid,
        cpu,
        time_ns,
        rest: c.rest(),
    })
}

/// The first ` [digits]` group: the CPU column (a process name may contain brackets, but
/// not that pattern before it).
fn find_cpu_bracket(line: &[u8]) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(rel) = memchr::memchr(b'[', &line[from..]) {
        let open = from + rel;
        let mut end = open + 1;
        while end < line.len() && line[end].is_ascii_digit() {
            end += 1;
        }
        if end > open + 1
            && end < line.len()
            && line[end] == b']'
            && open > 0
            && line[open - 1] == b' '
        {
            return Some((open, end));
        }
        from = open + 1;
    }
    None
}

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
    let name_code;
    if name == b"tracing_mark_write" {
        e.kind = RecordKind::Marker;
        name_code = table.names().intern(marker_event(body));
    } else if let Some(sys) = name.strip_prefix(b"sys_enter_") {
        e.kind = RecordKind::SyscallEnter;
        name_code = table.names().intern(sys);
        parse_syscall_args(&mut e, body);
    } else if let Some(sys) = name.strip_prefix(b"sys_exit_") {
        e.kind = RecordKind::SyscallExit;
        name_code = table.names().intern(sys);
        e.ret = Some(
            parse_number(body.trim_ascii())
                .map(|v| v as i64)
                .ok_or("bad syscall return value")?,
        );
    } else {
        e.kind = RecordKind::Other;
        name_code = table.names().intern(name);
    }
    let comm_code = table.comms().intern(comm);
    table.push(&e, comm_code, 0, name_code, body);
    Ok(())
}

/// The syscall events' own print format: `sys_write(fd: 3, buf: 0x7f…, count: 0x28)` on
/// entry and `sys_write -> 0x28` on exit → the syscall's name and the row's text, with the
/// kind, arguments and return value set in `e`. `Ok(None)`, with `e` untouched, if `rest`
/// is not in that form.
fn syscall_print_format<'a>(
    e: &mut Event,
    rest: &'a [u8],
) -> Result<Option<SyscallText<'a>>, &'static str> {
    let name_end = rest
        .iter()
        .position(|&b| b == b'(' || b == b' ' || b == b':')
        .unwrap_or(rest.len());
    let name = &rest[4..name_end];
    let body;
    if rest.get(name_end) == Some(&b'(') {
        let args = &rest[name_end + 1..];
        body = args
            .strip_suffix(b")")
            .ok_or("unclosed syscall argument list")?;
        e.kind = RecordKind::SyscallEnter;
        parse_syscall_args(e, body);
    } else if let Some(ret) = rest[name_end..].strip_prefix(b" -> ") {
        body = ret.trim_ascii();
        e.kind = RecordKind::SyscallExit;
        e.ret = Some(
            parse_number(body)
                .map(|v| v as i64)
                .ok_or("bad syscall return value")?,
        );
    } else {
        return Ok(None);
    }
    Ok(Some(SyscallText { name, body }))
}

/// A syscall line's name (without `sys_`) and the row's text.
struct SyscallText<'a> {
    name: &'a [u8],
    body: &'a [u8],
}

/// A syscall line in its print format, read by `syscall_print_format` into `e`.
fn push_syscall(table: &mut RowWriter<'_>, e: &Event, comm: &[u8], syscall: SyscallText<'_>) {
    let name_code = table.names().intern(syscall.name);
    let comm_code = table.comms().intern(comm);
    table.push(e, comm_code, 0, name_code, syscall.body);
}

/// `0x1f` (hex) or `31` (decimal), as syscall tracepoints print arguments.
fn parse_number(s: &[u8]) -> Option<u64> {
    if s.starts_with(b"0x") {
        parse_hex(s)
    } else {
        parse_u64(s)
    }
}

/// `sqlwa txn_begin i=3 …` → `txn_begin`; foreign markers have no event word.
fn marker_event(body: &[u8]) -> &[u8] {
    let mut c = Cursor::new(body);
    if c.word() == Some(b"sqlwa") {
        c.word().unwrap_or_default()
    } else {
        b""
    }
}

/// `fd: 0x00000003, buf: 0x…, count: 0x00001000` → fd and count (into `aux`).
fn parse_syscall_args(e: &mut Event, body: &[u8]) {
    for arg in body.split(|&b| b == b',') {
        let Some(colon) = memchr::memchr(b':', arg) else {
            continue;
        };
        let key = arg[..colon].trim_ascii();
        let Some(value) = parse_number(arg[colon + 1..].trim_ascii()) else {
            continue;
        };
        match key {
            b"fd" => e.fd = Some(value as u32 as i32 as i64),
            b"count" | b"nbytes" | b"len" | b"length" => e.aux = value,
            _ => {}
        }
    }
}

fn push_block_tracepoint(
    table: &mut RowWriter<'_>,
    mut e: Event,
    action: Action,
    name: &[u8],
    body: &[u8],
    comm: &[u8],
) -> Result<(), &'static str> {
    let name_code = table.names().intern(name);
    // block_plug / block_unplug print no device and no RWBS.
    if matches!(action, Action::Plug | Action::Unplug) {
        return push_block_event(table, e, action, b"N", body, comm, name_code);
    }
    let mut c = Cursor::new(body);
    let (maj, min) = c.word().and_then(parse_dev).ok_or("bad device")?;
    e.dev_major = maj;
    e.dev_minor = min;
    if action == Action::OtherBlock {
        // block_dirty_buffer, block_io_start …: keep the body text, interpret what fits.
        let rest = c.rest();
        let mut probe = Cursor::new(rest);
        if let Some(rwbs) = probe.word() {
            if push_block_event(
                table,
                e.clone(),
                action,
                rwbs,
                probe.rest(),
                comm,
                name_code,
            )
            .is_ok()
            {
                return Ok(());
            }
        }
        e.kind = RecordKind::Block;
        e.action = action;
        let comm_code = table.comms().intern(comm);
        table.push(&e, comm_code, 0, name_code, body);
        return Ok(());
    }
    let rwbs = c.word().ok_or("missing RWBS")?;
    push_block_event(table, e, action, rwbs, c.rest(), comm, name_code)
}

/// The `blk` tracer: `maj,min [cgroup] action rwbs body`.
fn push_blk_tracer_line(
    table: &mut RowWriter<'_>,
    mut e: Event,
    rest: &[u8],
    comm: &[u8],
) -> Result<(), &'static str> {
    let mut c = Cursor::new(rest);
    let (maj, min) = c
        .word()
        .and_then(parse_dev)
        .ok_or("neither an event name nor a blk tracer device")?;
    e.dev_major = maj;
    e.dev_minor = min;
    let mut letters = c.word().ok_or("missing action")?;
    if letters.contains(&b',') {
        // cgroup id `ino,gen` in hex.
        letters = c.word().ok_or("missing action")?;
    }
    let action = Action::from_letters(letters).ok_or("unknown blk action")?;
    let rwbs = c.word().ok_or("missing RWBS")?;
    push_block_event(table, e, action, rwbs, c.rest(), comm, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{flags, Operation};

    fn parse(text: &str) -> (EventTable, ParseReport) {
        let mut t = EventTable::new();
        let mut r = ParseReport::default();
        for line in text.lines() {
            parse_line(line.as_bytes(), &mut t.writer(), &mut r)
                .unwrap_or_else(|e| panic!("{e}: {line}"));
        }
        (t, r)
    }

    #[test]
    fn block_tracepoints_with_and_without_ioprio() {
        let (t, _) = parse(
            "          sqlite-1234    [001] d..1.  1234.567890: block_rq_issue: 7,0 WS 4096 () 1234 + 8 be,0,4 [sqlite]\n\
             <idle>-0       [001] ..s1.  1234.567990: block_rq_complete: 7,0 WS () 1234 + 8 be,0,4 [0]\n\
             jbd2/loop0-8-77 [000] ....  1234.600000: block_rq_issue: 7,0 FF 0 () 0 + 0 [jbd2/loop0-8]\n\
             kworker/0:1-40 (     40) [000] .... 5.000001: block_rq_complete: 7,0 FWFS () 88 + 8 [-5]\n\
             dd-9 [000] 5.000002: block_bio_queue: 7,0 W 88 + 8 [dd]\n\
             dd-9 [000] 5.000003: block_plug: [dd]\n\
             dd-9 [000] 5.000004: block_unplug: [dd] 1\n\
             dd-9 [000] 5.000005: block_split: 7,0 W 88 / 96 [dd]\n\
             dd-9 [000] 5.000006: block_bio_remap: 7,0 W 88 + 8 <- (253,1) 80\n\
             dd-9 [000] 5.000007: block_dirty_buffer: 7,0 sector=12 size=4096\n",
        );
        assert_eq!(t.len(), 10);
        assert_eq!(
            (t.action_at(0), t.time_ns[0], t.cpu[0], t.pid[0]),
            (Action::Issue, 1_234_567_890_000, 1, 1234)
        );
        assert_eq!(
            (t.sector[0], t.sectors[0], t.bytes[0], t.comm_at(0)),
            (1234, 8, 4096, "sqlite")
        );
        assert_eq!(
            (t.action_at(1), t.error[1], t.comm_at(1)),
            (Action::Complete, 0, "<idle>")
        );
        assert_eq!(
            (t.operation_at(2), t.flags[2]),
            (Operation::Flush, flags::PREFLUSH)
        );
        assert_eq!(t.pid[2], 77);
        assert_eq!(
            (t.error[3], t.flags[3]),
            (-5, flags::PREFLUSH | flags::FUA | flags::SYNC)
        );
        assert_eq!(t.comm_at(3), "kworker/0:1");
        assert_eq!(t.action_at(4), Action::Queue);
        assert_eq!(t.action_at(5), Action::Plug);
        assert_eq!((t.action_at(6), t.aux_at(6)), (Action::Unplug, 1));
        assert_eq!((t.action_at(7), t.aux_at(7)), (Action::Split, 96));
        assert_eq!(t.remap_at(8), Some((253, 1, 80)));
        assert_eq!(
            (t.action_at(9), t.text_at(9)),
            (Action::OtherBlock, "7,0 sector=12 size=4096")
        );
        assert_eq!(t.name_at(0), "block_rq_issue");
    }

    #[test]
    fn markers_syscalls_and_losses() {
        let (t, r) = parse(
            "# tracer: nop\n\
             # entries-in-buffer/entries-written: 1578/1600   #P:2\n\
             sqlwa-run-500 [001] ..... 10.000001: tracing_mark_write: sqlwa txn_begin i=3 warmup=0 t=123\n\
             sqlwa-run-500 [001] ..... 10.000002: sys_enter_fsync: fd: 0x00000003\n\
             sqlwa-run-500 [001] ..... 10.000003: sys_exit_fsync: 0x0\n\
             sqlwa-run-500 [001] ..... 10.000004: sys_enter_pwrite64: fd: 0x00000004, buf: 0x7f00, count: 0x00001000, pos: 0x00002000\n\
             sqlwa-run-500 [001] ..... 10.000005: sys_exit_unlink: 0xfffffffffffffffe\n\
             CPU:1 [LOST 42 EVENTS]\n\
             sqlwa-run-500 [001] ..... 10.000006: sched_switch: prev_comm=a\n",
        );
        assert_eq!(r.lost_events, 42 + 22);
        assert_eq!(
            (t.kind_at(0), t.name_at(0), t.text_at(0)),
            (
                RecordKind::Marker,
                "txn_begin",
                "sqlwa txn_begin i=3 warmup=0 t=123"
            )
        );
        assert_eq!(
            (t.kind_at(1), t.name_at(1), t.fd_at(1)),
            (RecordKind::SyscallEnter, "fsync", Some(3))
        );
        assert_eq!(
            (t.kind_at(2), t.ret_at(2)),
            (RecordKind::SyscallExit, Some(0))
        );
        assert_eq!((t.fd_at(3), t.aux_at(3)), (Some(4), 4096));
        assert_eq!(t.ret_at(4), Some(-2));
        assert_eq!(t.comm_at(0), "sqlwa-run");
        assert_eq!(
            (t.kind_at(5), t.name_at(5)),
            (RecordKind::Other, "sched_switch")
        );
    }

    #[test]
    fn syscall_print_format_of_newer_kernels() {
        let (t, _) = parse(
            "         python3-21901   [001] .....  7285.608394: sys_openat(dfd: 0xffffff9c, filename: 0x7fc27dd9f4d0, flags: 0x80001, mode: 0)\n\
                      python3-21901   [001] .....  7285.608417: sys_openat -> 0x3\n\
                      python3-21901   [001] .....  7285.608437: sys_write(fd: 3, buf: 0x7fc27e0175c0, count: 0x28)\n\
                      python3-21901   (-------) [001]   7285.608439: sys_unlink -> 0xfffffffffffffffe\n",
        );
        assert_eq!(
            (t.kind_at(0), t.name_at(0), t.fd_at(0)),
            (RecordKind::SyscallEnter, "openat", None)
        );
        assert_eq!(
            (t.kind_at(1), t.name_at(1), t.ret_at(1)),
            (RecordKind::SyscallExit, "openat", Some(3))
        );
        assert_eq!(
            (t.fd_at(2), t.aux_at(2), t.text_at(2)),
            (Some(3), 0x28, "fd: 3, buf: 0x7fc27e0175c0, count: 0x28")
        );
        assert_eq!((t.name_at(3), t.ret_at(3)), ("unlink", Some(-2)));
    }

    #[test]
    fn blk_tracer_lines() {
        let (t, _) = parse(
            "  kworker/0:1-40    [000] ....   123.456000:   8,0    D   W 1234 + 8 [kworker/0:1]\n\
               kworker/0:1-40    [000] ....   123.456001:   8,0    m   N cfq40 slice\n",
        );
        assert_eq!(
            (t.action_at(0), t.dev_major[0], t.sector[0]),
            (Action::Issue, 8, 1234)
        );
        assert_eq!(
            (t.kind_at(1), t.text_at(1)),
            (RecordKind::Message, "cfq40 slice")
        );
    }

    /// Every column of every row, with dictionary codes resolved, plus the sparse fields.
    fn rows(t: &EventTable) -> Vec<String> {
        (0..t.len()).map(|i| t.row_text(i)).collect()
    }

    /// Each line through the fast and the general path: same verdict, same rows, same
    /// dictionaries, same report.
    fn assert_paths_agree(lines: &[&[u8]]) {
        let (mut fast, mut general) = (EventTable::new(), EventTable::new());
        let (mut rf, mut rg) = (ParseReport::default(), ParseReport::default());
        let mut caches = FastPath::default();
        for &line in lines {
            let a = parse_line_fast(line, &mut fast.writer(), &mut rf, &mut caches);
            let b = parse_line(line, &mut general.writer(), &mut rg);
            assert_eq!(a, b, "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(rows(&fast), rows(&general));
        assert_eq!(fast.comms.values, general.comms.values);
        assert_eq!(fast.rwbs_values.values, general.rwbs_values.values);
        assert_eq!(fast.names.values, general.names.values);
        assert_eq!(
            (rf.lost_events, rf.skipped_lines),
            (rg.lost_events, rg.skipped_lines)
        );
    }

    const ODD_LINES: &[&str] = &[
        "         sqlite3-4242    [003] .....  7000.000002: block_rq_issue: 259,0 FWS 4096 () 96672995 + 8 be,0,4 [sqlite3]",
        "          <idle>-0       [002] d.h1.  7000.000083: block_rq_complete: 259,0 W () 15155303 + 64 be,0,4 [0]",
        "         sqlite3-4242    [001] .....  7000.000090: sys_fdatasync(fd: 3)",
        "         sqlite3-4242    [001] ...1.  7000.000091: tracing_mark_write: sqlwa txn_end i=9 t=7000000091",
        "  kworker/u8:2-btrfs-endio-meta-123 [001] ..... 12.5: block_rq_complete: 8,16 WFS () 18446744073709551615 + 8 none,0,0 [-5]",
        "  kworker/u8:2-btrfs-endio-meta-123 [001] ..... 12.000001: block_rq_issue: 8,16 FF 0 () 0 + 0 none,0,0 [kworker/u8:2]",
        "   my task name-77 [000] .... 1.000000001: block_rq_issue: 7,0 W 4096 () 1234 + 8 [my task]",
        "   my [weird] task-77 [000] .... 1.000000001: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
        "   x-7 [1] 1.1: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
        "   x-7 [12345] ..... 99999.999999: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
        "   x-1234567 [00012345] ..... 99999.999999: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
        "   x-4294967295 [000000000012] 1.000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-4294967296 [000] 1.000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [4294967296] 1.000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] 18446744073.709551615: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] 18446744074.000000000: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] 123456789012: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] 1.0000000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] .... 1.: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] .... .5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] ....: 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5:: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] \t....\t1.5:\tblock_rq_issue:\t7,0\tW\t()\t1234\t+\t8\t[x]",
        "\tx-12 [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x] ",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x] 3",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 be,0,4",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 be,0,4 rt,1,1 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 2,0,4 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 (35 00 00) 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 ()1234 +8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096() 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 4294967296 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 []",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 ]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [a] [b]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 123456789012345678901 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W () 9999999999999999999 + 4294967295 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W () 99999999999999999999 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_complete: 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_complete: 7,0 W () 1234 + 8 [-2147483649]",
        "   x-12 [000] .... 1.5: block_rq_requeue: 7,0 W () 1234 + 8 [-11]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 QQ 4096 () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0 DE 4096 () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0,1 W 4096 () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 7,0",
        "   x-12 [000] .... 1.5: block_rq_issue: 4294967296,0 W () 1 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue: 1234567890,0 W () 1 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue:",
        "   x-12 [000] .... 1.5: block_rq_issue: ",
        "   x-12 [000] .... 1.5: block_rq_complete:  7,0 W () 1234 + 8 [0]",
        "   x-12 [000] .... 1.5: block_rq_completed: 7,0 W () 1234 + 8 [0]",
        "   x-12 [000] .... 1.5: block_rq_issue:\t7,0 W () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: block_rq_issue:x 7,0 W () 1234 + 8 [x]",
        "   x-12 [000] .... 1.5: tracing_mark_write: hello",
        "   x-12 [000] .... 1.5: tracing_mark_write: sqlwa",
        "   x-12 [000] .... 1.5: tracing_mark_write:",
        "   x-12 [000] .... 1.5: tracing_mark_write: ",
        "   x-12 [000] .... 1.5: tracing_mark_writer: sqlwa x",
        "   x-12 [000] .... 1.5: block_bio_queue: 7,0 W 88 + 8 [dd]",
        "   x-12 [000] .... 1.5: block_bio_complete: 7,0 W 88 + 8 [0]",
        "   x-12 [000] .... 1.5: block_split: 7,0 W 88 / 96 [dd]",
        "   x-12 [000] .... 1.5: block_bio_remap: 7,0 W 88 + 8 <- (253,1) 80",
        "   x-12 [000] .... 1.5: block_rq_remap: 7,0 W 88 + 8 <- (253,1) 80 3",
        "   x-12 [000] .... 1.5: block_plug: [dd]",
        "   x-12 [000] .... 1.5: block_unplug: [dd] 1",
        "   x-12 [000] .... 1.5: block_dirty_buffer: 7,0 sector=12 size=4096",
        "   x-12 [000] .... 1.5: block_getrq: 7,0 RA 12934856 + 32 [bash]",
        "   x-12 [000] .... 1.5: sched_switch: prev_comm=a",
        "   x-12 [000] .... 1.5: sys_enter_pwrite64: fd: 0x00000004, buf: 0x7f00, count: 0x00001000",
        "   x-12 [000] .... 1.5: sys_exit_unlink: 0xfffffffffffffffe",
        "   x-12 [000] .... 1.5: sys_unlink -> 0xfffffffffffffffe",
        "   x-12 [000] .... 1.5: sys_read(fd: 3",
        "   x-12 [000] .... 1.5: sys_read -> zz",
        "   x-12 [000] .... 1.5: sys_read 7,0 D W 8 + 8",
        "   x-12 (     12) [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "   x-12 (-------) [000] 1.5: sys_unlink -> 0x0",
        "  kworker/0:1-40    [000] ....   123.456000:   8,0    D   W 1234 + 8 [kworker/0:1]",
        "  kworker/0:1-40    [000] ....   123.456001:   8,0    m   N cfq40 slice",
        "CPU:1 [LOST 42 EVENTS]",
        "CPU 0/KVM-1234 [001] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "# entries-in-buffer/entries-written: 1578/1600   #P:2",
        "#   x-12 [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "",
        "   ",
        "-12 [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "x- [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "x-1a [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "x-12[000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "[000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "x-12 [] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "x-12 [000] ....",
        "x-12 [000] .... 1.5:",
        "x-12 [000] .... 1.5:block_rq_issue: 7,0 W () 1234 + 8 [x]",
        "hello world",
    ];

    #[test]
    fn fast_and_general_paths_agree_on_odd_lines() {
        let lines: Vec<&[u8]> = ODD_LINES.iter().map(|l| l.as_bytes()).collect();
        assert_paths_agree(&lines);
        // The fast path does take the usual lines (and some odd ones).
        let takes = |single: bool| -> Vec<&str> {
            let mut t = EventTable::new();
            let mut rwbs_decoded = Decoded::default();
            ODD_LINES
                .iter()
                .filter(|l| {
                    fast_header(l.as_bytes(), &mut PrefixMemo::default()).is_some_and(|h| {
                        let mut c = Cursor::new(h.rest);
                        let name = c
                            .word()
                            .and_then(|w| w.strip_suffix(b":"))
                            .unwrap_or_default();
                        c.skip_spaces();
                        let Some(action) = Action::from_tracepoint(name) else {
                            return false;
                        };
                        let read = if single {
                            block_body::<true>(c.rest()).is_some()
                        } else {
                            block_body::<false>(c.rest()).is_some()
                        };
                        read && fast_block(
                            &mut t.writer(),
                            &mut rwbs_decoded,
                            &h,
                            action,
                            name,
                            c.rest(),
                        )
                    })
                })
                .copied()
                .collect()
        };
        let (any_blanks, single_spaces) = (takes(false), takes(true));
        assert!(any_blanks.len() >= 20, "{any_blanks:#?}");
        assert!(
            single_spaces.len() >= 10 && single_spaces.len() < any_blanks.len(),
            "{single_spaces:#?}"
        );
        for fast in [&any_blanks, &single_spaces] {
            assert!(
                fast.contains(&ODD_LINES[0])
                    && fast.contains(&ODD_LINES[1])
                    && fast.contains(&ODD_LINES[5])
            );
        }
        // And each line on its own, so one line's dictionary entries cannot hide another's.
        for line in &lines {
            assert_paths_agree(&[line]);
        }
    }

    #[test]
    fn fast_and_general_paths_agree_on_the_samples() {
        for name in ["trace.txt", "trace-tgid-noirq.txt"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("samples/ftrace-loop-ext4")
                .join(name);
            let text = std::fs::read(path).unwrap();
            let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
            assert_paths_agree(&lines);
        }
    }

    /// `read` (fast path, deferred zero columns) against the general path line by line,
    /// reading the sample twice into one table so the second read starts mid-table.
    #[test]
    fn read_matches_the_general_path_line_by_line() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("samples/ftrace-loop-ext4/trace.txt");
        let mut mixed = ODD_LINES
            .iter()
            .filter(|l| {
                parse_line(
                    l.as_bytes(),
                    &mut EventTable::new().writer(),
                    &mut ParseReport::default(),
                )
                .is_ok()
            })
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        mixed.push('\n');
        mixed.push_str(&std::fs::read_to_string(&path).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mixed.txt");
        std::fs::write(&file, &mixed).unwrap();
        let (mut t, mut r) = (EventTable::new(), ParseReport::default());
        read(&file, false, &mut t, &mut r).unwrap();
        read(&file, false, &mut t, &mut r).unwrap();
        let (mut g, mut rg) = (EventTable::new(), ParseReport::default());
        for _ in 0..2 {
            for line in mixed.lines() {
                parse_line(line.as_bytes(), &mut g.writer(), &mut rg).unwrap();
            }
        }
        assert!(t.error.iter().any(|&e| e != 0));
        assert_eq!((t.sequence.len(), t.error.len()), (t.len(), t.len()));
        assert_eq!(rows(&t), rows(&g));
        assert_eq!(
            (r.lost_events, r.skipped_lines),
            (rg.lost_events, rg.skipped_lines)
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, .. Default::default() })]

        /// Real and odd lines with a few bytes replaced or inserted anywhere.
        #[test]
        fn fast_and_general_paths_agree_on_mangled_lines(
            picks in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<proptest::sample::Index>(), proptest::collection::vec(proptest::sample::select(b" \t0123456789-+,.:()[]<>#/aFWSx\xff".to_vec()), 0..4), proptest::prelude::any::<bool>()), 1..8)
        ) {
            let mut owned = Vec::new();
            for (line, at, junk, insert) in picks {
                let mut l = ODD_LINES[line.index(ODD_LINES.len())].as_bytes().to_vec();
                let cut = at.index(l.len() + 1);
                let end = if insert { cut } else { (cut + junk.len()).min(l.len()) };
                l.splice(cut..end, junk);
                owned.push(l);
            }
            let lines: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            assert_paths_agree(&lines);
        }
    }

    #[test]
    fn digit_runs_read_eight_at_a_time_as_one_at_a_time() {
        let mut cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"0".to_vec(),
            b"12345678".to_vec(),
            b"123456789 x".to_vec(),
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 24) as usize;
            let line: Vec<u8> = (0..len)
                .map(|k| {
                    let r = (x >> (k % 8 * 8)) as u8 ^ k as u8;
                    if r % 5 == 0 {
                        b"/:. \xff\x00\x2f\x3a"[(r / 5 % 8) as usize]
                    } else {
                        b'0' + r % 10
                    }
                })
                .collect();
            cases.push(line);
        }
        for line in cases {
            for start in 0..=line.len() {
                let mut p = start;
                let (v, n) = digits(&line, &mut p);
                let run = line[start..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                let want = line[start..start + run].iter().fold(0u64, |v, &c| {
                    v.wrapping_mul(10).wrapping_add((c - b'0') as u64)
                });
                assert_eq!(
                    (v, n, p),
                    (want, run, start + run),
                    "{:?} at {start}",
                    String::from_utf8_lossy(&line)
                );
            }
        }
    }

    #[test]
    fn remembered_prefixes_answer_as_the_scan_does() {
        // The usual lines with one byte changed anywhere in their first 48: starts that
        // agree up to, into and past the CPU column and the timestamp's start.
        let mut lines: Vec<Vec<u8>> = ODD_LINES.iter().map(|l| l.as_bytes().to_vec()).collect();
        for l in &ODD_LINES[..4] {
            for at in 0..48 {
                for b in [b' ', b'[', b'-', b'7', b'x', b'\t'] {
                    let mut v = l.as_bytes().to_vec();
                    v[at] = b;
                    lines.push(v);
                }
            }
        }
        let header = |line: &[u8], memo: &mut PrefixMemo| {
            fast_header(line, memo)
                .map(|h| (h.comm.to_vec(), h.pid, h.cpu, h.time_ns, h.rest.to_vec()))
        };
        let (mut remembered, mut hits) = (0, 0);
        for a in &lines {
            let mut memo = PrefixMemo::default();
            if header(a, &mut memo).is_none() || memo.find(a).is_none() {
                continue;
            }
            remembered += 1;
            for b in &lines {
                let hit = memo.find(b).is_some();
                // Where the remembered start answers, as the scan does; or not at all (a
                // blank more before the timestamp), leaving the line to the general path.
                let got = header(b, &mut memo.clone());
                if got.is_some() {
                    assert_eq!(
                        got,
                        header(b, &mut PrefixMemo::default()),
                        "{:?} after {:?}",
                        String::from_utf8_lossy(b),
                        String::from_utf8_lossy(a)
                    );
                }
                hits += (hit && got.is_some()) as usize;
            }
        }
        // Lines changed past their timestamp's start share the remembered start.
        assert!(
            hits > 3 * remembered,
            "{hits} hits for {remembered} remembered"
        );
    }

    #[test]
    fn the_memo_keeps_the_starts_a_capture_interleaves() {
        // sqlite on four CPUs with and without a preemption-depth flag, and the idle task:
        // starts that agree in their first 32 bytes, seen in turns.
        let mut lines = Vec::new();
        for cpu in 0..4 {
            for (comm, pid, flags) in [
                ("sqlite3", 4242, "....."),
                ("sqlite3", 4242, "...1."),
                ("<idle>", 0, "d.h1."),
            ] {
                lines.push(format!("{comm:>16}-{pid:<7} [{cpu:03}] {flags}  7000.000172: block_rq_issue: 259,0 W 4096 () 8 + 8 be,0,4 [x]"));
            }
        }
        let mut memo = PrefixMemo::default();
        for line in &lines {
            assert!(fast_header(line.as_bytes(), &mut memo).is_some(), "{line}");
        }
        for line in &lines {
            assert!(memo.find(line.as_bytes()).is_some(), "forgotten: {line}");
        }
    }

    #[test]
    fn whitespace_is_skipped_back_as_one_byte_at_a_time() {
        for line in [
            &b"x-1            [0]"[..],
            b"x-1 \t \r  \x0c        [0]",
            b"        [",
            b"a[",
            b"ab                 ",
        ] {
            for start in 0..line.len() {
                for end in start..=line.len() {
                    let mut want = end;
                    while want > start && line[want - 1].is_ascii_whitespace() {
                        want -= 1;
                    }
                    assert_eq!(
                        skip_back_whitespace(line, start, end),
                        want,
                        "{line:?} {start}..{end}"
                    );
                }
            }
        }
    }

    #[test]
    fn garbage_is_an_error() {
        let mut t = EventTable::new();
        let mut r = ParseReport::default();
        assert!(parse_line(b"hello world", &mut t.writer(), &mut r).is_err());
        assert!(parse_line(
            b"x-1 [000] 1.0: block_rq_issue: 7,0 QQ 1 + 8 [x]",
            &mut t.writer(),
            &mut r
        )
        .is_err());
    }
}
