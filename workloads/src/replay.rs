//! Replays a recorded SQL log (`sqllog`, format 1) through the engine: the same counting
//! VFS, commit markers and [`CommitRecord`]s as a scenario run, so every output of a run
//! works for an app's own workload.
//!
//! The log is read twice, line by line (memory bounded by the longest line):
//! [`SqlLog::load`] checks every line and gathers the database files; [`replay()`] streams
//! it again. A bad line is [`EngineError::LogParse`] ("SQL log P, line N: …").
//!
//! - Each connection of the log gets its own connection, each database file its own file
//!   in the run's directory, in recorded order: by basename (`app-2.db` for a second
//!   `app.db`), created empty, or `from_db` (and its `-wal`) copied for the log's only
//!   database (or the one of the same basename). [`RunInfo::db_path`] is the first;
//!   [`ReplaySummary::databases`] has commits, statements, payload and VFS counts per file.
//! - A commit window opens just before the first statement of a transaction that writes
//!   (SQLite's `sqlite3_stmt_readonly`: the statement itself, in autocommit) and closes when
//!   the connection is back in autocommit (COMMIT, END, ROLLBACK, RELEASE of the outermost
//!   SAVEPOINT, or the autocommit statement done): exactly the transactions as written, as
//!   SQLite itself delimits them. Statements that only read — autocommit reads, read-only
//!   transactions and the reads of a transaction before its first write — are replayed and
//!   counted apart ([`ReadFigures`]), never as commits, so per-commit means are those of
//!   the transactions that wrote. So are transactions that changed no database file (an
//!   UPDATE or DELETE matching no row, a write only to a TEMP table: the VFS saw no write,
//!   truncate or sync of the database, its journal or WAL): `txn_void` ends their window,
//!   they make no [`CommitRecord`] and are counted in [`RunInfo::wrote_nothing`] (and per
//!   database). Closing a connection outside every window is measured between the
//!   `close_begin`/`close_end` markers ([`RunInfo::close`], and per database): in WAL mode
//!   the last to close checkpoints. Windows never overlap: a statement of another connection
//!   while one is open is counted in it. [`CommitRecord::logical_bytes`] is the bytes of
//!   the literals in a writing statement's text (values are expanded in the log): strings
//!   and blobs by length, numbers 8.
//! - Confinement (`crate::confine`, `crate::vfs::RunFiles`): an event's `sql` holding
//!   several statements is split by SQLite's own parser, each statement prepared once the
//!   one before has run, and every statement is judged by SQLite's authorizer as SQLite
//!   parsed it — no ATTACH, DETACH, VACUUM INTO, extension loading, and PRAGMAs by their
//!   unquoted name, whatever the spelling (`PRAGMA main."journal_mode"`). Every
//!   connection opens through the VFS shim, which refuses any named file but the run's
//!   databases, their journals and the snapshots; a file it refused is
//!   [`EngineError::ReplayConfined`]. So is a journal_mode or synchronous that reads
//!   back changed (read after every statement a PRAGMA was seen in, and after each
//!   commit, never inside a commit window: a PRAGMA seen in one is read back once it has
//!   closed): the run never measures another setting than it reports.
//! - PRAGMAs: those the run's own settings set (journal_mode, synchronous, and the others
//!   given) are skipped when the log assigns them (the run chooses them; SQLite's
//!   authorizer makes them do nothing) and read when it reads them; those that act on the
//!   run's own database (`confine::REPLAYED_PRAGMAS`) are replayed as recorded; others
//!   are refused (failures of kind "refused"). A database's `page_size`/`auto_vacuum` set
//!   before its first other statement are applied, confined, at its first open, before
//!   the run's journal_mode. The first 100 distinct PRAGMA statements are listed with what
//!   the run did and how often. Statements a trigger ran, and those of temporary
//!   (":memory:") connections, are skipped and counted. Each connection starts with
//!   foreign keys off, as SQLite documents and the programs recorded had them (the
//!   bundled build turns them on: `DOCUMENTED_DEFAULTS`).
//! - A statement calling a function the replay's SQLite lacks (the program's own, or one
//!   of SQLite's this build left out) fails at prepare and is counted by function
//!   ([`MissingFunctions`]); the summary names the SQLite that recorded the log and the
//!   one that replayed it, with a note when they may differ.
//! - A statement that fails (a refused one too) is counted by kind, the first five kept,
//!   and the rest of its event is not run; `strict` makes it [`EngineError::ReplayFailed`].
//!   A run that measured no commit is [`EngineError::NothingReplayed`].
//! - Settings only a replay takes (a scenario refuses them as [`EngineError::BadSetting`]):
//!   `from_db`, `timing`, `strict`. A replay refuses `think_time_ms`; `warmup` defaults
//!   to 0 (no invented warm-up); `txns` stops after that many measured transactions.
//!   `snapshot_dir` and `dm_mark` (crash exploration) work for a log of one database file.
//! - Timing: the recorded start of each transaction (and of each autocommit read) is kept
//!   relative to the first (scaled by the factor), sleeping when the replay is ahead; a
//!   replay behind its schedule does not sleep. A log without timing runs back to back.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::{Batch, Connection, Statement};
use serde::Serialize;

use crate::confine::{Confinement, PragmaSeen};
use crate::engine::{run_pragmas, Closing, EmptyTransaction, WroteNothing};
use crate::harness::{
    check_journal_mode, close_connection, create_new_file, frame, open, query_all, read_pragma,
    storage_failure, value_text, Ended, Harness, ProgressClock, TxnWindow, TxnWork,
};
use crate::settings::{pragma_statement, Timing};
use crate::sqllog::{pragma_of, Event, LogReader, SqlLog};
use crate::stop::Stop;
use crate::{
    CommitRecord, CommitSink, EngineError, Progress, RunInfo, RunOutput, RunSettings, VfsCounts,
};

/// What a new connection of the recorded program started with and the bundled SQLite's
/// build changes: foreign key constraints are off by default (foreignkeys.html §2; so in
/// Debian's SQLite), and libsqlite3-sys builds with
/// SQLITE_DEFAULT_FOREIGN_KEYS=1. Each replayed connection is set back before the log's
/// statements, which turn them on where the program did (`PRAGMA foreign_keys = ON`).
pub(crate) const DOCUMENTED_DEFAULTS: &[&str] = &["PRAGMA foreign_keys=OFF"];

