//! blktrace binary traces (format version 7): one file per CPU, `NAME.blktrace.N`, each a
//! sequence of 48-byte `struct blk_io_trace` headers followed by `pdu_len` payload bytes,
//! in the byte order of the machine that recorded them. Files are merged by time the way
//! blkparse orders its output; process-notify records name the pids and are not rows.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Location, ParseError};
use crate::report::ParseReport;
use crate::rwbs::{category, decode_category, rwbs_from_category};
use crate::table::{Action, Event, EventTable, RecordKind};

pub const MAGIC: u32 = 0x6561_7400;
pub const SUPPORTED_VERSION: u32 = 7;
pub const HEADER_LEN: usize = 48;

/// `__BLK_TA_*` action codes (low 16 bits of `action`).
pub mod ta {
    pub const QUEUE: u32 = 1;
    pub const BACKMERGE: u32 = 2;
    pub const FRONTMERGE: u32 = 3;
    pub const GETRQ: u32 = 4;
    pub const SLEEPRQ: u32 = 5;
    pub const REQUEUE: u32 = 6;
    pub const ISSUE: u32 = 7;
    pub const COMPLETE: u32 = 8;
    pub const PLUG: u32 = 9;
    pub const UNPLUG_IO: u32 = 10;
    pub const UNPLUG_TIMER: u32 = 11;
    pub const INSERT: u32 = 12;
    pub const SPLIT: u32 = 13;
    pub const BOUNCE: u32 = 14;
    pub const REMAP: u32 = 15;
    pub const ABORT: u32 = 16;
    pub const DRV_DATA: u32 = 17;
    /// Set when the payload starts with an 8-byte cgroup id.
    pub const CGROUP: u32 = 1 << 8;
}

/// `__BLK_TN_*` notify codes (with the NOTIFY category bit set).
pub mod tn {
    pub const PROCESS: u32 = 0;
    pub const TIMESTAMP: u32 = 1;
    pub const MESSAGE: u32 = 2;
}

fn action_of(act: u32) -> Option<Action> {
    Some(match act {
        ta::QUEUE => Action::Queue,
        ta::BACKMERGE => Action::BackMerge,
        ta::FRONTMERGE => Action::FrontMerge,
        ta::GETRQ => Action::GetRq,
        ta::SLEEPRQ => Action::SleepRq,
        ta::REQUEUE => Action::Requeue,
        ta::ISSUE => Action::Issue,
        ta::COMPLETE => Action::Complete,
        ta::PLUG => Action::Plug,
        ta::UNPLUG_IO => Action::Unplug,
        ta::UNPLUG_TIMER => Action::UnplugTimer,
        ta::INSERT => Action::Insert,
        ta::SPLIT => Action::Split,
        ta::BOUNCE => Action::Bounce,
        ta::REMAP => Action::Remap,
        ta::ABORT => Action::Abort,
        _ => return None,
    })
}

/// `NAME` → its per-CPU files `NAME.blktrace.0 …` in CPU order; existing files stay as given.
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ParseError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_file() {
            out.push(p.clone());
            continue;
        }
        let per_cpu = per_cpu_files(p);
        if per_cpu.is_empty() {
            return Err(ParseError::io(p, std::io::Error::new(std::io::ErrorKind::NotFound, "no such file, and no NAME.blktrace.N files for it")));
        }
        out.extend(per_cpu);
    }
    Ok(out)
}

