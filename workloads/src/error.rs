//! The one error type of the engine. Every variant carries what the user needs to fix
//! the problem; `Display` is one line, `hint()` the suggested fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("unknown scenario '{name}' (available: {})", available.join(", "))]
    UnknownScenario {
        name: String,
        available: Vec<String>,
    },

    #[error("scenario file {origin}, line {line}, column {column}: {message}")]
    ScenarioParse {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },

    #[error("scenario {origin}: {message}")]
    InvalidScenario { origin: String, message: String },

    /// The scenario file could not be read at all (its text is checked by the parser).
    #[error("cannot read scenario file {}: {message}", path.display())]
    UnreadableScenario { path: PathBuf, message: String },

    #[error("invalid value '{value}' for {name} (allowed: {})", allowed.join(", "))]
    InvalidSetting {
        name: String,
        value: String,
        allowed: Vec<String>,
    },

    /// A settings map that does not deserialise: `name` is the setting (an unknown one,
    /// or the one with a value of the wrong type or not allowed).
    #[error("setting {name}: {message}")]
    BadSetting { name: String, message: String },

    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },

    #[error("SQL failed: {message} (statement: {statement})")]
    Sql { statement: String, message: String },

    /// The filesystem under the run's database failed a statement (full, an I/O error, a
    /// file it cannot open): the disk's fault, not the scenario's.
    #[error("{problem} in {} (SQLite: {message}; statement: {statement})", dir.display())]
    Storage {
        dir: PathBuf,
        problem: String,
        message: String,
        statement: String,
    },

    /// An extra PRAGMA changed what one of the run's own settings set; `readback` says
    /// how ("PRAGMA synchronous read 2 before it, 0 after").
    #[error(
        "extra pragma '{pragma}' contradicts the run's setting {setting}={wanted} ({readback})"
    )]
    PragmaConflict {
        pragma: String,
        setting: String,
        wanted: String,
        readback: String,
    },

    /// The kernel would not say how much CPU time the SQL thread used (getrusage with
    /// RUSAGE_THREAD, in every Linux since 2.6.26).
    #[error("cannot read the SQL thread's CPU time: {message}")]
    CpuTime { message: String },

    /// A SQL log (format 1, replay.rs) that cannot be read: not JSON, a key missing, a
    /// statement on a connection never opened. `line` is 1-based.
    #[error("SQL log {}, line {line}: {message}", path.display())]
    LogParse {
        path: PathBuf,
        line: u64,
        message: String,
    },

    /// A logged statement failed on replay and the run is `strict`.
    #[error("SQL log {}, line {line}: statement failed on replay: {message} (statement: {statement})", path.display())]
    ReplayFailed {
        path: PathBuf,
        line: u64,
        message: String,
        statement: String,
    },

    /// A replay that measured no commit: the log wrote nothing (or only in warm-up).
    #[error("SQL log {}: {message}", path.display())]
    NothingReplayed { path: PathBuf, message: String },

    #[error("interrupted")]
    Interrupted,
}

impl EngineError {
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
