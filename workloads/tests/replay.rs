//! Replaying SQL logs (format 1): SQLite's documented sync sequence per commit
//! (docs/reference/sqlite-commit-syncs.md), transactions as SQLite delimits them, the
//! log's PRAGMAs, several databases, and bad logs named by file and line.

mod common;

use std::path::{Path, PathBuf};

use common::sqllog::{open, query_int, run, sql, write_log};
use serde_json::json;
use sqlwa_workloads::{
    CommitRecord, JournalMode, ReplayOutput, RunSettings, SqlLog, Stop, SyncMode,
};

/// CREATE TABLE, then `n` single-row inserts: autocommit, or each in BEGIN…COMMIT with
/// a read before its write, and autocommit reads between them.
fn insert_log(dir: &Path, n: usize, explicit: bool) -> PathBuf {
    let mut events = vec![
        open(1, "/data/app/app.db"),
        sql(
            1,
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)",
        ),
    ];
    for i in 0..n {
        let insert = format!("INSERT INTO t (v) VALUES ('{}')", "x".repeat(100 + i % 3));
        if explicit {
            events.push(sql(1, "BEGIN"));
            events.push(sql(1, "SELECT count(*) FROM t"));
            events.push(sql(1, &insert));
            events.push(sql(1, "COMMIT"));
            events.push(sql(1, "SELECT v FROM t WHERE id = 1"));
        } else {
            events.push(sql(1, &insert));
        }
    }
    events.push(json!({"ev": "close", "conn": 1}));
    write_log(dir, &events, false)
}

fn measured(out: &ReplayOutput) -> Vec<&CommitRecord> {
    out.run.commits.iter().filter(|c| !c.warmup).collect()
}

/// (journal, db, wal) xSyncs of every measured commit, asserted equal; None elsewhere.
fn syncs(journal: JournalMode, sync: SyncMode, explicit: bool) -> (u64, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let log = insert_log(dir.path(), 25, explicit);
    let settings = RunSettings {
        journal,
        sync,
        warmup: Some(5),
        wal_autocheckpoint: Some(0),
        ..Default::default()
    };
    let out = run(&log, &settings, dir.path()).unwrap();
    // the CREATE and the 25 inserts are the commits; reads are not
    assert_eq!(out.run.commits.len(), 26);
    let commits = measured(&out);
    assert_eq!(commits.len(), 21);
    let per = |c: &CommitRecord| {
        let v = &c.vfs;
        (v.journal.sync_calls, v.db.sync_calls, v.wal.sync_calls)
    };
    let first = per(commits[0]);
    for c in &commits {
        assert_eq!(per(c), first, "{journal}/{sync} commit {}", c.index);
        assert_eq!(c.vfs.total().sync_calls, first.0 + first.1 + first.2);
    }
    if explicit {
        // a SELECT inside each transaction, before its write, and one after it
        assert_eq!(out.replay.reads.statements, 2 * 25 + 25);
        assert!(
            commits.iter().all(|c| c.statements == 2),
            "INSERT and COMMIT"
        );
    } else {
        assert_eq!(out.replay.reads.statements, 0);
    }
    first
}

#[test]
fn syncs_per_commit_follow_sqlites_documented_sequence() {
    use JournalMode as J;
    use SyncMode as S;
    // docs/reference/sqlite-commit-syncs.md, as workloads/tests/sync_sequence.rs
    let table = [
        (J::Wal, S::Normal, (0, 0, 0)),
        (J::Wal, S::Full, (0, 0, 1)),
        (J::Wal, S::Extra, (0, 0, 1)),
        (J::Delete, S::Full, (2, 1, 0)),
        (J::Delete, S::Normal, (1, 1, 0)),
        (J::Delete, S::Extra, (2, 1, 0)),
        (J::Truncate, S::Full, (3, 1, 0)),
        (J::Truncate, S::Normal, (1, 1, 0)),
        (J::Persist, S::Full, (3, 1, 0)),
        (J::Persist, S::Normal, (2, 1, 0)),
        (J::Delete, S::Off, (0, 0, 0)),
        (J::Truncate, S::Off, (0, 0, 0)),
        (J::Wal, S::Off, (0, 0, 0)),
    ];
    for (journal, sync, want) in table {
        for explicit in [false, true] {
            assert_eq!(
                syncs(journal, sync, explicit),
                want,
                "{journal}/{sync} explicit={explicit}"
            );
        }
    }
}

