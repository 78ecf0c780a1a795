//! The mobibench-* scenarios against MobiBench's own source: `data/mobibench-f56ea5e.txt`
//! holds verbatim lines of ESOS-Lab/Mobibench f56ea5e (shell/mobibench.c, shell/Makefile).
//! Each test runs MobiBench's SQL, filled in as its printf calls fill it, beside the
//! scenario and compares what the two make: schema, rows, statements, id ranges.

use std::path::Path;

use rusqlite::Connection;
use sqlwa_workloads::scenario::{Generator, Operation};
use sqlwa_workloads::{FileKind, JournalMode, RunSettings, Scenario, SyncMode};

mod common;

const SOURCE: &str = include_str!("data/mobibench-f56ea5e.txt");

/// The source line quoted as `<file>:<line>: <text>`.
fn line(at: &str) -> &'static str {
    let prefix = format!("{at}: ");
    SOURCE
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("{at} is not in the excerpt"))
}

/// The first C string literal on that line.
fn literal(at: &str) -> &'static str {
    line(at).split('"').nth(1).unwrap()
}

/// The integer a line assigns (`name = 3;`).
fn assigned(at: &str) -> i64 {
    let value = line(at).split('=').nth(1).unwrap();
    value
        .trim()
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap()
}

/// `format` with each %d / %s replaced by the next argument, as sprintf does.
fn sprintf(format: &str, args: &[&str]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut parts = format.split('%');
    out.push_str(parts.next().unwrap());
    for part in parts {
        out.push_str(args.next().expect("an argument per conversion"));
        out.push_str(&part[1..]);
    }
    out
}

const TABLES_AT: &str = "shell/mobibench.c:2421";
const INSERT_STR: &str = "shell/mobibench.c:195";
const UPDATE_STR: &str = "shell/mobibench.c:196";

fn tables() -> Vec<String> {
    (0..assigned(TABLES_AT)).map(|t| t.to_string()).collect()
}

/// A database made as MobiBench's thread_main_db makes it: page_size, the Makefile's
/// auto_vacuum, then its tables in one transaction.
fn mobibench_database(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    let autovacuum = line("shell/Makefile:27").split('=').nth(1).unwrap();
    conn.execute_batch(&format!("PRAGMA auto_vacuum = {};", &autovacuum[..1]))
        .unwrap();
    conn.execute_batch(literal("shell/mobibench.c:1372"))
        .unwrap();
    let mut sql = literal("shell/mobibench.c:1388").to_string();
    for t in tables() {
        sql += &sprintf(literal("shell/mobibench.c:1392"), &[&t]);
    }
    sql += literal("shell/mobibench.c:1395");
    conn.execute_batch(&sql).unwrap();
    conn
}

/// Runs `name` with `txns` transactions (no warm-up, like MobiBench) in `dir`.
fn run_scenario(name: &str, txns: u64, dir: &Path) -> Connection {
    let settings = RunSettings {
        journal: JournalMode::Truncate,
        sync: SyncMode::Off,
        txns: Some(txns),
        warmup: Some(0),
        ..Default::default()
    };
    let out = common::run_quiet(&Scenario::builtin(name).unwrap(), &settings, dir).unwrap();
    Connection::open(out.info.db_path).unwrap()
}

/// Everything that defines the database: schema entries, settings and every row.
fn contents(conn: &Connection) -> Vec<String> {
    let rows = |sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        let columns = stmt.column_count();
        let row = |r: &rusqlite::Row| {
            let values = (0..columns).map(|i| r.get::<_, rusqlite::types::Value>(i));
            values
                .map(|v| v.map(|v| format!("{v:?}")))
                .collect::<Result<Vec<_>, _>>()
        };
        let found = stmt.query_map([], row).unwrap();
        found.map(|r| r.unwrap().join("|")).collect()
    };
    let mut out = rows("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name");
    out.extend(rows("PRAGMA page_size"));
    out.extend(rows("PRAGMA auto_vacuum"));
    let mut names = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names: Vec<String> = names
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for name in names {
        out.push(format!("table {name}"));
        out.extend(rows(&format!("SELECT * FROM {name} ORDER BY rowid")));
    }
    out
}

