//! Runs a scenario: creates the database, applies the settings, sets up the schema (not
//! measured), then runs warm-up and measured transactions, recording per commit its
//! CLOCK_MONOTONIC window, payload bytes, VFS counts and the SQL thread's CPU time
//! ([`run`], [`run_with_stop`]). The frame around the SQL (markers, the counting VFS, the
//! extents at the end) is the same for a replay (`crate::replay`).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{params_from_iter, Connection, OpenFlags};
use serde::Serialize;

use crate::confine::Confinement;
use crate::cpu::{thread_cpu, CpuTime};
use crate::dmmark::DmMarker;
use crate::markers::{current_tid, monotonic_ns, MarkerSink};
use crate::scenario::{Operation, Scenario, Statement, Workload};
use crate::settings::{pragma_statement, REPORTED_PRAGMAS};
use crate::stop::Stop;
use crate::vfs::{CountingVfs, LowerDir, RunFiles, VfsShared};
use crate::{EngineError, FileKind, RunSettings, VfsCounts};

/// One transaction of a run: its window, what it stored, the VFS calls and CPU time in it.
#[derive(Clone, Debug, Serialize)]
pub struct CommitRecord {
    /// 0-based over all transactions, warm-up included
    pub index: u64,
    /// warm-up transactions are run but not measured
    pub warmup: bool,
    /// CLOCK_MONOTONIC just before the transaction starts
    pub start_ns: u64,
    /// CLOCK_MONOTONIC just after COMMIT returns
    pub end_ns: u64,
    /// payload the app asked to store (value bytes of inserted/updated columns)
    pub logical_bytes: u64,
    /// statements in the window: a scenario's (BEGIN and COMMIT not counted); a replay's,
    /// from its first write to the statement that ends the transaction, both included
    pub statements: u64,
    /// VFS calls made between start and end (all zero when counting is off)
    pub vfs: VfsCounts,
    /// CPU time of the thread that ran the SQL, read inside start..end (see `cpu`):
    /// user + system is exact, the split between them is the kernel's tick-sampled one
    pub cpu: CpuTime,
}

/// The transactions that changed no page of a database file (an UPDATE or DELETE that
/// matched no row, a write only to a TEMP table, a row rewritten unchanged): the VFS saw
/// no write, truncate or sync of the database, its journal or its WAL in them
/// ([`VfsCounts::wrote_database`]). They are run and measured here, never as commits:
/// no [`CommitRecord`], and `txn_void` instead of `txn_end` (MARKERS.md). With the VFS
/// not counting (`RunSettings::count_vfs` false) the engine cannot tell, and every
/// transaction is a commit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WroteNothing {
    /// how many
    pub transactions: u64,
    /// their statements (a scenario's, BEGIN and COMMIT not counted; a replay's, from the
    /// first that could write to the one that ended the transaction)
    pub statements: u64,
    /// the time they took, in all
    pub time_ns: u64,
    /// the VFS calls they made (reads; temp files)
    pub vfs: VfsCounts,
    /// the first few, by the statement that opened each
    pub first: Vec<EmptyTransaction>,
}

/// How many of the transactions that wrote nothing [`WroteNothing::first`] lists.
pub(crate) const EMPTY_LISTED: usize = 5;

/// One transaction that wrote nothing, by its first statement.
#[derive(Clone, Debug, Serialize)]
pub struct EmptyTransaction {
    /// a replay's: the line of the log of its first statement (a scenario's: None)
    pub line: Option<u64>,
    /// its first statement, as run (at most 200 characters)
    pub statement: String,
    /// its statements
    pub statements: u64,
}

impl WroteNothing {
    /// Counts one transaction that wrote nothing.
    pub(crate) fn add(&mut self, time_ns: u64, vfs: &VfsCounts, first: EmptyTransaction) {
        self.transactions += 1;
        self.statements += first.statements;
        self.time_ns += time_ns;
        self.vfs = self.vfs.add(vfs);
        if self.first.len() < EMPTY_LISTED {
            self.first.push(first);
        }
    }
}

