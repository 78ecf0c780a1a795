//! The columnar event table every reader fills, plus the small enums its columns hold.
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

pub use crate::intern::Dictionary;

/// What kind of record a row is: block I/O is the main subject, but ftrace text also
/// carries sqlwa's markers and syscall tracepoints on the same timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RecordKind {
    /// A block-layer event (blktrace record, blkparse line, block tracepoint).
    Block = 0,
    /// An sqlwa marker written to `trace_marker` (`tracing_mark_write`).
    Marker = 1,
    /// A syscall tracepoint's entry, with its arguments.
    SyscallEnter = 2,
    /// A syscall tracepoint's exit, with its return value.
    SyscallExit = 3,
    /// blktrace message records (`m N ...`) and ftrace lines of other events.
    Message = 4,
    /// Any other ftrace event, kept by name with its text.
    Other = 5,
}

impl RecordKind {
    /// Every kind, in code order: `ALL[code]` is the kind a `kind` column code stands for.
    pub const ALL: [RecordKind; 6] = [
        RecordKind::Block,
        RecordKind::Marker,
        RecordKind::SyscallEnter,
        RecordKind::SyscallExit,
        RecordKind::Message,
        RecordKind::Other,
    ];
    /// The name the Arrow `kind` column and the report use (`"block"`, `"syscall_enter"`, …).
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Block => "block",
            RecordKind::Marker => "marker",
            RecordKind::SyscallEnter => "syscall_enter",
            RecordKind::SyscallExit => "syscall_exit",
            RecordKind::Message => "message",
            RecordKind::Other => "other",
        }
    }
}

/// The blkparse action letters. ftrace tracepoints map onto the same set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Action {
    /// Not a block action (markers, syscalls, other events).
    None = 0,
    /// A bio entered the block layer (`Q`).
    Queue = 1,
    /// A request was allocated (`G`).
    GetRq = 2,
    /// Inserted into the I/O scheduler (`I`).
    Insert = 3,
    /// Issued to the driver (`D`).
    Issue = 4,
    /// Completed by the device (`C`).
    Complete = 5,
    /// Merged at the back of a request (`M`).
    BackMerge = 6,
    /// Merged at the front of a request (`F`).
    FrontMerge = 7,
    /// Remapped from another device, a partition or dm (`A`).
    Remap = 8,
    /// Split in two (`X`).
    Split = 9,
    /// Bounced to reachable memory (`B`).
    Bounce = 10,
    /// The submitter slept for a free request (`S`).
    SleepRq = 11,
    /// Put back on the queue (`R`).
    Requeue = 12,
    /// The queue was plugged (`P`).
    Plug = 13,
    /// The queue was unplugged by I/O (`U`).
    Unplug = 14,
    /// The queue was unplugged by its timer (`UT`).
    UnplugTimer = 15,
    /// Aborted (`T`: the kernel's __BLK_TA_ABORT; blkparse has no letter for it).
    Abort = 16,
    /// A message record (`m`).
    Notify = 17,
    /// Driver data records.
    DrvData = 18,
    /// A block tracepoint with no blkparse equivalent (block_dirty_buffer, block_io_start …).
    OtherBlock = 19,
}

impl Action {
    /// Every action, in code order: `ALL[code]` is the action an `action` column code stands for.
    pub const ALL: [Action; 20] = [
        Action::None,
        Action::Queue,
        Action::GetRq,
        Action::Insert,
        Action::Issue,
        Action::Complete,
        Action::BackMerge,
        Action::FrontMerge,
        Action::Remap,
        Action::Split,
        Action::Bounce,
        Action::SleepRq,
        Action::Requeue,
        Action::Plug,
        Action::Unplug,
        Action::UnplugTimer,
        Action::Abort,
        Action::Notify,
        Action::DrvData,
        Action::OtherBlock,
    ];

    /// The letter(s) blkparse prints (`m` on message rows, as blkparse and the kernel's
    /// `blk` tracer print them); "" for other non-block rows, "?" for block events
    /// without one.
    pub fn name(self) -> &'static str {
        match self {
            Action::None => "",
            Action::Queue => "Q",
            Action::GetRq => "G",
            Action::Insert => "I",
            Action::Issue => "D",
            Action::Complete => "C",
            Action::BackMerge => "M",
            Action::FrontMerge => "F",
            Action::Remap => "A",
            Action::Split => "X",
            Action::Bounce => "B",
            Action::SleepRq => "S",
            Action::Requeue => "R",
            Action::Plug => "P",
            Action::Unplug => "U",
            Action::UnplugTimer => "UT",
            Action::Abort => "T",
            Action::Notify => "m",
            Action::DrvData => "DRV",
            Action::OtherBlock => "?",
        }
    }

    /// Parses a blkparse action column (`m` is blkparse's message letter).
    pub fn from_letters(s: &[u8]) -> Option<Action> {
        Some(match s {
            b"Q" => Action::Queue,
            b"G" => Action::GetRq,
            b"I" => Action::Insert,
            b"D" => Action::Issue,
            b"C" => Action::Complete,
            b"M" => Action::BackMerge,
            b"F" => Action::FrontMerge,
            b"A" => Action::Remap,
            b"X" => Action::Split,
            b"B" => Action::Bounce,
            b"S" => Action::SleepRq,
            b"R" => Action::Requeue,
            b"P" => Action::Plug,
            b"U" => Action::Unplug,
            b"UT" | b"T" => Action::UnplugTimer,
            b"m" | b"N" => Action::Notify,
            _ => return None,
        })
    }

    /// The action an ftrace block tracepoint stands for.
    pub fn from_tracepoint(name: &[u8]) -> Option<Action> {
        Some(match name {
            b"block_rq_issue" => Action::Issue,
            b"block_rq_complete" | b"block_rq_error" | b"block_bio_complete" => Action::Complete,
            b"block_rq_insert" => Action::Insert,
            b"block_bio_queue" => Action::Queue,
            b"block_getrq" => Action::GetRq,
            b"block_sleeprq" => Action::SleepRq,
            b"block_bio_backmerge" | b"block_rq_merge" => Action::BackMerge,
            b"block_bio_frontmerge" => Action::FrontMerge,
            b"block_split" => Action::Split,
            b"block_bio_remap" | b"block_rq_remap" => Action::Remap,
            b"block_bio_bounce" => Action::Bounce,
            b"block_rq_requeue" => Action::Requeue,
            b"block_plug" => Action::Plug,
            b"block_unplug" => Action::Unplug,
            _ if name.starts_with(b"block_") => Action::OtherBlock,
            _ => return None,
        })
    }
}

