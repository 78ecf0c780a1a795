//! A replayed log stays inside the run (#43, item 1): an event holding several statements
//! is split by SQLite's parser and each judged by the authorizer; PRAGMAs are judged by
//! the name SQLite parsed, however quoted; no statement reaches a file outside the run.
//! Victim databases beside and outside the run are compared byte for byte before and after.

mod common;

use std::path::{Path, PathBuf};

use common::sqllog::{open, query_int, run, sql};
use sqlwa_workloads::{JournalMode, RunSettings, SyncMode};

/// A log of connection 1 on one database running `sqls`, one event each.
fn write_log(dir: &Path, sqls: &[String]) -> PathBuf {
    let mut events = vec![open(1, "/d/app.db")];
    events.extend(sqls.iter().map(|text| sql(1, text)));
    common::sqllog::write_log(dir, &events, false)
}

/// A database with a `secrets` table of one row; its bytes.
fn victim(path: &Path) -> Vec<u8> {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("CREATE TABLE secrets (s); INSERT INTO secrets VALUES ('hunter2')")
        .unwrap();
    drop(conn);
    std::fs::read(path).unwrap()
}

fn count(db: &Path, table: &str) -> i64 {
    query_int(db, &format!("SELECT count(*) FROM {table}"))
}

#[test]
fn a_batch_that_starts_with_a_pragma_cannot_attach_another_database() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let (beside, away) = (
        dir.path().join("victim.db"),
        outside.path().join("victim.db"),
    );
    let (beside_bytes, away_bytes) = (victim(&beside), victim(&away));
    let mut sqls = vec!["CREATE TABLE t (s)".to_string()];
    for (i, db) in [&beside, &away].iter().enumerate() {
        sqls.push(format!(
            "PRAGMA user_version={i}; ATTACH '{}' AS e{i}",
            db.display()
        ));
        sqls.push(format!("PRAGMA user_version=5; DELETE FROM e{i}.secrets"));
        sqls.push(format!(
            "PRAGMA cache_size=10; INSERT INTO t SELECT * FROM e{i}.secrets"
        ));
    }
    sqls.push(format!(
        "PRAGMA cache_size=10; VACUUM INTO '{}'",
        dir.path().join("ESCAPED.db").display()
    ));
    let log = write_log(dir.path(), &sqls);
    let out = run(&log, &RunSettings::default(), dir.path()).unwrap();
    assert_eq!(std::fs::read(&beside).unwrap(), beside_bytes);
    assert_eq!(std::fs::read(&away).unwrap(), away_bytes);
    assert!(!dir.path().join("ESCAPED.db").exists());
    let run_db = dir.path().join("run/app.db");
    assert_eq!(count(&run_db, "t"), 0, "no foreign row was copied in");
    // the attaches and the VACUUM INTO refused; the statements on e0/e1 find no database
    assert_eq!(
        out.replay.failed["refused"], 3,
        "{:?}",
        out.replay.first_failures
    );
    let first = &out.replay.first_failures[0];
    assert_eq!((first.line, first.kind.as_str()), (4, "refused"));
    assert!(
        first
            .message
            .starts_with("ATTACH and VACUUM INTO would open the file"),
        "{first:?}"
    );
    // each statement ran alone: the PRAGMA before the refused ATTACH did
    assert_eq!(query_int(&run_db, "PRAGMA user_version"), 5);
}

#[test]
fn an_event_of_several_statements_runs_them_one_at_a_time_as_sqlite_delimits_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[
            // the second statement names a table the first makes
            "CREATE TABLE t (v); INSERT INTO t VALUES ('ab')".into(),
            "BEGIN; INSERT INTO t VALUES ('cd'); INSERT INTO t VALUES ('e;f'); COMMIT;".into(),
            "INSERT INTO t VALUES ('g') -- one more; INSERT INTO t VALUES ('no')".into(),
        ],
    );
    let out = run(&log, &RunSettings::default(), dir.path()).unwrap();
    assert!(
        out.replay.failed.is_empty(),
        "{:?}",
        out.replay.first_failures
    );
    assert_eq!(count(&dir.path().join("run/app.db"), "t"), 4);
    let commits: Vec<(u64, u64)> = (out.run.commits.iter())
        .map(|c| (c.statements, c.logical_bytes))
        .collect();
    // CREATE, the insert after it, one transaction of three statements (BEGIN before its
    // first write is not in it), the last insert
    assert_eq!(commits, [(1, 0), (1, 2), (3, 5), (1, 1)]);
    assert_eq!(out.replay.replayed, 3);
}

#[test]
fn quoted_pragmas_of_the_runs_settings_are_overridden_and_the_run_measures_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let mut sqls = vec![
        r#"PRAGMA "synchronous"=OFF"#.to_string(),
        r#"PRAGMA main."journal_mode"=OFF"#.into(),
        "PRAGMA [synchronous] = 0; PRAGMA `journal_mode` = 'memory'".into(),
        "CREATE TABLE t (v)".into(),
    ];
    sqls.extend((0..5).map(|i| format!("INSERT INTO t VALUES ({i})")));
    let log = write_log(dir.path(), &sqls);
    let settings = RunSettings {
        journal: JournalMode::Delete,
        sync: SyncMode::Full,
        ..Default::default()
    };
    let out = run(&log, &settings, dir.path()).unwrap();
    let pragmas: std::collections::HashMap<_, _> = out.run.info.pragmas.iter().cloned().collect();
    assert_eq!(
        (
            pragmas["journal_mode"].as_str(),
            pragmas["synchronous"].as_str()
        ),
        ("delete", "2")
    );
    let actions: Vec<&str> = out
        .replay
        .pragmas
        .iter()
        .map(|p| p.action.as_str())
        .collect();
    assert_eq!(actions, ["overridden"; 4]);
    assert_eq!(out.replay.skipped.overridden_pragmas, 4);
    // DELETE/FULL: the journal synced twice and the database once a commit
    // (docs/reference/sqlite-commit-syncs.md)
    for c in &out.run.commits[1..] {
        assert_eq!(
            (c.vfs.journal.sync_calls, c.vfs.db.sync_calls),
            (2, 1),
            "{c:?}"
        );
    }
}

#[test]
fn a_refused_statement_with_strict_stops_the_replay_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[
            "CREATE TABLE t (v)".into(),
            format!(
                r#"PRAGMA user_version=1; PRAGMA "temp_store_directory"='{}'"#,
                dir.path().display()
            ),
        ],
    );
    let strict = RunSettings {
        strict: true,
        ..Default::default()
    };
    let text = run(&log, &strict, dir.path()).unwrap_err().to_string();
    assert!(
        text.contains(
            "app.sqllog, line 4: statement failed on replay: PRAGMA temp_store_directory: "
        ),
        "{text}"
    );
}
