//! A replay paced as recorded: each transaction starts at its recorded offset. In a test
//! binary of its own, so no heavier test of the same binary competes for the CPU while
//! it measures milliseconds.

/// How late a paced transaction may start: the thread sleeps until its offset, then waits
/// for a CPU. On a 2-core machine under a full load (the flake finder's, or `./scripts/test`
/// beside other work: load average 6 to 11) the woken thread queues behind the runnable
/// tasks' slices (EEVDF's base slice is 0.75 ms × (1 + log2 CPUs) = 1.5 ms here), measured
/// at up to 4.4 ms late, median 2.1 ms; 20 ms is a dozen slices. A pacing that ignored the
/// factor is late by 25 to 250 ms at these gaps.
const LATE_BY_AT_MOST_MS: f64 = 20.0;

mod common;

use common::sqllog::write_log;
use serde_json::json;
use sqlwa_workloads::{replay, JournalMode, RunSettings, SqlLog, Stop, SyncMode};

#[test]
fn recorded_gaps_are_kept_and_scaled() {
    let dir = tempfile::tempdir().unwrap();
    let mut events = vec![json!({"ev": "open", "conn": 1, "db": "/d/a.db"})];
    // Long against the scheduler's noise (LATE_BY_AT_MOST_MS), so each gap's scaling shows.
    let gaps_ms = [0u64, 300, 50, 500, 200];
    let mut t = 1_000_000u64;
    events.push(json!({"ev": "sql", "conn": 1, "sql": "CREATE TABLE t (v)", "t": t}));
    for gap in gaps_ms {
        t += gap * 1_000_000;
        events.push(json!({"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (1)", "t": t}));
    }
    let log = write_log(dir.path(), &events, true);
    let log = SqlLog::load(&log, &Stop::never()).unwrap();
    for (timing, factor) in [("recorded", 1.0), ("0.5", 0.5)] {
        let settings = RunSettings {
            timing: Some(timing.into()),
            journal: JournalMode::Wal,
            sync: SyncMode::Off,
            ..Default::default()
        };
        let run_dir = dir.path().join(timing);
        let out = replay(
            &log,
            &settings,
            &run_dir,
            None,
            &mut |_| true,
            &Stop::never(),
        )
        .unwrap();
        // Each transaction starts at its recorded offset from the first (times the
        // factor): never early; late only by scheduling noise.
        let commits = &out.run.commits;
        let mut late = Vec::new();
        let mut want = 0.0;
        for (i, gap) in gaps_ms.iter().enumerate() {
            want += *gap as f64 * factor;
            let got = (commits[i + 1].start_ns - commits[0].start_ns) as f64 / 1e6;
            assert!(
                got >= want - 0.1,
                "{timing}: commit {} early: {got} ms, want {want}",
                i + 1
            );
            late.push(got - want);
        }
        late.sort_by(f64::total_cmp);
        assert!(
            late[late.len() / 2] < LATE_BY_AT_MOST_MS,
            "{timing}: late by {late:?} ms"
        );
    }
}
