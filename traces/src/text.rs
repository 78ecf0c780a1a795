//! Shared pieces of the two text readers: line reading (mapped or chunked) and the body grammar
//! blkparse and the kernel's block tracepoints share (`sector + n`, `<- (maj,min) s`, …).
use std::io::Read;
use std::path::Path;

use crate::error::{Location, ParseError};
use crate::input::{map_file, open_regular};
use crate::report::ParseReport;
use crate::table::EventTable;
use crate::table::MAX_TIME_NS;

/// Calls `f` with the lines of `path` a segment at a time (a few MB of whole lines, in
/// order), so that a reader can hand on what it made of each segment before the next is
/// read, never holding the whole file: a regular file is mapped and the pages of earlier
/// segments dropped behind the reader (no copy of the page cache), anything else (a pipe, a
/// tracefs file) read in chunks.
pub fn for_each_segment(
    path: &Path,
    f: impl FnMut(&mut Lines<'_>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let file = open_regular(path)?;
    match map_file(&file) {
        Some(map) => for_each_mapped_segment(&map, SEGMENT, f),
        None => for_each_read_segment(path, file, SEGMENT, f),
    }
}

/// The lines of one segment, numbered from where the previous segment stopped.
pub struct Lines<'a> {
    data: &'a [u8],
    start: usize,
    line_no: u64,
    newline: &'a NewlineFinder,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (u64, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<(u64, &'a [u8])> {
        if self.start >= self.data.len() {
            return None;
        }
        let rest = &self.data[self.start..];
        let len = self.newline.find(rest).unwrap_or(rest.len());
        self.start += len + 1;
        self.line_no += 1;
        Some((self.line_no, trim_cr(&rest[..len])))
    }
}

/// The lines of a mapped file in segments of `segment` bytes (to the next newline), the
/// pages of every segment before the one being read dropped from the process (they stay
/// in the page cache).
fn for_each_mapped_segment(
    map: &memmap2::Mmap,
    segment: usize,
    mut f: impl FnMut(&mut Lines<'_>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let newline = NewlineFinder::new();
    let data: &[u8] = map;
    let (mut start, mut line_no, mut released) = (0usize, 0u64, 0usize);
    while start < data.len() {
        let cut = (start + segment).min(data.len());
        let end = match newline.find(&data[cut..]) {
            Some(n) => cut + n + 1,
            None => data.len(),
        };
        let mut lines = Lines {
            data: &data[start..end],
            start: 0,
            line_no,
            newline: &newline,
        };
        f(&mut lines)?;
        line_no = lines.line_no;
        let upto = start & !(PAGE - 1);
        if upto > released {
            // SAFETY: a read-only file mapping: dropped pages read back from the page cache,
            // unchanged, should anything touch them again (nothing does: f keeps no line).
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    released,
                    upto - released,
                )
            };
            released = upto;
        }
        start = end;
    }
    Ok(())
}

/// Bytes of whole lines in a segment (and what a read fills at once): a segment's pages
/// are dropped once the next one is read, so this also bounds the file's resident part.
const SEGMENT: usize = 8 << 20;
const PAGE: usize = 4096;