#[test]
fn logical_bytes_are_the_literals_of_the_writes() {
    let dir = tempfile::tempdir().unwrap();
    let log = insert_log(dir.path(), 3, false);
    let out = run(&log, &RunSettings::default(), dir.path()).unwrap();
    let bytes: Vec<u64> = out.run.commits.iter().map(|c| c.logical_bytes).collect();
    assert_eq!(bytes, [0, 100, 101, 102]);
}

#[test]
fn savepoints_and_rollbacks_delimit_commits_as_sqlite_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[
            open(1, "/d/a.db"),
            sql(1, "CREATE TABLE t (v)"),
            sql(1, "SAVEPOINT outer_sp"),
            sql(1, "INSERT INTO t VALUES (1)"),
            sql(1, "SAVEPOINT inner_sp"),
            sql(1, "INSERT INTO t VALUES (2)"),
            sql(1, "ROLLBACK TO inner_sp"),
            sql(1, "RELEASE inner_sp"),
            sql(1, "INSERT INTO t VALUES (3)"),
            sql(1, "RELEASE outer_sp"),
            sql(1, "BEGIN"),
            sql(1, "INSERT INTO t VALUES (4)"),
            sql(1, "ROLLBACK"),
            sql(1, "BEGIN"),
            sql(1, "SELECT * FROM t"),
            sql(1, "END"),
        ],
        false,
    );
    let out = run(&log, &RunSettings::default(), dir.path()).unwrap();
    let statements: Vec<u64> = out.run.commits.iter().map(|c| c.statements).collect();
    // CREATE; the savepoint transaction from its first INSERT to the outer RELEASE; the
    // rolled-back one. The read-only transaction is no commit.
    assert_eq!(statements, [1, 7, 2]);
    assert_eq!(out.replay.reads.statements, 2 + 3);
    let sum = query_int(&dir.path().join("run/a.db"), "SELECT sum(v) FROM t");
    assert_eq!(sum, 4);
}

#[test]
fn the_runs_pragmas_override_the_logs_and_the_others_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[
            open(1, "/d/a.db"),
            sql(1, "PRAGMA page_size=8192"),
            sql(1, "PRAGMA journal_mode=DELETE"),
            sql(1, "PRAGMA synchronous=OFF"),
            sql(1, "PRAGMA user_version=7"),
            sql(1, "PRAGMA temp_store_directory='/tmp'"),
            sql(1, "CREATE TABLE t (v)"),
        ],
        false,
    );
    let settings = RunSettings {
        journal: JournalMode::Wal,
        sync: SyncMode::Normal,
        ..Default::default()
    };
    let out = run(&log, &settings, dir.path()).unwrap();
    let pragmas: std::collections::HashMap<_, _> = out.run.info.pragmas.into_iter().collect();
    assert_eq!(pragmas["journal_mode"], "wal");
    assert_eq!(pragmas["synchronous"], "1");
    assert_eq!(pragmas["page_size"], "8192");
    let actions: Vec<(&str, &str)> = (out.replay.pragmas.iter())
        .map(|p| (p.statement.as_str(), p.action.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("PRAGMA page_size=8192", "kept"),
            ("PRAGMA journal_mode=DELETE", "overridden"),
            ("PRAGMA synchronous=OFF", "overridden"),
            ("PRAGMA user_version=7", "kept"),
            ("PRAGMA temp_store_directory='/tmp'", "refused"),
        ]
    );
    assert_eq!(out.replay.failed["refused"], 1);
    let version = query_int(&dir.path().join("run/a.db"), "PRAGMA user_version");
    assert_eq!(version, 7);
}

