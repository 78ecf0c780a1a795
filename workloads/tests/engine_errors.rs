//! Engine behaviour on bad input and control flow: each error names the problem.

use sqlwa_workloads::{
    run, run_with_stop, EngineError, JournalMode, LockingMode, RunSettings, Scenario, Stop,
    SyncMode,
};

mod common;

fn quick() -> RunSettings {
    RunSettings {
        sync: SyncMode::Off,
        txns: Some(5),
        warmup: Some(0),
        ..Default::default()
    }
}

/// Runs the built-in `kv-prefs` scenario in `dir` and returns the error it must fail with.
fn kv_prefs_error(settings: &RunSettings, dir: &std::path::Path) -> EngineError {
    builtin_error("kv-prefs", settings, dir)
}

/// The error a built-in scenario must fail with (not the whole output if it does not).
fn builtin_error(name: &str, settings: &RunSettings, dir: &std::path::Path) -> EngineError {
    match common::run_quiet(&Scenario::builtin(name).unwrap(), settings, dir) {
        Ok(out) => panic!("{name} ran {} transactions", out.commits.len()),
        Err(err) => err,
    }
}

#[test]
fn existing_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kv-prefs.db"), b"precious").unwrap();
    let err = kv_prefs_error(&quick(), dir.path());
    assert!(matches!(err, EngineError::Io { .. }));
    assert!(
        err.to_string()
            .contains("kv-prefs.db: database already exists"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("kv-prefs.db")).unwrap(),
        b"precious"
    );
}

#[test]
fn unwritable_directory_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let err = kv_prefs_error(&quick(), &file.join("sub"));
    assert!(matches!(err, EngineError::Io { .. }), "{err}");
    assert!(!err.hint().is_empty());
}

#[test]
fn sql_failure_names_the_statement() {
    let text = r#"
name = "violates-not-null"
[[table]]
name = "t"
columns = ["id INTEGER PRIMARY KEY", "v TEXT NOT NULL"]
[[txn]]
op = "insert"
table = "t"
values = { v = { kind = "null" } }
"#;
    let scenario = Scenario::from_toml_str(text, "test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let err = common::run_quiet(&scenario, &quick(), dir.path()).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, EngineError::Sql { .. }));
    assert!(
        message.contains("NOT NULL") && message.contains("INSERT INTO t (v) VALUES (?)"),
        "{message}"
    );
}

#[test]
fn bad_extra_pragma_is_an_invalid_setting() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        extra_pragmas: vec!["cache_size=1; DROP TABLE x".into()],
        ..quick()
    };
    let err = kv_prefs_error(&settings, dir.path());
    assert!(matches!(err, EngineError::InvalidSetting { .. }), "{err}");
}

#[test]
fn schema_failure_names_the_statement() {
    // query_only makes SQLite refuse the first write: the schema statement.
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        extra_pragmas: vec!["query_only=1".into()],
        ..quick()
    };
    let err = kv_prefs_error(&settings, dir.path());
    assert!(matches!(err, EngineError::Sql { .. }), "{err}");
    assert!(
        err.to_string().contains("(statement: CREATE TABLE prefs"),
        "{err}"
    );
}

#[test]
fn progress_false_interrupts_at_a_transaction_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let mut calls = 0;
    let err = run(
        &Scenario::builtin("kv-prefs").unwrap(),
        &quick(),
        dir.path(),
        None,
        &mut |p| {
            calls += 1;
            assert_eq!(p.total, Some(5));
            false
        },
    )
    .unwrap_err();
    assert!(matches!(err, EngineError::Interrupted));
    assert_eq!(calls, 1);
}

#[test]
fn progress_reports_completion() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = None;
    run(
        &Scenario::builtin("kv-prefs").unwrap(),
        &quick(),
        dir.path(),
        None,
        &mut |p| {
            last = Some(p);
            true
        },
    )
    .unwrap();
    assert_eq!(last.map(|p| (p.done, p.total)), Some((5, Some(5))));
}

#[test]
fn a_duration_stops_starting_transactions_at_its_deadline() {
    // 50 ms of think time between transactions: 0.3 s holds about six, far fewer than asked
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        duration_s: Some(0.3),
        txns: Some(1_000_000),
        think_time_ms: Some(50.0),
        ..quick()
    };
    let started = std::time::Instant::now();
    let out = run(
        &Scenario::builtin("kv-prefs").unwrap(),
        &settings,
        dir.path(),
        None,
        &mut |_| true,
    )
    .unwrap();
    assert_eq!(out.info.stopped_by, "duration");
    let n = out.commits.len();
    assert!((3..=8).contains(&n), "{n} transactions in 0.3 s");
    let (first, last) = (&out.commits[0], &out.commits[n - 1]);
    assert!(last.start_ns - first.start_ns < 300_000_000);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn a_duration_alone_leaves_the_total_open() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        duration_s: Some(0.2),
        txns: None,
        ..quick()
    };
    let mut totals = vec![];
    let out = run(
        &Scenario::builtin("kv-prefs").unwrap(),
        &settings,
        dir.path(),
        None,
        &mut |p| {
            totals.push(p.total);
            true
        },
    )
    .unwrap();
    assert_eq!(out.info.stopped_by, "duration");
    assert_eq!(totals[0], None);
    assert_eq!(*totals.last().unwrap(), Some(out.commits.len() as u64));
}