/// Reads in large chunks so neither the whole file nor one String per line is ever held;
/// each chunk's whole lines are a segment.
fn for_each_read_segment(
    path: &Path,
    mut file: std::fs::File,
    segment: usize,
    mut f: impl FnMut(&mut Lines<'_>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut buf = vec![0u8; segment];
    let mut filled = 0usize;
    let mut line_no = 0u64;
    let newline = NewlineFinder::new();
    loop {
        if filled == buf.len() {
            // One line longer than the buffer: grow rather than split it.
            buf.resize(buf.len() * 2, 0);
        }
        let n = file
            .read(&mut buf[filled..])
            .map_err(|e| ParseError::io(path, e))?;
        let at_eof = n == 0;
        filled += n;
        // Whole lines only, but for the last line of the file without its newline.
        let whole = match at_eof {
            true => filled,
            false => memchr::memrchr(b'\n', &buf[..filled]).map_or(0, |p| p + 1),
        };
        let mut lines = Lines {
            data: &buf[..whole],
            start: 0,
            line_no,
            newline: &newline,
        };
        f(&mut lines)?;
        line_no = lines.line_no;
        if at_eof {
            return Ok(());
        }
        buf.copy_within(whole..filled, 0);
        filled -= whole;
    }
}

/// A text reader's state for one file, carried from one segment of its lines to the next.
pub(crate) trait SegmentReader {
    /// One segment's lines into `table`.
    fn read(
        &mut self,
        lines: &mut Lines<'_>,
        table: &mut EventTable,
        report: &mut ParseReport,
    ) -> Result<(), ParseError>;

    /// `table` was handed on and starts again empty: forget what holds its dictionary codes.
    fn new_table(&mut self) {}

    /// The file is read: what it adds to the report beyond its rows.
    fn finish(self, _report: &mut ParseReport)
    where
        Self: Sized,
    {
    }
}

/// Reads `path` with `reader` into `table`, whole.
pub(crate) fn read_whole(
    path: &Path,
    mut reader: impl SegmentReader,
    table: &mut EventTable,
    report: &mut ParseReport,
) -> Result<(), ParseError> {
    let result = for_each_segment(path, |lines| reader.read(lines, table, report));
    // Text rows have no sequence numbers and few errors: a reader may leave those columns
    // untouched until here.
    table.undefer_zero_columns();
    reader.finish(report);
    result
}

/// Reads `path` with `reader` into tables of about `rows` rows (whole segments of the
/// file), each handed to `sink` as it fills, the counts of its rows added to `report`.
pub(crate) fn read_in_chunks(
    path: &Path,
    mut reader: impl SegmentReader,
    report: &mut ParseReport,
    rows: usize,
    sink: &mut dyn FnMut(EventTable) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut table = EventTable::new();
    let result = for_each_segment(path, |lines| {
        reader.read(lines, &mut table, report)?;
        if table.len() >= rows {
            reader.new_table();
            hand_on(&mut table, report, sink)?;
        }
        Ok(())
    });
    reader.finish(report);
    result?;
    match table.is_empty() {
        true => Ok(()),
        false => hand_on(&mut table, report, sink),
    }
}

/// The rows read so far, finished, counted and given to `sink`; `table` starts again empty.
fn hand_on(
    table: &mut EventTable,
    report: &mut ParseReport,
    sink: &mut dyn FnMut(EventTable) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut full = std::mem::replace(table, EventTable::new());
    full.undefer_zero_columns();
    full.shrink_to_fit();
    report.add_counts(&full);
    sink(full)
}

/// `memchr(b'\n', …)` without its per-call CPU dispatch, which costs as much as the
/// search on lines of a hundred bytes.
struct NewlineFinder {
    #[cfg(target_arch = "x86_64")]
    avx2: Option<memchr::arch::x86_64::avx2::memchr::One>,
}

impl NewlineFinder {
    fn new() -> Self {
        NewlineFinder {
            #[cfg(target_arch = "x86_64")]
            avx2: memchr::arch::x86_64::avx2::memchr::One::new(b'\n'),
        }
    }

    #[inline(always)]
    fn find(&self, haystack: &[u8]) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if let Some(one) = &self.avx2 {
            return one.find(haystack);
        }
        memchr::memchr(b'\n', haystack)
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A line's bytes as an error message shows them: invalid UTF-8 replaced, and control
/// characters and line separators escaped (`\u{b}`), so that the message stays one line.
fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| match c {
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                c.escape_default().to_string()
            }
            c => c.to_string(),
        })
        .collect()
}

/// A line a text reader could not take, `what` naming what it expected: an error, or in
/// lenient mode a note in the report.
pub fn reject_line(
    path: &Path,
    line_no: u64,
    line: &[u8],
    what: &str,
    reason: &str,
    lenient: bool,
    report: &mut ParseReport,
) -> Result<(), ParseError> {
    let err = ParseError::bad(
        path,
        Location::Line(line_no),
        format!("not {what} ({reason}): {}", shown_line(line)),
    );
    if lenient {
        report.note_bad(err.to_string());
        Ok(())
    } else {
        Err(err)
    }
}

/// Lines longer than this are shown cut in messages, saying how much was left out (a
/// binary file read as text can have megabyte "lines").
const SHOWN_LINE: usize = 1024;

/// `line` as a message shows it: whole, unless it is longer than any trace line.
fn shown_line(line: &[u8]) -> String {
    let shown = shown(&line[..line.len().min(SHOWN_LINE)]);
    match line.len().saturating_sub(SHOWN_LINE) {
        0 => shown,
        more => format!("{shown} … ({more} more bytes)"),
    }
}

