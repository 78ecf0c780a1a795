//! blktrace binary traces (format version 7): one file per CPU, `NAME.blktrace.N`, each a
//! sequence of 48-byte `struct blk_io_trace` headers followed by `pdu_len` payload bytes,
//! in the byte order of the machine that recorded them. Files are merged by time the way
//! blkparse orders its output; process-notify records name the pids and are not rows.
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{Location, ParseError};
use crate::input::Input;
use crate::report::ParseReport;
use crate::rwbs::{category, decode_category, rwbs_from_category};
use crate::table::{
    flags, zeroed_column, Action, Dictionary, EventTable, Operation, RecordKind, SparseFields,
    MAX_TIME_NS,
};

pub(crate) const MAGIC: u32 = 0x6561_7400;
pub(crate) const SUPPORTED_VERSION: u32 = 7;
pub(crate) const HEADER_LEN: usize = 48;

/// `__BLK_TA_*` action codes (low 16 bits of `action`).
pub mod ta {
    /// Queued: a bio entered the block layer (blkparse `Q`).
    pub const QUEUE: u32 = 1;
    /// Merged at the back of a queued request (`M`).
    pub const BACKMERGE: u32 = 2;
    /// Merged at the front of a queued request (`F`).
    pub const FRONTMERGE: u32 = 3;
    /// A request was allocated for a bio (`G`).
    pub const GETRQ: u32 = 4;
    /// The submitter slept waiting for a free request (`S`).
    pub const SLEEPRQ: u32 = 5;
    /// A request was put back on the queue (`R`).
    pub const REQUEUE: u32 = 6;
    /// Issued to the driver (`D`).
    pub const ISSUE: u32 = 7;
    /// Completed by the device (`C`).
    pub const COMPLETE: u32 = 8;
    /// The queue was plugged (`P`).
    pub const PLUG: u32 = 9;
    /// The queue was unplugged by I/O (`U`).
    pub const UNPLUG_IO: u32 = 10;
    /// The queue was unplugged by its timer (`UT`).
    pub const UNPLUG_TIMER: u32 = 11;
    /// A request was inserted into the I/O scheduler (`I`).
    pub const INSERT: u32 = 12;
    /// A bio was split in two (`X`).
    pub const SPLIT: u32 = 13;
    /// A bio was bounced to reachable memory (`B`).
    pub const BOUNCE: u32 = 14;
    /// A bio was remapped from another device, e.g. a partition or dm (`A`).
    pub const REMAP: u32 = 15;
    /// A request was aborted (`__BLK_TA_ABORT`; blkparse has no letter for it).
    pub const ABORT: u32 = 16;
    /// Driver-specific data (not printed by blkparse, counted as skipped).
    pub const DRV_DATA: u32 = 17;
    /// Set when the payload starts with an 8-byte cgroup id.
    pub const CGROUP: u32 = 1 << 8;
}

/// `__BLK_TN_*` notify codes (with the NOTIFY category bit set).
pub(crate) mod tn {
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
pub(crate) fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ParseError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_file() {
            out.push(p.clone());
            continue;
        }
        let per_cpu = per_cpu_files(p);
        if per_cpu.is_empty() {
            return Err(ParseError::io(p, not_a_trace(p)));
        }
        out.extend(per_cpu);
    }
    Ok(out)
}

/// Why `p`, with no `p.blktrace.N` files beside it, is no trace to read: what looking at
/// it says (permission denied, a name too long), that it is a directory or no regular
/// file (a device or a pipe, which may never end), or that nothing is there.
fn not_a_trace(p: &Path) -> std::io::Error {
    use std::io::{Error, ErrorKind};
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Error::new(ErrorKind::IsADirectory, "a directory, not a trace file"),
        Ok(_) => Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device or a pipe)",
        ),
        Err(e) if e.kind() != ErrorKind::NotFound => e,
        Err(_) => Error::new(
            ErrorKind::NotFound,
            "no such file, and no NAME.blktrace.N files for it",
        ),
    }
}

/// The `base.blktrace.N` files next to `base`, sorted by N.
pub(crate) fn per_cpu_files(base: &Path) -> Vec<PathBuf> {
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(stem) = base.file_name().and_then(|s| s.to_str()) else {
        return Vec::new();
    };
    let prefix = format!("{stem}.blktrace.");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
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
pub(crate) fn looks_like_blktrace(head: &[u8]) -> bool {
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

/// A reader of `input` positioned at byte `offset`.
fn stream_at(input: &Input, offset: u64) -> Stream<'_> {
    Stream {
        path: input.path(),
        data: input.bytes(),
        pos: offset as usize,
        big_endian: None,
    }
}

/// A cursor over one file's records.
struct Stream<'a> {
    path: &'a Path,
    data: &'a [u8],
    pos: usize,
    big_endian: Option<bool>,
}