/// How many failed statements are shown (each kind is counted whatever their number).
pub(crate) const FAILURES_SHOWN: usize = 5;
/// How many distinct PRAGMA statements the summary lists.
pub(crate) const PRAGMAS_LISTED: usize = 100;
/// How many distinct missing functions the summary names.
pub(crate) const MISSING_FUNCTIONS_LISTED: usize = 100;
/// The kind a statement calling a function the program defined is counted as.
pub const APP_FUNCTION_KIND: &str = "app-defined function";
/// The kind a statement calling one of SQLite's own functions that the replay's SQLite
/// was built without is counted as.
pub const UNBUILT_FUNCTION_KIND: &str = "function not in this SQLite build";
/// SQLite's own functions a build has only with a compile option (func.c's
/// `aBuiltinFunc` and its `#ifdef`s, sqlite3.c 3.54.1): a "no such function" naming one
/// is the replay's build lacking it (the bundled SQLite has no math functions; Debian's
/// has), not the program defining it.
const OPTIONAL_FUNCTIONS: &[(&str, &[&str])] = &[
    (
        "SQLITE_ENABLE_MATH_FUNCTIONS",
        &[
            "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "ceiling", "cos",
            "cosh", "degrees", "exp", "floor", "ln", "log", "log10", "log2", "mod", "pi", "pow",
            "power", "radians", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
        ],
    ),
    (
        "SQLITE_ENABLE_PERCENTILE",
        &["median", "percentile", "percentile_cont", "percentile_disc"],
    ),
    ("SQLITE_SOUNDEX", &["soundex"]),
    ("SQLITE_ENABLE_OFFSET_SQL_FUNC", &["sqlite_offset"]),
];

/// A replay's results: the run's, as a scenario's, and what only a replay has.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayOutput {
    /// the commits and the run's information, as a scenario run gives them
    pub run: RunOutput,
    /// what only a replay has
    pub replay: ReplaySummary,
}

/// What a replay did with the log (the Python layer puts it in summary.json's
/// `config.replay`, without `commit_database`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplaySummary {
    /// the log's path
    pub log: PathBuf,
    /// where the log came from (its header's `source`: "record", "android-logcat", ...)
    pub source: String,
    /// the recorded program's command line, when the log names it
    pub program: Option<Vec<String>>,
    /// the SQLite version the program ran, when the log names it (`sqlwa record` asks
    /// the library the program loaded; a .sql file or a logcat names none: unknown)
    pub recorded_sqlite_version: Option<String>,
    /// the SQLite version that ran the replay (`sqlite3_libversion()`, the bundled one)
    pub replayed_sqlite_version: String,
    /// what a replay by another SQLite, or by one not known to be the same, means for
    /// its figures; None when the log names the version that replayed it
    pub sqlite_note: Option<String>,
    /// whether the log's literals were replaced (`sqlwa record --redact`)
    pub redacted: bool,
    /// whether the log carries timing
    pub timed: bool,
    /// the pacing used: `recorded`, `recorded x<factor>`, `back-to-back`
    pub timing: String,
    /// the snapshot the run started from (`from_db`), or None (the log's own schema)
    pub from_db: Option<PathBuf>,
    /// what the run did about warm-up
    pub warmup: String,
    /// `sql` events in the log
    pub statements: u64,
    /// statements run to completion
    pub replayed: u64,
    /// the statements that only read, outside any commit window
    pub reads: ReadFigures,
    /// statements not replayed, by reason
    pub skipped: Skipped,
    /// failed statements by kind ("no such table", "constraint", ...)
    pub failed: BTreeMap<String, u64>,
    /// the first five failures
    pub first_failures: Vec<Failure>,
    /// the statements that failed because they call a function the replay's SQLite
    /// lacks: the program's own (counted in `failed` as [`APP_FUNCTION_KIND`]) or one
    /// of SQLite's that this build left out ([`UNBUILT_FUNCTION_KIND`])
    pub missing_functions: MissingFunctions,
    /// the log's PRAGMAs (distinct statements, in order) and what the run did with each
    pub pragmas: Vec<LoggedPragma>,
    /// the run's figures per database file
    pub databases: Vec<DatabaseFigures>,
    /// per commit record, the index into `databases` of the database it wrote ([`replay`]
    /// only: empty from [`replay_into`], whose sink is told each record's database)
    pub commit_database: Vec<u32>,
    /// the run stopped after `txns` transactions (RunSettings::txns) before the log's end
    pub truncated: bool,
}

/// Statements that read only, outside any commit window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReadFigures {
    /// statements
    pub statements: u64,
    /// the time they ran, in all
    pub time_ns: u64,
    /// the VFS calls they made
    pub vfs: VfsCounts,
}

/// Statements not replayed, by reason.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Skipped {
    /// on a temporary (":memory:" or "") connection
    pub temporary: u64,
    /// run by a trigger (it runs again on replay)
    pub trigger: u64,
    /// a PRAGMA the run chooses (journal_mode, synchronous, the run's own settings)
    pub overridden_pragmas: u64,
}

/// A statement that failed on replay.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// its line in the log, 1-based
    pub line: u64,
    /// the kind it is counted as ("no such table", "constraint", "refused", ...)
    pub kind: String,
    /// SQLite's message
    pub message: String,
    /// the statement
    pub statement: String,
}

/// Statements that call a function the replay's SQLite does not have: one the recorded
/// program defined itself (`sqlite3_create_function`, or an extension it loaded), or one
/// of SQLite's own that its SQLite was built with and the replay's without
/// (`OPTIONAL_FUNCTIONS`). SQLite's `sqlite3_prepare` refuses them (SQLITE_ERROR, "no
/// such function: X") and they never run. Told by that error, not by the statement's
/// text, so a name in a string or a comment, or a function SQLite has, is never taken
/// for one.
///
/// Such a statement inside a transaction does not end it (a prepare error leaves the
/// transaction open): the program's transaction is replayed without it, so that commit
/// writes less than the program's did, by what the statement changed. Outside one it was
/// its own transaction, which is missing if it wrote.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MissingFunctions {
    /// each function (as the first statement calling it spelt it), with how many
    /// statements called it; the first `MISSING_FUNCTIONS_LISTED` distinct names
    pub functions: Vec<MissingFunction>,
    /// of those statements, the ones that failed inside a transaction, which went on
    /// without them
    pub in_transaction: u64,
    /// commit records (warm-up or measured) of transactions that ran without one of them
    pub commits_without_them: u64,
}

/// A function the replay's SQLite lacks, and the statements of the log that called it.
#[derive(Clone, Debug, Serialize)]
pub struct MissingFunction {
    /// the name, as SQLite's error gave it (names match without ASCII case)
    pub name: String,
    /// statements that called it (a statement calling two counts for the first SQLite
    /// named)
    pub statements: u64,
    /// None: the program defined it; else the compile option that gives SQLite's own
    /// function of that name, which the replay's SQLite was built without
    pub sqlite_option: Option<String>,
}

/// A distinct PRAGMA statement of the log, and what the run did with it.
#[derive(Clone, Debug, Serialize)]
pub struct LoggedPragma {
    /// the database file (run's name)
    pub database: String,
    /// the statement as logged
    pub statement: String,
    /// "kept", "overridden" (the run chooses it) or "refused" (confinement)
    pub action: String,
    /// how often the log ran it
    pub count: u64,
}

/// A replay's figures for one database file.
#[derive(Clone, Debug, Serialize)]
pub struct DatabaseFigures {
    /// the path as the program named it
    pub recorded: String,
    /// the file's name in the run's directory
    pub file_name: String,
    /// measured commits that wrote it
    pub commits: u64,
    /// transactions on it that changed no database file (not commits: `RunInfo::wrote_nothing`)
    pub wrote_nothing: u64,
    /// the closing of its connections (in WAL mode, the checkpoint at the last close)
    pub close: Closing,
    /// statements in those commits
    pub statements: u64,
    /// payload bytes of those commits
    pub logical_bytes: u64,
    /// VFS calls inside this database's commit windows
    pub vfs: VfsCounts,
}