#[test]
fn insert_makes_the_database_mobibench_makes() {
    let dir = tempfile::tempdir().unwrap();
    let txns = 40;
    let theirs = mobibench_database(&dir.path().join("mobibench.db"));
    for tx_i in 0..txns {
        let mut sql = literal("shell/mobibench.c:1504").to_string();
        for t in tables() {
            let id = tx_i.to_string(); // ran = tx_i (line 1513)
            sql += &sprintf(
                literal("shell/mobibench.c:1518"),
                &[&t, &id, literal(INSERT_STR)],
            );
        }
        sql += literal("shell/mobibench.c:1523");
        theirs.execute_batch(&sql).unwrap();
    }
    let ours = run_scenario("mobibench-insert", txns, &dir.path().join("sqlwa"));
    // no sqlite_sequence (AUTOINCREMENT until 2017), three tables, ids 0..txns-1
    assert_eq!(contents(&ours), contents(&theirs));
}

/// MobiBench's insert commit changes page 1 (the change counter) and the last leaf of
/// each of its tables: one page write each to the database, the same pages journalled.
#[test]
fn insert_commit_writes_page_one_and_a_leaf_per_table() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        journal: JournalMode::Truncate,
        sync: SyncMode::Off,
        txns: Some(60),
        warmup: Some(0),
        ..Default::default()
    };
    let scenario = Scenario::builtin("mobibench-insert").unwrap();
    let out = common::run_quiet(&scenario, &settings, dir.path()).unwrap();
    let pages = |kind: FileKind| -> Vec<u64> {
        out.commits
            .iter()
            .map(|c| c.vfs.get(kind).write_bytes / 4096)
            .collect()
    };
    let expected = 1 + tables().len() as u64;
    // a commit that starts a new leaf (or pointer-map page) writes more: at most 1 in 10
    let typical = |pages: Vec<u64>| pages.iter().filter(|&&n| n == expected).count();
    assert!(
        typical(pages(FileKind::Db)) >= 54,
        "{:?}",
        pages(FileKind::Db)
    );
    assert!(
        typical(pages(FileKind::Journal)) >= 54,
        "{:?}",
        pages(FileKind::Journal)
    );
}

/// The statement of a printf format with its conversions as parameters, spaced as the
/// scenario's generated SQL is.
fn as_parameters(format: &str) -> String {
    let sql = format
        .replace("'%s'", "?")
        .replace("=%d", " = %d")
        .replace("%d;", "?");
    sql.replace("tblMyList%d", "T")
        .trim_end_matches(';')
        .to_string()
}

fn scenario_sql(op: &Operation, table: &str) -> String {
    assert_eq!(op.table, format!("tblMyList{table}"));
    op.sql.replace(&op.table, "T")
}

/// (op, table) pairs in MobiBench's order: one statement per table, in table order.
fn per_table(scenario: &Scenario) -> impl Iterator<Item = (&Operation, String)> {
    assert_eq!(
        scenario.txn.len(),
        tables().len(),
        "one statement per table"
    );
    assert!(
        !scenario.autocommit,
        "MobiBench wraps them in BEGIN; ... COMMIT;"
    );
    scenario.txn.iter().zip(tables())
}

#[test]
fn update_statements_and_ids_are_mobibenchs() {
    let scenario = Scenario::builtin("mobibench-update").unwrap();
    let rows = setup_rows(&scenario);
    for (op, t) in per_table(&scenario) {
        let theirs = as_parameters(literal("shell/mobibench.c:1533"));
        assert_eq!(scenario_sql(op, &t), theirs);
        let [value, id] = &op.params[..] else {
            panic!("{:?}", op.params)
        };
        assert_eq!(value.generator, literal_text(UPDATE_STR));
        // rand() % column_count + 1, column_count being the rows the setup made
        assert_eq!(id.generator, Generator::Int { min: 1, max: rows });
    }
}