impl Stream<'_> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn left(&self) -> usize {
        self.data.len() - self.pos
    }

    fn error(&self, offset: u64, message: impl Into<String>) -> ParseError {
        ParseError::bad(self.path, Location::ByteOffset(offset), message)
    }

    /// The header at the cursor if it starts a whole block record (not notify) of the
    /// supported version in a byte order already known, with a time in range, and its
    /// payload length; `None` for anything else, which [`Stream::next`] reads and checks.
    #[inline(always)]
    fn block_header(&self) -> Option<(Header<'_>, usize)> {
        let h = Header {
            bytes: self.data[self.pos..].first_chunk::<HEADER_LEN>()?,
            big: self.big_endian?,
        };
        let pdu_len = h.u16(46) as usize;
        let whole = h.u32(0) == MAGIC | SUPPORTED_VERSION && self.left() >= HEADER_LEN + pdu_len;
        let usual = (h.u32(28) >> 16) & category::NOTIFY == 0 && h.u64(8) <= MAX_TIME_NS;
        (whole && usual).then_some((h, pdu_len))
    }

    /// The first pass's reader: for a whole block record, reads only the fields that decide
    /// order and RWBS (time, action, bytes); anything else goes through [`Stream::next`].
    #[inline]
    fn next_light(&mut self, rec: &mut Record) -> Result<bool, ParseError> {
        let Some((h, pdu_len)) = self.block_header() else {
            return self.next(rec);
        };
        rec.time = h.u64(8);
        rec.action = h.u32(28);
        rec.bytes = h.u32(24);
        self.pos += HEADER_LEN + pdu_len;
        Ok(true)
    }

    /// The second pass's reader for the usual record, a block record without payload:
    /// reads it into `rec` and answers true; false (nothing read) for anything else, which
    /// [`Stream::next`] then reads.
    #[inline(always)]
    fn next_plain(&mut self, rec: &mut Record) -> bool {
        let Some((h, 0)) = self.block_header() else {
            return false;
        };
        h.read_fields(rec);
        rec.aux = 0;
        rec.remap = None;
        rec.cgroup_id = 0;
        self.pos += HEADER_LEN;
        true
    }

    /// Reads the next record into `rec`; Ok(false) at a clean end of file.
    #[inline]
    fn next(&mut self, rec: &mut Record) -> Result<bool, ParseError> {
        let start = self.offset();
        let Some(bytes) = self.data[self.pos..].first_chunk::<HEADER_LEN>() else {
            if self.left() > 0 {
                return Err(self.error(
                    start,
                    format!(
                        "truncated record: {} of {HEADER_LEN} header bytes",
                        self.left()
                    ),
                ));
            }
            return Ok(false);
        };
        let magic_bytes = [bytes[0], bytes[1], bytes[2], bytes[3]];
        let big = match self.big_endian {
            Some(b) => b,
            None => {
                let b = detect_byte_order(magic_bytes).ok_or_else(|| {
                    self.error(
                        start,
                        format!(
                            "bad magic {:#010x}: not a blktrace file",
                            u32::from_le_bytes(magic_bytes)
                        ),
                    )
                })?;
                self.big_endian = Some(b);
                b
            }
        };
        let h = Header { bytes, big };
        check_magic(h.u32(0)).map_err(|m| self.error(start, m))?;
        h.read_fields(rec);
        check_time(rec.time).map_err(|m| self.error(start, m))?;
        let pdu_len = h.u16(46) as usize;
        if self.left() < HEADER_LEN + pdu_len {
            return Err(self.error(
                start,
                format!("truncated record: payload of {pdu_len} bytes cut off"),
            ));
        }
        let pdu_start = self.pos + HEADER_LEN;
        decode_payload(rec, &self.data[pdu_start..pdu_start + pdu_len], big);
        self.pos += HEADER_LEN + pdu_len;
        Ok(true)
    }
}

/// One `struct blk_io_trace` header, in the byte order of the machine that recorded it.
#[derive(Clone, Copy)]
struct Header<'a> {
    bytes: &'a [u8; HEADER_LEN],
    big: bool,
}

impl Header<'_> {
    #[inline(always)]
    fn u16(&self, o: usize) -> u16 {
        let b = [self.bytes[o], self.bytes[o + 1]];
        if self.big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }

    #[inline(always)]
    fn u32(&self, o: usize) -> u32 {
        let b = [
            self.bytes[o],
            self.bytes[o + 1],
            self.bytes[o + 2],
            self.bytes[o + 3],
        ];
        if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    #[inline(always)]
    fn u64(&self, o: usize) -> u64 {
        let b: [u8; 8] = self.bytes[o..o + 8].try_into().unwrap();
        if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        }
    }

    /// The header's fields (all but magic and payload length) into `rec`.
    #[inline(always)]
    fn read_fields(&self, rec: &mut Record) {
        rec.sequence = self.u32(4);
        rec.time = self.u64(8);
        rec.sector = self.u64(16);
        rec.bytes = self.u32(24);
        rec.action = self.u32(28);
        rec.pid = self.u32(32);
        rec.device = self.u32(36);
        rec.cpu = self.u32(40);
        rec.error = self.u16(44);
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
        return Err(format!(
            "bad magic {magic:#010x}: not a blktrace record (corrupt or misaligned)"
        ));
    }
    match magic & 0xff {
        SUPPORTED_VERSION => Ok(()),
        8 => Err("blktrace format version 8 (blktrace >= 2.0, 64-bit action bits) is not supported yet; \
                  record with blktrace 1.x or convert with `blkparse -d`"
            .to_string()),
        v => Err(format!("unknown blktrace format version {v} (this parser reads version 7)")),
    }
}

/// The kernel stamps records with its clock in ns since boot; one past [`MAX_TIME_NS`]
/// (292 years) is a corrupt record, not a time.
fn check_time(time: u64) -> Result<(), String> {
    if time > MAX_TIME_NS {
        return Err(format!(
            "time {time} ns is 2^63 ns (292 years) or more: a corrupt record"
        ));
    }
    Ok(())
}

/// Interprets the payload that follows the header: cgroup prefix, remap, split/unplug values.
#[inline]
fn decode_payload(rec: &mut Record, pdu: &[u8], big: bool) {
    rec.aux = 0;
    rec.remap = None;
    rec.cgroup_id = 0;
    rec.text.clear();
    let act = rec.action & 0xffff;
    let mut pdu = pdu;
    if act & ta::CGROUP != 0 && pdu.len() >= 8 {
        let b: [u8; 8] = pdu[..8].try_into().unwrap();
        rec.cgroup_id = if big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        };
        pdu = &pdu[8..];
    }
    let cat = rec.action >> 16;
    if cat & category::NOTIFY != 0 {
        rec.text.extend_from_slice(pdu);
        return;
    }
    let be64 = |p: &[u8]| {
        p.get(..8)
            .map(|b| u64::from_be_bytes(b.try_into().unwrap()))
    };
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

/// One stretch of consecutive records of one file in merge order.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// Byte offset of the run's first record in its file.
    offset: u64,
    file: u32,
    records: u32,
    /// How many of the records become rows (notify records and driver data do not).
    rows: u32,
}

/// Runs are cut at this many records so that even one long file splits across threads.
const MAX_RUN: u32 = 1 << 14;

/// Rows below which one more thread is not worth starting.
const MIN_ROWS_PER_THREAD: usize = 1 << 16;