/// Replays `log` with `settings` in `dir` (which must not hold its database files), as
/// the module documentation describes. Markers go to `markers` when given; `progress`
/// (statements done of the log's) returning false, or `stop`, ends it with
/// [`EngineError::Interrupted`].
///
/// Timing (`RunSettings::timing`: "recorded", the default; "back-to-back"; a factor on the
/// gaps): each statement that starts a transaction (or an autocommit statement) waits
/// until its recorded `t`, relative to the first, times the factor; a log with
/// `"timed": false` runs back to back.
pub fn replay(
    log: &SqlLog,
    settings: &RunSettings,
    dir: &Path,
    markers: Option<&Path>,
    progress: &mut dyn FnMut(Progress) -> bool,
    stop: &Stop,
) -> Result<ReplayOutput, EngineError> {
    /// Every record, and the database each wrote.
    #[derive(Default)]
    struct Kept(Vec<CommitRecord>, Vec<u32>);
    impl CommitSink for Kept {
        fn push(&mut self, commit: CommitRecord, database: u32) -> Result<(), EngineError> {
            self.0.push(commit);
            self.1.push(database);
            Ok(())
        }
    }
    let mut kept = Kept::default();
    let (info, mut summary) = replay_into(log, settings, dir, markers, progress, stop, &mut kept)?;
    let Kept(commits, databases) = kept;
    summary.commit_database = databases;
    Ok(ReplayOutput {
        run: RunOutput { info, commits },
        replay: summary,
    })
}

/// As [`replay`], each commit record handed to `commits` as its transaction ends instead
/// of returned (bounded memory for a log of any length); the per-database figures are
/// summed as the commits go, and `commit_database` is left empty (the sink is told each
/// record's database).
pub fn replay_into(
    log: &SqlLog,
    settings: &RunSettings,
    dir: &Path,
    markers: Option<&Path>,
    progress: &mut dyn FnMut(Progress) -> bool,
    stop: &Stop,
    commits: &mut dyn CommitSink,
) -> Result<(RunInfo, ReplaySummary), EngineError> {
    let timing = check_settings(log, settings)?;
    let create = || create_databases(log, settings, dir);
    let ((counted, summary, info), ran) = frame(settings, dir, markers, create, |h| {
        let mut replayer = Replayer::new(log, settings, timing, h, stop, commits);
        let result = replayer.replay_all(progress);
        Ok(h.close(|| {
            let closed = replayer.close_all();
            let Replayer {
                count,
                measured,
                summary,
                info,
                wrote_nothing,
                closing,
                ..
            } = replayer;
            result?;
            closed?;
            let info = info.map(|info| RunInfo {
                wrote_nothing,
                close: closing,
                ..info
            });
            Ok(((count, measured), summary, info))
        }))
    })?;
    let mut info = info.ok_or_else(|| EngineError::sql("(replay)", "no database was opened"))?;
    ran.stamp(&mut info, settings);
    info.stopped_by = (if summary.truncated { "txns" } else { "log" }).to_string();
    check_measured(log, &summary, &info.wrote_nothing, counted)?;
    Ok((info, summary))
}

/// The settings a replay cannot honour, refused before anything is made; the pacing.
fn check_settings(log: &SqlLog, settings: &RunSettings) -> Result<Timing, EngineError> {
    let bad = |name: &str, message: &str| EngineError::BadSetting {
        name: name.into(),
        message: message.into(),
    };
    if settings.think_time_ms.is_some() {
        return Err(bad(
            "think_time_ms",
            "a replay keeps the log's own gaps; pace it with timing (--timing)",
        ));
    }
    if settings.duration_s.is_some() {
        return Err(bad(
            "duration_s",
            "a replay runs to the log's end (or -n transactions), not for a duration",
        ));
    }
    if settings.snapshot_dir.is_some() && log.databases.len() > 1 {
        return Err(bad(
            "snapshot_dir",
            "crash exploration replays a log of one database file; this log opens several",
        ));
    }
    if let Some(from) = &settings.from_db {
        if !from.is_file() {
            return Err(bad(
                "from_db",
                &format!("{} is not a database file", from.display()),
            ));
        }
    }
    let timing = settings.timing.as_deref().unwrap_or("recorded");
    Timing::parse(timing)
}

/// The run's database files, in the log's order: empty, or the `from_db` snapshot (and
/// its -wal) for the database it is (the log's only one, or the one of the same basename).
fn create_databases(
    log: &SqlLog,
    settings: &RunSettings,
    dir: &Path,
) -> Result<Vec<PathBuf>, EngineError> {
    let from_index = match &settings.from_db {
        None => None,
        Some(from) => Some(snapshot_target(log, from)?),
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| EngineError::io(dir, format!("cannot create directory: {e}")))?;
    let mut paths = Vec::new();
    for (i, db) in log.databases.iter().enumerate() {
        let path = dir.join(&db.file_name);
        create_new_file(&path)?;
        if from_index == Some(i) {
            copy_snapshot(settings.from_db.as_deref().unwrap_or(Path::new("")), &path)?;
        }
        paths.push(path);
    }
    Ok(paths)
}

fn snapshot_target(log: &SqlLog, from: &Path) -> Result<usize, EngineError> {
    if log.databases.len() == 1 {
        return Ok(0);
    }
    let name = from.file_name().map(|n| n.to_string_lossy().into_owned());
    let found = log.databases.iter().position(|d| {
        Path::new(&d.recorded)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            == name
    });
    found.ok_or_else(|| EngineError::BadSetting {
        name: "from_db".into(),
        message: format!(
            "the log opens several databases and none is named {}",
            name.unwrap_or_default()
        ),
    })
}

/// Copies the snapshot over the (just created, empty) database file, and its -wal.
fn copy_snapshot(from: &Path, to: &Path) -> Result<(), EngineError> {
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to)
            .map(drop)
            .map_err(|e| EngineError::io(from, format!("cannot copy the snapshot: {e}")))
    };
    copy(from, to)?;
    let wal = |p: &Path| {
        let mut name = p.as_os_str().to_owned();
        name.push("-wal");
        PathBuf::from(name)
    };
    if wal(from).is_file() {
        copy(&wal(from), &wal(to))?;
    }
    Ok(())
}

/// One connection of the log, open on the run's copy of its database.
struct Live {
    conn: Connection,
    confinement: Confinement,
    db: usize,
    /// journal_mode and synchronous as the run set them
    held: Held,
}

/// The two settings a run reports and a log may never change under it, as the
/// connection reads them back (synchronous as SQLite's number, 0 to 3).
#[derive(Clone, Debug, Default, PartialEq)]
struct Held {
    journal_mode: String,
    synchronous: String,
}

impl Held {
    fn read(conn: &Connection) -> rusqlite::Result<Held> {
        let read = |sql: &str| {
            let mut stmt = conn.prepare_cached(sql)?;
            stmt.query_row([], |row| {
                row.get::<_, rusqlite::types::Value>(0).map(value_text)
            })
        };
        Ok(Held {
            journal_mode: read("PRAGMA main.journal_mode")?,
            synchronous: read("PRAGMA main.synchronous")?,
        })
    }

