//! Per-commit CPU time of the SQL thread (`CommitRecord::cpu`), against what the kernel
//! says about the thread independently of the engine's getrusage: CLOCK_THREAD_CPUTIME_ID
//! read by the test around the whole run, and the thread's runqueue wait from
//! /proc/thread-self/schedstat (time it was ready to run but another task had the CPU,
//! which counts in a commit's latency but is no CPU time of its own).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;
use sqlwa_workloads::{run, CommitRecord, RunSettings, Scenario};

/// Each transaction sums 1..N in a recursive CTE (through a view: a scenario's
/// operations read tables and views) and stores one row: CPU-bound, a few ms of SQL.
const CPU_BOUND: &str = r#"
name = "cpu-bound"
txns = 6
warmup = 1
[[table]]
name = "results"
columns = ["id INTEGER PRIMARY KEY", "v INTEGER"]
[[table]]
name = "burn"
sql = "CREATE VIEW burn AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT sum(x) AS s FROM c"
[[txn]]
op = "select"
table = "burn"
[[txn]]
op = "insert"
table = "results"
values = { v = { kind = "int", min = 1, max = 9 } }
"#;

fn thread_clock_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds this thread has waited on a runqueue (schedstat's second field).
fn runqueue_wait_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn latency(c: &CommitRecord) -> u64 {
    c.end_ns - c.start_ns
}

fn settings(txns: u64) -> RunSettings {
    RunSettings {
        txns: Some(txns),
        sync: "off".parse().unwrap(), // no device wait in these commits: CPU and runqueue only
        ..RunSettings::default()
    }
}

#[test]
fn a_cpu_bound_commit_is_cpu_time_and_the_sum_fits_the_threads_own_clock() {
    let scenario = Scenario::from_toml_str(CPU_BOUND, "cpu-bound.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (clock_before, waited_before) = (thread_clock_ns(), runqueue_wait_ns());
    let out = common::run_quiet(&scenario, &settings(6), dir.path()).unwrap();
    let (clock, waited) = (
        thread_clock_ns() - clock_before,
        runqueue_wait_ns() - waited_before,
    );
    let cpu: u64 = out.commits.iter().map(|c| c.cpu.total_ns()).sum();
    let wall: u64 = out.commits.iter().map(latency).sum();
    // the commits are part of the run: their CPU time is part of the thread's
    assert!(
        cpu <= clock,
        "commits {cpu} ns, the thread's clock {clock} ns"
    );
    for c in &out.commits {
        assert!(c.cpu.total_ns() <= latency(c), "{c:?}");
    }
    // The time not spent on the CPU is the runqueue wait (the test's own reading, over
    // the whole run, so at least the commits' share of it); little else is left.
    let running = wall.saturating_sub(waited);
    assert!(
        cpu as f64 >= 0.8 * running as f64,
        "CPU {cpu} ns of {wall} ns latency, {waited} ns waiting for a CPU"
    );
    assert!(cpu > 0 && out.commits.iter().all(|c| c.cpu.total_ns() > 0));
}

#[test]
fn a_commit_that_waits_on_a_lock_spends_little_cpu_on_it() {
    let scenario = Scenario::builtin("kv-prefs").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kv-prefs.db");
    let settings = RunSettings {
        warmup: Some(0),
        extra_pragmas: vec!["busy_timeout=10000".into()],
        ..settings(3)
    };
    let (locked_tx, locked_rx) = mpsc::channel();
    let mut holder = None;
    // Before the first transaction: another connection takes the write lock and holds it
    // for 300 ms, so transaction 0 waits in SQLite's busy handler (which sleeps).
    let mut progress = |p: sqlwa_workloads::Progress| {
        if p.done == 0 && holder.is_none() {
            let (db, locked) = (db.clone(), locked_tx.clone());
            holder = Some(std::thread::spawn(move || {
                let conn = Connection::open(&db).unwrap();
                conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
                locked.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                conn.execute_batch("COMMIT").unwrap();
            }));
            locked_rx.recv().unwrap();
        }
        true
    };
    let out = run(&scenario, &settings, dir.path(), None, &mut progress).unwrap();
    holder.expect("the run reported its start").join().unwrap();
    let waited = &out.commits[0];
    assert!(latency(waited) >= 250_000_000, "{waited:?}");
    assert!(
        waited.cpu.total_ns() * 10 < latency(waited),
        "a commit that waited {} ns used {:?}",
        latency(waited),
        waited.cpu
    );
}

#[test]
fn the_think_time_lies_between_the_windows_not_in_them() {
    let scenario = Scenario::builtin("kv-prefs").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        warmup: Some(0),
        think_time_ms: Some(50.0),
        ..settings(4)
    };
    let out = common::run_quiet(&scenario, &settings, dir.path()).unwrap();
    for pair in out.commits.windows(2) {
        assert!(pair[1].start_ns - pair[0].end_ns >= 50_000_000, "{pair:?}");
    }
    for c in &out.commits {
        assert!(latency(c) < 50_000_000, "the pause is in the window: {c:?}");
        assert!(c.cpu.total_ns() <= latency(c), "{c:?}");
    }
}
