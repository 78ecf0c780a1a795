//! Scenario parsing, validation errors and seed determinism.

use rusqlite::types::Value;
use sqlwa_workloads::{builtin_names, EngineError, Scenario, Stop};

fn parse(text: &str) -> Result<Scenario, EngineError> {
    Scenario::from_toml_str(text, "x.toml")
}

const BASE: &str = r#"
name = "t"
[[table]]
name = "items"
columns = ["id INTEGER PRIMARY KEY", "body TEXT"]
"#;

fn with_txn(txn: &str) -> String {
    format!("{BASE}\n[[txn]]\n{txn}\n")
}

#[test]
fn same_seed_same_statements_different_seed_different() {
    for name in builtin_names() {
        let s = Scenario::builtin(&name).unwrap();
        assert_eq!(s.render(5, 20), s.render(5, 20), "{name}");
        assert_eq!(s.stream_hash(5, 20), s.stream_hash(5, 20), "{name}");
        let has_randomness = !name.starts_with("mobibench-insert");
        if has_randomness {
            assert_ne!(
                s.stream_hash(5, 20),
                s.stream_hash(6, 20),
                "{name}: seed has no effect"
            );
        }
    }
    let messenger = Scenario::builtin("messenger").unwrap();
    assert_eq!(
        messenger.render(1, 3).len(),
        6,
        "two statements per transaction"
    );
}

#[test]
fn value_sizes_follow_the_distribution() {
    let s = parse(&with_txn(
        r#"op = "insert"
table = "items"
values = { body = { kind = "blob", min = 4096, max = 65536 } }"#,
    ))
    .unwrap();
    let mut w = sqlwa_workloads::scenario::Workload::new(&s, 9);
    let sizes: Vec<u64> = (0..200).map(|_| w.next_txn()[0].logical_bytes).collect();
    assert!(sizes.iter().all(|n| (4096..=65536).contains(n)));
    assert!(sizes.iter().min() != sizes.iter().max());
}

#[test]
fn shuffle_deals_every_value_once_per_round() {
    let s = parse(&with_txn(
        r#"op = "delete"
table = "items"
where = { id = { kind = "shuffle", min = 3, max = 12 } }"#,
    ))
    .unwrap();
    let mut w = sqlwa_workloads::scenario::Workload::new(&s, 9);
    let mut ids = |n: usize| -> Vec<i64> {
        (0..n)
            .map(|_| match w.next_txn()[0].params[0] {
                Value::Integer(i) => i,
                ref v => panic!("{v:?}"),
            })
            .collect()
    };
    let (first, second) = (ids(10), ids(10));
    assert_ne!(first, (3..=12).collect::<Vec<_>>(), "not in order");
    assert_ne!(first, second, "each round in a new order");
    for round in [first, second] {
        let mut sorted = round.clone();
        sorted.sort();
        assert_eq!(sorted, (3..=12).collect::<Vec<_>>(), "{round:?}");
    }
}

#[test]
fn shuffle_needs_a_range_it_can_hold() {
    for range in ["min = 5, max = 4", "min = 0", "min = 0, max = 10000000"] {
        let text = with_txn(&format!(
            "op = \"delete\"\ntable = \"items\"\nwhere = {{ id = {{ kind = \"shuffle\", {range} }} }}"
        ));
        let err = parse(&text).unwrap_err();
        assert!(
            err.to_string().contains("shuffle needs `min` and `max`"),
            "{range}: {err}"
        );
    }
}

#[test]
fn setup_runs_op_by_op_or_round_robin() {
    let setup = r#"
[[setup]]
op = "insert"
table = "items"
repeat = 2
values = { body = { kind = "null" } }

[[setup]]
op = "insert"
table = "items"
repeat_per_txn = 1
values = { body = { kind = "null" } }

[[setup]]
op = "insert"
table = "items"
values = { body = { kind = "null" } }
"#;
    let text = with_txn(&format!("op = \"select\"\ntable = \"items\"\n{setup}"));
    let order = |text: &str| parse(text).unwrap().setup_order(3).collect::<Vec<_>>();
    assert_eq!(order(&text), [0, 0, 1, 1, 1, 2]);
    let interleaved = text.replacen(
        "name = \"t\"\n",
        "name = \"t\"\nsetup_interleaved = true\n",
        1,
    );
    assert_eq!(order(&interleaved), [0, 1, 2, 0, 1, 1]);
}