    /// What changed from `self` to `now`, in words; None when nothing did.
    fn changed_to(&self, now: &Held) -> Option<String> {
        const SYNC: [&str; 4] = ["off", "normal", "full", "extra"];
        let sync = |n: &str| {
            let name = n.parse::<usize>().ok().and_then(|i| SYNC.get(i));
            name.map_or_else(|| n.to_string(), |s| s.to_string())
        };
        let (name, was, is) = if self.journal_mode != now.journal_mode {
            (
                "journal_mode",
                self.journal_mode.clone(),
                now.journal_mode.clone(),
            )
        } else if self.synchronous != now.synchronous {
            (
                "synchronous",
                sync(&self.synchronous),
                sync(&now.synchronous),
            )
        } else {
            return None;
        };
        Some(format!(
            "{name} changed from {was} to {is} under the run, which measures and reports \
             the {name} it was asked for"
        ))
    }
}

/// What became of an event's statements.
#[derive(Default)]
struct Outcome {
    /// one of them ran to completion
    ran: bool,
    /// one of them failed (the rest of the event was not run)
    failed: bool,
}

/// The open commit window.
struct Window {
    owner: u64,
    db: usize,
    /// the harness's window: the commit index, clock, CPU time and VFS counts at its start
    txn: TxnWindow,
    /// the line of the log, and the text, of the statement that opened it
    line: u64,
    first: String,
    statements: u64,
    logical_bytes: u64,
    /// the statements PRAGMAs were seen in while it was open, one a connection: their
    /// connections' settings are read back once it has closed, outside what it measures
    pragmas: Vec<PragmaInWindow>,
    /// a statement of its transaction called an app-defined function and never ran
    without_app_statement: bool,
}

/// A statement of connection `conn` (at `line` of the log) in which the authorizer saw a
/// PRAGMA while a commit window was open.
struct PragmaInWindow {
    conn: u64,
    line: u64,
    text: String,
}

struct Replayer<'a> {
    log: &'a SqlLog,
    settings: &'a RunSettings,
    timing: Timing,
    stop: &'a Stop,
    /// the run's frame: its database files, markers, VFS shim (which every connection
    /// opens through) and transaction windows
    h: &'a Harness,
    /// live connections by the log's id; temporary ones are not opened
    conns: HashMap<u64, Live>,
    temporary: Vec<u64>,
    opened: Vec<bool>,
    window: Option<Window>,
    /// (recorded time, when it was replayed) of the first paced statement
    anchor: Option<(u64, Instant)>,
    /// where the commit records go
    out: &'a mut dyn CommitSink,
    /// commit records handed out, and whether one of them was measured (not warm-up)
    count: u64,
    measured: bool,
    summary: ReplaySummary,
    info: Option<RunInfo>,
    /// the transactions that changed no database file, counted apart
    wrote_nothing: WroteNothing,
    /// the closing of connections outside every transaction
    closing: Closing,
    /// transactions to run (warm-up included), when `txns` limits them
    limit: Option<u64>,
    warmup: u64,
    /// the current event's line and statement (for failures)
    line: u64,
    /// connections in a transaction that lost a statement calling an app-defined
    /// function before the transaction's commit window opened
    lost_app_statement: Vec<u64>,
}

impl<'a> Replayer<'a> {
    fn new(
        log: &'a SqlLog,
        settings: &'a RunSettings,
        timing: Timing,
        h: &'a Harness,
        stop: &'a Stop,
        out: &'a mut dyn CommitSink,
    ) -> Self {
        let warmup = settings.warmup.unwrap_or(0);
        let timing = if log.header.timed {
            timing
        } else {
            Timing::BackToBack
        };
        let summary = ReplaySummary {
            log: log.path.clone(),
            source: log.header.source.clone(),
            program: log.header.program.clone(),
            recorded_sqlite_version: log.header.sqlite_version.clone(),
            replayed_sqlite_version: rusqlite::version().into(),
            sqlite_note: sqlite_note(log.header.sqlite_version.as_deref(), rusqlite::version()),
            redacted: log.header.redacted,
            timed: log.header.timed,
            timing: match timing {
                Timing::BackToBack => "back-to-back".into(),
                Timing::Recorded(1.0) => "recorded".into(),
                Timing::Recorded(f) => format!("recorded x{f}"),
            },
            from_db: settings.from_db.clone(),
            warmup: match warmup {
                0 => "none: a replay has no invented warm-up; every transaction of the log \
                      is measured"
                    .into(),
                n => format!("the log's first {n} transactions, run but not measured"),
            },
            statements: log.statements,
            databases: (log.databases.iter())
                .map(|d| DatabaseFigures {
                    recorded: d.recorded.clone(),
                    file_name: d.file_name.clone(),
                    commits: 0,
                    wrote_nothing: 0,
                    close: Closing::default(),
                    statements: 0,
                    logical_bytes: 0,
                    vfs: VfsCounts::default(),
                })
                .collect(),
            ..ReplaySummary::default()
        };
        Replayer {
            log,
            settings,
            timing,
            stop,
            h,
            conns: HashMap::new(),
            temporary: Vec::new(),
            opened: vec![false; h.db_paths.len()],
            window: None,
            anchor: None,
            out,
            count: 0,
            measured: false,
            summary,
            info: None,
            wrote_nothing: WroteNothing::default(),
            closing: Closing::default(),
            limit: settings.txns.map(|n| n + warmup),
            warmup,
            line: 0,
            lost_app_statement: Vec::new(),
        }
    }

    fn replay_all(
        &mut self,
        progress: &mut dyn FnMut(Progress) -> bool,
    ) -> Result<(), EngineError> {
        let mut reader = LogReader::open(&self.log.path)?;
        let total = self.log.statements;
        let (mut done, mut reports) = (0, ProgressClock::default());
        while let Some((line, event)) = reader.next_event()? {
            self.line = line;
            let now = Progress {
                done,
                total: Some(total),
                ..Progress::default()
            };
            if reports.due() && !progress(now) {
                return Err(EngineError::Interrupted);
            }
            if self.window.is_none() {
                self.stop.check()?;
            }
            match event {
                Event::Open { conn, db, .. } => self.open(conn, &db)?,
                Event::Sql {
                    conn,
                    sql,
                    t,
                    trigger,
                } => {
                    done += 1;
                    self.statement(conn, &sql, t, trigger)?;
                }
                Event::Close { conn } => self.close(conn)?,
            }
            if self.limit.is_some_and(|n| self.count >= n) {
                self.summary.truncated = done < total;
                break;
            }
        }
        progress(Progress {
            done,
            total: Some(total),
            ..Progress::default()
        });
        Ok(())
    }

