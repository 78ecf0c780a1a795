//! sqlwa's workload engine: app-like SQLite scenarios on rusqlite (bundled SQLite), a
//! counting VFS shim and commit markers. See `API.md` beside this crate for the
//! contract the Python layer relies on, `MARKERS.md` for the marker format and
//! `scenarios/README.md` for the scenario format.

mod confine;
pub mod counts;
pub mod cpu;
pub mod dmmark;
pub mod engine;
pub mod error;
pub mod markers;
pub mod replay;
pub mod scenario;
pub mod settings;
pub mod sqllog;
pub mod stop;
pub mod vfs;

pub use counts::{FileKind, KindCounts, VfsCounts};
pub use cpu::CpuTime;
pub use engine::{run, run_with_stop, CommitRecord, Progress, RunInfo, RunOutput};
pub use error::EngineError;
pub use markers::MarkerSink;
pub use replay::{replay, ReplayOutput, ReplaySummary};
pub use scenario::{builtin_names, Scenario};
pub use settings::{JournalMode, LockingMode, RunSettings, SyncMode, Timing};
pub use sqllog::{is_sql_log, SqlLog};
pub use stop::Stop;