#[test]
fn a_kept_stop_ends_the_run_with_the_transactions_done() {
    let dir = tempfile::tempdir().unwrap();
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = asked.clone();
    // says stop from its fourth question on: between transactions, never inside one
    let stop = Stop::new(move || counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 3)
        .keep_measured();
    let settings = RunSettings {
        txns: Some(1_000_000),
        think_time_ms: Some(60.0),
        ..quick()
    };
    let out = run_with_stop(
        &Scenario::builtin("kv-prefs").unwrap(),
        &settings,
        dir.path(),
        None,
        &mut |_| true,
        &stop,
    )
    .unwrap();
    assert_eq!(out.info.stopped_by, "interrupted");
    let n = out.commits.len();
    assert!(n > 0 && n < 100, "{n}");
    assert_eq!(
        out.commits.iter().map(|c| c.index).collect::<Vec<_>>(),
        (0..n as u64).collect::<Vec<_>>()
    );
}

#[test]
fn settings_are_applied_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        journal: JournalMode::Wal,
        sync: SyncMode::Normal,
        txns: Some(3),
        warmup: Some(1),
        seed: Some(99),
        page_size: Some(8192),
        cache_size: Some(-4000),
        wal_autocheckpoint: Some(100),
        journal_size_limit: Some(1 << 20),
        locking_mode: Some(LockingMode::Exclusive),
        mmap_size: Some(0),
        extra_pragmas: vec!["temp_store=memory".into()],
        ..Default::default()
    };
    let out = common::run_quiet(
        &Scenario::builtin("messenger").unwrap(),
        &settings,
        dir.path(),
    )
    .unwrap();
    let p: std::collections::HashMap<_, _> = out.info.pragmas.iter().cloned().collect();
    assert_eq!(p["journal_mode"], "wal");
    assert_eq!(p["synchronous"], "1");
    assert_eq!(p["page_size"], "8192");
    assert_eq!(p["cache_size"], "-4000");
    assert_eq!(p["wal_autocheckpoint"], "100");
    assert_eq!(p["journal_size_limit"], "1048576");
    assert_eq!(p["locking_mode"], "exclusive");
    assert_eq!(p["mmap_size"], "0");
    assert_eq!(out.commits.len(), 4);
    assert_eq!(out.info.seed, 99);
    assert_eq!(out.info.db_path, dir.path().join("messenger.db"));
    assert!(out.info.sqlite_version.starts_with("3."));
    assert!(!out.info.sqlite_source_id.is_empty());
    assert!(
        out.info
            .compile_options
            .iter()
            .any(|o| o.starts_with("THREADSAFE")),
        "{:?}",
        out.info.compile_options
    );
    assert!(out.info.vfs_counting);
}

#[test]
fn think_time_spaces_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        think_time_ms: Some(20.0),
        txns: Some(3),
        ..quick()
    };
    let out = common::run_quiet(
        &Scenario::builtin("kv-prefs").unwrap(),
        &settings,
        dir.path(),
    )
    .unwrap();
    for pair in out.commits.windows(2) {
        assert!(pair[1].start_ns - pair[0].end_ns >= 20_000_000);
    }
}

#[test]
fn concurrent_runs_keep_separate_counts() {
    let handles: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let journal = if i % 2 == 0 {
                    JournalMode::Wal
                } else {
                    JournalMode::Delete
                };
                let settings = RunSettings {
                    journal,
                    sync: SyncMode::Full,
                    txns: Some(30),
                    warmup: Some(3),
                    ..Default::default()
                };
                let out = common::run_quiet(
                    &Scenario::builtin("mobibench-insert").unwrap(),
                    &settings,
                    dir.path(),
                )
                .unwrap();
                (journal, out)
            })
        })
        .collect();
    for h in handles {
        let (journal, out) = h.join().unwrap();
        let expected = if journal == JournalMode::Wal { 1 } else { 3 };
        assert!(
            out.commits
                .iter()
                .filter(|c| !c.warmup)
                .all(|c| c.vfs.total().sync_calls == expected),
            "{journal}"
        );
    }
}