/// The closing of a run's connections, measured apart from every commit, between the
/// `close_begin` and `close_end` markers: in WAL mode the last connection to close a
/// database checkpoints the WAL into it and deletes the WAL (SQLite's `sqlite3WalClose`),
/// syncing both; a rollback journal's close writes nothing. A connection closed while
/// another's transaction is open is counted in that transaction.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Closing {
    /// connections closed
    pub connections: u64,
    /// the time closing them took, in all
    pub time_ns: u64,
    /// the VFS calls closing them made
    pub vfs: VfsCounts,
}

impl Closing {
    pub(crate) fn add(&mut self, other: &Closing) {
        self.connections += other.connections;
        self.time_ns += other.time_ns;
        self.vfs = self.vfs.add(&other.vfs);
    }
}

/// Closes a connection (`close`) between the `close_begin` and `close_end` markers,
/// measuring it; `close`'s own result is returned beside the figures.
pub(crate) fn measured_close<T>(
    shared: &VfsShared,
    sink: &Option<Arc<MarkerSink>>,
    close: impl FnOnce() -> T,
) -> Result<(T, Closing), EngineError> {
    let before = shared.snapshot();
    let start_ns = monotonic_ns();
    mark(sink, |m| m.close_begin(start_ns))?;
    let out = close();
    let end_ns = monotonic_ns();
    mark(sink, |m| m.close_end(end_ns))?;
    let closing = Closing {
        connections: 1,
        time_ns: end_ns.saturating_sub(start_ns),
        vfs: shared.snapshot().since(&before),
    };
    Ok((out, closing))
}

/// What ran, and where: the scenario, SQLite, the settings as SQLite reports them.
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    /// the scenario's name (a replay's: the log's file stem)
    pub scenario: String,
    /// the seed the values were generated from
    pub seed: u64,
    /// `sqlite3_libversion()`
    pub sqlite_version: String,
    /// `sqlite_source_id()`
    pub sqlite_source_id: String,
    /// `PRAGMA compile_options`
    pub compile_options: Vec<String>,
    /// effective values read back after setup, in this order: journal_mode, synchronous
    /// (as the number SQLite reports, 0..3), page_size, cache_size, wal_autocheckpoint,
    /// journal_size_limit, locking_mode, mmap_size
    pub pragmas: Vec<(String, String)>,
    /// whether the counting VFS ran (`RunSettings::count_vfs`)
    pub vfs_counting: bool,
    /// the database file (a replay's first)
    pub db_path: PathBuf,
    /// the process that ran the SQL (for syscall filters)
    pub pid: u32,
    /// the thread that ran the SQL, as the kernel numbers it (for syscall filters)
    pub tid: u32,
    /// what ended the transactions: "txns" (all of them ran), "duration"
    /// ([`RunSettings::duration_s`] ran out) or "interrupted" (a stop between commits, with
    /// [`Stop::keep_measured`]); a replay: "txns" or "log" (its end)
    pub stopped_by: String,
    /// the transactions that changed no database file, counted apart from the commits
    pub wrote_nothing: WroteNothing,
    /// the closing of the run's connections (in WAL mode, the checkpoint at the last)
    pub close: Closing,
}

/// A run's results.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutput {
    /// what ran, and where
    pub info: RunInfo,
    /// every transaction, warm-up included, in order
    pub commits: Vec<CommitRecord>,
}

/// Where a run's commit records go, one at a time as each transaction ends, so a caller
/// can hand them on in bounded chunks (written out as the run goes) instead of holding a
/// run's every record: a long run's memory then does not grow with its length.
pub trait CommitSink {
    /// Takes the record of the transaction that just ended, which wrote the run's
    /// database `database` (an index into a replay's databases; a scenario's is 0). An
    /// error ends the run with it.
    fn push(&mut self, commit: CommitRecord, database: u32) -> Result<(), EngineError>;
}

/// Keeps every record, in order (what [`run`] and [`run_with_stop`] return).
impl CommitSink for Vec<CommitRecord> {
    fn push(&mut self, commit: CommitRecord, _database: u32) -> Result<(), EngineError> {
        Vec::push(self, commit);
        Ok(())
    }
}