#[test]
fn databases_are_kept_apart_and_temporary_and_trigger_statements_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[
            open(1, "/a/app.db"),
            open(2, "/b/app.db"),
            open(3, ":memory:"),
            sql(3, "CREATE TABLE scratch (v)"),
            sql(1, "CREATE TABLE t (v)"),
            sql(2, "CREATE TABLE u (v)"),
            sql(1, "INSERT INTO t VALUES ('aa')"),
            json!({"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES ('aa')", "trigger": true}),
            sql(2, "INSERT INTO u VALUES ('b')"),
            sql(2, "INSERT INTO u VALUES ('c')"),
            sql(1, "ATTACH '/etc/passwd.db' AS x"),
        ],
        false,
    );
    let out = run(&log, &RunSettings::default(), dir.path()).unwrap();
    let files: Vec<&str> = (out.replay.databases.iter())
        .map(|d| d.file_name.as_str())
        .collect();
    assert_eq!(files, ["app.db", "app-2.db"]);
    let commits: Vec<u64> = out.replay.databases.iter().map(|d| d.commits).collect();
    assert_eq!(commits, [2, 3]);
    assert_eq!(out.replay.commit_database, [0, 1, 0, 1, 1]);
    assert_eq!(out.replay.databases[0].vfs.db.write_bytes % 4096, 0);
    assert!(out.replay.databases[1].vfs.journal.sync_calls > 0);
    assert_eq!(out.replay.skipped.temporary, 1);
    assert_eq!(out.replay.skipped.trigger, 1);
    assert_eq!(out.replay.failed["refused"], 1);
    assert!(!Path::new("/etc/passwd.db").exists());
    let count = |file: &str, table: &str| {
        query_int(
            &dir.path().join("run").join(file),
            &format!("SELECT count(*) FROM {table}"),
        )
    };
    assert_eq!((count("app.db", "t"), count("app-2.db", "u")), (1, 2));
}

#[test]
fn a_failing_statement_is_counted_or_with_strict_stops_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[
            open(1, "/d/a.db"),
            sql(1, "INSERT INTO missing VALUES (1)"),
            sql(1, "CREATE TABLE t (v UNIQUE)"),
            sql(1, "INSERT INTO t VALUES (1)"),
            sql(1, "INSERT INTO t VALUES (1)"),
        ],
        false,
    );
    let out = run(&log, &RunSettings::default(), dir.path()).unwrap();
    assert_eq!(out.replay.failed["no such table"], 1);
    assert_eq!(out.replay.failed["constraint"], 1);
    assert_eq!(out.replay.first_failures[0].line, 3);
    let strict = RunSettings {
        strict: true,
        ..Default::default()
    };
    let err = run(&log, &strict, &dir.path().join("strict")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("app.sqllog, line 3:"), "{text}");
    assert!(text.contains("no such table: missing"), "{text}");
}

#[test]
fn bad_logs_name_their_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = insert_log(dir.path(), 2, false);
    let text = std::fs::read_to_string(&good).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let cases = [
        // truncated last line
        (format!("{}\n{}", lines[..3].join("\n"), &lines[3][..20]), 4),
        // garbled JSON in the middle
        (
            format!("{}\n{{\"ev\": \"sql\",, }}\n{}", lines[0], lines[1]),
            2,
        ),
        // a key missing
        (format!("{}\n{{\"ev\": \"sql\", \"conn\": 1}}", lines[0]), 2),
        // a statement on a connection never opened
        (format!("{}\n{}", lines[0], lines[2]), 2),
        // not a header
        (
            "{\"sqlwa_sql_log\": 2, \"source\": \"x\", \"timed\": false}".to_string(),
            1,
        ),
    ];
    for (content, line) in cases {
        let path = dir.path().join("bad.sqllog");
        std::fs::write(&path, &content).unwrap();
        let err = SqlLog::load(&path, &Stop::never()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("SQL log {}, line {line}: ", path.display())),
            "{text}"
        );
    }
}

#[test]
fn a_scenario_refuses_the_settings_only_a_replay_takes() {
    let scenario = sqlwa_workloads::Scenario::builtin("kv-prefs").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        timing: Some("recorded".into()),
        ..Default::default()
    };
    let err = sqlwa_workloads::run(&scenario, &settings, dir.path(), None, &mut |_| true)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("setting timing: applies to a replayed SQL log"),
        "{err}"
    );
    let bad = RunSettings {
        timing: Some("sometimes".into()),
        ..Default::default()
    };
    assert!(bad.check().unwrap_err().to_string().contains("'sometimes'"));
}