/// The first blank (space or tab) at or after `p`, or the end.
#[inline(always)]
pub(crate) fn word_end(s: &[u8], p: usize) -> usize {
    scan(
        s,
        p,
        |w| bytes_equal(w, b' ') | bytes_equal(w, b'\t'),
        is_blank,
    )
}

/// The first position at or after `p` whose byte `hit` accepts, or the end: eight bytes at
/// a time where `matches` marks the accepted bytes of a word (first byte lowest) by their
/// high bits, exactly up to the first.
#[inline(always)]
pub(crate) fn scan(
    s: &[u8],
    mut p: usize,
    matches: impl Fn(u64) -> u64,
    hit: impl Fn(u8) -> bool,
) -> usize {
    while let Some(chunk) = s.get(p..p + 8) {
        let m = matches(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        if m != 0 {
            return p + (m.trailing_zeros() / 8) as usize;
        }
        p += 8;
    }
    while s.get(p).is_some_and(|&c| !hit(c)) {
        p += 1;
    }
    p
}

/// High bit of each byte of `w` equal to `byte`: exact up to the first such byte (a borrow
/// may mark later ones), which is all a search needs.
#[inline(always)]
pub(crate) fn bytes_equal(w: u64, byte: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let v = w ^ (ONES * byte as u64);
    v.wrapping_sub(ONES) & !v & HIGHS
}

pub(crate) fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Moves `*p` past the blanks (spaces and tabs) at it.
#[inline]
pub(crate) fn skip_blanks(s: &[u8], p: &mut usize) {
    while s.get(*p).is_some_and(|&c| is_blank(c)) {
        *p += 1;
    }
}

/// A cursor over one line's bytes.
pub struct Cursor<'a> {
    pub s: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(s: &'a [u8]) -> Self {
        Cursor { s, pos: 0 }
    }
    #[inline]
    pub fn skip_spaces(&mut self) {
        skip_blanks(self.s, &mut self.pos);
    }
    pub fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }
    pub fn rest(&self) -> &'a [u8] {
        &self.s[self.pos.min(self.s.len())..]
    }
    /// The next whitespace-delimited token.
    #[inline]
    pub fn word(&mut self) -> Option<&'a [u8]> {
        self.skip_spaces();
        let start = self.pos;
        self.pos = word_end(self.s, start);
        (self.pos > start).then(|| &self.s[start..self.pos])
    }
}

pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(v)
}

pub fn parse_u32(s: &[u8]) -> Option<u32> {
    parse_u64(s).and_then(|v| u32::try_from(v).ok())
}

pub fn parse_i64(s: &[u8]) -> Option<i64> {
    match s.split_first() {
        Some((b'-', digits)) => parse_u64(digits).and_then(|v| 0i64.checked_sub_unsigned(v)),
        _ => parse_u64(s).and_then(|v| i64::try_from(v).ok()),
    }
}

pub fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s.strip_prefix(b"0x").unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | d as u64;
    }
    Some(v)
}

/// `maj,min` → (major, minor).
pub fn parse_dev(s: &[u8]) -> Option<(u32, u32)> {
    let comma = memchr::memchr(b',', s)?;
    Some((parse_u32(&s[..comma])?, parse_u32(&s[comma + 1..])?))
}

/// `seconds.fraction` (any number of fraction digits up to 9) → nanoseconds; a plain
/// integer is taken as nanoseconds already (ftrace counter clocks). `None` also for a time
/// past [`MAX_TIME_NS`].
pub fn parse_time_ns(s: &[u8]) -> Option<u64> {
    match memchr::memchr(b'.', s) {
        None => parse_u64(s),
        Some(dot) => {
            let secs = parse_u64(&s[..dot])?;
            let frac = &s[dot + 1..];
            if frac.is_empty() || frac.len() > 9 {
                return None;
            }
            let mut ns = parse_u64(frac)?;
            for _ in frac.len()..9 {
                ns *= 10;
            }
            secs.checked_mul(1_000_000_000)?.checked_add(ns)
        }
    }
    .filter(|&ns| ns <= MAX_TIME_NS)
}