/// How far a run is, handed to the progress callback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// transactions done (a replay: statements of the log)
    pub done: u64,
    /// transactions in all, warm-up included (a replay: the log's statements); None when
    /// only a duration bounds the run
    pub total: Option<u64>,
    /// measured (not warm-up) transactions done
    pub measured: u64,
    /// VFS syncs (xSync) of the measured transactions so far, every file
    pub syncs: u64,
    /// VFS bytes written (xWrite) by the measured transactions so far, every file
    pub write_bytes: u64,
}

pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// Runs `scenario` with `settings` in `dir`: creates `dir` if missing and the database
/// `dir/<scenario>.db` in it (refusing to overwrite an existing one), applies the
/// settings, creates the schema and the setup's rows (not measured), runs the warm-up then
/// the measured transactions, and closes the connection. Markers (`MARKERS.md`) go to the
/// file `markers` when given.
///
/// `progress` is called at most ~10 times a second; when it returns `false` the run stops
/// at the next transaction boundary with [`EngineError::Interrupted`] (or, with
/// [`Stop::keep_measured`], ends there with the transactions done, `stopped_by`
/// "interrupted").
///
/// The transactions run until [`RunSettings::txns`] (plus the warm-up) are done or, with
/// [`RunSettings::duration_s`], until that many seconds have passed since the first
/// transaction began, whichever comes first: no transaction starts after the deadline
/// (a think time is cut short by it). A duration without `txns` leaves their number
/// unbounded; the setup is then sized for the scenario's own number.
///
/// PRAGMAs: a scenario's `[pragmas]` are defaults the run's settings override, applied
/// before them; the extra PRAGMAs ([`RunSettings::extra_pragmas`]) are applied last, one
/// at a time, and one that changes a PRAGMA the run's own settings set (journal_mode,
/// synchronous, and page_size, cache_size, wal_autocheckpoint, journal_size_limit,
/// locking_mode, mmap_size when given), as read back before and after it, is
/// [`EngineError::PragmaConflict`]. A journal mode SQLite refuses to switch to is an
/// [`EngineError::Sql`] naming `PRAGMA journal_mode=…` and the mode SQLite kept, never
/// silently another mode.
///
/// A scenario's SQL (schema, setup, transactions) runs confined by SQLite's authorizer:
/// ATTACH/DETACH, VACUUM INTO, PRAGMAs and `load_extension()` are refused, when the
/// scenario is loaded and again here, as [`EngineError::InvalidScenario`] whose message
/// is `statement refused: <why> (statement: <sql>)`. The engine's own statements are not
/// confined; extension loading is switched off on every connection. Every connection
/// opens through the VFS shim, counting or not, which refuses to open or delete any named
/// file but the run's database, its journal, WAL and -shm, and the snapshots' (a refusal
/// is `statement refused: SQLite was made to open the file …`).
///
/// With counting off ([`RunSettings::count_vfs`] false) the commits carry all-zero
/// [`VfsCounts`], and only the run and transaction markers are written (the others come
/// from the shim).
pub fn run(
    scenario: &Scenario,
    settings: &RunSettings,
    dir: &Path,
    markers: Option<&Path>,
    progress: &mut dyn FnMut(Progress) -> bool,
) -> Result<RunOutput, EngineError> {
    run_with_stop(scenario, settings, dir, markers, progress, &Stop::never())
}

/// As [`run`], and `stop` ends the run with [`EngineError::Interrupted`] within about
/// 50 ms wherever it is: creating the schema, in the setup, inside one long statement
/// (through a SQLite progress handler). It is not asked inside a measured (or warm-up)
/// transaction, whose time and syscalls must be the SQL's alone: a stop asked for then is
/// seen when the transaction ends. A think time is cut short by a stop.
pub fn run_with_stop(
    scenario: &Scenario,
    settings: &RunSettings,
    dir: &Path,
    markers: Option<&Path>,
    progress: &mut dyn FnMut(Progress) -> bool,
    stop: &Stop,
) -> Result<RunOutput, EngineError> {
    let mut commits = Vec::new();
    let info = run_into(
        scenario,
        settings,
        dir,
        markers,
        progress,
        stop,
        &mut commits,
    )?;
    Ok(RunOutput { info, commits })
}