/// SQLite's own error says a statement calls a function the replay's SQLite lacks
/// (sqlite3_prepare: SQLITE_ERROR, "no such function: X"): counted as its own kind, by
/// function, and the transactions that went on without it are counted. The bundled
/// SQLite is built without SQLITE_ENABLE_MATH_FUNCTIONS (its pow() is asked below), so
/// pow() is SQLite's own, missing from this build, not the program's.
#[test]
fn statements_calling_an_app_defined_function_are_counted_by_function() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[
            open(1, "/d/a.db"),
            sql(1, "CREATE TABLE t (a)"),
            sql(1, "INSERT INTO t VALUES (now())"), // its own transaction: missing
            sql(1, "BEGIN"),
            sql(1, "INSERT INTO t VALUES (1)"),
            sql(1, "INSERT INTO t VALUES (NOW())"), // in a commit already writing
            sql(1, "COMMIT"),
            sql(1, "BEGIN"),
            sql(1, "UPDATE t SET a = convert_fn(a)"), // before the transaction's first write
            sql(1, "INSERT INTO t VALUES (2)"),
            sql(1, "COMMIT"),
            sql(1, "BEGIN"),
            sql(1, "SELECT convert_fn(1)"), // in a transaction that then writes nothing
            sql(1, "COMMIT"),
            sql(1, "INSERT INTO t VALUES (3)"),
            sql(1, "SELECT 'no such function: x'"), // the text alone decides nothing
            sql(1, "INSERT INTO t VALUES (pow(2, 3))"), // SQLite's own, not built in here
        ],
        false,
    );
    let plain = rusqlite::Connection::open_in_memory().unwrap();
    let err = plain.prepare("SELECT pow(2, 3)").err().unwrap().to_string();
    assert!(err.contains("no such function: pow"), "{err}");
    let out = run(&log, &RunSettings::default(), dir.path()).unwrap();
    assert_eq!(out.replay.failed.len(), 2, "{:?}", out.replay.failed);
    assert_eq!(out.replay.failed["app-defined function"], 4);
    assert_eq!(out.replay.failed["function not in this SQLite build"], 1);
    let app = &out.replay.missing_functions;
    let by_name: Vec<(&str, u64, Option<&str>)> = (app.functions.iter())
        .map(|f| (f.name.as_str(), f.statements, f.sqlite_option.as_deref()))
        .collect();
    let math = Some("SQLITE_ENABLE_MATH_FUNCTIONS");
    assert_eq!(
        by_name,
        [("now", 2, None), ("convert_fn", 2, None), ("pow", 1, math)]
    );
    assert_eq!(app.in_transaction, 3);
    // the first and second BEGIN…COMMIT ran without one of the program's statements
    assert_eq!(app.commits_without_them, 2);
    assert_eq!(out.run.commits.len(), 4);
    let first = &out.replay.first_failures[0];
    assert_eq!(
        (first.line, first.kind.as_str()),
        (4, "app-defined function")
    );
    assert!(
        first.message.contains("no such function: now"),
        "{}",
        first.message
    );
}

/// The summary names the SQLite the log says recorded it (unknown when it says none) and
/// the one that replayed it (`sqlite3_libversion()`), with a note when they may differ.
#[test]
fn the_sqlite_that_recorded_and_the_one_that_replayed_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(
        dir.path(),
        &[open(1, "/d/a.db"), sql(1, "CREATE TABLE t (a)")],
        false,
    );
    let text = std::fs::read_to_string(&log).unwrap();
    // the bundled SQLite, asked by SQLite's own function on a plain connection
    let bundled: String = (rusqlite::Connection::open_in_memory().unwrap())
        .query_row("SELECT sqlite_version()", [], |r| r.get(0))
        .unwrap();
    let with_version = |version: &str| {
        let header = format!("\"sqlite_version\": \"{version}\"");
        std::fs::write(&log, text.replacen("\"sqlite_version\":null", &header, 1)).unwrap();
        assert!(std::fs::read_to_string(&log).unwrap().contains(&header));
        let run_dir = dir.path().join(version);
        run(&log, &RunSettings::default(), &run_dir).unwrap().replay
    };
    let unknown = run(&log, &RunSettings::default(), &dir.path().join("unknown"))
        .unwrap()
        .replay;
    assert_eq!(unknown.recorded_sqlite_version, None);
    assert_eq!(unknown.replayed_sqlite_version, bundled);
    assert!(unknown.sqlite_note.unwrap().contains("unknown"));
    let debian = with_version("3.40.1");
    assert_eq!(debian.recorded_sqlite_version.as_deref(), Some("3.40.1"));
    let note = debian.sqlite_note.unwrap();
    assert!(note.contains("recorded with SQLite 3.40.1"), "{note}");
    assert!(
        note.contains(&format!("replayed with SQLite {bundled}")),
        "{note}"
    );
    assert_eq!(with_version(&bundled).sqlite_note, None);
}

