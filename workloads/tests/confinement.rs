//! A scenario's SQL stays inside the run's own database: no ATTACH, VACUUM INTO, PRAGMA
//! or load_extension, refused when the scenario is loaded (its SQL
//! runs then, on a scratch database) and again by the engine, with one line naming the
//! file, the statement and why; nothing is created outside.

use std::path::Path;

use sqlwa_workloads::{EngineError, RunSettings, Scenario, SyncMode};

mod common;

/// A scenario whose one table is made by `sql` (verbatim DDL).
fn with_table_sql(sql: &str) -> String {
    with_pragmas_and_sql("", sql)
}

/// `pragmas` (lines of a [pragmas] table) from line 3 of the file.
fn with_pragmas_and_sql(pragmas: &str, sql: &str) -> String {
    format!(
        r#"name = "confined"
[pragmas]
{pragmas}
[[table]]
name = "t"
sql = "{}"
[[txn]]
op = "insert"
table = "t"
values = {{ v = {{ kind = "int", min = 1, max = 9 }} }}
"#,
        sql.replace('\\', "\\\\").replace('"', "\\\""),
    )
}

/// The refusal `sql` gets when the scenario is loaded: (message, hint).
fn refused_at_load(sql: &str) -> (String, String) {
    let err = Scenario::from_toml_str(&with_table_sql(sql), "evil.toml").unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidScenario { .. }),
        "{err:?}"
    );
    (err.to_string(), err.hint())
}

fn sql_path(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn attach_is_refused_and_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.db");
    let sql = format!(
        "CREATE TABLE t (v); ATTACH DATABASE '{}' AS e; CREATE TABLE e.z (a)",
        sql_path(&victim)
    );
    let (message, hint) = refused_at_load(&sql);
    assert!(
        message.starts_with("scenario evil.toml: statement refused: ATTACH"),
        "{message}"
    );
    assert!(
        message.contains(&sql_path(&victim)) && message.contains(&sql),
        "{message}"
    );
    assert!(!message.contains('\n') && hint.contains("README"), "{hint}");
    assert!(!victim.exists());
}

#[test]
fn vacuum_into_is_refused_and_writes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("copy.db");
    let sql = format!("CREATE TABLE t (v); VACUUM INTO '{}'", sql_path(&victim));
    let (message, _) = refused_at_load(&sql);
    assert!(message.contains("VACUUM INTO"), "{message}");
    assert!(!victim.exists());
}

#[test]
fn pragmas_in_a_scenarios_sql_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for pragma in [
        "PRAGMA journal_mode = off".to_string(),
        "PRAGMA synchronous = 0".into(),
        "PRAGMA main.locking_mode = exclusive".into(),
        format!("PRAGMA temp_store_directory = '{}'", sql_path(dir.path())),
        "PRAGMA data_store_directory = '/tmp'".into(),
        "PRAGMA writable_schema".into(),
    ] {
        let (message, _) = refused_at_load(&format!("CREATE TABLE t (v); {pragma}"));
        assert!(
            message.contains("statement refused: PRAGMA") && message.contains("[pragmas]"),
            "{message}"
        );
    }
}

#[test]
fn load_extension_is_refused() {
    let (message, _) = refused_at_load("CREATE TABLE t (v); SELECT load_extension('/tmp/x.so')");
    assert!(message.contains("load_extension"), "{message}");
}

#[test]
fn ordinary_ddl_is_allowed() {
    let sql = "CREATE TABLE t (v INTEGER, w TEXT DEFAULT (upper('x'))); \
               CREATE VIEW tv AS SELECT v FROM t; \
               CREATE TRIGGER tt AFTER INSERT ON t BEGIN UPDATE t SET w = 'y' WHERE rowid = new.rowid; END; \
               CREATE VIRTUAL TABLE ft USING fts5(body)";
    let scenario = Scenario::from_toml_str(&with_table_sql(sql), "ok.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        sync: SyncMode::Off,
        txns: Some(3),
        warmup: Some(0),
        ..Default::default()
    };
    common::run_quiet(&scenario, &settings, dir.path()).unwrap();
}

#[test]
fn the_engine_refuses_what_the_loader_would() {
    // A Scenario built through the API (its fields are public) skips loading: the engine
    // confines its SQL too.
    let mut scenario =
        Scenario::from_toml_str(&with_table_sql("CREATE TABLE t (v)"), "api").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.db");
    scenario
        .schema
        .push(format!("ATTACH '{}' AS e", sql_path(&victim)));
    let settings = RunSettings {
        extra_pragmas: vec!["temp_store=memory".into()],
        txns: Some(2),
        ..Default::default()
    };
    let Err(err) = common::run_quiet(&scenario, &settings, &dir.path().join("run")) else {
        panic!("the engine ran the ATTACH");
    };
    assert!(
        matches!(err, EngineError::InvalidScenario { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("scenario api: statement refused: ATTACH"),
        "{err}"
    );
    assert!(!victim.exists());
}

#[test]
fn process_wide_and_run_owned_pragmas_are_refused_in_the_pragmas_table() {
    for (name, value) in [
        ("temp_store_directory", "\"tmp\""),
        ("data_store_directory", "\"tmp\""),
        ("hard_heap_limit", "1"),
        ("soft_heap_limit", "1"),
        ("journal_mode", "\"wal\""),
        ("Synchronous", "0"),
    ] {
        let text = with_pragmas_and_sql(&format!("{name} = {value}"), "CREATE TABLE t (v)");
        let err = Scenario::from_toml_str(&text, "p.toml").unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("scenario file p.toml, line 3, column ")
                && message.contains(&format!("pragma {name}")),
            "{message}"
        );
    }
    // the others stay per-scenario defaults
    let text = with_pragmas_and_sql(
        "page_size = 8192\ncache_size = -500\nlocking_mode = \"exclusive\"",
        "CREATE TABLE t (v)",
    );
    assert_eq!(
        Scenario::from_toml_str(&text, "p.toml")
            .unwrap()
            .pragmas
            .len(),
        3
    );
}