/// As [`run_with_stop`], each commit record handed to `commits` as its transaction ends
/// instead of returned (bounded memory for a run of any length); returns the run's
/// information.
pub fn run_into(
    scenario: &Scenario,
    settings: &RunSettings,
    dir: &Path,
    markers: Option<&Path>,
    progress: &mut dyn FnMut(Progress) -> bool,
    stop: &Stop,
    commits: &mut dyn CommitSink,
) -> Result<RunInfo, EngineError> {
    if let Some(name) = settings.replay_only() {
        return Err(EngineError::BadSetting {
            name: name.into(),
            message: format!(
                "applies to a replayed SQL log, not to scenario {}",
                scenario.name
            ),
        });
    }
    let create = || create_db_file(dir, &scenario.name).map(|path| vec![path]);
    let (mut info, ran) = harness(settings, dir, markers, create, |h| {
        let db_path = &h.db_paths[0];
        let mut conn = open(db_path, &h.vfs)?;
        let confinement = Confinement::install(&mut conn)?;
        stop.install(&mut conn)?;
        let result = Runner {
            scenario,
            settings,
            conn: &conn,
            db_path,
            confinement: &confinement,
            stop,
            shared: &h.shared,
            sink: &h.sink,
            dm_marker: h.dm_marker.as_ref(),
        }
        .run_all(progress, commits);
        Ok(h.close(|| {
            let measured = measured_close(&h.shared, &h.sink, || {
                conn.close().map_err(|(_, e)| {
                    let statement = "(closing the database)";
                    storage_failure(db_path, statement, &e)
                        .unwrap_or_else(|| EngineError::sql(statement, e))
                })
            });
            // The first failure is the one to report.
            let mut info = result?;
            let (closed, closing) = measured?;
            closed?;
            info.close = closing;
            Ok(info)
        }))
    })?;
    ran.stamp(&mut info, settings);
    Ok(info)
}

/// What a run's SQL has to work with, set up by [`harness`] before it and taken down
/// after it.
pub(crate) struct Harness {
    pub(crate) sink: Option<Arc<MarkerSink>>,
    pub(crate) shared: Arc<VfsShared>,
    /// the VFS shim every connection of the run opens through: it confines them to the
    /// run's files, and counts their calls unless counting is off
    pub(crate) vfs: CountingVfs,
    pub(crate) dm_marker: Option<DmMarker>,
    /// the run's database files, as the harness's `create_files` made them
    pub(crate) db_paths: Vec<PathBuf>,
}

/// A run body's result once its connections are closed, which only [`Harness::close`]
/// makes: a body cannot skip the extents around the closing.
pub(crate) struct Closed<T>(Result<T, EngineError>);

impl Harness {
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
pub(crate) fn harness<T>(
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

/// Creates the (empty) database file; refuses an existing one so no result is ever
/// measured on a database left over from another run.
fn create_db_file(dir: &Path, name: &str) -> Result<PathBuf, EngineError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| EngineError::io(dir, format!("cannot create directory: {e}")))?;
    let path = dir.join(format!("{name}.db"));
    create_new_file(&path)?;
    Ok(path)
}

/// Creates `path` empty, refusing an existing file (see [`create_db_file`]).
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

pub(crate) fn open(path: &Path, vfs: &CountingVfs) -> Result<Connection, EngineError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags_and_vfs(path, flags, vfs.name())
        .map_err(|e| EngineError::io(path, format!("cannot open database: {e}")))
}

struct Runner<'a> {
    scenario: &'a Scenario,
    settings: &'a RunSettings,
    conn: &'a Connection,
    db_path: &'a Path,
    /// confines the scenario's own statements (schema, setup, transactions)
    confinement: &'a Confinement,
    stop: &'a Stop,
    shared: &'a VfsShared,
    sink: &'a Option<Arc<MarkerSink>>,
    dm_marker: Option<&'a DmMarker>,
}

