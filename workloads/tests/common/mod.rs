//! Helpers shared by the integration tests (each test binary uses some of them).
#![allow(dead_code)]

pub mod sqllog;

use std::path::Path;

use sqlwa_workloads::{run, EngineError, RunOutput, RunSettings, Scenario};

/// `run` without a marker file or progress callback.
pub fn run_quiet(
    scenario: &Scenario,
    settings: &RunSettings,
    dir: &Path,
) -> Result<RunOutput, EngineError> {
    run(scenario, settings, dir, None, &mut |_| true)
}

/// Runs built-in `mobibench-insert` in a temp dir under `parent` (the system temp dir
/// when None) with a marker file; returns the output and the marker lines, checking that
/// the file ends with a complete line.
pub fn run_with_markers(settings: &RunSettings, parent: Option<&Path>) -> (RunOutput, Vec<String>) {
    let scenario = Scenario::builtin("mobibench-insert").unwrap();
    let dir = match parent {
        Some(p) => tempfile::tempdir_in(p),
        None => tempfile::tempdir(),
    }
    .unwrap();
    let marker_path = dir.path().join("trace_marker");
    let out = run(
        &scenario,
        settings,
        &dir.path().join("db"),
        Some(&marker_path),
        &mut |_| true,
    )
    .unwrap();
    let text = std::fs::read_to_string(&marker_path).unwrap();
    assert!(text.ends_with('\n'));
    (out, text.lines().map(String::from).collect())
}