/// Threads the binary reader uses for `rows` rows: `BLKTRACE_PARSE_THREADS` if set, else
/// the available cores, but at most one per 64 Ki rows.
pub fn threads_for(rows: usize) -> usize {
    let cores = std::env::var("BLKTRACE_PARSE_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    cores.min(rows / MIN_ROWS_PER_THREAD).max(1)
}

/// Reads and merges the given per-CPU files (already expanded) into `table`, in two passes
/// that overlap: the first merges the files by time on one thread, reading only what
/// decides the order and what is not a row (process names, timestamps, errors), and hands
/// the merge order on in batches of runs; the other threads decode those batches' rows as
/// they come, each batch into its own range of rows, and the first thread joins them once
/// the merge is done.
pub(crate) fn read(
    paths: &[PathBuf],
    lenient: bool,
    table: &mut EventTable,
    report: &mut ParseReport,
) -> Result<(), ParseError> {
    read_with_threads(paths, lenient, table, report, None)
}

/// Reads and merges the given per-CPU files (their full names: `NAME.blktrace.N`) into
/// `table`, as [`crate::parse_paths`] does for a blktrace trace, on a given number of
/// threads (`None`: [`threads_for`] the most rows the files can hold). The table is the
/// same whatever the number (`tests/threads.rs` checks 1, 2, 3 and 7).
pub fn read_with_threads(
    paths: &[PathBuf],
    lenient: bool,
    table: &mut EventTable,
    report: &mut ParseReport,
    threads: Option<usize>,
) -> Result<(), ParseError> {
    let inputs = open_inputs(paths)?;
    // No row is shorter than a header: this many rows at most. The columns rows write are
    // sized for that many (zeroed pages, which cost nothing until written) and cut to the
    // real count at the end, so decoding can start before the count is known.
    let max_rows = inputs
        .iter()
        .map(|i| i.bytes().len() / HEADER_LEN)
        .sum::<usize>();
    let threads = threads
        .unwrap_or_else(|| threads_for(max_rows))
        .clamp(1, max_rows.max(1));
    let mut out = sized_table(max_rows);
    let lookup = RwbsLookup::new();
    // pid → process name code, once the merge has read every file.
    let names = std::sync::OnceLock::new();
    let rows = decode_with(
        &mut out,
        (&inputs, &lookup, &names),
        threads,
        |emit, (rwbs_values, comms)| {
            let planned = plan(
                &inputs,
                lenient,
                rwbs_values,
                &lookup,
                report,
                &mut |b, _| {
                    emit(b);
                    Ok(())
                },
            )?;
            let comm_by_pid = intern_names(&planned.names, comms);
            names.set(comm_by_pid).expect("names are set once");
            Ok(planned.rows)
        },
    )?;
    out.truncate_rows(rows);
    if table.is_empty() {
        *table = out;
    } else {
        table.append(&out);
    }
    Ok(())
}

fn open_inputs(paths: &[PathBuf]) -> Result<Vec<Input>, ParseError> {
    paths.iter().map(|p| Input::open(p)).collect()
}

/// A table whose columns hold `rows` zeroed rows, for the decoders to fill.
fn sized_table(rows: usize) -> EventTable {
    let mut out = EventTable::new();
    out.size_dense_columns(rows);
    // Zero and untouched where no row writes: kind, error (mostly), comm (unnamed pids), name.
    out.kind = vec![0; rows];
    out.error = vec![0; rows];
    out.comm = zeroed_column(rows, rows);
    out.name = vec![0; rows];
    out
}

/// Decodes into `out` (sized ahead) the batches `feed` hands on, on `threads` threads: the
/// calling thread runs `feed` (given the sink for batches and `out`'s RWBS and process-name
/// dictionaries), then decodes too. Batches' rows are rows of `out`. After a failed `feed`
/// nothing more is decoded: its error is the answer.
fn decode_with<R>(
    out: &mut EventTable,
    (inputs, lookup, names): (
        &[Input],
        &RwbsLookup,
        &std::sync::OnceLock<HashMap<u32, u32>>,
    ),
    threads: usize,
    feed: impl FnOnce(
        &mut dyn FnMut(Batch),
        (&mut Dictionary, &mut Dictionary),
    ) -> Result<R, ParseError>,
) -> Result<R, ParseError> {
    // Batches are taken by whichever decoder is free. The decoders stop once the sender is
    // gone and the channel empty; the sender is dropped when `feed` ends, or while
    // unwinding should it panic, so no decoder waits for batches never sent.
    let (batches, queue) = crossbeam_channel::unbounded::<Batch>();
    let EventTable {
        kind,
        time_ns,
        dev_major,
        dev_minor,
        cpu,
        sequence,
        pid,
        comm,
        action,
        operation,
        flags,
        sector,
        sectors,
        bytes,
        error,
        rwbs,
        rwbs_values,
        comms,
        sparse,
        ..
    } = out;
    let columns = SharedColumns::new(Columns {
        kind,
        time_ns,
        dev_major,
        dev_minor,
        cpu,
        sequence,
        pid,
        comm,
        action,
        operation,
        flags,
        sector,
        sectors,
        bytes,
        error,
        rwbs,
    });
    let decoder = Decoder {
        inputs,
        lookup,
        queue: &queue,
        columns: &columns,
        names,
    };
    let (fed, decoded) = std::thread::scope(|s| {
        let helpers: Vec<_> = (1..threads).map(|_| s.spawn(|| decoder.run())).collect();
        let fed = feed(
            &mut |batch| {
                batches
                    .send(batch)
                    .expect("the feeding thread holds a receiver");
            },
            (rwbs_values, comms),
        );
        drop(batches);
        if fed.is_err() {
            queue.try_iter().for_each(drop);
        }
        let mut decoded = vec![decoder.run()];
        decoded.extend(
            helpers
                .into_iter()
                .map(|h| h.join().expect("decoder thread panicked")),
        );
        (fed, decoded)
    });
    let fed = fed?;
    let mut shares = Vec::new();
    for d in decoded {
        shares.extend(d?);
    }
    // The batches' sparse fields, gathered in row order.
    shares.sort_unstable_by_key(|&(base, _)| base);
    for (_, share) in shares {
        // Rows are already the table's.
        sparse.append(&share, 0);
    }
    Ok(fed)
}

/// Reads and merges the given per-CPU files (already expanded) as [`read_with_threads`] does, but
/// hands the rows on to `sink` in tables of about `chunk_rows` rows each (whole batches), in row
/// order, so that memory holds a few chunks whatever the trace's length. The merge runs on its own
/// thread, a chunk ahead; the calling thread decodes each chunk (on `threads` threads) and calls
/// `sink`. Process names are read first, in a pass of their own, since a name may come after its
/// pid's first rows. The first error, the merge's or the sink's, is the answer. The report ends as
/// [`read_with_threads`]'s does once counted: its counts are those of every row handed on.
pub fn read_in_chunks(
    paths: &[PathBuf],
    lenient: bool,
    report: &mut ParseReport,
    (chunk_rows, threads): (usize, usize),
    sink: &mut dyn FnMut(EventTable) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let inputs = open_inputs(paths)?;
    let mut comms = Dictionary::default();
    comms.intern(b"");
    let names = std::sync::OnceLock::new();
    names
        .set(intern_names(&process_names(&inputs), &mut comms))
        .expect("names are set once");
    let lookup = RwbsLookup::new();
    let (chunks, chunk_queue) = crossbeam_channel::bounded::<Chunk>(1);
    let counts = std::thread::scope(|s| {
        let merge = s.spawn(|| {
            let mut rwbs_values = Dictionary::default();
            rwbs_values.intern(b"");
            let mut chunk = Chunk::default();
            let planned = plan(
                &inputs,
                lenient,
                &mut rwbs_values,
                &lookup,
                report,
                &mut |b, rwbs| {
                    chunk.rows += b.rows;
                    chunk.batches.push(b);
                    if chunk.rows >= chunk_rows {
                        chunk.rwbs_values = rwbs.clone();
                        // Fails only once the sink has failed, whose error is the answer.
                        chunks
                            .send(std::mem::take(&mut chunk))
                            .map_err(|_| ParseError::Usage("the sink stopped".into()))?;
                    }
                    Ok(())
                },
            );
            if planned.is_ok() && chunk.rows > 0 {
                chunk.rwbs_values = rwbs_values;
                // A stopped sink has its own error to tell.
                let _ = chunks.send(chunk);
            }
            drop(chunks);
            planned.map(drop)
        });
        let mut sunk = Ok(());
        // The merging thread holds the report; the rows are counted here, then added.
        let mut counts = ParseReport::default();
        for chunk in chunk_queue.iter() {
            let decoded_to = last_runs(&chunk, inputs.len());
            sunk = decode_chunk(chunk, (&inputs, &lookup, &names), &comms, threads).and_then(
                |table| {
                    counts.add_counts(&table);
                    sink(table)
                },
            );
            if sunk.is_err() {
                break;
            }
            // Every record before a file's last run in this chunk is decoded.
            for (input, offset) in inputs.iter().zip(decoded_to) {
                input.release_before(offset as usize);
            }
        }
        drop(chunk_queue);
        let merged = merge.join().expect("merging thread panicked");
        sunk.and(merged).map(|()| counts)
    })?;
    report.take_counts(counts);
    Ok(())
}

/// Whole batches of the merge order, about a chunk's worth of rows, with the RWBS strings
/// interned so far (which include every one of these rows').
#[derive(Default)]
struct Chunk {
    batches: Vec<Batch>,
    rows: usize,
    rwbs_values: Dictionary,
}

/// Per file, the offset of the chunk's last run in it (0 where it has none).
fn last_runs(chunk: &Chunk, files: usize) -> Vec<u64> {
    let mut last = vec![0; files];
    for run in chunk.batches.iter().flat_map(|b| &b.runs) {
        last[run.file as usize] = last[run.file as usize].max(run.offset);
    }
    last
}

/// One chunk's rows as a table of their own.
fn decode_chunk(
    chunk: Chunk,
    shared: (
        &[Input],
        &RwbsLookup,
        &std::sync::OnceLock<HashMap<u32, u32>>,
    ),
    comms: &Dictionary,
    threads: usize,
) -> Result<EventTable, ParseError> {
    let mut out = sized_table(chunk.rows);
    out.rwbs_values = chunk.rwbs_values;
    out.comms = comms.clone();
    let first = chunk.batches.first().map_or(0, |b| b.base);
    let threads = threads.clamp(1, chunk.batches.len().max(1));
    decode_with(&mut out, shared, threads, |emit, _| {
        for mut batch in chunk.batches {
            batch.base -= first;
            emit(batch);
        }
        Ok(())
    })?;
    Ok(out)
}

/// pid → process name from every file's process-notify records, on its own (the merge
/// learns them too, but only by its end): where a pid is named more than once, the name
/// with the latest time wins, a later file's on a tie, as in the merge's order. A file's
/// records after one that cannot be read are not read (the merge stops there too).
fn process_names(inputs: &[Input]) -> BTreeMap<u32, Vec<u8>> {
    let mut named: BTreeMap<u32, ((u64, usize), Vec<u8>)> = BTreeMap::new();
    let mut rec = Record::default();
    for (file, input) in inputs.iter().enumerate() {
        let mut stream = stream_at(input, 0);
        let mut release_at = RELEASE_EVERY;
        while let Ok(true) = stream.next_light(&mut rec) {
            if stream.pos >= release_at {
                input.release_before(stream.pos);
                release_at += RELEASE_EVERY;
            }
            let notify = (rec.action >> 16) & category::NOTIFY != 0;
            if notify && rec.action & 0xffff & !ta::CGROUP == tn::PROCESS {
                let key = (rec.time, file);
                let end = memchr::memchr(0, &rec.text).unwrap_or(rec.text.len());
                match named.get_mut(&rec.pid) {
                    Some((at, name)) if *at <= key => {
                        (*at, *name) = (key, rec.text[..end].to_vec())
                    }
                    Some(_) => {}
                    None => {
                        named.insert(rec.pid, (key, rec.text[..end].to_vec()));
                    }
                }
            }
        }
    }
    for input in inputs {
        input.release_before(usize::MAX);
    }
    named
        .into_iter()
        .map(|(pid, (_, name))| (pid, name))
        .collect()
}

/// The pass over the process names lets the pages it has read go every this many bytes.
const RELEASE_EVERY: usize = 64 << 20;

/// Interns the process names in pid order (so that their codes do not vary from run to
/// run); pid → code.
fn intern_names(names: &BTreeMap<u32, Vec<u8>>, comms: &mut Dictionary) -> HashMap<u32, u32> {
    names
        .iter()
        .map(|(&pid, name)| (pid, comms.intern(name)))
        .collect()
}
/// Rows per batch the merge hands to the decoders: big enough that handing over is rare,
/// small enough that the decoders start early and finish together.
const BATCH_ROWS: usize = 1 << 14;

/// Runs of the merge order whose rows start at row `base`.
struct Batch {
    runs: Vec<Run>,
    base: usize,
    rows: usize,
}

/// What the first pass learns besides the merge order.
struct Planned {
    rows: usize,
    /// pid → process name.
    names: BTreeMap<u32, Vec<u8>>,
}

/// The first pass: merges the files by time, hands the merge order to `emit` in batches of
/// runs (with their first row, and the RWBS strings interned so far), interns the RWBS
/// strings in order of first appearance, learns the process names, and reports what is
/// not a row. An error from `emit` ends the merge.
fn plan(
    inputs: &[Input],
    lenient: bool,
    rwbs_values: &mut Dictionary,
    lookup: &RwbsLookup,
    report: &mut ParseReport,
    emit: &mut dyn FnMut(Batch, &Dictionary) -> Result<(), ParseError>,
) -> Result<Planned, ParseError> {
    let mut streams: Vec<Stream> = inputs.iter().map(|i| stream_at(i, 0)).collect();
    let mut heads: Vec<Record> = vec![Record::default(); streams.len()];
    let mut head_offsets = vec![0u64; streams.len()];
    let mut heap = BinaryHeap::with_capacity(streams.len());
    for (i, s) in streams.iter_mut().enumerate() {
        if advance(s, &mut heads[i], lenient, report)? {
            heap.push(Reverse((heads[i].time, i)));
        }
    }
    // pid → process name, known only after the first pass because a name may arrive
    // after the pid's first events (another CPU's file). Ordered, so that the names'
    // dictionary codes do not vary from run to run.
    let mut names: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut rwbs_codes = RwbsCodes::new(lookup);
    let mut time_base: Option<u64> = None;
    let mut batch = Batch {
        runs: Vec::new(),
        base: 0,
        rows: 0,
    };
    let mut push_run = |run: Run, rwbs_values: &Dictionary| {
        batch.rows += run.rows as usize;
        batch.runs.push(run);
        if batch.rows >= BATCH_ROWS {
            let next = Batch {
                runs: Vec::new(),
                base: batch.base + batch.rows,
                rows: 0,
            };
            emit(std::mem::replace(&mut batch, next), rwbs_values)?;
        }
        Ok::<_, ParseError>(())
    };
    while let Some(Reverse((_, i))) = heap.pop() {
        // Keep taking from this file while it stays the earliest: per-CPU files come in
        // long runs, and this avoids a heap operation per record. Ties go to the lower
        // file index, exactly as the heap orders them.
        let next_other = heap.peek().map(|Reverse(key)| *key);
        let mut run = Run {
            offset: head_offsets[i],
            file: i as u32,
            records: 0,
            rows: 0,
        };
        loop {
            let rec = &heads[i];
            let big = streams[i].big_endian == Some(true);
            if note(rec, big, rwbs_values, report, &mut names, &mut rwbs_codes) {
                run.rows += 1;
                // blkparse's time zero is the first printed event, not the first notify record.
                time_base = Some(time_base.map_or(rec.time, |t| t.min(rec.time)));
            }
            run.records += 1;
            head_offsets[i] = streams[i].offset();
            let more = streams[i]
                .next_light(&mut heads[i])
                .or_else(|e| advance_failed(e, lenient, report))?;
            if !more {
                break;
            }
            let key = (heads[i].time, i);
            if next_other.is_some_and(|other| other < key) {
                heap.push(Reverse(key));
                break;
            }
            if run.records == MAX_RUN {
                let next = Run {
                    offset: head_offsets[i],
                    file: i as u32,
                    records: 0,
                    rows: 0,
                };
                push_run(std::mem::replace(&mut run, next), rwbs_values)?;
            }
        }
        push_run(run, rwbs_values)?;
    }
    let rows = batch.base + batch.rows;
    emit(batch, rwbs_values)?;
    report.time_base_ns = time_base;
    Ok(Planned { rows, names })
}

/// First pass over one record (from a file of the given byte order): takes in what is not
/// a row and interns the RWBS of rows in order of first appearance; true if the record is
/// a row.
fn note(
    rec: &Record,
    big: bool,
    rwbs_values: &mut Dictionary,
    report: &mut ParseReport,
    names: &mut BTreeMap<u32, Vec<u8>>,
    rwbs_codes: &mut RwbsCodes,
) -> bool {
    let cat = rec.action >> 16;
    let act = rec.action & 0xffff & !ta::CGROUP;
    if cat & category::NOTIFY != 0 {
        match act {
            tn::PROCESS => {
                let end = memchr::memchr(0, &rec.text).unwrap_or(rec.text.len());
                names.insert(rec.pid, rec.text[..end].to_vec());
                report.notify_records += 1;
                false
            }
            tn::TIMESTAMP => {
                // Two u32 words, seconds and nanoseconds, in the recording machine's order.
                if rec.text.len() >= 8 {
                    let word = |o: usize| {
                        let b = rec.text[o..o + 4].try_into().unwrap();
                        (if big {
                            u32::from_be_bytes(b)
                        } else {
                            u32::from_le_bytes(b)
                        }) as u64
                    };
                    let (sec, nsec) = (word(0), word(4));
                    report.wall_clock_start_ns = Some(sec * 1_000_000_000 + nsec);
                }
                report.notify_records += 1;
                false
            }
            _ => {
                rwbs_codes.code_message(rwbs_values);
                true
            }
        }
    } else if action_of(act).is_some() {
        rwbs_codes.code(cat, rec.bytes, rwbs_values);
        true
    } else {
        // Driver data and unknown codes: blkparse prints none of them either.
        report.skipped_records += 1;
        false
    }
}

/// Mutable views of one range of rows of the columns the decoders write.
struct Columns<'a> {
    kind: &'a mut [u8],
    time_ns: &'a mut [u64],
    dev_major: &'a mut [u32],
    dev_minor: &'a mut [u32],
    cpu: &'a mut [u32],
    sequence: &'a mut [u64],
    pid: &'a mut [u32],
    comm: &'a mut [u32],
    action: &'a mut [u8],
    operation: &'a mut [u8],
    flags: &'a mut [u16],
    sector: &'a mut [u64],
    sectors: &'a mut [u32],
    bytes: &'a mut [u64],
    error: &'a mut [i32],
    rwbs: &'a mut [u32],
}

