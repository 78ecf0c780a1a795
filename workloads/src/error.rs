//! The one error type of the engine. Every variant carries what the user needs to fix
//! the problem; `Display` is one line, `hint()` the suggested fix.

use std::path::PathBuf;

/// Everything the engine can fail with. Each variant carries what the user needs to fix
/// the problem: [`Display`](std::fmt::Display) is one line naming it, [`EngineError::hint`]
/// the fix shown under it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No built-in scenario of that name.
    #[error("unknown scenario '{name}' (available: {})", available.join(", "))]
    UnknownScenario {
        /// the name asked for
        name: String,
        /// the built-in names
        available: Vec<String>,
    },

    /// A scenario that is not valid TOML or not a scenario (also a file that is not UTF-8
    /// text: "not a valid scenario"), at a position.
    #[error("scenario file {origin}, line {line}, column {column}: {message}")]
    ScenarioParse {
        /// the file's path, or `builtin:<name>`
        origin: String,
        /// 1-based
        line: usize,
        /// 1-based
        column: usize,
        /// what is wrong there
        message: String,
    },

    /// A scenario that parses but is wrong: a table missing from the schema, SQL that does
    /// not prepare, a statement the confinement refuses (`statement refused: <why>
    /// (statement: <sql>)`), a limit passed.
    #[error("scenario {origin}: {message}")]
    InvalidScenario {
        /// the file's path, or `builtin:<name>`
        origin: String,
        /// what is wrong
        message: String,
    },

    /// The scenario file could not be read at all (its text is checked by the parser).
    #[error("cannot read scenario file {}: {message}", path.display())]
    UnreadableScenario {
        /// the file
        path: PathBuf,
        /// why (the OS's error, or what the file is instead of a regular file)
        message: String,
    },

    /// A setting's value is not one of those allowed.
    #[error("invalid value '{value}' for {name} (allowed: {})", allowed.join(", "))]
    InvalidSetting {
        /// the setting
        name: String,
        /// the value given
        value: String,
        /// the values allowed (empty: see the setting's documentation)
        allowed: Vec<String>,
    },

    /// A settings map that does not deserialise, or a setting this kind of run does not
    /// take: `name` is the setting (an unknown one, or the one with a value of the wrong
    /// type or not allowed; `extra_pragmas[1]` for a list item).
    #[error("setting {name}: {message}")]
    BadSetting {
        /// the setting
        name: String,
        /// what is wrong with it
        message: String,
    },

    /// A file or directory of the run's that could not be made, opened or written.
    #[error("{}: {message}", path.display())]
    Io {
        /// the file or directory
        path: PathBuf,
        /// what failed
        message: String,
    },

    /// A statement failed (a SQLITE_FULL under a lowered max_page_count names that limit).
    #[error("SQL failed: {message} (statement: {statement})")]
    Sql {
        /// the statement, or what the engine was doing ("(closing the database)")
        statement: String,
        /// SQLite's message
        message: String,
    },

    /// The filesystem under the run's database failed a statement (SQLITE_FULL, IOERR,
    /// CANTOPEN, NOLFS, or the database file vanished): the disk's fault, not the
    /// scenario's.
    #[error("{problem} in {} (SQLite: {message}; statement: {statement})", dir.display())]
    Storage {
        /// the database's directory
        dir: PathBuf,
        /// the problem in words ("no space left for the database")
        problem: String,
        /// SQLite's message
        message: String,
        /// the statement that failed
        statement: String,
    },

    /// An extra PRAGMA changed what one of the run's own settings set; `readback` says
    /// how ("PRAGMA synchronous read 2 before it, 0 after").
    #[error(
        "extra pragma '{pragma}' contradicts the run's setting {setting}={wanted} ({readback})"
    )]
    PragmaConflict {
        /// the extra PRAGMA as given
        pragma: String,
        /// the run's setting it contradicts
        setting: String,
        /// the setting's value
        wanted: String,
        /// what was read back before and after the extra PRAGMA
        readback: String,
    },

    /// The kernel would not say how much CPU time the SQL thread used (getrusage with
    /// RUSAGE_THREAD, in every Linux since 2.6.26).
    #[error("cannot read the SQL thread's CPU time: {message}")]
    CpuTime {
        /// the OS's error
        message: String,
    },

    /// A SQL log (format 1) that cannot be read: not JSON, a key missing, a statement on a
    /// connection never opened.
    #[error("SQL log {}, line {line}: {message}", path.display())]
    LogParse {
        /// the log
        path: PathBuf,
        /// 1-based
        line: u64,
        /// what is wrong with the line
        message: String,
    },

    /// A logged statement failed on replay and the run is `strict`.
    #[error("SQL log {}, line {line}: statement failed on replay: {message} (statement: {statement})", path.display())]
    ReplayFailed {
        /// the log
        path: PathBuf,
        /// the statement's line, 1-based
        line: u64,
        /// SQLite's message
        message: String,
        /// the statement
        statement: String,
    },

    /// A logged statement reached past the replay's confinement where SQLite's
    /// authorizer alone does not stop it: the VFS shim refused a file outside the run's
    /// directory, or journal_mode or synchronous read back changed under the run. Whatever
    /// `strict`: the run would otherwise write elsewhere or measure another setting than
    /// it reports.
    #[error("SQL log {}, line {line}: {message} (statement: {statement})", path.display())]
    ReplayConfined {
        /// the log
        path: PathBuf,
        /// the statement's line, 1-based
        line: u64,
        /// what the statement did
        message: String,
        /// the statement
        statement: String,
    },

    /// A replay that measured no commit: the log wrote nothing (or only in warm-up).
    #[error("SQL log {}: {message}", path.display())]
    NothingReplayed {
        /// the log
        path: PathBuf,
        /// what the replay did instead
        message: String,
    },

    /// Stopped: the progress callback returned false, or a [`Stop`](crate::Stop) said stop.
    #[error("interrupted")]
    Interrupted,
}

