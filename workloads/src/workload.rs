//! What a run runs, as its callers (the PyO3 module, the `sqlwa-engine` program) take it:
//! a scenario or a recorded SQL log, loaded from a name or a file and run into a
//! [`CommitSink`]; and the commit records as columns, one name and order for every caller.

use std::path::Path;

use crate::engine::{self, CommitRecord, CommitSink, Progress, RunInfo};
use crate::replay::{self, ReplaySummary};
use crate::{EngineError, FileKind, KindCounts, RunSettings, Scenario, SqlLog, Stop};

/// A scenario, or a recorded SQL log to replay.
#[derive(Debug)]
pub enum Workload {
    /// A built-in or a TOML scenario.
    Scenario(Scenario),
    /// A SQL log (format 1), replayed.
    Replay(SqlLog),
}

impl Workload {
    /// The workload in the file at `path`: a SQL log if its first line is a log header
    /// (whatever its name), else a scenario. Loading honours `stop`.
    pub fn from_file(path: &Path, stop: &Stop) -> Result<Workload, EngineError> {
        if crate::is_sql_log(path) {
            SqlLog::load(path, stop).map(Workload::Replay)
        } else {
            Scenario::from_file_with(path, stop).map(Workload::Scenario)
        }
    }

    /// The workload run in `dir`, each commit record handed to `commits` as its
    /// transaction ends ([`engine::run_into`], [`replay::replay_into`]); a replay's
    /// summary beside the run's information.
    pub fn run_into(
        &self,
        settings: &RunSettings,
        dir: &Path,
        markers: Option<&Path>,
        progress: &mut dyn FnMut(Progress) -> bool,
        stop: &Stop,
        commits: &mut dyn CommitSink,
    ) -> Result<(RunInfo, Option<ReplaySummary>), EngineError> {
        match self {
            Workload::Scenario(s) => {
                engine::run_into(s, settings, dir, markers, progress, stop, commits)
                    .map(|info| (info, None))
            }
            Workload::Replay(log) => {
                replay::replay_into(log, settings, dir, markers, progress, stop, commits)
                    .map(|(info, summary)| (info, Some(summary)))
            }
        }
    }
}

/// One column of [`commit_columns`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    /// Counters, nanoseconds, bytes.
    U64(Vec<u64>),
    /// Flags (`warmup`).
    Bool(Vec<bool>),
}

/// The commit records column by column, named and ordered as every reader of a run's
/// records takes them: `index`, `warmup`, `start_ns`, `end_ns`, `logical_bytes`,
/// `statements`, `cpu_user_ns`, `cpu_sys_ns`, then `vfs_<kind>_<counter>` for every
/// [`FileKind`] and every [`KindCounts`] field.
pub fn commit_columns(commits: &[CommitRecord]) -> Vec<(String, Column)> {
    let column = |f: fn(&CommitRecord) -> u64| Column::U64(commits.iter().map(f).collect());
    let mut columns = vec![
        ("index".to_string(), column(|c| c.index)),
        (
            "warmup".to_string(),
            Column::Bool(commits.iter().map(|c| c.warmup).collect()),
        ),
        ("start_ns".to_string(), column(|c| c.start_ns)),
        ("end_ns".to_string(), column(|c| c.end_ns)),
        ("logical_bytes".to_string(), column(|c| c.logical_bytes)),
        ("statements".to_string(), column(|c| c.statements)),
        ("cpu_user_ns".to_string(), column(|c| c.cpu.user_ns)),
        ("cpu_sys_ns".to_string(), column(|c| c.cpu.sys_ns)),
    ];
    for kind in FileKind::ALL {
        for (i, (field, _)) in KindCounts::default().fields().into_iter().enumerate() {
            let values = commits.iter().map(|c| c.vfs.get(kind).fields()[i].1);
            columns.push((
                format!("vfs_{}_{field}", kind.as_str()),
                Column::U64(values.collect()),
            ));
        }
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    #[test]
    fn columns_are_named_in_order_and_each_file_kind_has_every_counter() {
        let names: Vec<String> = commit_columns(&[]).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names[..8],
            [
                "index",
                "warmup",
                "start_ns",
                "end_ns",
                "logical_bytes",
                "statements",
                "cpu_user_ns",
                "cpu_sys_ns"
            ]
        );
        let counters = KindCounts::default().fields().len();
        assert_eq!(names.len(), 8 + FileKind::ALL.len() * counters);
        assert!(names.contains(&"vfs_wal_sync_calls".to_string()));
    }

    #[test]
    fn a_class_per_kind_of_error() {
        assert_eq!(EngineError::Interrupted.class(), ErrorClass::Interrupted);
        let bad = EngineError::BadSetting {
            name: "sync".into(),
            message: "no".into(),
        };
        assert_eq!(bad.class(), ErrorClass::Settings);
    }
}