macro_rules! for_each_column {
    ($m:ident) => {
        $m!(
            kind, time_ns, dev_major, dev_minor, cpu, sequence, pid, comm, action, operation,
            flags, sector, sectors, bytes, error, rwbs
        )
    };
}

/// The decoders' columns, shared by the threads that write disjoint ranges of their rows.
struct SharedColumns<'a> {
    kind: *mut u8,
    time_ns: *mut u64,
    dev_major: *mut u32,
    dev_minor: *mut u32,
    cpu: *mut u32,
    sequence: *mut u64,
    pid: *mut u32,
    comm: *mut u32,
    action: *mut u8,
    operation: *mut u8,
    flags: *mut u16,
    sector: *mut u64,
    sectors: *mut u32,
    bytes: *mut u64,
    error: *mut i32,
    rwbs: *mut u32,
    rows: usize,
    _borrowed: std::marker::PhantomData<Columns<'a>>,
}

// SAFETY: the pointers come from a `Columns` borrowed for 'a (mutable slices of plain
// integers, which are Send): moving them to another thread moves that borrow.
unsafe impl Send for SharedColumns<'_> {}
// SAFETY: through a shared reference the columns are reached only by `rows`, whose callers
// promise views of disjoint row ranges (see there), so no two threads touch the same row.
unsafe impl Sync for SharedColumns<'_> {}

