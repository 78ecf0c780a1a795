//! blktrace-parse: turns block traces (blktrace binary, blkparse text, ftrace text) into
//! one columnar [`EventTable`], with a [`ParseReport`] of what was seen and skipped.
//!
//! [`parse_paths`] reads any mix of the three formats ([`Format::Auto`] tells them apart
//! by their first bytes); [`arrow::to_record_batch`] (feature `arrow`) hands the table to
//! Arrow without copying its columns; [`parquet::parse_to_parquet`] (feature `parquet`)
//! writes it to a Parquet file in bounded memory; [`perfetto::render`] (feature
//! `perfetto`) turns a Perfetto trace into the ftrace text the others read. Every error is
//! a [`ParseError`] naming the file and the line or byte offset.
//!
//! ```
//! use blktrace_parse::{parse_paths, Action, Format, Operation, Tally};
//!
//! // Two lines of tracefs `trace` output: a 4 KiB synchronous write issued, then completed.
//! let trace = "\
//!     sqlite-1234 [001] d..1. 1234.567890: block_rq_issue: 7,0 WS 4096 () 1234 + 8 [sqlite]
//!     <idle>-0    [001] ..s1. 1234.567990: block_rq_complete: 7,0 WS () 1234 + 8 [0]
//! ";
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("trace.txt");
//! std::fs::write(&path, trace)?;
//!
//! let (table, report) = parse_paths(&[path], Format::Auto, false)?;
//! assert_eq!(report.files[0].1, "ftrace");
//! assert_eq!(report.per_action["D"], 1);
//! // What device 7,0 completed, per operation; its stages (D, C) counted apart.
//! let loop0 = &report.devices[&(7, 0)];
//! assert_eq!(loop0.completed["write"], Tally { count: 1, bytes: 4096 });
//! assert_eq!((loop0.stages["D"].count, loop0.stages["C"].count), (1, 1));
//! assert_eq!(table.len(), 2);
//! assert_eq!((table.action_at(0), table.operation_at(0)), (Action::Issue, Operation::Write));
//! assert_eq!(table.comm_at(0), "sqlite");
//! assert_eq!((table.sector[0], table.bytes[0]), (1234, 4096));
//! assert_eq!(table.time_ns[1] - table.time_ns[0], 100_000); // 100 µs, in ns
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The formats, the columns and the design (threads, memory, the Parquet encodings) are
//! described in the crate's README.
//!
//! Unsafe code: every block and impl says why it is sound in a `// SAFETY:` comment, and
//! `./scripts/test` runs the tests that reach each one under valgrind (README: Unsafe code).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#[cfg(feature = "arrow")]
pub mod arrow;
pub mod binary;
pub(crate) mod blkparse_text;
pub(crate) mod error;
pub(crate) mod ftrace;
pub(crate) mod input;
mod intern;
#[cfg(feature = "parquet")]
pub mod parquet;
#[cfg(feature = "perfetto")]
pub mod perfetto;
pub(crate) mod report;
pub mod rwbs;
pub mod table;
pub(crate) mod text;
pub mod writer;

use std::io::Read;
use std::path::{Path, PathBuf};

pub use error::{Location, ParseError};
pub use report::{DeviceTotals, ParseReport, Tally};
pub use table::{flags, Action, Event, EventTable, Operation, RecordKind, TaskNames};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// The trace format a file is read as: [`parse_paths`] takes one for every file.
pub enum Format {
    /// Detect each file's format from its first bytes ([`detect_bytes`]).
    Auto,
    /// blktrace binary: per-CPU `NAME.blktrace.N` files, or their base name `NAME`.
    Blktrace,
    /// blkparse's default text output.
    Blkparse,
    /// tracefs `trace` / `trace_pipe` text: block tracepoints, markers, syscalls.
    Ftrace,
}

impl Format {
    /// The format's name, as `--format` takes it and [`ParseReport::files`] lists it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Blktrace => "blktrace",
            Format::Blkparse => "blkparse",
            Format::Ftrace => "ftrace",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s {
            "auto" => Format::Auto,
            "blktrace" | "binary" => Format::Blktrace,
            "blkparse" => Format::Blkparse,
            "ftrace" => Format::Ftrace,
            other => {
                return Err(ParseError::Usage(format!(
                    "unknown trace format {other:?}; use auto, blktrace, blkparse or ftrace"
                )))
            }
        })
    }
}