/// The request operation, normalised across the RWBS dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Operation {
    /// Not a request (plug, unplug, non-block rows) or one with no operation (zone management).
    None = 0,
    /// Reads data.
    Read = 1,
    /// Writes data (zone append included).
    Write = 2,
    /// Discards (trims) sectors.
    Discard = 3,
    /// Securely erases sectors.
    SecureErase = 4,
    /// Writes zeroes without data.
    WriteZeroes = 5,
    /// Flushes the device's cache, alone (no data).
    Flush = 6,
}

impl Operation {
    /// Every operation, in code order: `ALL[code]` is the operation an `operation` column code
    /// stands for.
    pub const ALL: [Operation; 7] = [
        Operation::None,
        Operation::Read,
        Operation::Write,
        Operation::Discard,
        Operation::SecureErase,
        Operation::WriteZeroes,
        Operation::Flush,
    ];
    /// The name the Arrow `operation` column and the report use (`"read"`, `"write_zeroes"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Operation::None => "none",
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::Discard => "discard",
            Operation::SecureErase => "secure_erase",
            Operation::WriteZeroes => "write_zeroes",
            Operation::Flush => "flush",
        }
    }
}

/// Request flag bits (the `flags` column).
pub mod flags {
    /// Flush the device's cache before the write (REQ_PREFLUSH; RWBS leading `F`).
    pub const PREFLUSH: u16 = 1 << 0;
    /// Forced unit access: the write is durable when it completes (REQ_FUA; `F` after the
    /// operation).
    pub const FUA: u16 = 1 << 1;
    /// Synchronous request (RWBS `S`).
    pub const SYNC: u16 = 1 << 2;
    /// Filesystem metadata (RWBS `M`).
    pub const META: u16 = 1 << 3;
    /// Readahead (RWBS `A`).
    pub const READAHEAD: u16 = 1 << 4;
    /// SCSI passthrough (blktrace BLK_TC_PC): sector fields are meaningless.
    pub const PC: u16 = 1 << 5;
    /// REQ_ATOMIC (RWBS `U`): written whole or not at all.
    pub const ATOMIC: u16 = 1 << 6;
    /// Each flag bit with the name of its boolean Arrow column, in bit order.
    pub const NAMES: [(u16, &str); 7] = [
        (PREFLUSH, "preflush"),
        (FUA, "fua"),
        (SYNC, "sync"),
        (META, "meta"),
        (READAHEAD, "readahead"),
        (PC, "pc"),
        (ATOMIC, "atomic"),
    ];
}

/// The latest time a row may carry, in ns. Readers of the table compute with times as
/// signed 64-bit integers (Arrow durations, Polars differences), and 2^63 ns is 292 years
/// after the clock's start, which no trace clock reaches: a later time is a corrupt
/// record, refused where it is read rather than failing a cast downstream.
pub const MAX_TIME_NS: u64 = i64::MAX as u64;

/// One row of the table, used by the readers to build rows before pushing them.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// What the row is.
    pub kind: RecordKind,
    /// Time: the printed clock for text, the raw kernel time for blktrace binary.
    pub time_ns: u64,
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// CPU that recorded the event.
    pub cpu: u32,
    /// blktrace sequence number (per CPU); 0 where the trace has none.
    pub sequence: u64,
    /// Process id.
    pub pid: u32,
    /// Block action (blkparse letter).
    pub action: Action,
    /// Request operation, normalised across RWBS dialects.
    pub operation: Operation,
    /// Request flag bits ([`flags`]).
    pub flags: u16,
    /// First sector (512 bytes) of the request.
    pub sector: u64,
    /// Sectors the request covers.
    pub sectors: u32,
    /// Bytes the request covers: the trace's own count where it gives one, else sectors × 512.
    pub bytes: u64,
    /// Error code a completion reports (0 for success).
    pub error: i32,
    /// Remap source: (major, minor, sector).
    pub remap: Option<(u32, u32, u64)>,
    /// U/UT: unplug depth; X: sector of the second half; syscalls: count argument.
    pub aux: u64,
    /// blktrace cgroup id, 0 where none.
    pub cgroup_id: u64,
    /// Syscall entry: the file descriptor argument.
    pub fd: Option<i64>,
    /// Syscall exit: the return value.
    pub ret: Option<i64>,
}

/// A field most rows leave unset, as (row, value) pairs in row order: a table holds (and
/// writes) bytes for it only in the rows that have it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sparse<T>(pub Vec<(usize, T)>);

