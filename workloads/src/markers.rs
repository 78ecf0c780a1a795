//! Marker lines written into the trace (the tracefs `trace_marker` file, or a regular
//! file in tests). The format is documented in `../MARKERS.md` and nowhere else; the
//! trace parser relies on it. Each marker is exactly one `write()` of one line.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{EngineError, FileKind};

/// CLOCK_MONOTONIC in nanoseconds: the same clock as tracefs's `mono` trace_clock.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The kernel thread id of the calling thread (what syscall tracepoints record).
pub(crate) fn current_tid() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
}

/// Ranges per `extents` line: ~25 bytes each keeps a line under 1 KiB.
pub(crate) const EXTENTS_PER_LINE: usize = 40;

/// Writes marker lines unbuffered; one line per `write()` so lines never interleave or split.
#[derive(Debug)]
pub(crate) struct MarkerSink {
    file: File,
    path: PathBuf,
}

/// (SQLITE_SYNC_FULL, SQLITE_SYNC_DATAONLY) of xSync's flags argument.
pub(crate) fn sync_full_dataonly(flags: i32) -> (bool, bool) {
    (
        flags & 0x0F == rusqlite::ffi::SQLITE_SYNC_FULL,
        flags & rusqlite::ffi::SQLITE_SYNC_DATAONLY != 0,
    )
}

/// The `flags=` field of a sync marker, from xSync's flags argument.
pub(crate) fn sync_flags_label(flags: i32) -> &'static str {
    match sync_full_dataonly(flags) {
        (false, false) => "normal",
        (true, false) => "full",
        (false, true) => "dataonly",
        (true, true) => "full+dataonly",
    }
}