impl<'a> SharedColumns<'a> {
    fn new(c: Columns<'a>) -> Self {
        let rows = c.time_ns.len();
        macro_rules! share {
            ($($f:ident),*) => {{
                $(assert_eq!(c.$f.len(), rows, "every column sized alike");)*
                SharedColumns { $($f: c.$f.as_mut_ptr(),)* rows, _borrowed: std::marker::PhantomData }
            }};
        }
        for_each_column!(share)
    }

    /// Rows `base..base + n` of every column.
    ///
    /// # Safety
    /// No two views alive at the same time may share a row.
    unsafe fn rows(&self, base: usize, n: usize) -> Columns<'a> {
        assert!(
            base + n <= self.rows,
            "rows {base}..{} past the columns' {} rows",
            base + n,
            self.rows
        );
        macro_rules! view {
            // SAFETY: in bounds (checked above) of allocations borrowed for 'a, and by the
            // caller's promise no other live view overlaps these rows.
            ($($f:ident),*) => { Columns { $($f: unsafe { std::slice::from_raw_parts_mut(self.$f.add(base), n) },)* } };
        }
        for_each_column!(view)
    }
}

/// What a decoding thread works with.
#[derive(Clone, Copy)]
struct Decoder<'a> {
    inputs: &'a [Input],
    lookup: &'a RwbsLookup,
    queue: &'a crossbeam_channel::Receiver<Batch>,
    columns: &'a SharedColumns<'a>,
    names: &'a std::sync::OnceLock<HashMap<u32, u32>>,
}

