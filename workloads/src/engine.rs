//! Runs a scenario: creates the database, applies the settings, sets up the schema (not
//! measured), then runs warm-up and measured transactions, recording per commit its
//! CLOCK_MONOTONIC window, payload bytes, VFS counts and the SQL thread's CPU time
//! ([`run`], [`run_with_stop`]). The frame around the SQL (markers, the counting VFS, the
//! transaction windows, the extents at the end) is the run harness (`crate::harness`),
//! which a replay (`crate::replay`) shares: this module only says what a scenario's
//! transactions are.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{params_from_iter, Connection};
use serde::Serialize;

use crate::confine::Confinement;
use crate::cpu::CpuTime;
use crate::harness::{
    check_journal_mode, close_connection, create_new_file, frame, open, query_all, read_pragma,
    run_info, storage_failure, Ended, Harness, ProgressClock, TxnWork,
};
use crate::scenario::{Operation, Scenario, Statement, Workload};
use crate::settings::pragma_statement;
use crate::stop::Stop;
use crate::{EngineError, RunSettings, VfsCounts};

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
    let (mut info, ran) = frame(settings, dir, markers, create, |h| {
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
            h,
        }
        .run_all(progress, commits);
        Ok(h.close(|| {
            let measured = h.measured_close(|| close_connection(conn, db_path));
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

/// Creates the (empty) database file; refuses an existing one so no result is ever
/// measured on a database left over from another run.
fn create_db_file(dir: &Path, name: &str) -> Result<PathBuf, EngineError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| EngineError::io(dir, format!("cannot create directory: {e}")))?;
    let path = dir.join(format!("{name}.db"));
    create_new_file(&path)?;
    Ok(path)
}

struct Runner<'a> {
    scenario: &'a Scenario,
    settings: &'a RunSettings,
    conn: &'a Connection,
    db_path: &'a Path,
    /// confines the scenario's own statements (schema, setup, transactions)
    confinement: &'a Confinement,
    stop: &'a Stop,
    /// the run's frame: its markers, VFS and transaction windows
    h: &'a Harness,
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
        self.h.dm_mark("sqlwa-setup")?;
        self.snapshot("setup")?;
        let mut info = self.run_info(seed)?;
        let (stopped_by, wrote_nothing) = self.transactions(seed, progress, commits)?;
        info.stopped_by = stopped_by.to_string();
        info.wrote_nothing = wrote_nothing;
        Ok(info)
    }

    /// A copy of the database as committed, when asked (`RunSettings::snapshot_dir`).
    fn snapshot(&self, name: &str) -> Result<(), EngineError> {
        (self.h).snapshot(self.conn, name, |e| self.fail("VACUUM INTO", e))
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
        check_journal_mode(&self.pragma_value("journal_mode")?, self.settings)
    }

    /// Runs a statement to completion, discarding rows (PRAGMAs may return some).
    fn query_all(&self, sql: &str) -> Result<(), EngineError> {
        query_all(self.conn, sql).map_err(|e| self.fail(sql, e))
    }

    fn pragma_value(&self, name: &str) -> Result<String, EngineError> {
        read_pragma(self.conn, name).map_err(|e| self.fail(&format!("PRAGMA {name}"), e))
    }

    /// The error for a failed statement: the stop, the confinement's refusal, the
    /// database's page limit or the filesystem's failure when one of them is the cause,
    /// else the statement's own.
    fn fail(&self, sql: &str, err: rusqlite::Error) -> EngineError {
        if self.stop.stopped() {
            return EngineError::Interrupted;
        }
        let refused = (self.h.shared.take_refusal()).or_else(|| self.confinement.take_refusal());
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
        run_info(self.conn, &self.scenario.name, seed, |name| {
            self.pragma_value(name)
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
        let mut reports = ProgressClock::default();
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
            if reports.due() {
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

    /// One transaction in its window ([`Harness::begin_txn`]); one that changed no
    /// database file ends with `txn_void` and is no commit.
    fn transaction(
        &self,
        index: u64,
        warmup: bool,
        statements: &[Statement],
    ) -> Result<Ended, EngineError> {
        // counted before the window opens: only the SQL is inside it
        let work = TxnWork {
            statements: statements.len() as u64,
            logical_bytes: statements.iter().map(|s| s.logical_bytes).sum(),
        };
        let window = self.h.begin_txn(index, warmup)?;
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
        (self.h).end_txn(window, work, |name| self.snapshot(name))
    }
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

/// SQLite's default max_page_count (MAX_PAGE_COUNT of the bundled build).
const SQLITE_MAX_PAGE_COUNT: i64 = 0xffff_fffe;