/// Foreign key constraints are off on a new connection as SQLite documents them
/// (foreignkeys.html §2: "disabled by default", enabled per connection with PRAGMA
/// foreign_keys = ON), and so they are in the programs recorded (Debian's SQLite:
/// tests/e2e/test_record_program.py); the bundled SQLite is built with SQLITE_DEFAULT_FOREIGN_KEYS=1. A replayed
/// connection starts as the program's did: without them, unless the log turns them on.
#[test]
fn foreign_keys_are_off_as_sqlite_documents_unless_the_log_turns_them_on() {
    let dir = tempfile::tempdir().unwrap();
    let replayed = |turned_on: bool| {
        let mut events = vec![open(1, "/d/a.db")];
        if turned_on {
            events.push(sql(1, "PRAGMA foreign_keys = ON"));
        }
        for text in [
            "CREATE TABLE p (id INTEGER PRIMARY KEY)",
            "CREATE TABLE c (pid INTEGER REFERENCES p(id) ON DELETE CASCADE, v)",
            "INSERT INTO p VALUES (1)",
            "INSERT INTO c VALUES (1, 'child')",
            "INSERT INTO c VALUES (7, 'orphan')",
            "DELETE FROM p WHERE id = 1",
        ] {
            events.push(sql(1, text));
        }
        let at = dir.path().join(if turned_on { "on" } else { "off" });
        std::fs::create_dir(&at).unwrap();
        let out = run(
            &write_log(&at, &events, false),
            &RunSettings::default(),
            &at,
        )
        .unwrap();
        let rows = query_int(&at.join("run").join("a.db"), "SELECT count(*) FROM c");
        (out.replay.failed, rows)
    };
    let (failed, rows) = replayed(false);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(rows, 2); // the orphan kept, no cascade: as the program's SQLite did
    let (failed, rows) = replayed(true);
    assert_eq!(failed["constraint"], 1); // the orphan
    assert_eq!(rows, 0); // the child deleted by the cascade
}