impl Decoder<'_> {
    /// Takes batches from the queue until the merge is over and none are left, decoding each
    /// into its rows; returns each batch's sparse fields with its first row. Process names
    /// are known only once the merge has read every file: batches decoded before that get
    /// theirs afterwards, from their pids, by the thread that decoded them.
    fn run(self) -> Result<Vec<(usize, Decoded)>, ParseError> {
        let mut decoded = Vec::new();
        let mut unnamed: Vec<(usize, usize)> = Vec::new();
        loop {
            let batch = self.queue.recv().ok();
            let names = self.names.get();
            if let Some(names) = names {
                for (base, rows) in unnamed.drain(..) {
                    // SAFETY: this thread decoded these rows and no longer holds a view of them.
                    name_rows(unsafe { self.columns.rows(base, rows) }, names);
                }
            }
            let Some(batch) = batch else { break };
            // SAFETY: the merge hands out every row range once, in batches that do not overlap.
            let cols = unsafe { self.columns.rows(batch.base, batch.rows) };
            decoded.push((
                batch.base,
                decode_runs(self.inputs, self.lookup, &batch, names, cols)?,
            ));
            if names.is_none() {
                unnamed.push((batch.base, batch.rows));
            }
        }
        Ok(decoded)
    }
}

/// Process names of the block rows, from their pids.
fn name_rows(cols: Columns, names: &HashMap<u32, u32>) {
    let mut names = PidNames::new(names);
    for ((comm, &kind), &pid) in cols
        .comm
        .iter_mut()
        .zip(cols.kind.iter())
        .zip(cols.pid.iter())
    {
        if kind == RecordKind::Block as u8 {
            names.write(comm, pid);
        }
    }
}

/// Process name codes by pid, the last pid's at hand: rows come in long runs of one pid.
struct PidNames<'a> {
    names: &'a HashMap<u32, u32>,
    last: (u32, u32),
}

impl<'a> PidNames<'a> {
    fn new(names: &'a HashMap<u32, u32>) -> Self {
        PidNames {
            names,
            last: (u32::MAX, 0),
        }
    }

