//! The run harness a scenario run (`crate::engine`) and a replay (`crate::replay`) share:
//! everything around the SQL, so that each engine only says what its transactions are.
//!
//! - The frame of a run ([`frame`]): the marker file, the lower directory of a FUSE
//!   layer, the dm-log-writes marker, the database files, the counting VFS registered and
//!   unregistered, `run_begin` and `run_end`, the `end` and `close` extents, the marker
//!   lines that could not be written, and the first failure reported.
//! - A transaction's window ([`Harness::begin_txn`], [`Harness::end_txn`]): the VFS's
//!   current transaction, the clock, the SQL thread's CPU time, the VFS counts, the
//!   `txn_begin` / `txn_end` / `txn_void` markers, the dm-log-writes mark and the snapshot
//!   after a commit, and the [`CommitRecord`] (or the transaction that wrote nothing).
//! - A connection's closing, measured between `close_begin` and `close_end`
//!   ([`Harness::measured_close`]), and its failure ([`close_connection`]).
//! - The pieces every engine reads or reports the same way: the [`RunInfo`] read from a
//!   connection ([`run_info`]), the journal mode SQLite kept ([`check_journal_mode`]), a
//!   filesystem's failure of a statement ([`storage_failure`]), the pace of progress
//!   reports ([`ProgressClock`]).
//!
//! The markers and their order are the analyzer's contract (MARKERS.md): a change here is
//! a change of both engines' output.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::cpu::{thread_cpu, CpuTime};
use crate::dmmark::DmMarker;
use crate::engine::{Closing, WroteNothing};
use crate::markers::{current_tid, monotonic_ns, MarkerSink};
use crate::settings::REPORTED_PRAGMAS;
use crate::vfs::{CountingVfs, LowerDir, RunFiles, VfsShared};
use crate::{CommitRecord, EngineError, FileKind, RunInfo, RunSettings, VfsCounts};

/// How often an engine calls its caller's progress callback, at most.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// What a run's SQL has to work with, set up by [`frame`] before it and taken down after
/// it.
pub(crate) struct Harness {
    pub(crate) sink: Option<Arc<MarkerSink>>,
    pub(crate) shared: Arc<VfsShared>,
    /// the VFS shim every connection of the run opens through: it confines them to the
    /// run's files, and counts their calls unless counting is off
    pub(crate) vfs: CountingVfs,
    pub(crate) dm_marker: Option<DmMarker>,
    /// the run's database files, as the frame's `create_files` made them
    pub(crate) db_paths: Vec<PathBuf>,
    /// where a copy of the database goes after the schema and each commit
    /// (`RunSettings::snapshot_dir`)
    snapshot_dir: Option<PathBuf>,
    /// whether the VFS counts (`RunSettings::count_vfs`): without counts a transaction
    /// that wrote nothing cannot be told from a commit
    count_vfs: bool,
}

/// A run body's result once its connections are closed, which only [`Harness::close`]
/// makes: a body cannot skip the extents around the closing.
pub(crate) struct Closed<T>(Result<T, EngineError>);

/// Who ran a run and on which files, for its [`RunInfo`].
pub(crate) struct Ran {
    db_paths: Vec<PathBuf>,
    pid: u32,
    tid: u32,
}

impl Ran {
    /// Fills in the fields of `info` the harness knows: the first database, the process
    /// and thread, whether the VFS counted.
    pub(crate) fn stamp(&self, info: &mut RunInfo, settings: &RunSettings) {
        info.db_path = self.db_paths[0].clone();
        (info.pid, info.tid, info.vfs_counting) = (self.pid, self.tid, settings.count_vfs);
    }
}