/// The `base.blktrace.N` files next to `base`, sorted by N.
pub fn per_cpu_files(base: &Path) -> Vec<PathBuf> {
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(stem) = base.file_name().and_then(|s| s.to_str()) else { return Vec::new() };
    let prefix = format!("{stem}.blktrace.");
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut found: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u32 = name.strip_prefix(&prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// True if `head` starts with a blktrace magic in either byte order.
pub fn looks_like_blktrace(head: &[u8]) -> bool {
    head.len() >= 4 && {
        let b = [head[0], head[1], head[2], head[3]];
        u32::from_le_bytes(b) & 0xffff_ff00 == MAGIC || u32::from_be_bytes(b) & 0xffff_ff00 == MAGIC
    }
}

/// One decoded record, payload already interpreted.
#[derive(Default, Clone)]
struct Record {
    sequence: u32,
    time: u64,
    sector: u64,
    bytes: u32,
    action: u32,
    pid: u32,
    device: u32,
    cpu: u32,
    error: u16,
    /// Split: second-half sector; unplug: depth.
    aux: u64,
    remap: Option<(u32, u64)>,
    cgroup_id: u64,
    /// Notify payload (process name, message text, timestamp) without the cgroup prefix.
    text: Vec<u8>,
}

/// A per-CPU file read in large chunks.
struct Stream {
    path: PathBuf,
    file: std::fs::File,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    /// File offset of `buf[0]`.
    base: u64,
    big_endian: Option<bool>,
    eof: bool,
}

const CHUNK: usize = 1 << 20;

impl Stream {
    fn open(path: &Path) -> Result<Stream, ParseError> {
        let file = std::fs::File::open(path).map_err(|e| ParseError::io(path, e))?;
        Ok(Stream { path: path.to_path_buf(), file, buf: vec![0; CHUNK], pos: 0, filled: 0, base: 0, big_endian: None, eof: false })
    }

    /// Makes `n` bytes available at `pos`; false at end of file.
    fn fill(&mut self, n: usize) -> Result<bool, ParseError> {
        while self.filled - self.pos < n {
            if self.eof {
                return Ok(false);
            }
            if self.pos > 0 {
                self.buf.copy_within(self.pos..self.filled, 0);
                self.base += self.pos as u64;
                self.filled -= self.pos;
                self.pos = 0;
            }
            if self.buf.len() < n {
                self.buf.resize(n, 0);
            }
            let got = self.file.read(&mut self.buf[self.filled..]).map_err(|e| ParseError::io(&self.path, e))?;
            if got == 0 {
                self.eof = true;
            }
            self.filled += got;
        }
        Ok(true)
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn error(&self, offset: u64, message: impl Into<String>) -> ParseError {
        ParseError::bad(&self.path, Location::ByteOffset(offset), message)
    }

    /// Reads the next record into `rec`; Ok(false) at a clean end of file.
    fn next(&mut self, rec: &mut Record) -> Result<bool, ParseError> {
        let start = self.offset();
        if !self.fill(HEADER_LEN)? {
            if self.filled > self.pos {
                return Err(self.error(start, format!("truncated record: {} of {HEADER_LEN} header bytes", self.filled - self.pos)));
            }
            return Ok(false);
        }
        let h = &self.buf[self.pos..self.pos + HEADER_LEN];
        let magic_bytes = [h[0], h[1], h[2], h[3]];
        let big = match self.big_endian {
            Some(b) => b,
            None => {
                let b = detect_byte_order(magic_bytes).ok_or_else(|| {
                    self.error(start, format!("bad magic {:#010x}: not a blktrace file", u32::from_le_bytes(magic_bytes)))
                })?;
                self.big_endian = Some(b);
                b
            }
        };
        let u32_at = |o: usize| {
            let b = [h[o], h[o + 1], h[o + 2], h[o + 3]];
            if big { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) }
        };
        let u64_at = |o: usize| {
            let b: [u8; 8] = h[o..o + 8].try_into().unwrap();
            if big { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) }
        };
        let u16_at = |o: usize| {
            let b = [h[o], h[o + 1]];
            if big { u16::from_be_bytes(b) } else { u16::from_le_bytes(b) }
        };
        let magic = u32_at(0);
        check_magic(magic).map_err(|m| self.error(start, m))?;
        rec.sequence = u32_at(4);
        rec.time = u64_at(8);
        rec.sector = u64_at(16);
        rec.bytes = u32_at(24);
        rec.action = u32_at(28);
        rec.pid = u32_at(32);
        rec.device = u32_at(36);
        rec.cpu = u32_at(40);
        rec.error = u16_at(44);
        let pdu_len = u16_at(46) as usize;
        if !self.fill(HEADER_LEN + pdu_len)? {
            return Err(self.error(start, format!("truncated record: payload of {pdu_len} bytes cut off")));
        }
        let pdu_start = self.pos + HEADER_LEN;
        decode_payload(rec, &self.buf[pdu_start..pdu_start + pdu_len], big);
        self.pos += HEADER_LEN + pdu_len;
        Ok(true)
    }
}

fn detect_byte_order(b: [u8; 4]) -> Option<bool> {
    if u32::from_le_bytes(b) & 0xffff_ff00 == MAGIC {
        Some(false)
    } else if u32::from_be_bytes(b) & 0xffff_ff00 == MAGIC {
        Some(true)
    } else {
        None
    }
}

fn check_magic(magic: u32) -> Result<(), String> {
    if magic & 0xffff_ff00 != MAGIC {
        return Err(format!("bad magic {magic:#010x}: not a blktrace record (corrupt or misaligned)"));
    }
    match magic & 0xff {
        SUPPORTED_VERSION => Ok(()),
        8 => Err("blktrace format version 8 (blktrace >= 2.0, 64-bit action bits) is not supported yet; \
                  record with blktrace 1.x or convert with `blkparse -d`"
            .to_string()),
        v => Err(format!("unknown blktrace format version {v} (this parser reads version 7)")),
    }
}

/// Interprets the payload that follows the header: cgroup prefix, remap, split/unplug values.
fn decode_payload(rec: &mut Record, pdu: &[u8], big: bool) {
    rec.aux = 0;
    rec.remap = None;
    rec.cgroup_id = 0;
    rec.text.clear();
    let act = rec.action & 0xffff;
    let mut pdu = pdu;
    if act & ta::CGROUP != 0 && pdu.len() >= 8 {
        let b: [u8; 8] = pdu[..8].try_into().unwrap();
        rec.cgroup_id = if big { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) };
        pdu = &pdu[8..];
    }
    let cat = rec.action >> 16;
    if cat & category::NOTIFY != 0 {
        rec.text.extend_from_slice(pdu);
        return;
    }
    let be64 = |p: &[u8]| p.get(..8).map(|b| u64::from_be_bytes(b.try_into().unwrap()));
    match act & !ta::CGROUP {
        // Payload integers and the remap struct are big-endian on every machine.
        ta::SPLIT | ta::UNPLUG_IO | ta::UNPLUG_TIMER => rec.aux = be64(pdu).unwrap_or(0),
        ta::REMAP if pdu.len() >= 16 => {
            let from = u32::from_be_bytes(pdu[0..4].try_into().unwrap());
            let to = u32::from_be_bytes(pdu[4..8].try_into().unwrap());
            rec.device = to;
            rec.remap = Some((from, be64(&pdu[8..]).unwrap_or(0)));
        }
        _ => {}
    }
}