    fn open(&mut self, id: u64, recorded: &str) -> Result<(), EngineError> {
        self.close(id)?;
        let Some(db) = self.log.database_of(recorded) else {
            self.temporary.push(id);
            return Ok(());
        };
        let path = &self.h.db_paths[db];
        let mut conn = open(path, &self.h.vfs)?;
        let run_sets = (run_pragmas(self.settings).iter())
            .map(|(name, ..)| name.to_string())
            .collect();
        let confinement = Confinement::install_for_replay(&mut conn, run_sets)?;
        self.stop.install(&mut conn)?;
        let mut live = Live {
            conn,
            confinement,
            db,
            held: Held::default(),
        };
        let first = !self.opened[db];
        self.opened[db] = true;
        live.held = self.apply_pragmas(&live, first)?;
        if self.info.is_none() {
            self.info = Some(run_info(&live.conn, self.log, self.settings)?);
            self.h.dm_mark("sqlwa-setup")?;
            self.snapshot(&live.conn, "setup")?;
        }
        self.conns.insert(id, live);
        Ok(())
    }

    /// On a database's first connection, the log's early page_size/auto_vacuum (unless
    /// the run sets page_size or starts from a snapshot), confined; on every connection
    /// SQLite's documented defaults where the bundled build differs
    /// ([`DOCUMENTED_DEFAULTS`]), the run's settings, then its extra PRAGMAs; then the
    /// journal mode is checked. Returns the settings the run holds the connection to, as
    /// read back.
    fn apply_pragmas(&self, live: &Live, first: bool) -> Result<Held, EngineError> {
        let run = run_pragmas(self.settings);
        let run_sets = |name: &str| run.iter().any(|(n, ..)| *n == name);
        if first && self.settings.from_db.is_none() {
            let early = &self.log.databases[live.db].initial_pragmas;
            // (only page_size and auto_vacuum are kept early: sqllog.rs early_pragma)
            let kept = early
                .iter()
                .filter(|sql| pragma_of(sql).is_some_and(|p| !run_sets(&p.name)));
            for sql in kept {
                // Chosen by their text, judged by SQLite: one that is not a single PRAGMA
                // the replay runs fails here and does nothing; it runs again in its place
                // in the log, where its failure is counted.
                let _ = live.confinement.confined(|| query_all(&live.conn, sql));
                live.confinement.take_refusal();
                live.confinement.take_pragma();
                if let Some(why) = self.h.shared.take_refusal() {
                    return Err(self.confinement_error(why, sql));
                }
            }
        }
        let mut statements: Vec<String> =
            DOCUMENTED_DEFAULTS.iter().map(|s| s.to_string()).collect();
        statements.extend((run.iter()).map(|(name, _, v)| format!("PRAGMA {name}={v}")));
        for spec in &self.settings.extra_pragmas {
            statements.push(pragma_statement(spec)?);
        }
        for sql in &statements {
            query_all(&live.conn, sql).map_err(|e| self.failure(sql, e))?;
        }
        let held = Held::read(&live.conn).map_err(|e| self.failure("PRAGMA journal_mode", e))?;
        check_journal_mode(&held.journal_mode, self.settings)?;
        Ok(held)
    }

    fn close(&mut self, id: u64) -> Result<(), EngineError> {
        self.temporary.retain(|&t| t != id);
        self.lost_app_statement.retain(|&c| c != id);
        let live = self.conns.remove(&id);
        if self.window.as_ref().is_some_and(|w| w.owner == id) {
            let seen = self.close_window(live.as_ref().map(|l| &l.conn))?;
            self.check_held_after(live.as_ref().map(|l| (id, l)), &seen)?;
        }
        match live {
            Some(live) => self.close_live(live),
            None => Ok(()),
        }
    }

    /// Closes a connection: measured apart ([`Closing`]) outside every transaction, else
    /// in the open one, as any of its statements would be.
    fn close_live(&mut self, live: Live) -> Result<(), EngineError> {
        let h = self.h;
        if self.window.is_some() {
            return close_connection(live.conn, &h.db_paths[0]);
        }
        let db = live.db;
        let (closed, closing) = h.measured_close(|| close_connection(live.conn, &h.db_paths[0]))?;
        self.closing.add(&closing);
        self.summary.databases[db].close.add(&closing);
        closed
    }