/// The frame of every run, a scenario's or a replay's, around `body`, which opens its
/// connections, runs its SQL and closes them with [`Harness::close`]. In order (the
/// markers are read by the analyzer: MARKERS.md): the marker file, the lower directory
/// and the dm-log-writes marker are opened, the database files created (`create_files`),
/// the counting VFS registered, `run_begin` written; the body runs; the VFS is
/// unregistered, `run_end` written. The first failure is the one reported: the body's
/// (its SQL's, then its closing's), then `run_end`'s, then marker lines that could not be
/// written. A body that fails before its SQL runs (`Err`) ends the run there, with no
/// `run_end`.
pub(crate) fn frame<T>(
    settings: &RunSettings,
    dir: &Path,
    markers: Option<&Path>,
    create_files: impl FnOnce() -> Result<Vec<PathBuf>, EngineError>,
    body: impl FnOnce(&Harness) -> Result<Closed<T>, EngineError>,
) -> Result<(T, Ran), EngineError> {
    let sink = markers.map(MarkerSink::open).transpose()?.map(Arc::new);
    let lower = checked_lower_dir(settings)?;
    let dm_marker = settings
        .dm_mark
        .as_deref()
        .map(DmMarker::open)
        .transpose()?;
    let db_paths = create_files()?;
    let lower = lower.map(|lower| LowerDir::new(dir, lower));
    // Every connection of the run goes through the shim, which confines it to these files
    // whether it counts or not.
    let run_files = RunFiles::new(&db_paths, settings.snapshot_dir.as_deref());
    let shared = VfsShared::confined(sink.clone(), settings.map_extents, lower, Some(run_files));
    let vfs = CountingVfs::register_counting(shared.clone(), settings.count_vfs)?;
    let (pid, tid) = (std::process::id(), current_tid());
    mark(&sink, |m| m.run_begin(pid, tid))?;
    let h = Harness {
        sink,
        shared,
        vfs,
        dm_marker,
        db_paths,
        snapshot_dir: settings.snapshot_dir.clone(),
        count_vfs: settings.count_vfs,
    };
    let Closed(out) = body(&h)?;
    // Unregistered only now, after every connection that used it is closed.
    drop(h.vfs);
    let ended = mark(&h.sink, |m| m.run_end());
    let out = out?;
    ended?;
    if h.shared.marker_errors() > 0 {
        let path = h.sink.as_ref().map(|s| s.path().to_path_buf());
        let message = format!(
            "{} marker lines could not be written",
            h.shared.marker_errors()
        );
        return Err(EngineError::io(path.unwrap_or_default(), message));
    }
    let ran = Ran {
        db_paths: h.db_paths,
        pid,
        tid,
    };
    Ok((out, ran))
}

/// An open transaction window: what [`Harness::begin_txn`] read at its start.
pub(crate) struct TxnWindow {
    /// the commit index it will have (a transaction that wrote nothing leaves it unused)
    pub(crate) index: u64,
    pub(crate) warmup: bool,
    pub(crate) start_ns: u64,
    cpu_start: CpuTime,
    before: VfsCounts,
}

/// What the engine says of a transaction's SQL when its window ends, for its record.
pub(crate) struct TxnWork {
    /// statements in the window
    pub(crate) statements: u64,
    /// payload bytes they stored
    pub(crate) logical_bytes: u64,
}

/// How a transaction's window ended: a commit, or one that changed no database file
/// (`txn_void`: no commit, its index left to the next).
pub(crate) enum Ended {
    Commit(CommitRecord),
    WroteNothing { time_ns: u64, vfs: VfsCounts },
}

impl Harness {
    /// Writes a marker line, when the run has a marker file.
    pub(crate) fn mark(
        &self,
        write: impl FnOnce(&MarkerSink) -> std::io::Result<()>,
    ) -> Result<(), EngineError> {
        mark(&self.sink, write)
    }

    /// Opens transaction `index`'s window: the VFS's current transaction, then its counts,
    /// clock and CPU time, then `txn_begin`.
    pub(crate) fn begin_txn(&self, index: u64, warmup: bool) -> Result<TxnWindow, EngineError> {
        self.shared.set_current_txn(index as i64);
        let before = self.shared.snapshot();
        let start_ns = monotonic_ns();
        // Inside the latency window, so a commit's CPU time can never exceed its latency.
        let cpu_start = sql_thread_cpu()?;
        self.mark(|m| m.txn_begin(index, warmup, start_ns))?;
        Ok(TxnWindow {
            index,
            warmup,
            start_ns,
            cpu_start,
            before,
        })
    }