    /// Writes the pid's process name code into `comm`, unless it has none (the column's
    /// zero pages then stay untouched).
    #[inline(always)]
    fn write(&mut self, comm: &mut u32, pid: u32) {
        if pid != self.last.0 {
            self.last = (pid, self.names.get(&pid).copied().unwrap_or(0));
        }
        if self.last.1 != 0 {
            *comm = self.last.1;
        }
    }
}

/// A batch's sparse fields, with table row numbers.
type Decoded = SparseFields;

/// Decodes the rows of a batch's runs into `cols`, whose first row is the batch's; with
/// `names`, the process names of block rows too.
fn decode_runs(
    inputs: &[Input],
    lookup: &RwbsLookup,
    batch: &Batch,
    names: Option<&HashMap<u32, u32>>,
    cols: Columns,
) -> Result<Decoded, ParseError> {
    let mut streams: Vec<Option<Stream>> = inputs.iter().map(|_| None).collect();
    let mut rec = Record::default();
    let mut sparse = SparseFields::default();
    let mut names = names.map(PidNames::new);
    let mut i = 0usize;
    for run in &batch.runs {
        let f = run.file as usize;
        let s = match &mut streams[f] {
            Some(s) if s.offset() == run.offset => s,
            slot => slot.insert(stream_at(&inputs[f], run.offset)),
        };
        for _ in 0..run.records {
            let at = s.offset();
            if !s.next_plain(&mut rec) && !s.next(&mut rec)? {
                return Err(s.error(
                    at,
                    "file changed while being read: record missing in the second pass",
                ));
            }
            let cat = rec.action >> 16;
            let act = rec.action & 0xffff & !ta::CGROUP;
            let text: &[u8];
            if cat & category::NOTIFY != 0 {
                if act == tn::PROCESS || act == tn::TIMESTAMP {
                    continue;
                }
                cols.kind[i] = RecordKind::Message as u8;
                cols.action[i] = Action::Notify as u8;
                cols.rwbs[i] = lookup.message_code();
                let end = memchr::memchr(0, &rec.text).unwrap_or(rec.text.len());
                text = &rec.text[..end];
            } else {
                let Some(action) = action_of(act) else {
                    continue;
                };
                let (rwbs, operation, flags) = lookup.get(cat, rec.bytes);
                cols.action[i] = action as u8;
                cols.operation[i] = operation as u8;
                cols.flags[i] = flags;
                cols.sector[i] = rec.sector;
                cols.bytes[i] = rec.bytes as u64;
                cols.sectors[i] = rec.bytes >> 9;
                if rec.error != 0 {
                    cols.error[i] = rec.error as i16 as i32;
                }
                cols.rwbs[i] = rwbs;
                if let Some(names) = &mut names {
                    names.write(&mut cols.comm[i], rec.pid);
                }
                text = b"";
            }
            cols.time_ns[i] = rec.time;
            cols.dev_major[i] = dev_major(rec.device);
            cols.dev_minor[i] = dev_minor(rec.device);
            cols.cpu[i] = rec.cpu;
            cols.sequence[i] = rec.sequence as u64;
            cols.pid[i] = rec.pid;
            let remap = rec
                .remap
                .map(|(from, sector)| (dev_major(from), dev_minor(from), sector));
            sparse.push_fields(
                batch.base + i,
                remap,
                rec.aux,
                rec.cgroup_id,
                (None, None),
                text,
            );
            i += 1;
        }
    }
    if i != batch.rows {
        return Err(ParseError::bad(
            inputs[0].path(),
            Location::Whole,
            "file changed while being read: rows differ between the passes",
        ));
    }
    Ok(sparse)
}

/// In lenient mode a bad record ends its file (Ok(false)); other errors stay errors.
fn advance_failed(
    e: ParseError,
    lenient: bool,
    report: &mut ParseReport,
) -> Result<bool, ParseError> {
    match e {
        e @ ParseError::Bad { .. } if lenient => {
            report.note_bad(format!("{e} (rest of the file skipped)"));
            Ok(false)
        }
        e => Err(e),
    }
}

/// Reads the next record of a stream; in lenient mode a bad record ends that file.
fn advance(
    s: &mut Stream,
    rec: &mut Record,
    lenient: bool,
    report: &mut ParseReport,
) -> Result<bool, ParseError> {
    s.next(rec).or_else(|e| advance_failed(e, lenient, report))
}

/// Dictionary codes of the RWBS strings, with the operation and flags they decode to, by
/// the category bits that decide them: interning a string per record would cost more than
/// decoding the whole record, and this way the bits are decoded once per pattern. The
/// first pass fills it; decoders read it meanwhile ([`RwbsLookup`]).
struct RwbsCodes<'a> {
    /// (code, operation, flags without PC, which no RWBS letter shows); code u32::MAX until seen.
    by_bits: [(u32, Operation, u16); 256],
    lookup: &'a RwbsLookup,
}

/// The answers of [`RwbsCodes`] packed by [`RwbsLookup::key`], `UNSEEN` until seen: one load
/// per record instead of gathering the bits that decide it. 1 MiB, of which only the few
/// cache lines of the patterns a trace uses are ever touched. The first pass stores an
/// answer before it hands on a batch with the pattern (through the batch queue's lock), so
/// a decoder finds every answer its rows need; relaxed atomics are plain loads and stores.
struct RwbsLookup {
    by_key: Vec<std::sync::atomic::AtomicU64>,
}

const UNSEEN: u64 = u64::MAX;

impl RwbsLookup {
    fn new() -> Self {
        RwbsLookup {
            by_key: (0..1 << 17)
                .map(|_| std::sync::atomic::AtomicU64::new(UNSEEN))
                .collect(),
        }
    }

    /// All that decides a record's RWBS: its 16 category bits and whether it has bytes.
    #[inline(always)]
    fn key(cat: u32, bytes: u32) -> usize {
        ((cat as usize & 0xffff) << 1) | (bytes != 0) as usize
    }