#[test]
fn unknown_operation_names_line_and_column() {
    let text = with_txn(
        "op = \"inssert\"\ntable = \"items\"\nvalues = { body = { kind = \"text\", size = 3 } }",
    );
    let err = parse(&text).unwrap_err();
    let line = text.lines().position(|l| l.starts_with("op = ")).unwrap() + 1;
    assert_eq!(
        err.to_string(),
        format!("scenario file x.toml, line {line}, column 6: unknown operation 'inssert' (expected one of: insert, update, delete, upsert, select)")
    );
}

#[test]
fn toml_syntax_error_has_line() {
    let err = parse("name = \"t\"\n\n[[table]\nname = 1\n").unwrap_err();
    match err {
        EngineError::ScenarioParse { line, origin, .. } => {
            assert_eq!((line, origin.as_str()), (3, "x.toml"))
        }
        other => panic!("{other}"),
    }
}

#[test]
fn unknown_field_is_reported_with_its_line() {
    let err = parse(&format!("{BASE}\ntxnz = 3\n")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("line 7") && text.contains("txnz"), "{text}");
}

#[test]
fn missing_table_lists_known_tables() {
    let err = parse(&with_txn(
        "op = \"delete\"\ntable = \"itemz\"\nwhere = { id = { kind = \"seq\" } }",
    ))
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no table 'itemz' in the schema (tables: items)"),
        "{text}"
    );
}

#[test]
fn bad_size_ranges_are_rejected() {
    for values in [
        r#"{ body = { kind = "text", min = 10, max = 5 } }"#,
        r#"{ body = { kind = "text" } }"#,
        r#"{ body = { kind = "blob", size = 2000000000 } }"#,
        r#"{ body = { kind = "text", min = -1, max = 5 } }"#,
    ] {
        let err = parse(&with_txn(&format!(
            "op = \"insert\"\ntable = \"items\"\nvalues = {values}"
        )))
        .unwrap_err();
        assert!(
            matches!(err, EngineError::ScenarioParse { .. }),
            "{values}: {err}"
        );
        assert!(err.to_string().contains("column body"), "{err}");
    }
}

#[test]
fn unknown_value_kind_and_column_are_rejected() {
    let err = parse(&with_txn(
        "op = \"insert\"\ntable = \"items\"\nvalues = { body = { kind = \"txt\", size = 3 } }",
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown value kind 'txt'"),
        "{err}"
    );
    let err = parse(&with_txn(
        "op = \"insert\"\ntable = \"items\"\nvalues = { bodyy = { kind = \"text\", size = 3 } }",
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("no column named bodyy") || err.to_string().contains("bodyy"),
        "{err}"
    );
    assert!(matches!(err, EngineError::InvalidScenario { .. }));
}

#[test]
fn autocommit_needs_one_statement() {
    let text = with_txn(
        "op = \"insert\"\ntable = \"items\"\nrepeat = 2\nvalues = { body = { kind = \"null\" } }",
    )
    .replacen("name = \"t\"\n", "name = \"t\"\nautocommit = true\n", 1);
    let err = parse(&text).unwrap_err();
    assert!(
        err.to_string().contains("line 3") && err.to_string().contains("exactly one statement"),
        "{err}"
    );
}

#[test]
fn unknown_builtin_lists_available() {
    let err = Scenario::builtin("mobibench").unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "unknown scenario 'mobibench' (available: mobibench-insert, mobibench-update"
        ),
        "{text}"
    );
    assert!(text.contains("kv-prefs"));
}

#[test]
fn a_file_that_cannot_be_read_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for path in [dir.path().join("missing.toml"), dir.path().to_path_buf()] {
        let err = Scenario::from_file(&path).unwrap_err();
        assert!(
            matches!(err, EngineError::UnreadableScenario { .. }),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("cannot read scenario file {}: ", path.display())),
            "{message}"
        );
        assert!(!err.hint().contains("writable directory"), "{}", err.hint());
    }
}