    /// Closes window `w` once its SQL has run. With counting on, a transaction that
    /// changed no database file ends with `txn_void`; else `txn_end`, the dm-log-writes
    /// mark `sqlwa-txn-<index>` and `snapshot("txn-<index>")` (outside the latency window;
    /// the engine's, as it has the connection), then its record.
    pub(crate) fn end_txn(
        &self,
        w: TxnWindow,
        work: TxnWork,
        snapshot: impl FnOnce(&str) -> Result<(), EngineError>,
    ) -> Result<Ended, EngineError> {
        let cpu = sql_thread_cpu()?.since(&w.cpu_start);
        let end_ns = monotonic_ns();
        if self.count_vfs {
            let vfs = self.shared.snapshot().since(&w.before);
            if !vfs.wrote_database() {
                self.mark(|m| m.txn_void(w.index, end_ns))?;
                self.shared.set_current_txn(-1);
                let time_ns = end_ns.saturating_sub(w.start_ns);
                return Ok(Ended::WroteNothing { time_ns, vfs });
            }
        }
        self.mark(|m| m.txn_end(w.index, end_ns))?;
        self.dm_mark(&format!("sqlwa-txn-{}", w.index))?;
        snapshot(&format!("txn-{}", w.index))?;
        let vfs = self.shared.snapshot().since(&w.before);
        self.shared.set_current_txn(-1);
        Ok(Ended::Commit(CommitRecord {
            index: w.index,
            warmup: w.warmup,
            start_ns: w.start_ns,
            end_ns,
            logical_bytes: work.logical_bytes,
            statements: work.statements,
            vfs,
            cpu,
        }))
    }

    /// A mark in the log-writes target's log, when the run has one (`RunSettings::dm_mark`).
    pub(crate) fn dm_mark(&self, text: &str) -> Result<(), EngineError> {
        self.dm_marker.as_ref().map_or(Ok(()), |m| m.mark(text))
    }

    /// A copy of `conn`'s database as committed (`VACUUM INTO <snapshot_dir>/<name>.db`),
    /// when asked (`RunSettings::snapshot_dir`); `fail` makes the engine's error of it.
    pub(crate) fn snapshot(
        &self,
        conn: &Connection,
        name: &str,
        fail: impl FnOnce(rusqlite::Error) -> EngineError,
    ) -> Result<(), EngineError> {
        let Some(dir) = &self.snapshot_dir else {
            return Ok(());
        };
        let path = dir.join(format!("{name}.db"));
        let target = path
            .to_str()
            .ok_or_else(|| EngineError::io(&path, "snapshot path is not UTF-8"))?;
        conn.execute("VACUUM INTO ?1", [target])
            .map(drop)
            .map_err(fail)
    }

    /// Closes a connection (`close`) between the `close_begin` and `close_end` markers,
    /// measuring it; `close`'s own result is returned beside the figures.
    pub(crate) fn measured_close<T>(
        &self,
        close: impl FnOnce() -> T,
    ) -> Result<(T, Closing), EngineError> {
        let before = self.shared.snapshot();
        let start_ns = monotonic_ns();
        self.mark(|m| m.close_begin(start_ns))?;
        let out = close();
        let end_ns = monotonic_ns();
        self.mark(|m| m.close_end(end_ns))?;
        let closing = Closing {
            connections: 1,
            time_ns: end_ns.saturating_sub(start_ns),
            vfs: self.shared.snapshot().since(&before),
        };
        Ok((out, closing))
    }