fn dev_major(dev: u32) -> u32 {
    dev >> 20
}
fn dev_minor(dev: u32) -> u32 {
    dev & 0xfffff
}

/// Reads and merges the given per-CPU files (already expanded) into `table`.
pub fn read(paths: &[PathBuf], lenient: bool, table: &mut EventTable, report: &mut ParseReport) -> Result<(), ParseError> {
    let total_bytes: u64 = paths.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    // An upper bound on the row count, so the columns never reallocate.
    table.reserve((total_bytes / HEADER_LEN as u64) as usize);
    let mut streams = Vec::with_capacity(paths.len());
    for p in paths {
        streams.push(Stream::open(p)?);
    }
    let mut heads: Vec<Record> = vec![Record::default(); streams.len()];
    let mut heap = BinaryHeap::with_capacity(streams.len());
    for (i, s) in streams.iter_mut().enumerate() {
        if advance(s, &mut heads[i], lenient, report)? {
            heap.push(Reverse((heads[i].time, i)));
        }
    }
    let mut names = ProcessNames::default();
    let mut rwbs_codes = RwbsCodes::new();
    let mut time_base: Option<u64> = None;
    while let Some(Reverse((_, i))) = heap.pop() {
        // Keep taking from this file while it stays the earliest: per-CPU files come in
        // long runs, and this avoids a heap operation per record. Ties go to the lower
        // file index, exactly as the heap orders them.
        let next_other = heap.peek().map(|Reverse(key)| *key);
        loop {
            let rec = &heads[i];
            let rows_before = table.len();
            emit(rec, table, report, &mut names, &mut rwbs_codes);
            if table.len() > rows_before {
                // blkparse's time zero is the first printed event, not the first notify record.
                time_base = Some(time_base.map_or(rec.time, |t| t.min(rec.time)));
            }
            if !advance(&mut streams[i], &mut heads[i], lenient, report)? {
                break;
            }
            let key = (heads[i].time, i);
            if next_other.is_some_and(|other| other < key) {
                heap.push(Reverse(key));
                break;
            }
        }
    }
    report.time_base_ns = time_base;
    names.fill_comms(table);
    Ok(())
}