/// A log whose transactions SQLite runs without changing a page of the database: an
/// UPDATE and a DELETE that match no row, a TEMP table made and written (its pages live
/// in the temp file), then one transaction that does change a row.
fn empty_transactions_log(dir: &Path) -> PathBuf {
    write_log(
        dir,
        &[
            open(1, "/d/a.db"),
            sql(1, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"),
            sql(1, "INSERT INTO t VALUES (1, 'a')"),
            sql(1, "UPDATE t SET v = 'b' WHERE id = 99"),
            sql(1, "DELETE FROM t WHERE id = 99"),
            sql(1, "CREATE TEMP TABLE tt (a)"),
            sql(1, "INSERT INTO tt VALUES (1)"),
            sql(1, "BEGIN"),
            sql(1, "INSERT INTO tt VALUES (2)"),
            sql(1, "UPDATE t SET v = 'c' WHERE id = 1"),
            sql(1, "COMMIT"),
            json!({"ev": "close", "conn": 1}),
        ],
        false,
    )
}

#[test]
fn transactions_that_changed_no_database_file_are_counted_apart_not_as_commits() {
    for journal in [JournalMode::Delete, JournalMode::Wal] {
        let dir = tempfile::tempdir().unwrap();
        let log = SqlLog::load(&empty_transactions_log(dir.path()), &Stop::never()).unwrap();
        let markers = dir.path().join("markers");
        let settings = RunSettings {
            journal,
            ..Default::default()
        };
        let run_dir = dir.path().join("run");
        let out = sqlwa_workloads::replay(
            &log,
            &settings,
            &run_dir,
            Some(&markers),
            &mut |_| true,
            &Stop::never(),
        )
        .unwrap();
        // CREATE, the first INSERT, and BEGIN…COMMIT with its UPDATE of a row that exists
        let statements: Vec<u64> = out.run.commits.iter().map(|c| c.statements).collect();
        assert_eq!(statements, [1, 1, 3], "{journal}");
        let indices: Vec<u64> = out.run.commits.iter().map(|c| c.index).collect();
        assert_eq!(
            indices,
            [0, 1, 2],
            "{journal}: an empty transaction takes no index"
        );
        // every commit synced its journal or WAL (synchronous FULL); none wrote nothing
        assert!(out.run.commits.iter().all(|c| c.vfs.wrote_database()));
        let empty = &out.run.info.wrote_nothing;
        assert_eq!((empty.transactions, empty.statements), (4, 4), "{journal}");
        let first: Vec<(Option<u64>, &str)> = (empty.first.iter())
            .map(|e| (e.line, e.statement.as_str()))
            .collect();
        assert_eq!(
            first,
            [
                (Some(5), "UPDATE t SET v = 'b' WHERE id = 99"),
                (Some(6), "DELETE FROM t WHERE id = 99"),
                (Some(7), "CREATE TEMP TABLE tt (a)"),
                (Some(8), "INSERT INTO tt VALUES (1)"),
            ]
        );
        let quiet = &empty.vfs;
        let none = |k: &sqlwa_workloads::KindCounts| k.write_calls + k.sync_calls == 0;
        assert!(
            none(&quiet.db) && none(&quiet.journal) && none(&quiet.wal),
            "{quiet:?}"
        );
        assert_eq!(out.replay.databases[0].wrote_nothing, 4);
        assert_eq!(out.replay.databases[0].commits, 3);
        // the markers: txn_void in place of txn_end, the next transaction taking its index
        let text = std::fs::read_to_string(&markers).unwrap();
        let txn: Vec<String> = (text.lines())
            .filter(|l| l.starts_with("sqlwa txn_"))
            .map(|l| l.rsplit_once(" t=").unwrap().0.replace(" warmup=0", ""))
            .collect();
        let mut want = vec!["sqlwa txn_begin i=0", "sqlwa txn_end i=0"];
        want.extend(["sqlwa txn_begin i=1", "sqlwa txn_end i=1"]);
        for _ in 0..4 {
            want.extend(["sqlwa txn_begin i=2", "sqlwa txn_void i=2"]);
        }
        want.extend(["sqlwa txn_begin i=2", "sqlwa txn_end i=2"]);
        assert_eq!(txn, want, "{journal}");
        assert_eq!(
            query_int(
                &run_dir.join("a.db"),
                "SELECT count(*) FROM t WHERE v = 'c'"
            ),
            1
        );
    }
}

#[test]
fn closing_is_measured_apart_and_in_wal_mode_checkpoints() {
    for journal in [JournalMode::Delete, JournalMode::Wal] {
        let dir = tempfile::tempdir().unwrap();
        let log = SqlLog::load(&insert_log(dir.path(), 5, false), &Stop::never()).unwrap();
        let markers = dir.path().join("markers");
        let settings = RunSettings {
            journal,
            wal_autocheckpoint: Some(0),
            ..Default::default()
        };
        let out = sqlwa_workloads::replay(
            &log,
            &settings,
            &dir.path().join("run"),
            Some(&markers),
            &mut |_| true,
            &Stop::never(),
        )
        .unwrap();
        let close = &out.run.info.close;
        assert_eq!(close.connections, 1);
        assert_eq!(out.replay.databases[0].close.vfs, close.vfs);
        let v = &close.vfs;
        match journal {
            // sqlite3WalClose: the checkpoint syncs the WAL, copies its pages into the
            // database and syncs it, then deletes the WAL
            JournalMode::Wal => {
                assert_eq!((v.wal.sync_calls, v.db.sync_calls), (1, 1), "{v:?}");
                assert!(v.db.write_calls > 0 && v.wal.delete_calls == 1, "{v:?}");
            }
            // a rollback journal's close writes nothing
            _ => assert!(!v.wrote_database(), "{v:?}"),
        }
        // no commit counted the checkpoint (wal_autocheckpoint=0: none ran in one)
        assert!(
            out.run.commits.iter().all(|c| c.vfs.db.sync_calls == 0) || journal != JournalMode::Wal
        );
        let text = std::fs::read_to_string(&markers).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let at = |word: &str| lines.iter().position(|l| l.starts_with(word)).unwrap();
        let (begin, end) = (at("sqlwa close_begin t="), at("sqlwa close_end t="));
        let last_txn = lines
            .iter()
            .rposition(|l| l.starts_with("sqlwa txn_end"))
            .unwrap();
        assert!(last_txn < begin && begin < end && end < at("sqlwa run_end"));
        let syncs = lines[begin..end]
            .iter()
            .filter(|l| l.starts_with("sqlwa sync_begin i=-1"));
        assert_eq!(syncs.count() as u64, v.total().sync_calls, "{journal}");
    }
}
