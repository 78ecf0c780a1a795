//! Independent truth from the kernel side: the same workload under `strace -f -c` issues
//! exactly as many fsync + fdatasync calls per commit as the VFS shim counted xSyncs,
//! plus the one directory sync SQLite adds inside the first xSync after (re)creating a
//! rollback journal. Skipped (with a note) where strace is missing or ptrace is denied.
//!
//! The test re-runs this test binary under strace, selecting `strace_child` through an
//! environment variable. Setup and close cost the same in a short and a long run, so the
//! difference between the two isolates the extra commits.

use std::path::Path;
use std::process::{Command, Stdio};

use sqlwa_workloads::{JournalMode, RunSettings, Scenario, SyncMode};

mod common;

const CHILD_ENV: &str = "SQLWA_STRACE_CHILD";

/// Runs in the child: the workload, then the expected syscall syncs written to a file.
#[test]
fn strace_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [journal, sync, txns, dir] = parts[..] else {
        panic!("bad {CHILD_ENV}: {spec}")
    };
    let settings = RunSettings {
        journal: journal.parse().unwrap(),
        sync: sync.parse().unwrap(),
        txns: Some(txns.parse().unwrap()),
        warmup: Some(0),
        ..Default::default()
    };
    let dir = Path::new(dir);
    let out = common::run_quiet(
        &Scenario::builtin("mobibench-insert").unwrap(),
        &settings,
        &dir.join("db"),
    )
    .unwrap();
    // synchronous=EXTRA also syncs the directory after unlinking the journal (xDelete's
    // syncDir), inside xDelete rather than as an xSync.
    let extra = settings.sync == SyncMode::Extra;
    let expected: u64 = out
        .commits
        .iter()
        .map(|c| {
            // The journal is opened with O_CREAT once per write transaction (in normal
            // locking mode; PERSIST's extra read-only hot-journal opens do not create), and
            // its first xSync then also syncs the directory.
            let dir_sync = u64::from(c.vfs.journal.sync_calls > 0);
            let unlink_dir_sync = if extra { c.vfs.journal.delete_calls } else { 0 };
            c.vfs.total().sync_calls + dir_sync + unlink_dir_sync
        })
        .sum();
    std::fs::write(dir.join("expected"), expected.to_string()).unwrap();
}

/// fsync + fdatasync calls in an `strace -c` summary.
fn syscall_syncs(summary: &str) -> u64 {
    summary
        .lines()
        .filter_map(|line| {
            let tokens: Vec<&str> = line.split_whitespace().collect();
            match tokens.last() {
                Some(&"fsync") | Some(&"fdatasync") => tokens.get(3)?.parse::<u64>().ok(),
                _ => None,
            }
        })
        .sum()
}

fn strace_works() -> bool {
    Command::new("strace")
        .args(["-f", "-c", "-o", "/dev/null", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// (syscall syncs, expected from VFS counts) of one run of `txns` commits.
fn traced_run(journal: JournalMode, sync: SyncMode, txns: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("strace.txt");
    let status = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&summary)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "strace_child", "--nocapture", "--test-threads=1"])
        .env(
            CHILD_ENV,
            format!("{journal} {sync} {txns} {}", dir.path().display()),
        )
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "child run failed");
    let syscalls = syscall_syncs(&std::fs::read_to_string(&summary).unwrap());
    let expected = std::fs::read_to_string(dir.path().join("expected"))
        .unwrap()
        .parse()
        .unwrap();
    (syscalls, expected)
}

#[test]
fn syscall_syncs_match_vfs_syncs() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    if !strace_works() {
        eprintln!("skipped: strace is not installed or ptrace is not permitted");
        return;
    }
    let cases = [
        (JournalMode::Delete, SyncMode::Full, 4),
        (JournalMode::Delete, SyncMode::Normal, 3),
        (JournalMode::Delete, SyncMode::Extra, 5),
        (JournalMode::Truncate, SyncMode::Normal, 3),
        (JournalMode::Persist, SyncMode::Normal, 4),
        (JournalMode::Truncate, SyncMode::Full, 5),
        (JournalMode::Persist, SyncMode::Full, 5),
        (JournalMode::Wal, SyncMode::Full, 1),
        (JournalMode::Wal, SyncMode::Normal, 0),
        (JournalMode::Delete, SyncMode::Off, 0),
    ];
    for (journal, sync, per_commit) in cases {
        let (short_sys, short_vfs) = traced_run(journal, sync, 10);
        let (long_sys, long_vfs) = traced_run(journal, sync, 40);
        let (sys, vfs) = (long_sys - short_sys, long_vfs - short_vfs);
        assert_eq!(
            sys, vfs,
            "{journal}/{sync}: syscalls {sys} vs VFS {vfs} over 30 commits"
        );
        // and the documented total per commit (sqlite-commit-syncs.md)
        assert_eq!(sys, 30 * per_commit, "{journal}/{sync}");
    }
}