impl<T> Default for Sparse<T> {
    fn default() -> Self {
        Sparse(Vec::new())
    }
}

impl<T: Copy> Sparse<T> {
    /// The value of `row`, if it has one.
    pub fn get(&self, row: usize) -> Option<T> {
        self.position(row).map(|k| self.0[k].1)
    }

    fn position(&self, row: usize) -> Option<usize> {
        self.0.binary_search_by_key(&row, |&(r, _)| r).ok()
    }

    /// Sets `row`, which must come after every row set so far.
    #[inline(always)]
    pub(crate) fn set(&mut self, row: usize, value: T) {
        debug_assert!(
            self.0.last().is_none_or(|&(r, _)| r < row),
            "sparse rows out of order"
        );
        self.0.push((row, value));
    }

    /// Appends `other`'s rows moved down by `row_base`, their values passed through `shift`.
    fn extend_moved(&mut self, other: &Sparse<T>, row_base: usize, shift: impl Fn(T) -> T) {
        self.0
            .extend(other.0.iter().map(|&(r, v)| (r + row_base, shift(v))));
    }
}

/// The fields most rows leave at their defaults, each stored only for the rows that set it
/// (a block trace then writes, and holds, half the bytes per row it otherwise would), and
/// the rows' text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseFields {
    /// Remap source: (major, minor, sector).
    pub remap: Sparse<(u32, u32, u64)>,
    /// Nonzero values only.
    pub aux: Sparse<u64>,
    /// Nonzero values only.
    pub cgroup_id: Sparse<u64>,
    /// Syscall entry: the file descriptor argument.
    pub fd: Sparse<i64>,
    /// Syscall exit: the return value.
    pub ret: Sparse<i64>,
    /// Rows with text and where it ends in `text_data`; it starts where the previous
    /// row's ends.
    pub text_end: Sparse<usize>,
    /// The text of every row with text, in row order.
    pub text_data: Vec<u8>,
}

impl SparseFields {
    /// Sets `row`'s fields from the row's event and text (only those it sets).
    #[inline(always)]
    pub(crate) fn push(&mut self, row: usize, e: &Event, text: &[u8]) {
        self.push_fields(row, e.remap, e.aux, e.cgroup_id, (e.fd, e.ret), text);
    }

    /// Sets `row`'s fields that are set: a remap, nonzero aux and cgroup id, a syscall's
    /// fd and return value, nonempty text.
    #[inline(always)]
    pub(crate) fn push_fields(
        &mut self,
        row: usize,
        remap: Option<(u32, u32, u64)>,
        aux: u64,
        cgroup_id: u64,
        (fd, ret): (Option<i64>, Option<i64>),
        text: &[u8],
    ) {
        if let Some(remap) = remap {
            self.remap.set(row, remap);
        }
        if aux != 0 {
            self.aux.set(row, aux);
        }
        if cgroup_id != 0 {
            self.cgroup_id.set(row, cgroup_id);
        }
        if let Some(fd) = fd {
            self.fd.set(row, fd);
        }
        if let Some(ret) = ret {
            self.ret.set(row, ret);
        }
        if !text.is_empty() {
            self.text_data.extend_from_slice(text);
            self.text_end.set(row, self.text_data.len());
        }
    }

    /// `row`'s text bytes (empty when it has none).
    pub fn text(&self, row: usize) -> &[u8] {
        match self.text_end.position(row) {
            Some(k) => {
                let start = if k == 0 { 0 } else { self.text_end.0[k - 1].1 };
                &self.text_data[start..self.text_end.0[k].1]
            }
            None => b"",
        }
    }

    /// Appends `other`'s fields, its rows moved down by `row_base`.
    pub(crate) fn append(&mut self, other: &SparseFields, row_base: usize) {
        use std::convert::identity;
        self.remap.extend_moved(&other.remap, row_base, identity);
        self.aux.extend_moved(&other.aux, row_base, identity);
        self.cgroup_id
            .extend_moved(&other.cgroup_id, row_base, identity);
        self.fd.extend_moved(&other.fd, row_base, identity);
        self.ret.extend_moved(&other.ret, row_base, identity);
        let text_base = self.text_data.len();
        self.text_end
            .extend_moved(&other.text_end, row_base, |end| end + text_base);
        self.text_data.extend_from_slice(&other.text_data);
    }

    /// Bytes the fields hold.
    pub(crate) fn heap_bytes(&self) -> usize {
        fn bytes<T>(s: &Sparse<T>) -> usize {
            s.0.len() * std::mem::size_of::<(usize, T)>()
        }
        bytes(&self.remap)
            + bytes(&self.aux)
            + bytes(&self.cgroup_id)
            + bytes(&self.fd)
            + bytes(&self.ret)
            + bytes(&self.text_end)
            + self.text_data.len()
    }
}

impl Default for Event {
    fn default() -> Self {
        Event {
            kind: RecordKind::Block,
            time_ns: 0,
            dev_major: 0,
            dev_minor: 0,
            cpu: 0,
            sequence: 0,
            pid: 0,
            action: Action::None,
            operation: Operation::None,
            flags: 0,
            sector: 0,
            sectors: 0,
            bytes: 0,
            error: 0,
            remap: None,
            aux: 0,
            cgroup_id: 0,
            fd: None,
            ret: None,
        }
    }
}

/// Calls macro `$m` with the names of the columns every row writes, then any `$extra`
/// names: one list for the operations that go over the columns alike.
macro_rules! dense_columns {
    ($m:ident $(, $extra:ident)*) => {
        value_columns!($m, sequence $(, $extra)*)
    };
}

