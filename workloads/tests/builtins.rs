//! Every built-in scenario loads and runs end to end (few transactions).

use sqlwa_workloads::{builtin_names, JournalMode, RunSettings, Scenario, SyncMode};

mod common;

#[test]
fn every_builtin_runs_in_every_journal_mode_family() {
    let names = builtin_names();
    for required in [
        "mobibench-insert",
        "mobibench-update",
        "mobibench-delete",
        "mobibench-insert-2013",
        "messenger",
        "contacts-sync",
        "feed-cache",
        "kv-prefs",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "missing built-in {required}"
        );
    }
    for name in &names {
        let scenario = Scenario::builtin(name).unwrap();
        for journal in [JournalMode::Delete, JournalMode::Wal] {
            let dir = tempfile::tempdir().unwrap();
            let settings = RunSettings {
                journal,
                sync: SyncMode::Off,
                txns: Some(12),
                warmup: Some(2),
                ..Default::default()
            };
            let out = common::run_quiet(&scenario, &settings, dir.path())
                .unwrap_or_else(|e| panic!("{name} {journal}: {e}"));
            assert_eq!(out.commits.len(), 14, "{name}");
            assert_eq!(out.commits.iter().filter(|c| c.warmup).count(), 2);
            let measured = &out.commits[2..];
            assert!(measured.iter().all(|c| c.end_ns >= c.start_ns));
            assert!(
                measured.iter().all(|c| c.vfs.total().write_calls > 0),
                "{name} {journal}: a commit wrote nothing"
            );
            if name != "mobibench-delete" {
                assert!(measured.iter().all(|c| c.logical_bytes > 0), "{name}");
            }
            let pragma = |k: &str| {
                out.info
                    .pragmas
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            assert_eq!(pragma("journal_mode"), journal.as_str());
            assert_eq!(pragma("page_size"), "4096");
        }
    }
}

/// MobiBench until 2017; today's statements are checked against its source in
/// mobibench_source.rs.
#[test]
fn mobibench_2013_uses_its_autoincrement_table() {
    let insert = Scenario::builtin("mobibench-insert-2013").unwrap();
    assert!(insert.schema[0].contains(
        "tblMyList (id INTEGER PRIMARY KEY autoincrement, Value TEXT not null, creation_date long)"
    ));
    assert!(insert.autocommit);
    assert_eq!(
        insert.txn[0].sql,
        "INSERT INTO tblMyList (Value) VALUES (?)"
    );
    let line = &insert.render(1, 1)[0];
    assert!(line.contains("'aaaaaaaaaabbbbbbbbbb"), "{line}");
}

#[test]
fn mobibench_logical_bytes_are_the_100_byte_values() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::builtin("mobibench-update").unwrap();
    let settings = RunSettings {
        sync: SyncMode::Off,
        txns: Some(5),
        ..Default::default()
    };
    let out = common::run_quiet(&scenario, &settings, dir.path()).unwrap();
    // one UPDATE of a 100-byte value per table (the WHERE id adds nothing)
    assert!(out
        .commits
        .iter()
        .all(|c| c.logical_bytes == 300 && c.statements == 3));
}

/// mobibench-delete deletes each of its 1010 rows once a round: a second round's DELETEs
/// match no row, and SQLite changes no page for them (no journal is opened). They are
/// counted apart, not as commits, and take no commit index.
#[test]
fn mobibench_delete_past_its_rows_writes_nothing_and_makes_no_commit() {
    let scenario = Scenario::builtin("mobibench-delete").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        txns: Some(1015),
        warmup: Some(0),
        sync: SyncMode::Off,
        ..Default::default()
    };
    let out = common::run_quiet(&scenario, &settings, dir.path()).unwrap();
    assert_eq!(out.commits.len(), 1010);
    assert!(out.commits.iter().all(|c| c.vfs.wrote_database()));
    let indices: Vec<u64> = out.commits.iter().map(|c| c.index).collect();
    assert_eq!(indices, (0..1010).collect::<Vec<u64>>());
    let empty = &out.info.wrote_nothing;
    assert_eq!((empty.transactions, empty.statements), (5, 15));
    assert!(
        empty.first[0]
            .statement
            .starts_with("DELETE FROM tblMyList0"),
        "{empty:?}"
    );
    assert_eq!(empty.first[0].line, None);
    // the closing of a rollback journal's connection writes nothing
    assert_eq!(out.info.close.connections, 1);
    assert!(!out.info.close.vfs.wrote_database(), "{:?}", out.info.close);
}