    /// Closes every connection still open (in id order), the first failure reported.
    fn close_all(&mut self) -> Result<(), EngineError> {
        let mut result = Ok(());
        if let Some(owner) = self.window.as_ref().map(|w| w.owner) {
            let live = self.conns.remove(&owner);
            let seen = self.close_window(live.as_ref().map(|l| &l.conn));
            if let Some(live) = live {
                self.conns.insert(owner, live);
            }
            result = seen.and_then(|seen| self.check_held_after(None, &seen));
        }
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(live) = self.conns.remove(&id) {
                let closed = self.close_live(live);
                result = result.and(closed);
            }
        }
        result
    }

    fn statement(
        &mut self,
        id: u64,
        sql: &str,
        t: Option<u64>,
        trigger: bool,
    ) -> Result<(), EngineError> {
        if self.temporary.contains(&id) {
            self.summary.skipped.temporary += 1;
            return Ok(());
        }
        if trigger {
            self.summary.skipped.trigger += 1;
            return Ok(());
        }
        // out of the map while it runs, so the replay's own state stays mutable
        let Some(live) = self.conns.remove(&id) else {
            // the checking pass saw it opened; a close in between is the log's
            return Err(EngineError::LogParse {
                path: self.log.path.clone(),
                line: self.line,
                message: format!("a statement on connection {id}, closed before it"),
            });
        };
        let result = self.event(id, &live, sql, t);
        self.conns.insert(id, live);
        result
    }

    /// Runs one `sql` event: each statement SQLite's parser finds in it, one at a time,
    /// each judged by the authorizer as it is prepared. The outer error ends the replay;
    /// a statement's own failure is counted (or, `strict`, ends it) and ends the event.
    fn event(
        &mut self,
        id: u64,
        live: &Live,
        sql: &str,
        t: Option<u64>,
    ) -> Result<(), EngineError> {
        if self.window.is_none() && live.conn.is_autocommit() {
            self.pace(t)?;
        }
        let mut outcome = Outcome::default();
        // The common case, one statement, goes through the connection's statement cache.
        match live.confinement.confined(|| live.conn.prepare_cached(sql)) {
            Ok(mut stmt) => {
                let prepared = self.run_one(id, live, &mut stmt, sql, &mut outcome)?;
                // judged a PRAGMA: prepared (and judged) afresh each time it comes again
                if prepared.is_some() {
                    stmt.discard();
                }
            }
            // Several statements, or one that does not prepare (rusqlite prepares what
            // follows a first statement to refuse it): SQLite's parser takes them one at
            // a time, each prepared once the one before has run.
            Err(_) => {
                live.confinement.take_refusal();
                live.confinement.take_pragma();
                self.batch(id, live, sql, &mut outcome)?;
            }
        }
        if outcome.ran && !outcome.failed {
            self.summary.replayed += 1;
        }
        Ok(())
    }

    /// The statements of an event that holds several, one after the other.
    fn batch(
        &mut self,
        id: u64,
        live: &Live,
        sql: &str,
        outcome: &mut Outcome,
    ) -> Result<(), EngineError> {
        let mut statements = Batch::new(&live.conn, sql);
        loop {
            match live.confinement.confined(|| statements.next()) {
                Ok(None) => return Ok(()),
                Ok(Some(mut stmt)) => {
                    let text = stmt.expanded_sql().unwrap_or_else(|| sql.to_string());
                    self.run_one(id, live, &mut stmt, &text, outcome)?;
                }
                Err(err) => {
                    if let Some(seen) = live.confinement.take_pragma() {
                        self.list_pragma(live.db, sql, seen);
                    }
                    self.failed(id, live, sql, &err, outcome)?;
                }
            }
            if outcome.failed {
                return Ok(());
            }
        }
    }

    /// Runs one prepared statement (`text`) of an event: a commit window opens before it
    /// when it writes and none is open; a read outside a window is counted apart; the
    /// window closes when the connection is back in autocommit. A file the shim refused,
    /// or journal_mode or synchronous changed (read back after any statement a PRAGMA was
    /// seen in — once its window has closed, when one is open — and after each commit),
    /// ends the replay. Returns what the authorizer saw of PRAGMAs while the statement was
    /// prepared.
    fn run_one(
        &mut self,
        id: u64,
        live: &Live,
        stmt: &mut Statement<'_>,
        text: &str,
        outcome: &mut Outcome,
    ) -> Result<Option<PragmaSeen>, EngineError> {
        let prepared = live.confinement.take_pragma();
        if prepared == Some(PragmaSeen::Overridden) {
            // the run sets it: SQLite made it a statement that does nothing
            self.summary.skipped.overridden_pragmas += 1;
            self.list_pragma(live.db, text, PragmaSeen::Overridden);
            return Ok(prepared);
        }
        let writes = !stmt.readonly();
        if writes && self.window.is_none() {
            let index = self.count;
            let warmup = index < self.warmup;
            self.window = Some(Window {
                owner: id,
                db: live.db,
                txn: self.h.begin_txn(index, warmup)?,
                line: self.line,
                first: shortened(text),
                statements: 0,
                logical_bytes: 0,
                pragmas: Vec::new(),
                without_app_statement: self.lost_app_statement.contains(&id),
            });
        }
        let read_start =
            (self.window.is_none()).then(|| (self.h.shared.snapshot(), Instant::now()));
        let step = || {
            let mut rows = stmt.raw_query();
            while rows.next()?.is_some() {}
            Ok(())
        };
        let result: rusqlite::Result<()> = self.stop.quietly(|| live.confinement.confined(step));
        self.count_statement(writes, text, read_start);
        let seen = prepared.max(live.confinement.take_pragma());
        if let Some(seen) = seen {
            self.list_pragma(live.db, text, seen);
        }
        if let Some(why) = self.h.shared.take_refusal() {
            return Err(self.confinement_error(why, text));
        }
        if seen.is_some() {
            self.held_after_pragma(id, live, text)?;
        }
        match result {
            Ok(()) => outcome.ran = true,
            Err(err) => self.failed(id, live, text, &err, outcome)?,
        }
        if live.conn.is_autocommit() {
            // its transaction, if any, has ended: a loss before it wrote is no commit's
            self.lost_app_statement.retain(|&c| c != id);
        }
        if live.conn.is_autocommit() && self.window.as_ref().is_some_and(|w| w.owner == id) {
            let seen = self.close_window(Some(&live.conn))?;
            self.check_held_after(Some((id, live)), &seen)?;
            if !seen.iter().any(|p| p.conn == id) {
                self.check_held(live, self.line, text)?;
            }
        }
        Ok(prepared)
    }

    /// A PRAGMA was seen in statement `text` of connection `id`: its settings are read
    /// back now, or once the open commit window has closed (nothing but the log's
    /// statements runs inside a window).
    fn held_after_pragma(&mut self, id: u64, live: &Live, text: &str) -> Result<(), EngineError> {
        let Some(window) = self.window.as_mut() else {
            return self.check_held(live, self.line, text);
        };
        if !window.pragmas.iter().any(|p| p.conn == id) {
            window.pragmas.push(PragmaInWindow {
                conn: id,
                line: self.line,
                text: text.into(),
            });
        }
        Ok(())
    }

    /// The settings of each connection a PRAGMA was `seen` on in a window now closed, each
    /// error naming the PRAGMA's statement; `owner` is the window's connection when it is
    /// out of the map. A connection closed since is not read.
    fn check_held_after(
        &self,
        owner: Option<(u64, &Live)>,
        seen: &[PragmaInWindow],
    ) -> Result<(), EngineError> {
        for pragma in seen {
            let live = match owner {
                Some((id, live)) if id == pragma.conn => Some(live),
                _ => self.conns.get(&pragma.conn),
            };
            if let Some(live) = live {
                self.check_held(live, pragma.line, &pragma.text)?;
            }
        }
        Ok(())
    }

    /// Counts a statement that ran in the open window, or as a read outside any.
    fn count_statement(
        &mut self,
        writes: bool,
        text: &str,
        read_start: Option<(VfsCounts, Instant)>,
    ) {
        match (&mut self.window, read_start) {
            (Some(window), _) => {
                window.statements += 1;
                if writes {
                    window.logical_bytes += literal_bytes(text);
                }
            }
            (None, Some((before, started))) => {
                let reads = &mut self.summary.reads;
                reads.statements += 1;
                reads.time_ns += started.elapsed().as_nanos() as u64;
                reads.vfs = add_counts(&reads.vfs, &self.h.shared.snapshot().since(&before));
            }
            (None, None) => {}
        }
    }

    /// A statement of connection `id` failed: counted by kind, unless it ends the replay.
    fn failed(
        &mut self,
        id: u64,
        live: &Live,
        text: &str,
        err: &rusqlite::Error,
        outcome: &mut Outcome,
    ) -> Result<(), EngineError> {
        outcome.failed = true;
        let (kind, message) = classify(live, err);
        self.storage_or_stop(text, err)?;
        self.record_failure(&kind, &message, text)?;
        let missing = [APP_FUNCTION_KIND, UNBUILT_FUNCTION_KIND].contains(&kind.as_str());
        if let Some(name) = missing.then(|| missing_function(err)).flatten() {
            self.count_missing_function(id, live, name);
        }
        Ok(())
    }

    /// A statement calling function `name`, which the replay's SQLite lacks, failed on
    /// connection `id`: named, and, inside a transaction, its commit marked as without it.
    fn count_missing_function(&mut self, id: u64, live: &Live, name: &str) {
        let app = &mut self.summary.missing_functions;
        let listed = (app.functions.iter()).position(|f| f.name.eq_ignore_ascii_case(name));
        match listed {
            Some(i) => app.functions[i].statements += 1,
            None if app.functions.len() < MISSING_FUNCTIONS_LISTED => {
                app.functions.push(MissingFunction {
                    name: name.into(),
                    statements: 1,
                    sqlite_option: sqlite_option_of(name).map(String::from),
                })
            }
            None => {}
        }
        if live.conn.is_autocommit() {
            return; // its own transaction, which never ran
        }
        app.in_transaction += 1;
        match self.window.as_mut() {
            // windows never overlap: a statement while one is open is counted in it
            Some(window) => window.without_app_statement = true,
            None if !self.lost_app_statement.contains(&id) => self.lost_app_statement.push(id),
            None => {}
        }
    }

    /// The error that ends a replay whose statement (`text`) left its confinement.
    fn confinement_error(&self, message: String, text: &str) -> EngineError {
        self.confinement_error_at(self.line, message, text)
    }

    /// As [`Self::confinement_error`], for the statement at `line` of the log.
    fn confinement_error_at(&self, line: u64, message: String, text: &str) -> EngineError {
        EngineError::ReplayConfined {
            path: self.log.path.clone(),
            line,
            message,
            statement: shortened(text),
        }
    }

    /// journal_mode and synchronous must read as the run set them on this connection;
    /// a change is named by the statement (`text`, at `line`) after which it was read.
    fn check_held(&self, live: &Live, line: u64, text: &str) -> Result<(), EngineError> {
        let now = Held::read(&live.conn).map_err(|e| self.failure("PRAGMA journal_mode", e))?;
        match live.held.changed_to(&now) {
            None => Ok(()),
            Some(why) => Err(self.confinement_error_at(line, why, text)),
        }
    }

    fn list_pragma(&mut self, db: usize, sql: &str, seen: PragmaSeen) {
        let log = self.log;
        let database = &log.databases[db].file_name;
        let statement = sql.trim();
        let pragmas = &mut self.summary.pragmas;
        let listed =
            (pragmas.iter()).position(|p| &p.database == database && p.statement == statement);
        match listed {
            Some(i) => pragmas[i].count += 1,
            None if pragmas.len() < PRAGMAS_LISTED => pragmas.push(LoggedPragma {
                database: database.clone(),
                statement: statement.into(),
                action: seen.label().into(),
                count: 1,
            }),
            None => {}
        }
    }

    /// Sleeps until the statement's recorded start, relative to the first paced one.
    fn pace(&mut self, t: Option<u64>) -> Result<(), EngineError> {
        let (Timing::Recorded(factor), Some(t)) = (self.timing, t) else {
            return Ok(());
        };
        let Some((t0, at)) = self.anchor else {
            self.anchor = Some((t, Instant::now()));
            return Ok(());
        };
        let offset = Duration::from_secs_f64(t.saturating_sub(t0) as f64 * factor / 1e9);
        let left = (at + offset).saturating_duration_since(Instant::now());
        if !left.is_zero() {
            self.stop.sleep(left)?;
        }
        Ok(())
    }

    /// Closes the open window; `owner` is its connection (for the snapshot), when open.
    /// Returns the statements PRAGMAs were seen in while it was open.
    fn close_window(
        &mut self,
        owner: Option<&Connection>,
    ) -> Result<Vec<PragmaInWindow>, EngineError> {
        let Some(w) = self.window.take() else {
            return Ok(Vec::new());
        };
        let work = TxnWork {
            statements: w.statements,
            logical_bytes: w.logical_bytes,
        };
        let snapshot = |name: &str| match owner {
            Some(conn) => self.snapshot(conn, name),
            None => Ok(()),
        };
        let commit = match self.h.end_txn(w.txn, work, snapshot)? {
            Ended::Commit(commit) => commit,
            Ended::WroteNothing { time_ns, vfs } => {
                let first = EmptyTransaction {
                    line: Some(w.line),
                    statement: w.first,
                    statements: w.statements,
                };
                (self.wrote_nothing).add(time_ns, &vfs, first);
                self.summary.databases[w.db].wrote_nothing += 1;
                return Ok(w.pragmas);
            }
        };
        if w.without_app_statement {
            self.summary.missing_functions.commits_without_them += 1;
        }
        // the per-database figures, summed as the commits go
        let figures = &mut self.summary.databases[w.db];
        figures.commits += 1;
        figures.statements += commit.statements;
        figures.logical_bytes += commit.logical_bytes;
        figures.vfs = add_counts(&figures.vfs, &commit.vfs);
        self.count += 1;
        self.measured |= !commit.warmup;
        self.out.push(commit, w.db as u32)?;
        Ok(w.pragmas)
    }

    /// A copy of the database as committed, when asked (`RunSettings::snapshot_dir`).
    fn snapshot(&self, conn: &Connection, name: &str) -> Result<(), EngineError> {
        (self.h).snapshot(conn, name, |e| EngineError::sql("VACUUM INTO", e))
    }

    /// A stop, or the filesystem failing under the run, ends the replay whatever `strict`.
    fn storage_or_stop(&self, sql: &str, err: &rusqlite::Error) -> Result<(), EngineError> {
        if self.stop.stopped() {
            return Err(EngineError::Interrupted);
        }
        match storage_failure(&self.h.db_paths[0], sql, err) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn record_failure(&mut self, kind: &str, message: &str, sql: &str) -> Result<(), EngineError> {
        let statement = shortened(sql);
        if self.settings.strict {
            return Err(EngineError::ReplayFailed {
                path: self.log.path.clone(),
                line: self.line,
                message: message.into(),
                statement,
            });
        }
        *self.summary.failed.entry(kind.into()).or_default() += 1;
        if self.summary.first_failures.len() < FAILURES_SHOWN {
            self.summary.first_failures.push(Failure {
                line: self.line,
                kind: kind.into(),
                message: message.into(),
                statement,
            });
        }
        Ok(())
    }

    /// The error of one of the engine's own statements on a connection.
    fn failure(&self, sql: &str, err: rusqlite::Error) -> EngineError {
        if self.stop.stopped() {
            return EngineError::Interrupted;
        }
        storage_failure(&self.h.db_paths[0], sql, &err)
            .unwrap_or_else(|| EngineError::sql(sql, err))
    }
}