/// Calls macro `$m` with the columns that hold each row's own values (every reader writes
/// them), then any `$extra` names: the one list the other column lists build on.
macro_rules! value_columns {
    ($m:ident $(, $extra:ident)*) => {
        $m!(time_ns, sector, bytes, dev_major, dev_minor, cpu, pid, sectors, rwbs, flags, action, operation $(, $extra)*)
    };
}

/// Struct of column vectors: one entry per event, in trace order.
#[derive(Default, Debug, Clone)]
pub struct EventTable {
    /// Per row: [`RecordKind`] code.
    pub kind: Vec<u8>,
    /// Per row: time in ns ([`Event::time_ns`]).
    pub time_ns: Vec<u64>,
    /// Per row: device major number.
    pub dev_major: Vec<u32>,
    /// Per row: device minor number.
    pub dev_minor: Vec<u32>,
    /// Per row: CPU.
    pub cpu: Vec<u32>,
    /// Per row: blktrace sequence number.
    pub sequence: Vec<u64>,
    /// Per row: process id.
    pub pid: Vec<u32>,
    /// Code into `comms`.
    pub comm: Vec<u32>,
    /// Per row: [`Action`] code.
    pub action: Vec<u8>,
    /// Per row: [`Operation`] code.
    pub operation: Vec<u8>,
    /// Per row: [`flags`] bits.
    pub flags: Vec<u16>,
    /// Per row: first sector.
    pub sector: Vec<u64>,
    /// Per row: sectors covered.
    pub sectors: Vec<u32>,
    /// Per row: bytes covered.
    pub bytes: Vec<u64>,
    /// Per row: error code.
    pub error: Vec<i32>,
    /// Remap, aux, cgroup, syscall and text fields, in the rows that have them.
    pub sparse: SparseFields,
    /// Code into `rwbs_values`: the RWBS string exactly as the trace printed it.
    pub rwbs: Vec<u32>,
    /// Code into `names`: tracepoint / syscall name, or the sqlwa marker's event word.
    pub name: Vec<u32>,
    /// Process names (the `comm` column's values).
    pub comms: Dictionary,
    /// RWBS strings (the `rwbs` column's values).
    pub rwbs_values: Dictionary,
    /// Tracepoint, syscall and marker names (the `name` column's values).
    pub names: Dictionary,
    /// While set (`defer_zero_columns`), `push` leaves `sequence` and `error` alone.
    deferred: Option<Deferred>,
}

/// The rows `push` gave a nonzero `sequence` or `error` while those columns were deferred.
#[derive(Default, Debug, Clone)]
struct Deferred {
    sequences: Vec<(usize, u64)>,
    errors: Vec<(usize, i32)>,
}

/// Task names by pid, for the rows named `placeholder` ([`EventTable::name_tasks`]).
#[derive(Debug, Clone, Default)]
pub struct TaskNames {
    /// The process name the rows to be named carry now.
    pub placeholder: String,
    /// Each pid's task name.
    pub by_pid: HashMap<u32, String>,
}

impl EventTable {
    /// An empty table whose dictionaries hold the empty string at code 0.
    pub fn new() -> Self {
        let mut t = EventTable::default();
        t.comms.intern(b"");
        t.rwbs_values.intern(b"");
        t.names.intern(b"");
        t
    }

    /// Gives the rows whose process name is `names.placeholder` their task's name by pid
    /// (empty where `names` has none): a trace whose events carry only a pid (Perfetto's)
    /// is rendered with a placeholder name and named from its process tree afterwards.
    pub fn name_tasks(&mut self, names: &TaskNames) {
        let Some(unnamed) = self.comms.code(names.placeholder.as_bytes()) else {
            return;
        };
        let comms = &mut self.comms;
        // Looked up once a row: Fx, as the dictionaries hash (pids are not adversarial).
        let mut code_of_pid: HashMap<u32, u32, FxBuildHasher> = HashMap::default();
        for (comm, pid) in self.comm.iter_mut().zip(&self.pid) {
            if *comm == unnamed {
                *comm = *code_of_pid.entry(*pid).or_insert_with(|| {
                    comms.intern(names.by_pid.get(pid).map_or(&b""[..], |n| n.as_bytes()))
                });
            }
        }
        // No row holds the placeholder now (unless a task is named so): it leaves the
        // dictionary, so the column's categories are the names the rows carry.
        if code_of_pid.values().all(|&c| c != unnamed) {
            if let Some(moved) = self.comms.swap_remove(unnamed) {
                self.comm
                    .iter_mut()
                    .filter(|c| **c == moved)
                    .for_each(|c| *c = unnamed);
            }
        }
    }

    /// Returns unused reserved capacity (large allocations shrink in place via mremap).
    pub fn shrink_to_fit(&mut self) {
        macro_rules! shrink {
            ($($c:ident),*) => { $(self.$c.shrink_to_fit();)* };
        }
        dense_columns!(shrink, kind, comm, error, name);
        self.sparse.text_data.shrink_to_fit();
    }

    /// Cuts every column to its first `n` rows.
    pub(crate) fn truncate_rows(&mut self, n: usize) {
        macro_rules! truncate {
            ($($c:ident),*) => { $(self.$c.truncate(n);)* };
        }
        dense_columns!(truncate, kind, comm, error, name);
    }

    /// Rows in the table.
    pub fn len(&self) -> usize {
        self.time_ns.len()
    }