    #[inline(always)]
    fn packed(&self, cat: u32, bytes: u32) -> u64 {
        self.by_key[Self::key(cat, bytes)].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// RWBS code of message rows (`N`), which the first pass interns at the first one.
    /// Kept in the slot of the bare notify category, which no block row has.
    #[inline(always)]
    fn message_code(&self) -> u32 {
        self.get(category::NOTIFY, 0).0
    }

    /// RWBS code, operation and flags (`decode_category`) of a record whose RWBS the
    /// first pass saw.
    #[inline(always)]
    fn get(&self, cat: u32, bytes: u32) -> (u32, Operation, u16) {
        let packed = self.packed(cat, bytes);
        debug_assert_ne!(packed, UNSEEN, "the first pass saw every row's RWBS");
        (
            packed as u32,
            Operation::ALL[(packed >> 32) as u8 as usize],
            (packed >> 48) as u16,
        )
    }
}

impl<'a> RwbsCodes<'a> {
    fn new(lookup: &'a RwbsLookup) -> Self {
        RwbsCodes {
            by_bits: [(u32::MAX, Operation::None, 0); 256],
            lookup,
        }
    }

    fn bits(cat: u32, bytes: u32) -> usize {
        [
            category::FLUSH,
            category::DISCARD,
            category::WRITE,
            category::FUA,
            category::AHEAD,
            category::SYNC,
            category::META,
        ]
        .iter()
        .enumerate()
        .fold((bytes != 0) as usize, |acc, (n, &bit)| {
            acc | (((cat & bit != 0) as usize) << (n + 1))
        })
    }

    /// Interns the record's RWBS if its pattern is new.
    #[inline(always)]
    fn code(&mut self, cat: u32, bytes: u32, rwbs_values: &mut Dictionary) {
        if self.lookup.packed(cat, bytes) == UNSEEN {
            self.code_new(cat, bytes, rwbs_values);
        }
    }

    /// Interns the RWBS of message rows (`N`) at the first one.
    fn code_message(&mut self, rwbs_values: &mut Dictionary) {
        if self.lookup.packed(category::NOTIFY, 0) == UNSEEN {
            let code = rwbs_values.intern(b"N");
            self.lookup.by_key[RwbsLookup::key(category::NOTIFY, 0)]
                .store(code as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[inline(never)]
    fn code_new(&mut self, cat: u32, bytes: u32, rwbs_values: &mut Dictionary) {
        let slot = &mut self.by_bits[Self::bits(cat, bytes)];
        if slot.0 == u32::MAX {
            let mut buf = [0u8; 8];
            let n = rwbs_from_category(cat, bytes, &mut buf);
            let (operation, f) = decode_category(cat & !category::PC, bytes);
            *slot = (rwbs_values.intern(&buf[..n]), operation, f);
        }
        let (code, operation, f) = *slot;
        let f = if cat & category::PC != 0 {
            f | flags::PC
        } else {
            f
        };
        let packed = code as u64 | (operation as u64) << 32 | (f as u64) << 48;
        self.lookup.by_key[RwbsLookup::key(cat, bytes)]
            .store(packed, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Operation;
    use crate::writer::{act, dev, write_record, RawRecord};

    /// The PC bit shows in no RWBS letter but still reaches the flags column, on records
    /// that share an RWBS with records without it.
    #[test]
    fn flags_and_rwbs_come_from_the_category_bits() {
        let cats = [
            category::WRITE | category::SYNC,
            category::WRITE | category::SYNC | category::PC,
            category::FLUSH,
            category::DISCARD | category::FUA,
        ];
        let mut out = Vec::new();
        for (k, &cat) in cats.iter().enumerate() {
            let bytes = if cat & category::FLUSH != 0 { 0 } else { 4096 };
            let r = RawRecord {
                sequence: k as u32,
                time: k as u64,
                bytes,
                action: act(ta::ISSUE, cat),
                device: dev(8, 0),
                ..Default::default()
            };
            write_record(&mut out, &r, false, SUPPORTED_VERSION);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blktrace.0");
        std::fs::write(&path, &out).unwrap();
        let (mut t, mut r) = (EventTable::new(), ParseReport::default());
        read(&[path], false, &mut t, &mut r).unwrap();
        let got: Vec<_> = (0..t.len())
            .map(|i| (t.operation_at(i), t.flags[i], t.rwbs_at(i)))
            .collect();
        assert_eq!(
            got,
            [
                (Operation::Write, flags::SYNC, "WS"),
                (Operation::Write, flags::SYNC | flags::PC, "WS"),
                (Operation::Flush, flags::PREFLUSH, "FN"),
                (Operation::Discard, flags::FUA, "DF"),
            ]
        );
    }

    /// The wall-clock start (TN timestamp record) is read in the trace's byte order, on
    /// any machine.
    #[test]
    fn wall_clock_start_in_either_byte_order() {
        use crate::writer::be64_pdu;
        let dir = tempfile::tempdir().unwrap();
        for big in [false, true] {
            let (sec, nsec) = (1_700_000_000u32, 123_456_789u32);
            let words = if big {
                [sec.to_be_bytes(), nsec.to_be_bytes()]
            } else {
                [sec.to_le_bytes(), nsec.to_le_bytes()]
            }
            .concat();
            let mut out = Vec::new();
            let stamp = RawRecord {
                action: act(tn::TIMESTAMP, category::NOTIFY),
                pdu: words,
                ..Default::default()
            };
            write_record(&mut out, &stamp, big, SUPPORTED_VERSION);
            let unplug = RawRecord {
                time: 5,
                action: act(ta::UNPLUG_IO, 0),
                pdu: be64_pdu(1),
                ..Default::default()
            };
            write_record(&mut out, &unplug, big, SUPPORTED_VERSION);
            let path = dir.path().join(format!("t{big}.blktrace.0"));
            std::fs::write(&path, &out).unwrap();
            let (mut t, mut r) = (EventTable::new(), ParseReport::default());
            read(&[path], false, &mut t, &mut r).unwrap();
            assert_eq!(
                r.wall_clock_start_ns,
                Some(1_700_000_000_123_456_789),
                "big endian: {big}"
            );
            assert_eq!((t.len(), t.aux_at(0)), (1, 1));
        }
    }
}