#[test]
fn delete_statements_and_ids_are_mobibenchs() {
    let scenario = Scenario::builtin("mobibench-delete").unwrap();
    let rows = setup_rows(&scenario);
    for (i, (op, t)) in per_table(&scenario).enumerate() {
        assert_eq!(
            scenario_sql(op, &t),
            as_parameters(literal("shell/mobibench.c:1550"))
        );
        // get_random_id() once per transaction (line 1545), the same id in every table
        let expected = match i {
            0 => Generator::Shuffle {
                min: 0,
                max: rows - 1,
            },
            _ => Generator::SameAs {
                column: "id".into(),
            },
        };
        assert_eq!(op.params[0].generator, expected);
    }
}

/// The setup makes init_db_for_update's rows (line 1267: ids 0 .. n-1 in every table)
/// and returns n; a full delete run deletes every one of them once.
#[test]
fn setup_rows_are_init_db_for_updates_and_deletes_take_each_once() {
    for name in ["mobibench-update", "mobibench-delete"] {
        let dir = tempfile::tempdir().unwrap();
        let scenario = Scenario::builtin(name).unwrap();
        let rows = setup_rows(&scenario) as u64;
        let theirs = mobibench_database(&dir.path().join("mobibench.db"));
        for i in 0..rows {
            let mut sql = literal("shell/mobibench.c:1265").to_string();
            for t in tables() {
                let id = i.to_string();
                sql += &sprintf(
                    literal("shell/mobibench.c:1267"),
                    &[&t, &id, literal(INSERT_STR)],
                );
            }
            sql += literal("shell/mobibench.c:1269");
            theirs.execute_batch(&sql).unwrap();
        }
        let ours = run_scenario(
            name,
            if name == "mobibench-delete" { rows } else { 1 },
            &dir.path().join("sqlwa"),
        );
        let ids = |conn: &Connection, t: &str| -> Vec<i64> {
            let sql = format!("SELECT id FROM tblMyList{t} ORDER BY id");
            let mut stmt = conn.prepare(&sql).unwrap();
            stmt.query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        for t in tables() {
            let expected = if name == "mobibench-delete" {
                Vec::new()
            } else {
                ids(&theirs, &t)
            };
            assert_eq!(ids(&ours, &t), expected, "{name} tblMyList{t}");
        }
        if name == "mobibench-update" {
            // one update in place moves no page: the tables' pages lie where MobiBench's fill
            // puts them (alternating), so their writes merge as MobiBench's do
            assert_eq!(page_owners(&ours), page_owners(&theirs));
        }
    }
}

/// Which table (or page kind) owns each page of the file, in page order.
fn page_owners(conn: &Connection) -> Vec<(String, i64)> {
    let mut stmt = conn
        .prepare("SELECT name, pageno FROM dbstat ORDER BY pageno")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

fn literal_text(at: &str) -> Generator {
    Generator::Literal(rusqlite::types::Value::Text(literal(at).to_string()))
}

/// Rows per table the scenario's setup inserts (one insert per table, MobiBench's).
fn setup_rows(scenario: &Scenario) -> i64 {
    assert_eq!(scenario.setup.len(), tables().len());
    for (op, t) in scenario.setup.iter().zip(tables()) {
        assert_eq!(op.table, format!("tblMyList{t}"));
        assert_eq!(
            op.params
                .iter()
                .find(|p| p.column == "Value")
                .unwrap()
                .generator,
            literal_text(INSERT_STR)
        );
        let id = op.params.iter().find(|p| p.column == "id").unwrap();
        assert_eq!(id.generator, Generator::Seq { start: 0 }); // i from 0 (line 1267)
        assert_eq!(op.repeat, scenario.setup[0].repeat);
    }
    scenario.setup[0].repeat as i64
}