    /// True when the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.time_ns.is_empty()
    }

    /// Room for `n` more rows in every column every row writes.
    pub fn reserve(&mut self, n: usize) {
        self.reserve_columns(n);
        // Large tables: ask for transparent huge pages, which cuts the page faults of
        // filling the columns by 512x (a third of the run time on big binary traces).
        if n >= 1 << 16 {
            self.advise_dense_columns();
            advise_huge_pages(&self.comm);
            advise_huge_pages(&self.error);
            advise_huge_pages(&self.name);
        }
    }

    /// Room for `rows` rows with syscall fields or text and `bytes` of text, for text
    /// traces whose count is unknown ahead. Growing these from small copies them at every
    /// doubling (the allocator moves blocks under its mmap threshold); reserved room that
    /// no row uses costs address space only.
    pub(crate) fn reserve_sparse(&mut self, rows: usize, bytes: usize) {
        fn reserve_huge<T>(v: &mut Vec<T>, n: usize) {
            v.reserve(n);
            advise_huge_pages(v);
        }
        let s = &mut self.sparse;
        reserve_huge(&mut s.aux.0, rows);
        reserve_huge(&mut s.fd.0, rows);
        reserve_huge(&mut s.ret.0, rows);
        reserve_huge(&mut s.text_end.0, rows);
        reserve_huge(&mut s.text_data, bytes);
    }

    /// Sizes the columns every row writes to `n` zeroed rows (huge-page advised when
    /// large): pages straight from the OS, which cost nothing until written.
    pub(crate) fn size_dense_columns(&mut self, n: usize) {
        macro_rules! size {
            ($($c:ident),*) => { $(self.$c = vec![Default::default(); n];)* };
        }
        dense_columns!(size);
        if n >= 1 << 16 {
            self.advise_dense_columns();
        }
    }

    /// Huge-page hint for the columns every row writes (not kind, error, comm and name,
    /// which a binary trace mostly leaves zero and untouched).
    pub(crate) fn advise_dense_columns(&self) {
        macro_rules! advise {
            ($($c:ident),*) => { $(advise_huge_pages(&self.$c);)* };
        }
        dense_columns!(advise);
    }

    fn reserve_columns(&mut self, n: usize) {
        macro_rules! reserve {
            ($($c:ident),*) => { $(self.$c.reserve(n);)* };
        }
        dense_columns!(reserve, kind, comm, error, name);
    }

    /// Until `undefer_zero_columns`, `push` writes no `sequence` and `error` entries but
    /// notes the nonzero ones; the columns are then built zeroed (pages straight from the
    /// OS, which no zero row touches). For readers whose rows leave them mostly zero.
    pub(crate) fn defer_zero_columns(&mut self) {
        if self.deferred.is_none() {
            self.deferred = Some(Deferred::default());
        }
    }

    /// Fills in `sequence` and `error` after `defer_zero_columns`.
    pub(crate) fn undefer_zero_columns(&mut self) {
        let Some(d) = self.deferred.take() else {
            return;
        };
        fn build<T: Copy + Default>(old: &[T], n: usize, set: &[(usize, T)]) -> Vec<T> {
            let mut v = vec![T::default(); n];
            v[..old.len()].copy_from_slice(old);
            for &(row, x) in set {
                v[row] = x;
            }
            v
        }
        let n = self.len();
        self.sequence = build(&self.sequence, n, &d.sequences);
        self.error = build(&self.error, n, &d.errors);
    }

    /// Appends one row; `comm`, `rwbs` and `name` are dictionary codes, `text` raw bytes.
    /// For a few rows: readers push through a `writer`, which checks capacity once a row.
    pub fn push(&mut self, e: &Event, comm: u32, rwbs: u32, name: u32, text: &[u8]) {
        self.writer().push(e, comm, rwbs, name, text);
    }

    /// A writer appending rows to the table while it lives.
    pub(crate) fn writer(&mut self) -> RowWriter<'_> {
        RowWriter::new(self)
    }

    /// Row `i`'s action.
    pub fn action_at(&self, i: usize) -> Action {
        Action::ALL[self.action[i] as usize]
    }
    /// Row `i`'s operation.
    pub fn operation_at(&self, i: usize) -> Operation {
        Operation::ALL[self.operation[i] as usize]
    }
    /// Row `i`'s record kind.
    pub fn kind_at(&self, i: usize) -> RecordKind {
        RecordKind::ALL[self.kind[i] as usize]
    }
    /// Row `i`'s process name (empty where the trace names none).
    pub fn comm_at(&self, i: usize) -> &str {
        self.comms.get(self.comm[i])
    }
    /// Row `i`'s RWBS string as printed.
    pub fn rwbs_at(&self, i: usize) -> &str {
        self.rwbs_values.get(self.rwbs[i])
    }
    /// Row `i`'s tracepoint, syscall or marker name.
    pub fn name_at(&self, i: usize) -> &str {
        self.names.get(self.name[i])
    }
    /// Row `i`'s text (marker text, syscall arguments, message); empty if none.
    pub fn text_at(&self, i: usize) -> &str {
        std::str::from_utf8(self.sparse.text(i)).unwrap_or("")
    }
    /// Row `i`'s aux value: unplug depth, split sector or syscall count; 0 if none.
    pub fn aux_at(&self, i: usize) -> u64 {
        self.sparse.aux.get(i).unwrap_or(0)
    }
    /// Row `i`'s remap source (major, minor, sector), if it was remapped.
    pub fn remap_at(&self, i: usize) -> Option<(u32, u32, u64)> {
        self.sparse.remap.get(i)
    }
    /// Row `i`'s cgroup id, 0 if none.
    pub fn cgroup_id_at(&self, i: usize) -> u64 {
        self.sparse.cgroup_id.get(i).unwrap_or(0)
    }
    /// Row `i`'s syscall fd argument, if any.
    pub fn fd_at(&self, i: usize) -> Option<i64> {
        self.sparse.fd.get(i)
    }
    /// Row `i`'s syscall return value, if any.
    pub fn ret_at(&self, i: usize) -> Option<i64> {
        self.sparse.ret.get(i)
    }

    /// Every field of row `i` on one line, dictionary codes resolved, sparse fields and
    /// text included: for tests that compare tables row by row, and for debugging.
    pub fn row_text(&self, i: usize) -> String {
        format!(
            "{:?} {} {}:{} cpu{} seq{} pid{} {:?} {:?} {:?} {:?} f{} {}+{} {}B e{} remap{:?} aux{} cg{} {:?} fd{:?} ret{:?} {:?}",
            self.kind_at(i),
            self.time_ns[i],
            self.dev_major[i],
            self.dev_minor[i],
            self.cpu[i],
            self.sequence[i],
            self.pid[i],
            self.comm_at(i),
            self.action_at(i),
            self.operation_at(i),
            self.rwbs_at(i),
            self.flags[i],
            self.sector[i],
            self.sectors[i],
            self.bytes[i],
            self.error[i],
            self.remap_at(i),
            self.aux_at(i),
            self.cgroup_id_at(i),
            self.name_at(i),
            self.fd_at(i),
            self.ret_at(i),
            self.text_at(i),
        )
    }

    /// Bytes held by the columns (what the Arrow table will occupy, give or take).
    pub fn heap_bytes(&self) -> usize {
        let n = self.len();
        n * (1 + 8 + 4 + 4 + 4 + 8 + 4 + 4 + 1 + 1 + 2 + 8 + 4 + 8 + 4 + 4 + 4)
            + self.sparse.heap_bytes()
    }

    /// Appends all rows of `other`, re-coding its dictionaries.
    pub fn append(&mut self, other: &EventTable) {
        let row_base = self.len();
        let comm_map: Vec<u32> = other
            .comms
            .values
            .iter()
            .map(|s| self.comms.intern(s.as_bytes()))
            .collect();
        let rwbs_map: Vec<u32> = other
            .rwbs_values
            .values
            .iter()
            .map(|s| self.rwbs_values.intern(s.as_bytes()))
            .collect();
        let name_map: Vec<u32> = other
            .names
            .values
            .iter()
            .map(|s| self.names.intern(s.as_bytes()))
            .collect();
        self.kind.extend_from_slice(&other.kind);
        self.time_ns.extend_from_slice(&other.time_ns);
        self.dev_major.extend_from_slice(&other.dev_major);
        self.dev_minor.extend_from_slice(&other.dev_minor);
        self.cpu.extend_from_slice(&other.cpu);
        self.sequence.extend_from_slice(&other.sequence);
        self.pid.extend_from_slice(&other.pid);
        self.comm
            .extend(other.comm.iter().map(|&c| comm_map[c as usize]));
        self.action.extend_from_slice(&other.action);
        self.operation.extend_from_slice(&other.operation);
        self.flags.extend_from_slice(&other.flags);
        self.sector.extend_from_slice(&other.sector);
        self.sectors.extend_from_slice(&other.sectors);
        self.bytes.extend_from_slice(&other.bytes);
        self.error.extend_from_slice(&other.error);
        self.rwbs
            .extend(other.rwbs.iter().map(|&c| rwbs_map[c as usize]));
        self.name
            .extend(other.name.iter().map(|&c| name_map[c as usize]));
        self.sparse.append(&other.sparse, row_base);
    }
}