/// What the text after `maj,min action rwbs` (blkparse) or after `maj,min rwbs` (ftrace)
/// says. Every field is optional: which ones appear depends on the action.
#[derive(Default, Debug, PartialEq)]
pub struct Body<'a> {
    pub bytes: Option<u64>,
    pub sector: Option<u64>,
    pub sectors: Option<u32>,
    pub split_to: Option<u64>,
    pub remap: Option<(u32, u32, u64)>,
    /// The `[...]` group: process name, or the error code of completions.
    pub bracket: Option<&'a [u8]>,
    /// A number after the bracket (unplug depth) or after a remap (rq_remap's nr_bios).
    pub trailing: Option<u64>,
    pub ioprio: Option<&'a [u8]>,
}

/// A request's length in bytes: the printed bytes field, unless it is absent or 0 for a
/// request that has sectors, then sectors × 512. The block tracepoints of older kernels
/// print the byte count of passthrough requests only and 0 for every other request
/// (`block_rq_issue: 179,0 WFS 0 () 4717976 + 8`); blkparse prints it for passthrough
/// requests only, which have no sectors.
pub fn request_bytes(field: Option<u64>, sectors: u32) -> u64 {
    match field {
        Some(bytes) if bytes != 0 || sectors == 0 => bytes,
        _ => sectors as u64 * 512,
    }
}