    /// Ends the SQL of a run whose statements have all run: the `end` extents, `close`
    /// (which closes the body's connections and returns its result, the SQL's failure
    /// first, then the closing's), the `close` extents.
    pub(crate) fn close<T>(&self, close: impl FnOnce() -> Result<T, EngineError>) -> Closed<T> {
        self.shared.set_current_txn(-1);
        for path in &self.db_paths {
            map_run_files(&self.shared, path, "end");
        }
        let out = close();
        // closing may checkpoint the WAL into the database and delete the WAL
        for path in &self.db_paths {
            map_run_files(&self.shared, path, "close");
        }
        Closed(out)
    }
}

/// When a run's progress is next reported: at the first ask, then once
/// [`PROGRESS_INTERVAL`] has passed since the last report.
#[derive(Default)]
pub(crate) struct ProgressClock(Option<Instant>);

impl ProgressClock {
    /// Whether a report is due now (and, if so, counts it as made).
    pub(crate) fn due(&mut self) -> bool {
        let due = self.0.is_none_or(|t| t.elapsed() >= PROGRESS_INTERVAL);
        if due {
            self.0 = Some(Instant::now());
        }
        due
    }
}

/// `extents` markers for the database and its WAL and -shm files, when they exist (a
/// no-op unless `map_extents`): files written back after the last sync are mapped too.
pub(crate) fn map_run_files(shared: &VfsShared, db_path: &Path, at: &str) {
    let with_suffix = |suffix: &str| {
        let mut name = db_path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    shared.map_extents(FileKind::Db, at, db_path);
    shared.map_extents(FileKind::Wal, at, &with_suffix("-wal"));
    shared.map_extents(FileKind::Shm, at, &with_suffix("-shm"));
}

/// Where the extents of the run's files come from under a FUSE layer
/// (`RunSettings::extents_from`): a directory, or every file would go unmapped unseen.
pub(crate) fn checked_lower_dir(settings: &RunSettings) -> Result<Option<&Path>, EngineError> {
    match settings.extents_from.as_deref() {
        Some(lower) if !lower.is_dir() => Err(EngineError::BadSetting {
            name: "extents_from".into(),
            message: format!("{} is not a directory", lower.display()),
        }),
        lower => Ok(lower),
    }
}

/// Writes a marker line to `sink`, when there is one; a failure names the marker file.
pub(crate) fn mark(
    sink: &Option<Arc<MarkerSink>>,
    write: impl FnOnce(&MarkerSink) -> std::io::Result<()>,
) -> Result<(), EngineError> {
    match sink {
        Some(s) => {
            write(s).map_err(|e| EngineError::io(s.path(), format!("cannot write marker: {e}")))
        }
        None => Ok(()),
    }
}

/// Creates `path` empty, refusing an existing file, so no result is ever measured on a
/// database left over from another run.
pub(crate) fn create_new_file(path: &Path) -> Result<(), EngineError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                EngineError::io(path, "database already exists; refusing to overwrite it")
            }
            _ => EngineError::io(path, format!("cannot create database: {e}")),
        })?;
    Ok(())
}

/// Opens a connection of the run on `path`, through the run's VFS shim.
pub(crate) fn open(path: &Path, vfs: &CountingVfs) -> Result<Connection, EngineError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags_and_vfs(path, flags, vfs.name())
        .map_err(|e| EngineError::io(path, format!("cannot open database: {e}")))
}

/// Closes `conn`; its failure is the filesystem's (naming the directory of `any_db`, one
/// of the run's databases) or SQLite's.
pub(crate) fn close_connection(conn: Connection, any_db: &Path) -> Result<(), EngineError> {
    conn.close().map_err(|(_, e)| {
        let statement = "(closing the database)";
        storage_failure(any_db, statement, &e).unwrap_or_else(|| EngineError::sql(statement, e))
    })
}