/// Calls macro `$m` with the names of the columns every row writes, except `sequence` and
/// `error`, which `defer_zero_columns` can set aside.
macro_rules! row_columns {
    ($m:ident) => {
        value_columns!($m, kind, comm, name)
    };
}

/// Rows of room a `RowWriter` makes at a time.
const WRITER_ROOM: usize = 4096;

/// Appends rows to a table with one capacity check per row rather than one per column (a
/// tenth of a text reader's work went to those): it holds the table exclusively while it
/// lives, reserves room in every column a few thousand rows at a time, writes each row
/// into that room, and sets the columns' lengths when it makes more room and when dropped.
pub(crate) struct RowWriter<'a> {
    table: &'a mut EventTable,
    /// Rows in the table, including those whose column lengths are not yet set.
    len: usize,
    /// Every column a row writes has capacity for this many rows.
    room: usize,
}

impl<'a> RowWriter<'a> {
    fn new(table: &'a mut EventTable) -> Self {
        let len = table.len();
        // Rows are written at one index in every column: they must be in step.
        macro_rules! in_step {
            ($($c:ident),*) => { $(assert_eq!(table.$c.len(), len, concat!("column `", stringify!($c), "` out of step"));)* };
        }
        row_columns!(in_step);
        if table.deferred.is_none() {
            in_step!(sequence, error);
        }
        RowWriter {
            table,
            len,
            room: len,
        }
    }

    pub(crate) fn comms(&mut self) -> &mut Dictionary {
        &mut self.table.comms
    }

    pub(crate) fn rwbs_values(&mut self) -> &mut Dictionary {
        &mut self.table.rwbs_values
    }

    pub(crate) fn names(&mut self) -> &mut Dictionary {
        &mut self.table.names
    }