/// Parses the body grammar; `Err` carries a short reason.
pub fn parse_body(s: &[u8]) -> Result<Body<'_>, &'static str> {
    let mut body = Body::default();
    let mut c = Cursor::new(s);
    let mut first = true;
    loop {
        c.skip_spaces();
        if c.at_end() {
            return Ok(body);
        }
        let at_start = first;
        first = false;
        match c.s[c.pos] {
            b'[' => {
                if body.bracket.is_some() {
                    return Err("two [...] groups");
                }
                let close = memchr::memrchr(b']', &c.s[c.pos..]).ok_or("unclosed [")? + c.pos;
                body.bracket = Some(&c.s[c.pos + 1..close]);
                c.pos = close + 1;
            }
            b'(' => {
                let close = memchr::memchr(b')', &c.s[c.pos..]).ok_or("unclosed (")? + c.pos;
                c.pos = close + 1;
            }
            b'<' => {
                if c.word() != Some(b"<-") {
                    return Err("expected <-");
                }
                let dev = c.word().ok_or("remap without source device")?;
                let dev = dev
                    .strip_prefix(b"(")
                    .and_then(|d| d.strip_suffix(b")"))
                    .ok_or("bad remap device")?;
                let (maj, min) = parse_dev(dev).ok_or("bad remap device")?;
                let from = c.word().and_then(parse_u64).ok_or("bad remap sector")?;
                body.remap = Some((maj, min, from));
            }
            b'0'..=b'9' | b'-' => {
                let w = c.word().unwrap_or_default();
                let n = parse_u64(w);
                c.skip_spaces();
                let next = c.s.get(c.pos).copied();
                match (n, next) {
                    (Some(v), Some(b'+')) => {
                        c.pos += 1;
                        body.sector = Some(v);
                        body.sectors =
                            Some(c.word().and_then(parse_u32).ok_or("bad sector count")?);
                    }
                    (Some(v), Some(b'/')) => {
                        c.pos += 1;
                        body.sector = Some(v);
                        body.split_to =
                            Some(c.word().and_then(parse_u64).ok_or("bad split sector")?);
                    }
                    (Some(v), Some(b'(')) if at_start => body.bytes = Some(v),
                    (Some(v), _) if body.bracket.is_some() || body.remap.is_some() => {
                        body.trailing = Some(v)
                    }
                    (Some(v), _) if body.sector.is_none() => body.sector = Some(v),
                    (None, _) if w.contains(&b',') => body.ioprio = Some(w),
                    _ => return Err("unexpected number"),
                }
            }
            _ => {
                let w = c.word().unwrap_or_default();
                if w.contains(&b',') && body.ioprio.is_none() {
                    body.ioprio = Some(w);
                } else {
                    return Err("unexpected word");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapped file and the same file read in chunks give the same lines, numbered alike.
    #[test]
    fn mapped_and_read_files_give_the_same_lines() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(100_000);
        let contents = [
            "a\nb\n",
            "a\r\nb",
            "\n\n\n",
            "last line without newline",
            "crlf\r\n\r\nend\r",
            long.as_str(),
        ];
        for (k, text) in contents.iter().enumerate() {
            let path = dir.path().join(format!("{k}.txt"));
            std::fs::write(&path, text).unwrap();
            let collect = |mapped: bool, segment: usize| {
                let mut lines = Vec::new();
                let f = |segment: &mut Lines<'_>| {
                    lines.extend(segment.map(|(no, line)| (no, line.to_vec())));
                    Ok(())
                };
                let file = std::fs::File::open(&path).unwrap();
                if mapped {
                    let map = map_file(&file).expect("a regular file maps");
                    for_each_mapped_segment(&map, segment, f).unwrap();
                } else {
                    for_each_read_segment(&path, file, segment, f).unwrap();
                }
                lines
            };
            // Lines end at '\n' (the last may not), less one trailing '\r'.
            let body = text.strip_suffix('\n').unwrap_or(text);
            let want: Vec<(u64, Vec<u8>)> = body
                .split('\n')
                .enumerate()
                .map(|(i, l)| {
                    (
                        i as u64 + 1,
                        l.strip_suffix('\r').unwrap_or(l).as_bytes().to_vec(),
                    )
                })
                .collect();
            // Segments of a few bytes (many lines cut across), of pages, and the parse's own.
            for segment in [1, 3, 4096, SEGMENT] {
                assert_eq!(
                    collect(true, segment),
                    want,
                    "mapped {k}, segments of {segment}"
                );
                assert_eq!(
                    collect(false, segment),
                    want,
                    "read {k}, segments of {segment}"
                );
            }
        }
    }

    /// The pages dropped behind the reader (segments of 16 KiB here, 8 MiB in a parse)
    /// read back unchanged should anything touch them again.
    #[test]
    fn mapped_lines_read_the_same_with_pages_dropped_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.txt");
        let text: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let map = map_file(&std::fs::File::open(&path).unwrap()).expect("a regular file maps");
        let mut lines = Vec::new();
        for_each_mapped_segment(&map, 16 << 10, |segment| {
            lines.extend(segment.map(|(no, line)| (no, line.to_vec())));
            Ok(())
        })
        .unwrap();
        let want: Vec<(u64, Vec<u8>)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i as u64 + 1, l.as_bytes().to_vec()))
            .collect();
        assert_eq!(lines, want);
        // The whole map, dropped pages included, still holds the file.
        assert_eq!(&map[..], text.as_bytes());
    }

    #[test]
    fn times_scale_to_nanoseconds() {
        assert_eq!(parse_time_ns(b"0.000000149"), Some(149));
        assert_eq!(parse_time_ns(b"12.5"), Some(12_500_000_000));
        assert_eq!(parse_time_ns(b"3.000001"), Some(3_000_001_000));
        assert_eq!(parse_time_ns(b"77"), Some(77));
        assert_eq!(parse_time_ns(b"1.0000000001"), None);
    }

    #[test]
    fn body_forms() {
        let b = parse_body(b"763360912 + 16 [dmcrypt_write/2]").unwrap();
        assert_eq!(
            (b.sector, b.sectors, b.bracket),
            (Some(763360912), Some(16), Some(&b"dmcrypt_write/2"[..]))
        );
        let b = parse_body(b"746579600 + 8 <- (253,3) 578805392").unwrap();
        assert_eq!(b.remap, Some((253, 3, 578805392)));
        let b = parse_body(b"[kworker/u8:2] 3").unwrap();
        assert_eq!(
            (b.bracket, b.trailing),
            (Some(&b"kworker/u8:2"[..]), Some(3))
        );
        let b = parse_body(b"4096 () 1234 + 8 be,0,4 [sqlite]").unwrap();
        assert_eq!(
            (b.bytes, b.sector, b.sectors, b.ioprio),
            (Some(4096), Some(1234), Some(8), Some(&b"be,0,4"[..]))
        );
        let b = parse_body(b"() 1234 + 8 none,0,0 [-5]").unwrap();
        assert_eq!(b.bracket, Some(&b"-5"[..]));
        let b = parse_body(b"100 / 108 [fio]").unwrap();
        assert_eq!(b.split_to, Some(108));
        let b = parse_body(b"55 [0]").unwrap();
        assert_eq!(b.sector, Some(55));
        assert!(parse_body(b"hello world").is_err());
    }
}
