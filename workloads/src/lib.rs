//! sqlwa's workload engine: app-like SQLite workloads run on rusqlite (bundled SQLite)
//! through a counting VFS shim, each commit measured and marked in the trace.
//!
//! The crate is pure Rust: `cargo test -p sqlwa-workloads` covers it without Python. The
//! Python layer reaches it through the PyO3 crate `analyzer/native`, which only converts
//! these types and never needs logic of its own. Keep the names stable: extend rather than
//! rename.
//!
//! - [`Scenario`]: a workload described in TOML (format: `scenarios/README.md` beside this
//!   crate): a built-in ([`Scenario::builtin`], [`builtin_names`]), a file
//!   ([`Scenario::from_file`]) or text ([`Scenario::from_toml_str`]), checked when loaded.
//! - [`RunSettings`]: what a run chooses besides the workload (journal mode, synchronous,
//!   other PRAGMAs, counting, extents, pacing); the one definition of the settings the
//!   Python layer sends ([`RunSettings::deserialize_named`]).
//! - [`run`] and [`run_with_stop`]: a scenario run into a new database, giving a
//!   [`RunOutput`]: a [`RunInfo`] and one [`CommitRecord`] per transaction, with its
//!   `CLOCK_MONOTONIC` window, payload bytes, [`VfsCounts`] (per [`FileKind`], a
//!   [`KindCounts`] each) and the SQL thread's [`CpuTime`].
//! - [`SqlLog`] and [`replay()`]: an app's recorded SQL log (format 1, the docs' "SQL log
//!   format" page) replayed through the same engine: the same counts, markers and commit
//!   records, and a [`ReplaySummary`] of what only a replay has.
//! - [`Stop`]: how a caller (Ctrl-C) stops long work within about 50 ms.
//! - [`EngineError`]: the one error type; `Display` is one line naming the problem,
//!   [`EngineError::hint`] the fix shown under it.
//! - [`vfs::map_database_files`] and [`vfs::file_extents`]: a database's physical extents
//!   (FIEMAP), as `extents` markers after a run.
//!
//! With a marker file (in a capture, the tracefs `trace_marker`) the engine writes one
//! line per event: the run's begin and end, each transaction's, each sync, truncate and
//! delete of the shim; `MARKERS.md` beside this crate is the one place the format is
//! documented. Every output type is serde `Serialize`, `Debug` and `Clone`.
//!
//! # Running a scenario
//!
//! A scenario of one `INSERT` per transaction, run in WAL mode with `synchronous=FULL`:
//! each commit appends its frames to the WAL and syncs it once, and the database file is
//! not written until a checkpoint.
//!
//! ```
//! use sqlwa_workloads::{run, FileKind, JournalMode, RunSettings, Scenario, SyncMode};
//!
//! let scenario = Scenario::from_toml_str(
//!     r#"
//!     name = "notes"
//!     description = "one note of 100 bytes per transaction"
//!     txns = 5
//!     warmup = 1
//!     seed = 1
//!
//!     [[table]]
//!     name = "notes"
//!     columns = ["id INTEGER PRIMARY KEY", "body TEXT"]
//!
//!     [[txn]]
//!     op = "insert"
//!     table = "notes"
//!     values = { body = { kind = "text", min = 100, max = 100 } }
//!     "#,
//!     "notes.toml",
//! )?;
//! let settings = RunSettings {
//!     journal: JournalMode::Wal,
//!     sync: SyncMode::Full,
//!     ..RunSettings::default()
//! };
//! let dir = tempfile::tempdir()?;
//! let out = run(&scenario, &settings, dir.path(), None, &mut |_progress| true)?;
//!
//! assert_eq!(out.info.db_path, dir.path().join("notes.db"));
//! assert_eq!(out.commits.len(), 6); // the warm-up transaction is run, and marked as one
//! for commit in out.commits.iter().filter(|c| !c.warmup) {
//!     let (wal, db) = (commit.vfs.get(FileKind::Wal), commit.vfs.get(FileKind::Db));
//!     assert_eq!(wal.sync_calls, 1);
//!     assert_eq!((db.write_calls, db.sync_calls), (0, 0));
//!     assert_eq!(commit.logical_bytes, 100);
//!     assert!(commit.end_ns > commit.start_ns);
//!     assert!(commit.cpu.total_ns() <= commit.end_ns - commit.start_ns);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Replaying a SQL log
//!
//! A log of one connection: a table created, then a transaction of two inserts, then an
//! insert in autocommit. Each writing transaction is one commit, from its first write to
//! COMMIT returning; the `BEGIN` before it is counted with the reads.
//!
//! ```
//! use sqlwa_workloads::{replay, RunSettings, SqlLog, Stop};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("app.jsonl");
//! std::fs::write(
//!     &path,
//!     r#"{"sqlwa_sql_log": 1, "source": "sql-file", "timed": false}
//! {"ev": "open", "conn": 1, "db": "/data/app.db"}
//! {"ev": "sql", "conn": 1, "sql": "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)"}
//! {"ev": "sql", "conn": 1, "sql": "BEGIN"}
//! {"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (1, 'one')"}
//! {"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (2, 'two')"}
//! {"ev": "sql", "conn": 1, "sql": "COMMIT"}
//! {"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (3, 'three')"}
//! {"ev": "close", "conn": 1}
//! "#,
//! )?;
//!
//! let log = SqlLog::load(&path, &Stop::never())?;
//! assert_eq!((log.name.as_str(), log.statements), ("app", 6));
//! assert_eq!(log.databases[0].recorded, "/data/app.db");
//! assert_eq!(log.databases[0].file_name, "app.db");
//!
//! let run_dir = dir.path().join("run");
//! let out = replay(&log, &RunSettings::default(), &run_dir, None, &mut |_| true, &Stop::never())?;
//! let statements: Vec<u64> = out.run.commits.iter().map(|c| c.statements).collect();
//! assert_eq!(statements, [1, 3, 1]); // CREATE; INSERT, INSERT, COMMIT; INSERT
//! assert_eq!(out.run.commits[1].logical_bytes, 8 + 3 + 8 + 3); // the literals' bytes
//! assert_eq!(out.run.info.db_path, run_dir.join("app.db"));
//! assert_eq!((out.replay.replayed, out.replay.reads.statements), (6, 1)); // BEGIN
//! assert_eq!(out.replay.timing, "back-to-back"); // the log has no timing
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod confine;
pub(crate) mod counts;
pub(crate) mod cpu;
pub(crate) mod dmmark;
pub mod engine;
pub mod error;
pub(crate) mod harness;
pub mod markers;
pub mod replay;
pub mod scenario;
pub mod settings;
pub mod sqllog;
pub(crate) mod stop;
pub mod vfs;
pub mod workload;

pub use counts::{FileKind, KindCounts, VfsCounts};
pub use cpu::CpuTime;
pub use engine::{
    run, run_into, run_with_stop, Closing, CommitRecord, CommitSink, EmptyTransaction, Progress,
    RunInfo, RunOutput, WroteNothing,
};
pub use error::{EngineError, ErrorClass};
pub use replay::{
    replay, replay_into, ReplayOutput, ReplaySummary, APP_FUNCTION_KIND, UNBUILT_FUNCTION_KIND,
};
pub use scenario::{builtin_names, Scenario};
pub use settings::{JournalMode, LockingMode, RunSettings, SyncMode};
pub use sqllog::{is_sql_log, SqlLog};
pub use stop::Stop;
pub use workload::{commit_columns, Column, Workload};