/// What ran (`scenario`, `seed`) and with which SQLite, as `conn` reports it; `pragma`
/// reads one of [`REPORTED_PRAGMAS`] back (the engine's, with its own errors). The fields
/// [`Ran::stamp`] and the run's end fill are left empty.
pub(crate) fn run_info(
    conn: &Connection,
    scenario: &str,
    seed: u64,
    pragma: impl Fn(&str) -> Result<String, EngineError>,
) -> Result<RunInfo, EngineError> {
    let source_id = conn
        .query_row("SELECT sqlite_source_id()", [], |r| r.get::<_, String>(0))
        .map_err(|e| EngineError::sql("SELECT sqlite_source_id()", e))?;
    let options = conn
        .prepare("PRAGMA compile_options")
        .and_then(|mut stmt| {
            stmt.query_map([], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(|e| EngineError::sql("PRAGMA compile_options", e))?;
    let pragmas = REPORTED_PRAGMAS
        .iter()
        .map(|name| Ok((name.to_string(), pragma(name)?)))
        .collect::<Result<Vec<_>, EngineError>>()?;
    Ok(RunInfo {
        scenario: scenario.to_string(),
        seed,
        sqlite_version: rusqlite::version().to_string(),
        sqlite_source_id: source_id,
        compile_options: options,
        pragmas,
        vfs_counting: false,
        db_path: PathBuf::new(),
        pid: 0,
        tid: 0,
        stopped_by: String::new(),
        wrote_nothing: WroteNothing::default(),
        close: Closing::default(),
    })
}

/// SQLite silently keeps another journal mode when it cannot switch (`mode`, as read
/// back): say so instead.
pub(crate) fn check_journal_mode(mode: &str, settings: &RunSettings) -> Result<(), EngineError> {
    let wanted = settings.journal.as_str();
    if mode != wanted {
        let message = format!("SQLite kept journal_mode '{mode}' for this database");
        return Err(EngineError::sql(
            format!("PRAGMA journal_mode={wanted}"),
            message,
        ));
    }
    Ok(())
}

/// Runs a statement to completion, discarding rows (PRAGMAs may return some).
pub(crate) fn query_all(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare(sql)?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    Ok(())
}

/// `PRAGMA <name>`'s value, as text.
pub(crate) fn read_pragma(conn: &Connection, name: &str) -> rusqlite::Result<String> {
    conn.query_row(&format!("PRAGMA {name}"), [], |row| {
        row.get::<_, rusqlite::types::Value>(0).map(value_text)
    })
}

/// The SQL thread's CPU time so far; its failure is the engine's.
pub(crate) fn sql_thread_cpu() -> Result<CpuTime, EngineError> {
    thread_cpu().map_err(|e| EngineError::CpuTime {
        message: e.to_string(),
    })
}

/// The filesystem's failure of a statement, naming the database's directory: full, an
/// I/O error, a file it cannot open or that vanished, a file too large for it. None for
/// other errors.
pub(crate) fn storage_failure(
    db_path: &Path,
    statement: &str,
    err: &rusqlite::Error,
) -> Option<EngineError> {
    use rusqlite::ErrorCode::*;
    let moved = matches!(err, rusqlite::Error::SqliteFailure(e, _)
        if e.extended_code == rusqlite::ffi::SQLITE_READONLY_DBMOVED);
    let problem = match err.sqlite_error_code()? {
        ReadOnly if moved => "the database's file was moved or deleted",
        DiskFull => "no space left for the database",
        SystemIoFailure => "an I/O error on the database's files",
        CannotOpen => "cannot open the database's files",
        NoLargeFileSupport => "the filesystem cannot hold a file this large",
        _ => return None,
    };
    Some(EngineError::Storage {
        dir: db_path.parent().unwrap_or(db_path).to_path_buf(),
        problem: problem.into(),
        message: err.to_string(),
        statement: statement.into(),
    })
}

/// A value SQLite returned, as text (a PRAGMA's, a setting read back).
pub(crate) fn value_text(v: rusqlite::types::Value) -> String {
    use rusqlite::types::Value;
    match v {
        Value::Null => String::new(),
        Value::Integer(i) => i.to_string(),
        Value::Real(r) => r.to_string(),
        Value::Text(t) => t,
        Value::Blob(b) => format!("<{} bytes>", b.len()),
    }
}