#[test]
fn a_file_that_is_not_a_scenario_says_so_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[u8], &str); 3] = [
        (
            b"name = \"t\"\nbody = \"caf\xe9\"\n",
            "line 2, column 12: not a valid scenario: not UTF-8 text",
        ),
        (
            b"hello world\n",
            "line 1, column 7: not a valid scenario: key with no value",
        ),
        (
            b"\x1f\x8b\x08\x00\x00\x00", // a gzip header
            "line 1, column 2: not a valid scenario: not UTF-8 text",
        ),
    ];
    for (bytes, expected) in cases {
        let path = dir.path().join("garbage.toml");
        std::fs::write(&path, bytes).unwrap();
        let err = Scenario::from_file(&path).unwrap_err();
        assert!(matches!(err, EngineError::ScenarioParse { .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("scenario file {}, {expected}", path.display())),
            "{message}"
        );
        assert!(err.hint().contains("TOML"), "{}", err.hint());
    }
}

#[test]
fn a_schema_beyond_the_limit_is_refused_before_any_sql() {
    let tables: String = (0..=sqlwa_workloads::scenario::MAX_SCHEMA_OBJECTS)
        .map(|i| format!("[[table]]\nname = \"t{i}\"\ncolumns = [\"v\"]\n"))
        .collect();
    let text = format!("name = \"big\"\n{tables}[[txn]]\nop = \"insert\"\ntable = \"t0\"\nvalues = {{ v = {{ kind = \"null\" }} }}\n");
    let started = std::time::Instant::now();
    let err = parse(&text).unwrap_err();
    assert!(matches!(err, EngineError::InvalidScenario { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("10001 tables and indexes: a scenario's schema may create at most 10000"),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn loading_stops_when_asked_from_inside_the_schema() {
    // one `sql` creating many tables: a single long call SQLite is stopped inside of
    let creates: String = (0..5000)
        .map(|i| format!("CREATE TABLE t{i} (v); "))
        .collect();
    let text = format!("name = \"big\"\n[[table]]\nname = \"t0\"\nsql = \"{creates}\"\n[[txn]]\nop = \"insert\"\ntable = \"t0\"\nvalues = {{ v = {{ kind = \"null\" }} }}\n");
    let started = std::time::Instant::now();
    let stop = Stop::new(move || started.elapsed() > std::time::Duration::from_millis(200));
    let err = Scenario::from_toml_str_with(&text, "x.toml", &stop).unwrap_err();
    assert!(matches!(err, EngineError::Interrupted), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn operations_compile_to_the_expected_sql() {
    let s = parse(&with_txn(
        r#"op = "upsert"
table = "items"
key = ["id"]
values = { id = { kind = "int", min = 1, max = 9 }, body = { kind = "text", size = 4 } }
[[txn]]
op = "select"
table = "items"
where = { id = { kind = "int", min = 1, max = 9 } }
limit = 1
[[txn]]
op = "delete"
table = "items"
keep_newest = 5"#,
    ))
    .unwrap();
    assert_eq!(s.txn[0].sql, "INSERT INTO items (body, id) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body");
    assert_eq!(s.txn[1].sql, "SELECT * FROM items WHERE id = ? LIMIT 1");
    assert_eq!(
        s.txn[2].sql,
        "DELETE FROM items WHERE rowid <= (SELECT max(rowid) FROM items) - 5"
    );
    // only stored values count as payload: 8 (id) + 4 (body)
    let mut w = sqlwa_workloads::scenario::Workload::new(&s, 1);
    let stmts = w.next_txn();
    assert_eq!(
        stmts.iter().map(|s| s.logical_bytes).collect::<Vec<_>>(),
        vec![12, 0, 0]
    );
}

#[test]
fn messenger_updates_the_conversation_it_wrote_to() {
    let s = Scenario::builtin("messenger").unwrap();
    assert_eq!(
        s.txn[1].sql,
        "UPDATE conversations SET last_message = ?, last_time = ? WHERE id = ?"
    );
    let mut w = sqlwa_workloads::scenario::Workload::new(&s, 3);
    for _ in 0..20 {
        let txn = w.next_txn();
        // insert params (alphabetical): body, conversation_id, sender, sent_at
        let (insert, update) = (&txn[0].params, &txn[1].params);
        assert_eq!(update[0], insert[0], "last_message = body");
        assert_eq!(update[1], insert[3], "last_time = sent_at");
        assert_eq!(update[2], insert[1], "id = conversation_id");
    }
}

#[test]
fn same_as_needs_an_earlier_operation() {
    let err = parse(&with_txn("op = \"update\"\ntable = \"items\"\nset = { body = { kind = \"same_as\", column = \"nope\" } }")).unwrap_err();
    assert!(
        err.to_string().contains("same_as 'nope' needs an earlier"),
        "{err}"
    );
}