    /// Appends one row; `comm`, `rwbs` and `name` are dictionary codes, `text` raw bytes.
    /// Inlined, so that a reader's row goes to the columns without a stop in memory.
    #[inline(always)]
    pub(crate) fn push(&mut self, e: &Event, comm: u32, rwbs: u32, name: u32, text: &[u8]) {
        if self.len == self.room {
            self.make_room();
        }
        let row = self.len;
        let t = &mut *self.table;
        // SAFETY: `row` < `room`, which every column a row writes has capacity for
        // (`make_room`), and nothing else can touch the columns while the writer lives.
        unsafe {
            write(&mut t.kind, row, e.kind as u8);
            write(&mut t.time_ns, row, e.time_ns);
            write(&mut t.dev_major, row, e.dev_major);
            write(&mut t.dev_minor, row, e.dev_minor);
            write(&mut t.cpu, row, e.cpu);
            write(&mut t.pid, row, e.pid);
            write(&mut t.comm, row, comm);
            write(&mut t.action, row, e.action as u8);
            write(&mut t.operation, row, e.operation as u8);
            write(&mut t.flags, row, e.flags);
            write(&mut t.sector, row, e.sector);
            write(&mut t.sectors, row, e.sectors);
            write(&mut t.bytes, row, e.bytes);
            write(&mut t.rwbs, row, rwbs);
            write(&mut t.name, row, name);
        }
        match &mut t.deferred {
            // SAFETY: as above; without deferral these two are columns a row writes.
            None => unsafe {
                write(&mut t.sequence, row, e.sequence);
                write(&mut t.error, row, e.error);
            },
            Some(d) => {
                if e.sequence != 0 {
                    d.sequences.push((row, e.sequence));
                }
                if e.error != 0 {
                    d.errors.push((row, e.error));
                }
            }
        }
        t.sparse.push(row, e, text);
        self.len = row + 1;
    }

    /// Sets the lengths of the rows written so far, then reserves room for more.
    #[cold]
    fn make_room(&mut self) {
        self.set_lengths();
        let t = &mut *self.table;
        macro_rules! reserve {
            ($($c:ident),*) => { $(t.$c.reserve(WRITER_ROOM);)* };
        }
        row_columns!(reserve);
        if t.deferred.is_none() {
            reserve!(sequence, error);
        }
        self.room = self.len + WRITER_ROOM;
    }

    fn set_lengths(&mut self) {
        let (t, len) = (&mut *self.table, self.len);
        macro_rules! set_len {
            // SAFETY: every row below `len` was written in full by `push` (its last step
            // is counting it) into room these columns had reserved.
            ($($c:ident),*) => { $(unsafe { t.$c.set_len(len) };)* };
        }
        row_columns!(set_len);
        if t.deferred.is_none() {
            set_len!(sequence, error);
        }
    }
}

impl Drop for RowWriter<'_> {
    fn drop(&mut self) {
        self.set_lengths();
    }
}

/// Writes `value` at index `row` of `column`, past its length.
///
/// # Safety
/// `row` must be below the column's capacity.
#[inline(always)]
unsafe fn write<T>(column: &mut Vec<T>, row: usize, value: T) {
    // SAFETY: `row` is below the capacity (the caller's promise): in the allocation, and
    // `write` neither reads nor drops what was there.
    unsafe { column.as_mut_ptr().add(row).write(value) };
}

/// `n` zeroed values for a column of which about `writes` entries will be set. The pages
/// come zeroed from the OS and cost nothing until written. Where the writes will reach
/// (almost) every 2 MiB of the column anyway, it asks for huge pages: the kernel then zeroes
/// 2 MiB per fault, several times faster per byte than 4 KiB faults on this kind of VM.
pub(crate) fn zeroed_column<T: Clone + Default>(n: usize, writes: usize) -> Vec<T> {
    const HUGE: usize = 2 << 20;
    let v = vec![T::default(); n];
    if writes.saturating_mul(HUGE) >= n * std::mem::size_of::<T>() {
        advise_huge_pages(&v);
    }
    v
}

/// madvise(MADV_HUGEPAGE) on the 2 MiB-aligned part of a vector's allocation. Only a hint:
/// failures are ignored and the data is the same either way.
pub(crate) fn advise_huge_pages<T>(v: &Vec<T>) {
    advise_huge_range(v.as_ptr() as usize, v.capacity() * std::mem::size_of::<T>());
}