/// What it means for a replay's figures that SQLite `replayed` ran a log the program
/// recorded with SQLite `recorded` (None: the log does not say); None when the same.
fn sqlite_note(recorded: Option<&str>, replayed: &str) -> Option<String> {
    const WHERE: &str = "another SQLite (another version, or other build options) can \
        write other pages for the same statements (FTS5's 'optimize', ANALYZE's \
        sqlite_stat4, SECURE_DELETE, query plans), so the figures and the final database \
        can differ from the program's";
    match recorded {
        Some(recorded) if recorded == replayed => None,
        Some(recorded) => Some(format!(
            "recorded with SQLite {recorded}, replayed with SQLite {replayed}: {WHERE}"
        )),
        None => Some(format!(
            "recorded with an unknown SQLite (a .sql file or an Android logcat names none), \
             replayed with SQLite {replayed}: {WHERE}"
        )),
    }
}

/// (kind, message) of a failed statement: a refusal's reason first.
fn classify(live: &Live, err: &rusqlite::Error) -> (String, String) {
    if let Some(why) = live.confinement.take_refusal() {
        return ("refused".into(), why);
    }
    let message = err.to_string();
    let kind = failure_kind(err, &message);
    (kind, message)
}

fn pragma_value(conn: &Connection, name: &str) -> Result<String, EngineError> {
    read_pragma(conn, name).map_err(|e| EngineError::sql(format!("PRAGMA {name}"), e))
}