/// Reads the next record of a stream; in lenient mode a bad record ends that file.
fn advance(s: &mut Stream, rec: &mut Record, lenient: bool, report: &mut ParseReport) -> Result<bool, ParseError> {
    match s.next(rec) {
        Ok(more) => Ok(more),
        Err(e @ ParseError::Bad { .. }) if lenient => {
            report.note_bad(format!("{e} (rest of the file skipped)"));
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// pid → process name, from process-notify records; applied to all rows at the end
/// because a name may arrive after the pid's first events (another CPU's file).
#[derive(Default)]
struct ProcessNames {
    by_pid: HashMap<u32, Vec<u8>>,
}

impl ProcessNames {
    fn fill_comms(&self, table: &mut EventTable) {
        let mut code_by_pid: HashMap<u32, u32> = HashMap::with_capacity(self.by_pid.len());
        for (&pid, name) in &self.by_pid {
            code_by_pid.insert(pid, table.comms.intern(name));
        }
        let mut last = (u32::MAX, 0u32);
        for i in 0..table.len() {
            if table.kind[i] != RecordKind::Block as u8 {
                continue;
            }
            let pid = table.pid[i];
            if pid != last.0 {
                last = (pid, code_by_pid.get(&pid).copied().unwrap_or(0));
            }
            table.comm[i] = last.1;
        }
    }
}

/// Dictionary codes of the RWBS strings, by the category bits that decide them: interning
/// a string per record would cost more than decoding the whole record.
struct RwbsCodes {
    by_bits: [u32; 256],
}

impl RwbsCodes {
    fn new() -> Self {
        RwbsCodes { by_bits: [u32::MAX; 256] }
    }

    fn code(&mut self, cat: u32, bytes: u32, table: &mut EventTable) -> u32 {
        let bits = [category::FLUSH, category::DISCARD, category::WRITE, category::FUA, category::AHEAD, category::SYNC, category::META]
            .iter()
            .enumerate()
            .fold((bytes != 0) as usize, |acc, (n, &bit)| acc | (((cat & bit != 0) as usize) << (n + 1)));
        let slot = &mut self.by_bits[bits];
        if *slot == u32::MAX {
            let mut buf = [0u8; 8];
            let n = rwbs_from_category(cat, bytes, &mut buf);
            *slot = table.rwbs_values.intern(&buf[..n]);
        }
        *slot
    }
}

fn emit(rec: &Record, table: &mut EventTable, report: &mut ParseReport, names: &mut ProcessNames, rwbs_codes: &mut RwbsCodes) {
    let cat = rec.action >> 16;
    let act = rec.action & 0xffff & !ta::CGROUP;
    let mut e = Event {
        time_ns: rec.time,
        dev_major: dev_major(rec.device),
        dev_minor: dev_minor(rec.device),
        cpu: rec.cpu,
        sequence: rec.sequence as u64,
        pid: rec.pid,
        cgroup_id: rec.cgroup_id,
        ..Event::default()
    };
    if cat & category::NOTIFY != 0 {
        match act {
            tn::PROCESS => {
                let end = memchr::memchr(0, &rec.text).unwrap_or(rec.text.len());
                names.by_pid.insert(rec.pid, rec.text[..end].to_vec());
                report.notify_records += 1;
            }
            tn::TIMESTAMP => {
                if rec.text.len() >= 8 {
                    let sec = u32::from_ne_bytes(rec.text[0..4].try_into().unwrap()) as u64;
                    let nsec = u32::from_ne_bytes(rec.text[4..8].try_into().unwrap()) as u64;
                    report.wall_clock_start_ns = Some(sec * 1_000_000_000 + nsec);
                }
                report.notify_records += 1;
            }
            _ => {
                e.kind = RecordKind::Message;
                e.action = Action::Notify;
                let end = memchr::memchr(0, &rec.text).unwrap_or(rec.text.len());
                let rwbs = table.rwbs_values.intern(b"N");
                table.push(&e, 0, rwbs, 0, &rec.text[..end]);
            }
        }
        return;
    }
    let Some(action) = action_of(act) else {
        // Driver data and unknown codes: blkparse prints none of them either.
        report.skipped_records += 1;
        return;
    };
    let (operation, flags) = decode_category(cat, rec.bytes);
    e.kind = RecordKind::Block;
    e.action = action;
    e.operation = operation;
    e.flags = flags;
    e.sector = rec.sector;
    e.bytes = rec.bytes as u64;
    e.sectors = rec.bytes >> 9;
    e.error = rec.error as i16 as i32;
    e.aux = rec.aux;
    e.remap = rec.remap.map(|(from, sector)| (dev_major(from), dev_minor(from), sector));
    let rwbs = rwbs_codes.code(cat, rec.bytes, table);
    table.push(&e, 0, rwbs, 0, b"");
}