/// Limits glibc's malloc to one arena per core, for the process (call it before threads
/// start allocating). By default glibc makes up to 8 per core, and freed row groups stay in
/// the arena of the thread that freed them: a Perfetto trace's streamed parse (sort in one
/// thread, Parquet writer in others) peaked 1.16x higher for a trace twice as long, and
/// flat (1.04x) with one arena per core, at the same speed; the blktrace parse is
/// unchanged. A no-op off glibc.
pub fn one_malloc_arena_per_core() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: mallopt only sets a tunable of glibc's allocator; M_ARENA_MAX bounds
        // the arenas created from now on and touches no allocation.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores.try_into().unwrap_or(i32::MAX));
        }
    }
}

/// Parses every given trace into one table. Binary per-CPU files (or their base name) are
/// merged by time into one trace; text files are appended in the order given.
pub fn parse_paths(
    paths: &[PathBuf],
    format: Format,
    lenient: bool,
) -> Result<(EventTable, ParseReport), ParseError> {
    if paths.is_empty() {
        return Err(ParseError::Usage("no trace files given".into()));
    }
    let mut table = EventTable::new();
    let mut report = ParseReport::default();
    let mut binaries = Vec::new();
    for path in binary::expand_paths(paths)? {
        let fmt = if format == Format::Auto {
            detect(&path)?
        } else {
            format
        };
        report
            .files
            .push((path.display().to_string(), fmt.name().to_string()));
        match fmt {
            Format::Blktrace => binaries.push(path),
            Format::Blkparse => {
                reserve_for_text(&path, &mut table);
                blkparse_text::read(&path, lenient, &mut table, &mut report)?
            }
            Format::Ftrace => {
                reserve_for_text(&path, &mut table);
                ftrace::read(&path, lenient, &mut table, &mut report)?
            }
            Format::Auto => unreachable!("detect never answers Auto"),
        }
    }
    if !binaries.is_empty() {
        // Merged into one trace of their own, then appended after the text files' rows.
        binary::read(&binaries, lenient, &mut table, &mut report)?;
    }
    table.shrink_to_fit();
    report.count(&table);
    Ok((table, report))
}

/// Reserves room for a text file's rows (about one per 60 bytes) to avoid regrowing, and
/// for a quarter of them to carry sparse fields or text (markers, syscalls, messages).
fn reserve_for_text(path: &Path, table: &mut EventTable) {
    if let Ok(meta) = std::fs::metadata(path) {
        let rows = (meta.len() / 60) as usize;
        table.reserve(rows);
        table.reserve_sparse(rows / 4, rows * 4);
    }
}

/// Guesses a file's format from its first bytes.
pub fn detect(path: &Path) -> Result<Format, ParseError> {
    let mut head = [0u8; 4096];
    let mut file = input::open_regular(path)?;
    let mut n = 0;
    while n < head.len() {
        let got = file
            .read(&mut head[n..])
            .map_err(|e| ParseError::io(path, e))?;
        if got == 0 {
            break;
        }
        n += got;
    }
    detect_bytes(&head[..n]).ok_or_else(|| {
        ParseError::bad(path, Location::Whole, "unrecognised trace format (not blktrace binary, blkparse text or ftrace text); pass --format")
    })
}

/// Format of a file from its first bytes; `None` if nothing fits.
///
/// ```
/// use blktrace_parse::{detect_bytes, Format};
/// let blkparse = b"  8,0    1        1     0.000000000  4242  Q  WS 1234 + 8 [sqlite3]\n";
/// assert_eq!(detect_bytes(blkparse), Some(Format::Blkparse));
/// assert_eq!(detect_bytes(b"hello\n"), None);
/// ```
pub fn detect_bytes(head: &[u8]) -> Option<Format> {
    if binary::looks_like_blktrace(head) {
        return Some(Format::Blktrace);
    }
    let mut saw_comment = false;
    for line in head.split(|&b| b == b'\n').take(64) {
        let t = line.trim_ascii();
        if t.is_empty() {
            continue;
        }
        if t.starts_with(b"# tracer:") || t.starts_with(b"#           TASK-PID") {
            return Some(Format::Ftrace);
        }
        if t[0] == b'#' {
            saw_comment = true;
            continue;
        }
        let first = t.split(|&b| b == b' ').next().unwrap_or_default();
        if first.contains(&b',') && first.iter().all(|&b| b.is_ascii_digit() || b == b',') {
            return Some(Format::Blkparse);
        }
        if t.starts_with(b"CPU:") && memchr::memmem::find(t, b"[LOST").is_some() {
            return Some(Format::Ftrace);
        }
        // ftrace: `comm-pid [cpu] ... timestamp: event:`
        if memchr::memmem::find(t, b"] ").is_some() && memchr::memmem::find(t, b": ").is_some() {
            return Some(Format::Ftrace);
        }
        return None;
    }
    // Only comments: blkparse's header or an empty ftrace buffer.
    saw_comment.then_some(Format::Ftrace)
}
