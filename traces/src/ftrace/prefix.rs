//! The fast path's reading of a line's start, `  comm-pid [cpu] flags `, in one forward
//! scan, and its memo of the starts seen.
use super::scan::{digits, find_byte, load, skip_back_whitespace};
use crate::intern::spread;
use crate::text::{is_blank, skip_blanks, word_end};

/// What a line's bytes up to and including the CPU column's `[` say: where that `[` is,
/// the process name's range and the pid.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(super) struct TaskPrefix {
    /// Never 0 in a real prefix (a `[` at 0 has no ` ` before it): 0 marks an empty slot.
    open: usize,
    pub comm: (usize, usize),
    pub pid: u32,
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
pub(super) struct LinePrefix {
    pub task: TaskPrefix,
    pub cpu: u32,
    pub time_at: usize,
    /// Whether an irq-flags word stands between the CPU column and the timestamp.
    flags: bool,
}

/// `  comm-pid [cpu] flags ` of a line of the usual shape (flags optional); `None` for any
/// other (which `parse_header` then reads).
#[inline]
pub(super) fn line_prefix(line: &[u8]) -> Option<LinePrefix> {
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
pub(super) struct PrefixMemo {
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
    pub(super) fn find(&self, line: &[u8]) -> Option<LinePrefix> {
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
    pub(super) fn remember(&mut self, line: &[u8], prefix: LinePrefix) {
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