impl MarkerSink {
    /// Opens `path` write-only (creating a regular file if missing, appending to it).
    pub fn open(path: &Path) -> Result<MarkerSink, EngineError> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| EngineError::io(path, format!("cannot open marker file: {e}")))?;
        Ok(MarkerSink {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `line`, which already ends in a newline, in a single write(). The markers
    /// below format straight into it: one allocation per marker, no copy.
    fn emit(&self, line: String) -> std::io::Result<()> {
        let written = (&self.file).write(line.as_bytes())?;
        if written != line.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "short marker write",
            ));
        }
        Ok(())
    }

    pub fn run_begin(&self, pid: u32, tid: u32) -> std::io::Result<()> {
        let t = monotonic_ns();
        self.emit(format!("sqlwa run_begin pid={pid} tid={tid} t={t}\n"))
    }

    pub fn run_end(&self) -> std::io::Result<()> {
        self.emit(format!("sqlwa run_end t={}\n", monotonic_ns()))
    }

    /// Written just before the transaction starts, with the timestamp taken then.
    pub fn txn_begin(&self, index: u64, warmup: bool, t: u64) -> std::io::Result<()> {
        let w = u8::from(warmup);
        self.emit(format!("sqlwa txn_begin i={index} warmup={w} t={t}\n"))
    }

    /// Written just after COMMIT returns, with the timestamp taken then.
    pub fn txn_end(&self, index: u64, t: u64) -> std::io::Result<()> {
        self.emit(format!("sqlwa txn_end i={index} t={t}\n"))
    }

    /// Written instead of `txn_end` when the transaction changed no page of a database
    /// file (`VfsCounts::wrote_database`): it is no commit, and its index is the next
    /// transaction's.
    pub fn txn_void(&self, index: u64, t: u64) -> std::io::Result<()> {
        self.emit(format!("sqlwa txn_void i={index} t={t}\n"))
    }

    /// Written just before a connection of the run is closed, outside every transaction.
    pub fn close_begin(&self, t: u64) -> std::io::Result<()> {
        self.emit(format!("sqlwa close_begin t={t}\n"))
    }

    /// Written just after the connection is closed (in WAL mode, the last to close a
    /// database checkpoints it then).
    pub fn close_end(&self, t: u64) -> std::io::Result<()> {
        self.emit(format!("sqlwa close_end t={t}\n"))
    }

    pub fn sync_begin(&self, txn: i64, kind: FileKind, flags: i32) -> std::io::Result<()> {
        let (k, f, t) = (kind.as_str(), sync_flags_label(flags), monotonic_ns());
        self.emit(format!(
            "sqlwa sync_begin i={txn} kind={k} flags={f} t={t}\n"
        ))
    }

    /// The end marker of a sync, truncate or delete (`op` = "sync", "trunc", "delete").
    pub fn op_end(&self, op: &str, txn: i64, kind: FileKind, rc: i32) -> std::io::Result<()> {
        let (k, t) = (kind.as_str(), monotonic_ns());
        self.emit(format!("sqlwa {op}_end i={txn} kind={k} rc={rc} t={t}\n"))
    }

    /// `extents` marker lines for one file: its physical ranges in 512-byte sectors,
    /// `EXTENTS_PER_LINE` per line (a trace_marker write must stay well under 4 KiB), at
    /// least one line. `at` says when they were taken: sync, trunc, delete, end, close.
    /// `ranges` is `Err(errno)` when FIEMAP failed (e.g. EOPNOTSUPP on tmpfs).
    pub fn extents(
        &self,
        txn: i64,
        kind: FileKind,
        at: &str,
        ranges: Result<&[(u64, u64)], i32>,
    ) -> std::io::Result<()> {
        let k = kind.as_str();
        let line = |list: &dyn std::fmt::Display| {
            let t = monotonic_ns();
            self.emit(format!(
                "sqlwa extents i={txn} kind={k} at={at} ranges={list} t={t}\n"
            ))
        };
        match ranges {
            Err(errno) => line(&format_args!("error:{errno}")),
            Ok([]) => line(&"none"),
            Ok(r) => r.chunks(EXTENTS_PER_LINE).try_for_each(|chunk| {
                let mut list = String::with_capacity(chunk.len() * 24);
                for (i, (s, n)) in chunk.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "," };
                    let _ = write!(list, "{sep}{s}+{n}");
                }
                line(&list)
            }),
        }
    }

    /// The begin marker of a truncate or delete (`op` = "trunc", "delete").
    pub fn op_begin(&self, op: &str, txn: i64, kind: FileKind) -> std::io::Result<()> {
        let (k, t) = (kind.as_str(), monotonic_ns());
        self.emit(format!("sqlwa {op}_begin i={txn} kind={k} t={t}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_labels() {
        assert_eq!(sync_flags_label(2), "normal");
        assert_eq!(sync_flags_label(3), "full");
        assert_eq!(sync_flags_label(2 | 0x10), "dataonly");
        assert_eq!(sync_flags_label(3 | 0x10), "full+dataonly");
    }

    #[test]
    fn one_line_per_marker_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m");
        std::fs::write(&path, "existing\n").unwrap();
        let sink = MarkerSink::open(&path).unwrap();
        sink.run_begin(1, 2).unwrap();
        sink.sync_begin(-1, FileKind::Journal, 3).unwrap();
        sink.op_end("sync", -1, FileKind::Journal, 0).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "existing");
        assert!(lines[1].starts_with("sqlwa run_begin pid=1 tid=2 t="));
        assert!(lines[2].starts_with("sqlwa sync_begin i=-1 kind=journal flags=full t="));
        assert!(lines[3].starts_with("sqlwa sync_end i=-1 kind=journal rc=0 t="));
    }

    #[test]
    fn extents_lines_split_and_mark_empty_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m");
        let sink = MarkerSink::open(&path).unwrap();
        let many: Vec<(u64, u64)> = (0..EXTENTS_PER_LINE as u64 + 1)
            .map(|i| (i * 16, 8))
            .collect();
        sink.extents(3, FileKind::Journal, "sync", Ok(&many))
            .unwrap();
        sink.extents(-1, FileKind::Wal, "end", Ok(&[])).unwrap();
        sink.extents(-1, FileKind::Db, "end", Err(95)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("sqlwa extents i=3 kind=journal at=sync ranges=0+8,16+8,"));
        assert_eq!(lines[0].matches('+').count(), EXTENTS_PER_LINE);
        assert!(lines[1].starts_with("sqlwa extents i=3 kind=journal at=sync ranges=640+8 t="));
        assert!(lines[2].starts_with("sqlwa extents i=-1 kind=wal at=end ranges=none t="));
        assert!(lines[3].starts_with("sqlwa extents i=-1 kind=db at=end ranges=error:95 t="));
    }

    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a && a > 0);
    }
}