/// madvise(MADV_HUGEPAGE) on the 2 MiB-aligned part of `len` bytes at `start`, a live
/// allocation of ours.
fn advise_huge_range(start: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let aligned_start = (start + HUGE - 1) & !(HUGE - 1);
        let aligned_end = (start + len) & !(HUGE - 1);
        if aligned_end > aligned_start {
            // SAFETY: MADV_HUGEPAGE changes only how the kernel backs the pages, never
            // their contents.
            unsafe {
                libc::madvise(
                    aligned_start as *mut libc::c_void,
                    aligned_end - aligned_start,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row `i` of the writer tests: every field a function of `i`, some rows with sparse
    /// fields and text.
    fn event(i: u64) -> (Event, Vec<u8>) {
        let e = Event {
            kind: RecordKind::ALL[(i % 3) as usize],
            time_ns: i * 1000 + 7,
            dev_major: (i % 5) as u32,
            dev_minor: (i % 11) as u32,
            cpu: (i % 4) as u32,
            sequence: i % 13,
            pid: i as u32 ^ 0x5a5a,
            action: Action::ALL[(i % 7) as usize],
            operation: Operation::ALL[(i % 3) as usize],
            flags: (i % 32) as u16,
            sector: i * 8,
            sectors: (i % 64) as u32,
            bytes: (i % 64) * 512,
            error: -((i % 17 == 0) as i32),
            fd: (i % 9 == 0).then_some(i as i64),
            aux: i % 10,
            ..Event::default()
        };
        let text = if i % 6 == 0 {
            format!("text {i}").into_bytes()
        } else {
            Vec::new()
        };
        (e, text)
    }

    /// Each row's dense fields as numbers (kind … name, in the table's column order), as
    /// the events say: the truth the writer's columns must match.
    fn expected_rows(rows: std::ops::Range<u64>) -> Vec<[i64; 17]> {
        rows.map(|i| {
            let (e, _) = event(i);
            let (comm, rwbs, name) = (i % 2, i % 3, 0);
            [
                e.kind as i64,
                e.time_ns as i64,
                e.dev_major as i64,
                e.dev_minor as i64,
                e.cpu as i64,
                e.sequence as i64,
                e.pid as i64,
                comm as i64,
                e.action as i64,
                e.operation as i64,
                e.flags as i64,
                e.sector as i64,
                e.sectors as i64,
                e.bytes as i64,
                e.error as i64,
                rwbs as i64,
                name,
            ]
        })
        .collect()
    }

    fn table_rows(t: &EventTable) -> Vec<[i64; 17]> {
        (0..t.len())
            .map(|i| {
                [
                    t.kind[i] as i64,
                    t.time_ns[i] as i64,
                    t.dev_major[i] as i64,
                    t.dev_minor[i] as i64,
                    t.cpu[i] as i64,
                    t.sequence[i] as i64,
                    t.pid[i] as i64,
                    t.comm[i] as i64,
                    t.action[i] as i64,
                    t.operation[i] as i64,
                    t.flags[i] as i64,
                    t.sector[i] as i64,
                    t.sectors[i] as i64,
                    t.bytes[i] as i64,
                    t.error[i] as i64,
                    t.rwbs[i] as i64,
                    t.name[i] as i64,
                ]
            })
            .collect()
    }

    fn write_rows(w: &mut RowWriter<'_>, rows: std::ops::Range<u64>) {
        for i in rows {
            let (e, text) = event(i);
            w.push(&e, (i % 2) as u32, (i % 3) as u32, 0, &text);
        }
    }

    #[test]
    fn writers_write_what_pushes_by_hand_do() {
        // Past several rounds of room, in two writers one after the other, with and
        // without the deferred columns.
        let total = 3 * WRITER_ROOM as u64 + 17;
        for deferred in [false, true] {
            let mut t = EventTable::new();
            if deferred {
                t.defer_zero_columns();
            }
            write_rows(&mut t.writer(), 0..1000);
            write_rows(&mut t.writer(), 1000..total);
            t.undefer_zero_columns();
            assert_eq!(t.len(), total as usize);
            let (got, want) = (table_rows(&t), expected_rows(0..total));
            assert_eq!(got.len(), want.len());
            if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                panic!(
                    "deferred={deferred}: row {i}: {:?} vs {:?}",
                    got[i], want[i]
                );
            }
            for i in 0..total {
                let (e, text) = event(i);
                let row = i as usize;
                assert_eq!(
                    (t.fd_at(row), t.aux_at(row), t.text_at(row).as_bytes()),
                    (e.fd, e.aux, &text[..]),
                    "row {i}"
                );
            }
        }
    }

    /// A column long enough that the huge-page advice covers part of it (the madvise call's
    /// one test): still zeroed, and writable end to end.
    #[test]
    fn huge_page_advice_leaves_a_column_zeroed_and_writable() {
        let n = 1 << 19; // 4 MiB of u64: at least one whole aligned 2 MiB range.
        let mut v = zeroed_column::<u64>(n, n);
        assert!(v.iter().all(|&x| x == 0));
        for (i, x) in v.iter_mut().enumerate() {
            *x = i as u64;
        }
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
    }

    #[test]
    fn tasks_named_by_pid_where_the_placeholder_stands() {
        let mut t = EventTable::new();
        let (placeholder, own) = (t.comms.intern(b"<...>"), t.comms.intern(b"db"));
        for (pid, comm) in [
            (7, placeholder),
            (8, placeholder),
            (7, own),
            (9, placeholder),
        ] {
            t.push(
                &Event {
                    pid,
                    ..Event::default()
                },
                comm,
                0,
                0,
                b"",
            );
        }
        let names = TaskNames {
            placeholder: "<...>".into(),
            by_pid: HashMap::from([(7, "notes db".into()), (8, "kworker/u16:2".into())]),
        };
        t.name_tasks(&names);
        let named: Vec<&str> = t.comm.iter().map(|&c| t.comms.get(c)).collect();
        // pid 7's own name ("db", from its block event) stays; pid 9 has no name.
        assert_eq!(named, ["notes db", "kworker/u16:2", "db", ""]);
        // The placeholder names no row any more, and is no category of the column either.
        let mut values = t.comms.values.clone();
        values.sort();
        assert_eq!(values, ["", "db", "kworker/u16:2", "notes db"]);
        assert_eq!(t.comms.code(b"<...>"), None);
        assert_eq!(t.comms.code(b"db").map(|c| t.comms.get(c)), Some("db"));
    }

    #[test]
    #[should_panic(expected = "out of step")]
    fn a_writer_refuses_columns_out_of_step() {
        let mut t = EventTable::new();
        t.push(&Event::default(), 0, 0, 0, b"");
        t.pid.push(1);
        t.writer();
    }
}