impl Runner<'_> {
    fn run_all(
        &self,
        progress: &mut dyn FnMut(Progress) -> bool,
        commits: &mut dyn CommitSink,
    ) -> Result<RunInfo, EngineError> {
        let seed = self.settings.seed.unwrap_or(self.scenario.seed);
        self.apply_pragmas()?;
        self.create_schema(seed)?;
        self.dm_mark("sqlwa-setup")?;
        self.snapshot("setup")?;
        let mut info = self.run_info(seed)?;
        let (stopped_by, wrote_nothing) = self.transactions(seed, progress, commits)?;
        info.stopped_by = stopped_by.to_string();
        info.wrote_nothing = wrote_nothing;
        Ok(info)
    }

    /// A mark in the log-writes target's log, when the run has one (`RunSettings::dm_mark`).
    fn dm_mark(&self, text: &str) -> Result<(), EngineError> {
        self.dm_marker.map_or(Ok(()), |marker| marker.mark(text))
    }

    /// A copy of the database as committed, when asked (`RunSettings::snapshot_dir`).
    fn snapshot(&self, name: &str) -> Result<(), EngineError> {
        let Some(dir) = &self.settings.snapshot_dir else {
            return Ok(());
        };
        let path = dir.join(format!("{name}.db"));
        let target = path
            .to_str()
            .ok_or_else(|| EngineError::io(&path, "snapshot path is not UTF-8".to_string()))?;
        self.conn
            .execute("VACUUM INTO ?1", [target])
            .map(|_| ())
            .map_err(|e| self.fail("VACUUM INTO", e))
    }

    fn warmup_count(&self) -> u64 {
        self.settings.warmup.unwrap_or(self.scenario.warmup)
    }

    fn total_txns(&self) -> u64 {
        self.warmup_count() + self.settings.txns.unwrap_or(self.scenario.txns)
    }

    /// page_size first (it must precede the first write), then the scenario's defaults,
    /// then the run's settings, then the free-form extras, each of which must leave what
    /// the run's settings set as it was.
    fn apply_pragmas(&self) -> Result<(), EngineError> {
        let extras = (self.settings.extra_pragmas.iter())
            .map(|spec| Ok((spec, pragma_statement(spec)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        for sql in self.setting_pragmas() {
            self.query_all(&sql)?;
        }
        let owned = (self.run_pragmas().into_iter())
            .map(|(name, setting, wanted)| Ok((name, setting, wanted, self.pragma_value(name)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        for (spec, sql) in extras {
            self.query_all(&sql)?;
            self.check_extra(spec, &owned)?;
        }
        self.check_journal_mode()
    }

    /// The PRAGMA statements of the scenario's defaults and the run's settings, in order.
    fn setting_pragmas(&self) -> Vec<String> {
        let statement = |name: &str, value: &str| format!("PRAGMA {name}={value}");
        let run = self.run_pragmas();
        let run_page_size = run.iter().find(|(name, ..)| *name == "page_size");
        let mut pragmas: Vec<String> = (run_page_size.iter())
            .map(|(name, _, value)| statement(name, value))
            .collect();
        for (name, value) in &self.scenario.pragmas {
            if !(name == "page_size" && run_page_size.is_some()) {
                pragmas.push(statement(name, value));
            }
        }
        let rest = run.iter().filter(|(name, ..)| *name != "page_size");
        pragmas.extend(rest.map(|(name, _, value)| statement(name, value)));
        pragmas
    }

    /// The PRAGMAs the run's own settings set: (pragma, setting, value).
    fn run_pragmas(&self) -> Vec<(&'static str, &'static str, String)> {
        run_pragmas(self.settings)
    }

    /// An extra PRAGMA (`spec`) must leave each PRAGMA the run's settings set (`owned`:
    /// pragma, setting, value asked, value read back before the extras) as it was.
    fn check_extra(
        &self,
        spec: &str,
        owned: &[(&str, &str, String, String)],
    ) -> Result<(), EngineError> {
        for (name, setting, wanted, before) in owned {
            let after = self.pragma_value(name)?;
            if &after != before {
                return Err(EngineError::PragmaConflict {
                    pragma: spec.into(),
                    setting: setting.to_string(),
                    wanted: wanted.clone(),
                    readback: format!("PRAGMA {name} read {before} before it, {after} after"),
                });
            }
        }
        Ok(())
    }

    /// SQLite silently keeps another journal mode when it cannot switch; say so instead.
    fn check_journal_mode(&self) -> Result<(), EngineError> {
        let mode = self.pragma_value("journal_mode")?;
        let wanted = self.settings.journal.as_str();
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
    fn query_all(&self, sql: &str) -> Result<(), EngineError> {
        let run = || {
            let mut stmt = self.conn.prepare(sql)?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
            Ok(())
        };
        run().map_err(|e| self.fail(sql, e))
    }

    fn pragma_value(&self, name: &str) -> Result<String, EngineError> {
        let sql = format!("PRAGMA {name}");
        self.conn
            .query_row(&sql, [], |row| {
                row.get::<_, rusqlite::types::Value>(0).map(value_text)
            })
            .map_err(|e| self.fail(&sql, e))
    }

    /// The error for a failed statement: the stop, the confinement's refusal, the
    /// database's page limit or the filesystem's failure when one of them is the cause,
    /// else the statement's own.
    fn fail(&self, sql: &str, err: rusqlite::Error) -> EngineError {
        if self.stop.stopped() {
            return EngineError::Interrupted;
        }
        let refused = (self.shared.take_refusal()).or_else(|| self.confinement.take_refusal());
        if let Some(reason) = refused {
            return EngineError::refused(&self.scenario.origin, sql, &reason);
        }
        if let Some(pages) = self.page_limit(&err) {
            let message = format!("{err}: the database is limited to max_page_count = {pages}");
            return EngineError::sql(sql, message);
        }
        storage_failure(self.db_path, sql, &err).unwrap_or_else(|| EngineError::sql(sql, err))
    }

    /// max_page_count, when `err` is SQLITE_FULL and a PRAGMA lowered that limit.
    fn page_limit(&self, err: &rusqlite::Error) -> Option<i64> {
        if err.sqlite_error_code() != Some(rusqlite::ErrorCode::DiskFull) {
            return None;
        }
        let pages = self
            .conn
            .query_row("PRAGMA max_page_count", [], |r| r.get::<_, i64>(0))
            .ok()?;
        (pages < SQLITE_MAX_PAGE_COUNT).then_some(pages)
    }

    /// Schema and setup rows in one transaction, outside any measured window.
    fn create_schema(&self, seed: u64) -> Result<(), EngineError> {
        self.exec("BEGIN")?;
        for sql in &self.scenario.schema {
            self.stop.check()?;
            self.scenario_sql(sql, || self.conn.execute_batch(sql))?;
        }
        let mut setup = Workload::setup(self.scenario, seed);
        for i in self.scenario.setup_order(self.total_txns()) {
            self.stop.check()?;
            self.execute(&self.scenario.setup[i], &setup.statement(i))?;
        }
        self.exec("COMMIT")
    }

    fn exec(&self, sql: &str) -> Result<(), EngineError> {
        self.conn.execute_batch(sql).map_err(|e| self.fail(sql, e))
    }

    /// One statement of an operation of the scenario, its rows stepped through.
    fn execute(&self, op: &Operation, stmt: &Statement) -> Result<(), EngineError> {
        self.scenario_sql(&op.sql, || {
            let mut prepared = self.conn.prepare_cached(&op.sql)?;
            let mut rows = prepared.query(params_from_iter(stmt.params.iter()))?;
            while rows.next()?.is_some() {}
            Ok(())
        })
    }

    /// Runs a statement of the scenario's, confined: a refusal names the scenario, the
    /// statement and why.
    fn scenario_sql(
        &self,
        sql: &str,
        run: impl FnOnce() -> rusqlite::Result<()>,
    ) -> Result<(), EngineError> {
        self.confinement
            .confined(run)
            .map_err(|e| self.fail(sql, e))
    }

    fn run_info(&self, seed: u64) -> Result<RunInfo, EngineError> {
        let source_id = self
            .conn
            .query_row("SELECT sqlite_source_id()", [], |r| r.get::<_, String>(0))
            .map_err(|e| EngineError::sql("SELECT sqlite_source_id()", e))?;
        let options = self
            .conn
            .prepare("PRAGMA compile_options")
            .and_then(|mut stmt| {
                stmt.query_map([], |row| row.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| EngineError::sql("PRAGMA compile_options", e))?;
        let pragmas = REPORTED_PRAGMAS
            .iter()
            .map(|name| Ok((name.to_string(), self.pragma_value(name)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        Ok(RunInfo {
            scenario: self.scenario.name.clone(),
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

    fn transactions(
        &self,
        seed: u64,
        progress: &mut dyn FnMut(Progress) -> bool,
        commits: &mut dyn CommitSink,
    ) -> Result<(&'static str, WroteNothing), EngineError> {
        let warmup = self.warmup_count();
        let mut wrote_nothing = WroteNothing::default();
        // commits so far: the index of the next (a transaction that wrote nothing takes none)
        let mut committed = 0;
        // a duration alone leaves the number of transactions open
        let total = match (self.settings.duration_s, self.settings.txns) {
            (Some(_), None) => None,
            _ => Some(self.total_txns()),
        };
        let think = self
            .settings
            .think_time_ms
            .unwrap_or(self.scenario.think_time_ms);
        let deadline =
            (self.settings.duration_s).map(|s| Instant::now() + Duration::from_secs_f64(s));
        let mut workload = Workload::new(self.scenario, seed);
        let mut last_report: Option<Instant> = None;
        let mut now = Progress {
            total,
            ..Progress::default()
        };
        // a stop between commits: the run's end when the caller keeps what was measured
        let stopped = |err: EngineError| match err {
            EngineError::Interrupted if self.stop.keeps_measured() => Ok("interrupted"),
            err => Err(err),
        };
        let mut stopped_by = "txns";
        let mut index = 0;
        while total.is_none_or(|t| index < t) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                stopped_by = "duration";
                break;
            }
            if last_report.is_none_or(|t| t.elapsed() >= PROGRESS_INTERVAL) {
                last_report = Some(Instant::now());
                now.done = index;
                if !progress(now) {
                    stopped_by = stopped(EngineError::Interrupted)?;
                    break;
                }
            }
            if let Err(err) = self.stop.check() {
                stopped_by = stopped(err)?;
                break;
            }
            if index > 0 && think > 0.0 {
                let mut pause = Duration::from_secs_f64(think / 1000.0);
                if let Some(d) = deadline {
                    pause = pause.min(d.saturating_duration_since(Instant::now()));
                }
                if let Err(err) = self.stop.sleep(pause) {
                    stopped_by = stopped(err)?;
                    break;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    continue; // the deadline passed while thinking: no transaction starts
                }
            }
            let statements = workload.next_txn();
            let ended =
                (self.stop).quietly(|| self.transaction(committed, index < warmup, &statements))?;
            let commit = match ended {
                Ended::Commit(commit) => commit,
                Ended::WroteNothing { time_ns, vfs } => {
                    index += 1;
                    let first = EmptyTransaction {
                        line: None,
                        statement: crate::replay::shortened(
                            (statements.first()).map_or("", |s| &self.scenario.txn[s.op].sql),
                        ),
                        statements: statements.len() as u64,
                    };
                    wrote_nothing.add(time_ns, &vfs, first);
                    continue;
                }
            };
            committed += 1;
            if !commit.warmup {
                let vfs = commit.vfs.total();
                now.measured += 1;
                now.syncs += vfs.sync_calls;
                now.write_bytes += vfs.write_bytes;
            }
            // A run that keeps what was measured ends here when the sink was stopped while
            // taking this commit (it kept it: a Python sink holds a signal back until then).
            let pushed = commits.push(commit, 0);
            index += 1;
            if let Err(err) = pushed {
                stopped_by = stopped(err)?;
                break;
            }
        }
        now.done = index;
        now.total = Some(index);
        progress(now);
        Ok((stopped_by, wrote_nothing))
    }

    /// One transaction between its markers; VFS counts are the snapshot difference. One
    /// that changed no database file ends with `txn_void` and is no commit.
    fn transaction(
        &self,
        index: u64,
        warmup: bool,
        statements: &[Statement],
    ) -> Result<Ended, EngineError> {
        self.shared.set_current_txn(index as i64);
        let before = self.shared.snapshot();
        let start_ns = monotonic_ns();
        // Inside the latency window, so a commit's CPU time can never exceed its latency.
        let cpu_start = sql_thread_cpu()?;
        mark(self.sink, |m| m.txn_begin(index, warmup, start_ns))?;
        let explicit = !self.scenario.autocommit;
        if explicit {
            self.exec("BEGIN")?;
        }
        for stmt in statements {
            self.execute(&self.scenario.txn[stmt.op], stmt)?;
        }
        if explicit {
            self.exec("COMMIT")?;
        }
        let cpu = sql_thread_cpu()?.since(&cpu_start);
        let end_ns = monotonic_ns();
        if self.settings.count_vfs {
            let vfs = self.shared.snapshot().since(&before);
            if !vfs.wrote_database() {
                mark(self.sink, |m| m.txn_void(index, end_ns))?;
                self.shared.set_current_txn(-1);
                let time_ns = end_ns.saturating_sub(start_ns);
                return Ok(Ended::WroteNothing { time_ns, vfs });
            }
        }
        mark(self.sink, |m| m.txn_end(index, end_ns))?;
        self.dm_mark(&format!("sqlwa-txn-{index}"))?;
        self.snapshot(&format!("txn-{index}"))?;
        let vfs = self.shared.snapshot().since(&before);
        self.shared.set_current_txn(-1);
        Ok(Ended::Commit(CommitRecord {
            index,
            warmup,
            start_ns,
            end_ns,
            logical_bytes: statements.iter().map(|s| s.logical_bytes).sum(),
            statements: statements.len() as u64,
            vfs,
            cpu,
        }))
    }
}

/// How a scenario's transaction ended: a commit, or one that changed no database file.
enum Ended {
    Commit(CommitRecord),
    WroteNothing { time_ns: u64, vfs: VfsCounts },
}

/// The PRAGMAs a run's own settings set: (pragma, setting, value), page_size first.
pub(crate) fn run_pragmas(s: &RunSettings) -> Vec<(&'static str, &'static str, String)> {
    let text = |v: Option<i64>| v.map(|v| v.to_string());
    let set = [
        ("page_size", "page_size", text(s.page_size.map(i64::from))),
        ("journal_mode", "journal", Some(s.journal.to_string())),
        ("synchronous", "sync", Some(s.sync.to_string())),
        ("cache_size", "cache_size", text(s.cache_size)),
        (
            "wal_autocheckpoint",
            "wal_autocheckpoint",
            text(s.wal_autocheckpoint),
        ),
        (
            "journal_size_limit",
            "journal_size_limit",
            text(s.journal_size_limit),
        ),
        (
            "locking_mode",
            "locking_mode",
            s.locking_mode.map(|v| v.to_string()),
        ),
        ("mmap_size", "mmap_size", text(s.mmap_size)),
    ];
    (set.into_iter())
        .filter_map(|(name, setting, value)| Some((name, setting, value?)))
        .collect()
}

pub(crate) fn sql_thread_cpu() -> Result<CpuTime, EngineError> {
    thread_cpu().map_err(|e| EngineError::CpuTime {
        message: e.to_string(),
    })
}

/// SQLite's default max_page_count (MAX_PAGE_COUNT of the bundled build).
const SQLITE_MAX_PAGE_COUNT: i64 = 0xffff_fffe;

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