/// What ran: the log (by its name), the seed (a replay generates no values: 0 unless
/// given), and the SQLite of the run's first connection.
fn run_info(
    conn: &Connection,
    log: &SqlLog,
    settings: &RunSettings,
) -> Result<RunInfo, EngineError> {
    let seed = settings.seed.unwrap_or(0);
    crate::harness::run_info(conn, &log.name, seed, |name| pragma_value(conn, name))
}

/// The function SQLite's `sqlite3_prepare` found no definition of, when that is what
/// `err` is: SQLITE_ERROR with resolve.c's message "no such function: %#T" (the name as
/// the statement spelt it). SQLite's own judgement of the statement as it parsed it,
/// where a look at the text would take a name in a string or comment for a call.
fn missing_function(err: &rusqlite::Error) -> Option<&str> {
    let (error, message) = match err {
        rusqlite::Error::SqlInputError { error, msg, .. } => (error, msg.as_str()),
        rusqlite::Error::SqliteFailure(error, Some(msg)) => (error, msg.as_str()),
        _ => return None,
    };
    if error.extended_code != rusqlite::ffi::SQLITE_ERROR {
        return None;
    }
    message.strip_prefix("no such function: ")
}

/// The compile option that gives SQLite's own function `name`, when one does.
fn sqlite_option_of(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    (OPTIONAL_FUNCTIONS.iter())
        .find(|(_, names)| names.contains(&name.as_str()))
        .map(|(option, _)| *option)
}

/// A failure's kind: a call of a function this SQLite lacks ([`missing_function`]), the
/// program's or one this build left out; SQLite's message up to its detail ("no such
/// table", "UNIQUE constraint failed" → "constraint"); else its error code.
fn failure_kind(err: &rusqlite::Error, message: &str) -> String {
    if let Some(name) = missing_function(err) {
        let unbuilt = sqlite_option_of(name).is_some();
        return if unbuilt {
            UNBUILT_FUNCTION_KIND
        } else {
            APP_FUNCTION_KIND
        }
        .into();
    }
    for prefix in [
        "no such table",
        "no such column",
        "no such index",
        "already exists",
    ] {
        if message.contains(prefix) {
            return prefix.into();
        }
    }
    match err.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ConstraintViolation) => "constraint".into(),
        Some(code) => format!("{code:?}"),
        None => "error".into(),
    }
}

pub(crate) fn shortened(sql: &str) -> String {
    const SHOWN: usize = 200;
    let sql = sql.trim();
    match sql.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}…", &sql[..at]),
        None => sql.into(),
    }
}

fn add_counts(a: &VfsCounts, b: &VfsCounts) -> VfsCounts {
    let mut sum = *a;
    for kind in crate::FileKind::ALL {
        *sum.get_mut(kind) = a.get(kind).add(b.get(kind));
    }
    sum
}

/// A replay with no measured commit has nothing to report per commit: say why.
fn check_measured(
    log: &SqlLog,
    summary: &ReplaySummary,
    wrote_nothing: &WroteNothing,
    (count, measured): (u64, bool),
) -> Result<(), EngineError> {
    if measured {
        return Ok(());
    }
    let why = match (count, summary.first_failures.first()) {
        (0, Some(f)) => format!(
            "no transaction of the log wrote anything on replay ({} statements failed; \
             line {}: {})",
            summary.failed.values().sum::<u64>(),
            f.line,
            f.message
        ),
        (0, None) if wrote_nothing.transactions > 0 => format!(
            "no transaction of the log changed a database file on replay ({} wrote nothing: \
             no row matched, or only TEMP tables changed): nothing to measure per commit",
            wrote_nothing.transactions
        ),
        (0, None) => "no transaction of the log writes: nothing to measure per commit".into(),
        (n, _) => format!("all {n} transactions of the log were warm-up (--warmup)"),
    };
    Err(EngineError::NothingReplayed {
        path: log.path.clone(),
        message: why,
    })
}

/// Payload bytes of a write statement as logged (values expanded): the literals in its
/// text — a string's or blob's length, 8 for a number — as a scenario counts the values
/// it binds. Literals in a WHERE clause count too (the text does not say which values are
/// stored); a statement with no literal counts 0.
pub(crate) fn literal_bytes(sql: &str) -> u64 {
    let bytes = sql.as_bytes();
    let (mut i, mut total) = (0, 0u64);
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'\'' => {
                let (len, end) = quoted(bytes, i);
                total += len;
                i = end;
            }
            b'x' | b'X' if bytes.get(i + 1) == Some(&b'\'') && (i == 0 || !ident(bytes[i - 1])) => {
                let (len, end) = quoted(bytes, i + 1);
                total += len / 2;
                i = end;
            }
            b'"' | b'`' => i = skip_to(bytes, i + 1, b),
            b'[' => i = skip_to(bytes, i + 1, b']'),
            b'-' if bytes.get(i + 1) == Some(&b'-') => i = skip_to(bytes, i, b'\n'),
            b'0'..=b'9' if i == 0 || !ident(bytes[i - 1]) => {
                total += 8;
                while i < bytes.len() && (ident(bytes[i]) || bytes[i] == b'.') {
                    i += 1;
                }
            }
            _ if ident(b) => {
                while i < bytes.len() && ident(bytes[i]) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    total
}

/// The content length of the '…' string starting at `start` ('' is one quote) and the
/// index after it.
fn quoted(bytes: &[u8], start: usize) -> (u64, usize) {
    let (mut i, mut len) = (start + 1, 0u64);
    while i < bytes.len() {
        if bytes[i] == b'\'' {
            if bytes.get(i + 1) == Some(&b'\'') {
                i += 2;
                len += 1;
                continue;
            }
            return (len, i + 1);
        }
        i += 1;
        len += 1;
    }
    (len, i)
}

fn skip_to(bytes: &[u8], from: usize, end: u8) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| b == end)
        .map_or(bytes.len(), |p| from + p + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_changed_under_the_run_is_read_back_and_named() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA journal_mode=MEMORY; PRAGMA synchronous=FULL")
            .unwrap();
        let held = Held::read(&conn).unwrap();
        assert_eq!(
            (held.journal_mode.as_str(), held.synchronous.as_str()),
            ("memory", "2")
        );
        assert_eq!(held.changed_to(&Held::read(&conn).unwrap()), None);
        conn.execute_batch("PRAGMA synchronous=OFF").unwrap();
        let why = held.changed_to(&Held::read(&conn).unwrap()).unwrap();
        assert!(
            why.starts_with("synchronous changed from full to off under the run"),
            "{why}"
        );
        conn.execute_batch("PRAGMA journal_mode=OFF").unwrap();
        let why = held.changed_to(&Held::read(&conn).unwrap()).unwrap();
        assert!(
            why.starts_with("journal_mode changed from memory to off"),
            "{why}"
        );
    }

    #[test]
    fn literal_bytes_counts_values_not_names() {
        assert_eq!(literal_bytes("INSERT INTO t VALUES(1,'abc')"), 8 + 3);
        assert_eq!(
            literal_bytes("INSERT INTO t2 (\"c1\") VALUES('it''s', X'0102')"),
            4 + 2
        );
        assert_eq!(literal_bytes("UPDATE t SET v = NULL WHERE id = 12"), 8);
        assert_eq!(literal_bytes("DELETE FROM t -- 5\n"), 0);
    }
}
