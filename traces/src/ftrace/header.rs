//! What every ftrace line starts with, `comm-pid [cpu] flags secs.frac:`, read in
//! general (`parse_header`) or on the fast path (`fast_header`), and the lines that carry
//! no event: comments (the `entries-in-buffer/entries-written` header among them) and
//! `CPU:n [LOST m EVENTS]`.
use super::prefix::{line_prefix, LinePrefix, PrefixMemo};
use super::scan::digits;
use crate::table::{Event, RecordKind, MAX_TIME_NS};
use crate::text::{is_blank, parse_time_ns, parse_u32, parse_u64, Cursor};

/// The fields every ftrace line starts with.
pub(super) struct Header<'a> {
    pub comm: &'a [u8],
    pub pid: u32,
    pub cpu: u32,
    pub time_ns: u64,
    /// Everything after the timestamp's colon.
    pub rest: &'a [u8],
}

impl Header<'_> {
    /// A row of `kind` with the header's time, CPU and pid, the rest left to the body.
    pub fn event(&self, kind: RecordKind) -> Event {
        Event {
            kind,
            time_ns: self.time_ns,
            cpu: self.cpu,
            pid: self.pid,
            ..Event::default()
        }
    }
}

/// The header of a line of the usual shape, `  comm-pid [cpu] flags secs.frac: rest`
/// (flags optional), the start from `memo` where it has it, else in one forward scan
/// (`line_prefix`); `None` for anything else (comments, `CPU`
/// lines, the tgid column, counter clocks, odd digits), which `parse_header` then reads.
/// Where it answers, it answers as `parse_header` would.
#[inline]
pub(super) fn fast_header<'a>(line: &'a [u8], memo: &mut PrefixMemo) -> Option<Header<'a>> {
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
    let (time_ns, rest) = fast_timestamp(line, time_at)?;
    Some(Header {
        comm: &line[task.comm.0..task.comm.1],
        pid: task.pid,
        cpu,
        time_ns,
        rest,
    })
}

/// `secs.frac: ` at `at` (up to 10 and 9 digits) → nanoseconds and the rest of the line
/// after the colon; `None` for any other shape, and for a time past [`MAX_TIME_NS`] (ten
/// digits of seconds can reach it), which `parse_header` then refuses.
#[inline(always)]
fn fast_timestamp(line: &[u8], at: usize) -> Option<(u64, &[u8])> {
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
    let mut p = at;
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
    let time_ns = secs * 1_000_000_000 + frac * SCALE[n];
    (time_ns <= MAX_TIME_NS).then_some((time_ns, &line[p + 1..]))
}

/// What the lines of one file that carry no event say of lost events.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Losses {
    /// `# entries-in-buffer/entries-written: kept/written`: overwritten in the ring
    /// buffer before the `trace` file was read.
    pub overwritten: u64,
    /// `CPU:n [LOST k EVENTS]` (a consuming read: `trace_pipe`), the k summed.
    pub counted: u64,
    /// `CPU:n [LOST EVENTS]` (the `trace` file of kernels 5.7 on, overwritten while it
    /// was read, how many unknown): how many such lines.
    pub uncounted: u64,
}

impl Losses {
    pub fn add(&mut self, other: Losses) {
        self.overwritten += other.overwritten;
        self.counted += other.counted;
        self.uncounted += other.uncounted;
    }

    /// Events lost, as far as the lines tell. A consuming read's first count on a CPU
    /// starts from the same overrun counter the header reports, so where both exist they
    /// count the same events: the larger of the two, never their sum. A loss of unknown
    /// size counts as one.
    pub fn total(&self) -> u64 {
        self.overwritten.max(self.counted) + self.uncounted
    }
}

/// For a line that carries no event (blank, a comment, `CPU:n [LOST m EVENTS]`): the
/// losses it reports, none for most; `None` for any other line.
pub(super) fn non_event_line(line: &[u8]) -> Option<Losses> {
    let trimmed = line.trim_ascii_start();
    if trimmed.is_empty() || trimmed[0] == b'#' {
        return Some(Losses {
            overwritten: overwritten_entries(trimmed),
            ..Losses::default()
        });
    }
    lost_events(trimmed)
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

/// `CPU:3 [LOST 123 EVENTS]` → 123 counted; `CPU:3 [LOST EVENTS]` → one uncounted.
fn lost_events(line: &[u8]) -> Option<Losses> {
    if !line.starts_with(b"CPU") {
        return None;
    }
    let at = memchr::memmem::find(line, b"[LOST ")?;
    let mut c = Cursor::new(&line[at + 6..]);
    match c.word()? {
        b"EVENTS]" => Some(Losses {
            uncounted: 1,
            ..Losses::default()
        }),
        count => Some(Losses {
            counted: parse_u64(count)?,
            ..Losses::default()
        }),
    }
}

/// Whether a line is `perf script` output: `comm pid [cpu] secs.usecs: subsystem:event:`,
/// the pid a word of its own and the event named with its subsystem, which ftrace never
/// does. Asked only of lines the ftrace grammar refused.
pub(super) fn perf_script_line(line: &[u8]) -> bool {
    let Some((open, close)) = find_cpu_bracket(line) else {
        return false;
    };
    let pid_alone = line[..open]
        .trim_ascii()
        .rsplit(|&c| is_blank(c))
        .next()
        .is_some_and(|w| parse_u32(w).is_some());
    let mut c = Cursor::new(&line[close + 1..]);
    let subsystem_event = (0..4).filter_map(|_| c.word()).any(|w| {
        w.strip_suffix(b":").is_some_and(|name| {
            memchr::memchr(b':', name).is_some_and(|colon| colon > 0 && colon + 1 < name.len())
        })
    });
    pid_alone && subsystem_event
}

/// The header of any line that has one, as the kernel prints it with any trace options.
pub(super) fn parse_header(line: &[u8]) -> Result<Header<'_>, &'static str> {
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