#[test]
fn a_full_database_at_its_page_limit_names_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        extra_pragmas: vec!["max_page_count=3".into()],
        txns: Some(2000),
        ..quick()
    };
    let err = builtin_error("mobibench-insert", &settings, dir.path());
    assert!(matches!(err, EngineError::Sql { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("database or disk is full: the database is limited to max_page_count = 3"),
        "{err}"
    );
}

#[test]
fn a_failing_directory_is_the_disks_fault_not_the_scenarios() {
    // The run's directory disappears mid-run, its database file with it: SQLite refuses to
    // write to a database whose file is gone.
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("run");
    let settings = RunSettings {
        txns: Some(1_000_000),
        ..quick()
    };
    let mut removed = false;
    let Err(err) = run(
        &Scenario::builtin("mobibench-insert").unwrap(),
        &settings,
        &dir,
        None,
        &mut |p| {
            if p.done > 0 && !removed {
                std::fs::remove_dir_all(&dir).unwrap();
                removed = true;
            }
            true
        },
    ) else {
        panic!("the run went on without its directory");
    };
    assert!(matches!(err, EngineError::Storage { .. }), "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "the database's file was moved or deleted in {} (SQLite: attempt to write a readonly database; statement: INSERT",
            dir.display()
        )),
        "{err}"
    );
    assert!(err.hint().contains("not the scenario"), "{}", err.hint());
}

#[test]
fn a_stop_ends_a_long_setup_from_inside() {
    let text = r#"
name = "big-setup"
[[table]]
name = "t"
columns = ["id INTEGER PRIMARY KEY", "v INTEGER"]
[[setup]]
op = "insert"
table = "t"
repeat = 100000000
values = { v = { kind = "int", min = 1, max = 9 } }
[[txn]]
op = "insert"
table = "t"
values = { v = { kind = "int", min = 1, max = 9 } }
"#;
    let scenario = Scenario::from_toml_str(text, "test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let stop = Stop::new(move || started.elapsed() > std::time::Duration::from_millis(300));
    let err = run_with_stop(&scenario, &quick(), dir.path(), None, &mut |_| true, &stop)
        .err()
        .map(|e| e.to_string());
    assert_eq!(err.as_deref(), Some("interrupted"));
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[test]
fn extra_pragmas_may_not_contradict_the_runs_settings() {
    let conflicts = [
        (RunSettings { sync: SyncMode::Full, ..quick() }, "synchronous=off", "extra pragma 'synchronous=off' contradicts the run's setting sync=full (PRAGMA synchronous read 2 before it, 0 after)"),
        (RunSettings { journal: JournalMode::Wal, ..quick() }, "main.journal_mode=delete", "extra pragma 'main.journal_mode=delete' contradicts the run's setting journal=wal"),
        (RunSettings { cache_size: Some(-500), ..quick() }, "default_cache_size=100", "contradicts the run's setting cache_size=-500"),
    ];
    for (settings, extra, expected) in conflicts {
        let dir = tempfile::tempdir().unwrap();
        let settings = RunSettings {
            extra_pragmas: vec![extra.into()],
            ..settings
        };
        let err = kv_prefs_error(&settings, dir.path());
        assert!(matches!(err, EngineError::PragmaConflict { .. }), "{err}");
        assert!(err.to_string().contains(expected), "{err}");
    }
    // the same value, or a pragma no setting of the run sets, is no contradiction
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        sync: SyncMode::Full,
        extra_pragmas: vec!["synchronous=FULL".into(), "cache_size=100".into()],
        ..quick()
    };
    let out = common::run_quiet(
        &Scenario::builtin("kv-prefs").unwrap(),
        &settings,
        dir.path(),
    )
    .unwrap();
    let p: std::collections::HashMap<_, _> = out.info.pragmas.iter().cloned().collect();
    assert_eq!(
        (p["synchronous"].as_str(), p["cache_size"].as_str()),
        ("2", "100")
    );
}

#[test]
fn the_stop_hook_is_not_asked_inside_a_measured_transaction() {
    // Asking may take Python's GIL: inside a commit's window it would add to its time.
    // contacts-sync runs 100 upserts a transaction, enough for SQLite's progress handler.
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = asked.clone();
    let stop = Stop::new(move || {
        log.lock()
            .unwrap()
            .push(sqlwa_workloads::markers::monotonic_ns());
        false
    });
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        txns: Some(300),
        ..quick()
    };
    let scenario = Scenario::builtin("contacts-sync").unwrap();
    let out = run_with_stop(&scenario, &settings, dir.path(), None, &mut |_| true, &stop).unwrap();
    let asked = asked.lock().unwrap();
    assert!(asked.len() > 1, "the hook was asked");
    for c in &out.commits {
        assert!(
            !asked.iter().any(|t| (c.start_ns..=c.end_ns).contains(t)),
            "asked inside transaction {}",
            c.index
        );
    }
}

#[test]
fn a_stop_cuts_a_long_think_time_short() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        think_time_ms: Some(60_000.0),
        txns: Some(3),
        ..quick()
    };
    let started = std::time::Instant::now();
    let stop = Stop::new(move || started.elapsed() > std::time::Duration::from_millis(300));
    let scenario = Scenario::builtin("kv-prefs").unwrap();
    let err = run_with_stop(&scenario, &settings, dir.path(), None, &mut |_| true, &stop);
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some("interrupted")
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}