/// What an [`EngineError`] is about, as its callers tell users apart: the PyO3 module
/// raises one exception class per kind, `sqlwa-engine` exits with one status per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The workload: an unknown scenario, one that does not load, a SQL log that does
    /// not load or fails on replay.
    Workload,
    /// The settings: an unknown or mistyped setting, a value not allowed.
    Settings,
    /// A stop asked for (Ctrl-C, SIGTERM) ended the run.
    Interrupted,
    /// The run itself failed: a file, a statement, the storage, the CPU clock.
    Run,
}

impl EngineError {
    /// What the error is about ([`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            EngineError::UnknownScenario { .. }
            | EngineError::ScenarioParse { .. }
            | EngineError::InvalidScenario { .. }
            | EngineError::UnreadableScenario { .. }
            | EngineError::LogParse { .. }
            | EngineError::ReplayFailed { .. }
            | EngineError::ReplayConfined { .. }
            | EngineError::NothingReplayed { .. } => ErrorClass::Workload,
            EngineError::InvalidSetting { .. }
            | EngineError::BadSetting { .. }
            | EngineError::PragmaConflict { .. } => ErrorClass::Settings,
            EngineError::Interrupted => ErrorClass::Interrupted,
            _ => ErrorClass::Run,
        }
    }

    /// The one-line fix shown to the user below the error.
    pub fn hint(&self) -> String {
        match self {
            EngineError::UnknownScenario { .. } => {
                "pass one of the built-in names, or the path of a scenario .toml file".into()
            }
            EngineError::ScenarioParse { .. } => {
                "fix the TOML at that position; workloads/scenarios/README.md documents the format"
                    .into()
            }
            EngineError::InvalidScenario { .. } => {
                "correct the scenario; workloads/scenarios/README.md documents every field".into()
            }
            EngineError::UnreadableScenario { .. } => {
                "check the path and that the file is readable".into()
            }
            EngineError::InvalidSetting { name, allowed, .. } if allowed.is_empty() => {
                format!("check the value given for {name}")
            }
            EngineError::InvalidSetting { name, allowed, .. } => {
                format!("use one of: {} for {name}", allowed.join(", "))
            }
            EngineError::BadSetting { name, .. } => {
                format!("fix or leave out setting {name}; the message says what it accepts")
            }
            EngineError::Io { .. } => {
                "choose a writable directory that does not already hold this scenario's database"
                    .into()
            }
            EngineError::Sql { .. } => {
                "fix the statement in the scenario (schema or operation) or the extra PRAGMA".into()
            }
            EngineError::Storage { .. } => "the disk or directory is full or failing, not the \
                scenario: free space there or choose another directory (--dir; --image-size \
                with --fs), and see the kernel log (dmesg) for I/O errors"
                .into(),
            EngineError::PragmaConflict { setting, .. } => format!(
                "leave that pragma out and choose {setting} with the run's own option (sqlwa run --{})",
                setting.replace('_', "-")
            ),
            EngineError::CpuTime { .. } => {
                "run on a Linux kernel with getrusage(RUSAGE_THREAD) (2.6.26 or later)".into()
            }
            EngineError::LogParse { .. } => "fix or re-record the log; its format is \
                SQLLOG format 1 (one JSON object per line, the header first)"
                .into(),
            EngineError::ReplayFailed { .. } => "replay from a snapshot of the app's database \
                (--from DB), or leave --strict out to count such failures and go on"
                .into(),
            EngineError::ReplayConfined { .. } => "a replay works on the run's own database \
                files with the journal_mode and synchronous the run chose: remove that \
                statement from the log (or choose the setting with -j/--sync)"
                .into(),
            EngineError::NothingReplayed { .. } => "replay from a snapshot of the app's \
                database (--from DB) when its tables predate the log, record a stretch in \
                which the app writes, or lower --warmup"
                .into(),
            EngineError::Interrupted => {
                "the run was stopped before it finished; run it again".into()
            }
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, err: impl std::fmt::Display) -> Self {
        EngineError::Io {
            path: path.into(),
            message: err.to_string(),
        }
    }

    /// A scenario's statement the confinement refused (see `confine.rs`).
    pub(crate) fn refused(origin: &str, statement: &str, reason: &str) -> Self {
        EngineError::InvalidScenario {
            origin: origin.into(),
            message: format!("statement refused: {reason} (statement: {statement})"),
        }
    }

    pub(crate) fn sql(statement: impl Into<String>, err: impl std::fmt::Display) -> Self {
        EngineError::Sql {
            statement: statement.into(),
            message: err.to_string(),
        }
    }
}
