//! Scenarios: app-like workloads described in TOML (format: `scenarios/README.md`).
//!
//! Parsing turns the TOML into a validated [`Scenario`] whose operations are compiled to
//! SQL with `?` parameters; [`Workload`] then generates the parameter values of each
//! transaction from the seed, deterministically.
//!
//! A scenario's SQL is confined to the run's own database (no ATTACH, VACUUM INTO,
//! PRAGMA or `load_extension()`): checked when it is loaded, and again when it runs. A
//! schema may create at most [`MAX_SCHEMA_OBJECTS`] tables, indexes, views and triggers.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use rusqlite::types::Value;
use serde::Deserialize;
use toml::Spanned;

pub use crate::confine::MAX_SCHEMA_OBJECTS;
use crate::confine::{pragma_refusal, Confinement, SCHEMA_LIMIT_WHY};
use crate::stop::Stop;
use crate::EngineError;

/// The built-in scenarios, embedded at compile time.
const BUILTINS: &[(&str, &str)] = &[
    (
        "mobibench-insert",
        include_str!("../scenarios/mobibench-insert.toml"),
    ),
    (
        "mobibench-update",
        include_str!("../scenarios/mobibench-update.toml"),
    ),
    (
        "mobibench-delete",
        include_str!("../scenarios/mobibench-delete.toml"),
    ),
    (
        "mobibench-insert-2013",
        include_str!("../scenarios/mobibench-insert-2013.toml"),
    ),
    ("messenger", include_str!("../scenarios/messenger.toml")),
    (
        "contacts-sync",
        include_str!("../scenarios/contacts-sync.toml"),
    ),
    ("feed-cache", include_str!("../scenarios/feed-cache.toml")),
    ("kv-prefs", include_str!("../scenarios/kv-prefs.toml")),
];

/// Names of the built-in scenarios, in a stable order.
pub fn builtin_names() -> Vec<String> {
    BUILTINS.iter().map(|(name, _)| name.to_string()).collect()
}

/// Largest text or blob a generator may produce (SQLite's default SQLITE_MAX_LENGTH).
const MAX_VALUE_BYTES: u64 = 1_000_000_000;
/// Most values one `shuffle` generator deals (it holds a round's values: 8 bytes each).
const MAX_SHUFFLE_VALUES: u64 = 10_000_000;

// ---------------------------------------------------------------------------------------
// The TOML as written (private): spans kept so validation errors can name line and column.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default = "default_txns")]
    txns: u64,
    #[serde(default)]
    warmup: u64,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    think_time_ms: f64,
    #[serde(default)]
    autocommit: Option<Spanned<bool>>,
    #[serde(default)]
    pragmas: BTreeMap<String, Spanned<toml::Value>>,
    #[serde(default, rename = "table")]
    tables: Vec<TableFile>,
    #[serde(default, rename = "index")]
    indexes: Vec<IndexFile>,
    #[serde(default)]
    setup: Vec<OpFile>,
    #[serde(default)]
    setup_interleaved: bool,
    #[serde(default)]
    txn: Vec<OpFile>,
}

fn default_txns() -> u64 {
    1000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    name: Spanned<String>,
    #[serde(default)]
    columns: Vec<String>,
    #[serde(default)]
    sql: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexFile {
    name: Spanned<String>,
    table: Spanned<String>,
    #[serde(default)]
    columns: Vec<String>,
    #[serde(default)]
    unique: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpFile {
    op: Spanned<String>,
    table: Spanned<String>,
    #[serde(default)]
    values: BTreeMap<String, Spanned<GenFile>>,
    #[serde(default)]
    set: BTreeMap<String, Spanned<GenFile>>,
    #[serde(default, rename = "where")]
    filter: BTreeMap<String, Spanned<GenFile>>,
    #[serde(default)]
    key: Vec<String>,
    #[serde(default)]
    or: Option<Spanned<String>>,
    #[serde(default)]
    keep_newest: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    repeat: Option<Spanned<u64>>,
    #[serde(default)]
    repeat_per_txn: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GenFile {
    kind: String,
    size: Option<u64>,
    min: Option<i64>,
    max: Option<i64>,
    start: Option<i64>,
    value: Option<toml::Value>,
    column: Option<String>,
}

// ---------------------------------------------------------------------------------------
// The validated model.

/// A value generator for one column or WHERE term.
#[derive(Clone, Debug, PartialEq)]
pub enum Generator {
    /// Random lower-case alphanumeric text, length uniform in `min..=max` bytes.
    Text {
        /// the shortest, bytes
        min: u64,
        /// the longest, bytes
        max: u64,
    },
    /// Random bytes, length uniform in `min..=max`.
    Blob {
        /// the shortest, bytes
        min: u64,
        /// the longest, bytes
        max: u64,
    },
    /// Uniform integer in `min..=max`.
    Int {
        /// the smallest
        min: i64,
        /// the largest
        max: i64,
    },
    /// start, start+1, ... (one counter per generator, continued across transactions).
    Seq {
        /// the first value
        start: i64,
    },
    /// Every integer of `min..=max` once, in random order (sampling without replacement,
    /// as MobiBench picks the ids it deletes); then a new round in a new order.
    Shuffle {
        /// the smallest
        min: i64,
        /// the largest
        max: i64,
    },
    /// The same value every time.
    Literal(Value),
    /// NULL every time.
    Null,
    /// The value generated last, in this transaction, for the column of that name by an
    /// earlier operation (e.g. update the conversation a message was just inserted into).
    SameAs {
        /// the column whose value is repeated
        column: String,
    },
}

/// The five kinds of operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `INSERT` (with `or`: `INSERT OR REPLACE`, ...)
    Insert,
    /// `UPDATE ... WHERE`
    Update,
    /// `DELETE ... WHERE`
    Delete,
    /// `INSERT ... ON CONFLICT DO UPDATE`
    Upsert,
    /// `SELECT ... WHERE`, its rows stepped through
    Select,
}

impl OpKind {
    const NAMES: [(&'static str, OpKind); 5] = [
        ("insert", OpKind::Insert),
        ("update", OpKind::Update),
        ("delete", OpKind::Delete),
        ("upsert", OpKind::Upsert),
        ("select", OpKind::Select),
    ];
}

/// A parameter of an operation's SQL: its generator and whether its bytes count as
/// logical (payload the app asked to store: inserted/updated column values).
#[derive(Clone, Debug)]
pub struct Param {
    /// the column it is stored into or compared with
    pub column: String,
    /// where its values come from
    pub generator: Generator,
    /// whether its values count in [`CommitRecord::logical_bytes`](crate::CommitRecord::logical_bytes)
    pub stores_payload: bool,
}

/// One operation compiled to SQL; `repeat` statements of it per transaction (or in
/// total, for setup).
#[derive(Clone, Debug)]
pub struct Operation {
    /// what it does
    pub kind: OpKind,
    /// the table it works on
    pub table: String,
    /// the statement, with a `?` per parameter
    pub sql: String,
    /// the parameters, in the order of the `?`s
    pub params: Vec<Param>,
    /// statements of it per transaction (setup: in all)
    pub repeat: u64,
    /// setup only: additional statements per transaction of the run (txns + warmup)
    pub repeat_per_txn: u64,
}

/// A workload, loaded and checked: its schema, setup and the operations of one
/// transaction, with the run's defaults (which [`RunSettings`](crate::RunSettings)
/// overrides).
#[derive(Clone, Debug)]
pub struct Scenario {
    /// its name (the database is `<name>.db`)
    pub name: String,
    /// what app it imitates, in words
    pub description: String,
    /// where it came from: `builtin:<name>` or the file path
    pub origin: String,
    /// measured transactions
    pub txns: u64,
    /// transactions run before them, not measured
    pub warmup: u64,
    /// the seed of its values
    pub seed: u64,
    /// the pause between transactions, ms
    pub think_time_ms: f64,
    /// run each transaction's single statement without BEGIN/COMMIT (like MobiBench
    /// until 2017)
    pub autocommit: bool,
    /// per-scenario PRAGMA defaults ("page_size" first), overridden by run settings
    pub pragmas: Vec<(String, String)>,
    /// CREATE TABLE / CREATE INDEX statements, in order
    pub schema: Vec<String>,
    /// operations run once before measuring (not measured)
    pub setup: Vec<Operation>,
    /// run the setup's statements round-robin, one of each operation in turn
    pub setup_interleaved: bool,
    /// the operations of one transaction
    pub txn: Vec<Operation>,
}

impl Scenario {
    /// A built-in scenario by name.
    pub fn builtin(name: &str) -> Result<Scenario, EngineError> {
        let (_, text) = BUILTINS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            EngineError::UnknownScenario {
                name: name.into(),
                available: builtin_names(),
            }
        })?;
        Scenario::from_toml_str(text, &format!("builtin:{name}"))
    }

    /// A scenario from a TOML file.
    pub fn from_file(path: &Path) -> Result<Scenario, EngineError> {
        Scenario::from_file_with(path, &Stop::never())
    }

    /// A scenario from a TOML file; `stop` can end the loading, whose check of the SQL
    /// takes seconds for a large schema.
    pub fn from_file_with(path: &Path, stop: &Stop) -> Result<Scenario, EngineError> {
        let origin = path.display().to_string();
        let bytes =
            read_scenario_file(path).map_err(|message| EngineError::UnreadableScenario {
                path: path.into(),
                message,
            })?;
        let text = String::from_utf8(bytes).map_err(|e| not_utf8(&origin, &e))?;
        Scenario::from_toml_str_with(&text, &origin, stop)
    }

    /// A scenario from TOML text; `origin` names it in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Scenario, EngineError> {
        Scenario::from_toml_str_with(text, origin, &Stop::never())
    }

    /// As [`Scenario::from_toml_str`], which `stop` can end.
    pub fn from_toml_str_with(
        text: &str,
        origin: &str,
        stop: &Stop,
    ) -> Result<Scenario, EngineError> {
        let file: ScenarioFile = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            EngineError::ScenarioParse {
                origin: origin.into(),
                line,
                column,
                message: format!("not a valid scenario: {}", e.message().trim()),
            }
        })?;
        let scenario = Builder { text, origin }.build(file)?;
        check_sql(&scenario, stop)?;
        Ok(scenario)
    }

    /// The setup's statements in the order they run, as indices into `setup`, for a run
    /// of `total_txns` transactions (warm-up included): all of one operation's, then the
    /// next's; or, `setup_interleaved`, one of each operation (with any left) in turn, as
    /// an app writing related rows of several tables together lays out their pages.
    pub fn setup_order(&self, total_txns: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        let count =
            move |i: usize| self.setup[i].repeat + self.setup[i].repeat_per_txn * total_txns;
        let ops = 0..self.setup.len();
        if !self.setup_interleaved {
            return Box::new(ops.flat_map(move |i| std::iter::repeat_n(i, count(i) as usize)));
        }
        let rounds = ops.clone().map(count).max().unwrap_or(0);
        Box::new((0..rounds).flat_map(move |round| ops.clone().filter(move |&i| count(i) > round)))
    }

    /// Statements per transaction.
    pub fn statements_per_txn(&self) -> u64 {
        self.txn.iter().map(|op| op.repeat).sum()
    }

    /// The statement stream of the first `txns` transactions for `seed`, one line per
    /// statement (`<txn> <sql> <params>`; blobs as length and hash), without running it.
    pub fn render(&self, seed: u64, txns: u64) -> Vec<String> {
        let mut workload = Workload::new(self, seed);
        let mut lines = Vec::new();
        for i in 0..txns {
            for stmt in workload.next_txn() {
                let params: Vec<String> = stmt.params.iter().map(render_value).collect();
                lines.push(format!(
                    "{i} {} [{}]",
                    self.txn[stmt.op].sql,
                    params.join(", ")
                ));
            }
        }
        lines
    }

    /// A hash of `render(seed, txns)`: equal seeds give equal hashes.
    pub fn stream_hash(&self, seed: u64, txns: u64) -> u64 {
        self.render(seed, txns)
            .iter()
            .fold(FNV_OFFSET, |h, line| fnv1a(h, line.as_bytes()))
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn render_value(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Integer(i) => i.to_string(),
        Value::Real(r) => r.to_string(),
        Value::Text(t) => format!("'{t}'"),
        Value::Blob(b) => format!("blob({} bytes, fnv {:016x})", b.len(), fnv1a(FNV_OFFSET, b)),
    }
}

/// A scenario file that is not text: where its first byte that is not UTF-8 is.
/// The largest scenario file read: MAX_SCHEMA_OBJECTS statements of a few hundred bytes
/// each fit many times over; a larger file (or `/dev/zero`) is no scenario.
pub(crate) const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// A scenario file's bytes, once it is known to be a regular file (a symlink is followed)
/// of at most [`MAX_SCENARIO_BYTES`]: a FIFO would block the open, `/dev/zero` would be read
/// until memory ran out. The open does not wait (O_NONBLOCK) in case a FIFO took the name
/// after the check, and what was opened is checked again and read only to the limit.
fn read_scenario_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let refuse = |meta: std::fs::Metadata| {
        let kind = meta.file_type();
        let what = match () {
            _ if kind.is_file() && meta.len() <= MAX_SCENARIO_BYTES => return Ok(()),
            _ if kind.is_file() => {
                return Err(format!(
                    "it is {} bytes, larger than the {MAX_SCENARIO_BYTES} a scenario may be",
                    meta.len()
                ))
            }
            _ if kind.is_dir() => "a directory",
            _ if kind.is_fifo() => "a FIFO (named pipe)",
            _ if kind.is_char_device() => "a character device",
            _ if kind.is_block_device() => "a block device",
            _ => "not a regular file",
        };
        Err(format!(
            "it is {what}, not a regular file (sqlwa reads only regular files)"
        ))
    };
    refuse(std::fs::metadata(path).map_err(|e| e.to_string())?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    refuse(file.metadata().map_err(|e| e.to_string())?)?;
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(format!(
            "it grew past the {MAX_SCENARIO_BYTES} bytes a scenario may be"
        ));
    }
    Ok(bytes)
}

fn not_utf8(origin: &str, err: &std::string::FromUtf8Error) -> EngineError {
    let valid = err.utf8_error().valid_up_to();
    let text = std::str::from_utf8(&err.as_bytes()[..valid]).unwrap_or_default();
    let (line, column) = line_col(text, valid);
    EngineError::ScenarioParse {
        origin: origin.into(),
        line,
        column,
        message: "not a valid scenario: not UTF-8 text (a scenario is a TOML file)".into(),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

// ---------------------------------------------------------------------------------------
// Validation and compilation to SQL.

struct Builder<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Builder<'_> {
    /// An error at a position in the file.
    fn at(&self, span: Range<usize>, message: impl Into<String>) -> EngineError {
        let (line, column) = line_col(self.text, span.start);
        EngineError::ScenarioParse {
            origin: self.origin.into(),
            line,
            column,
            message: message.into(),
        }
    }

    fn invalid(&self, message: impl Into<String>) -> EngineError {
        EngineError::InvalidScenario {
            origin: self.origin.into(),
            message: message.into(),
        }
    }

    fn build(&self, file: ScenarioFile) -> Result<Scenario, EngineError> {
        let name = self.check_name(&file.name)?;
        let objects = file.tables.len() + file.indexes.len();
        if objects > MAX_SCHEMA_OBJECTS {
            return Err(self.invalid(format!("{objects} tables and indexes: {SCHEMA_LIMIT_WHY}")));
        }
        let schema = self.schema(&file.tables, &file.indexes)?;
        let tables: Vec<String> = file
            .tables
            .iter()
            .map(|t| t.name.get_ref().clone())
            .collect();
        let setup = self.operations(&file.setup, &tables, true)?;
        let txn = self.operations(&file.txn, &tables, false)?;
        if txn.is_empty() {
            return Err(self.invalid("no [[txn]] operations: a transaction needs at least one"));
        }
        let autocommit = file.autocommit.as_ref().is_some_and(|a| *a.get_ref());
        let statements: u64 = txn.iter().map(|op| op.repeat).sum();
        if let (Some(flag), true) = (&file.autocommit, autocommit && statements != 1) {
            let msg = format!(
                "autocommit = true needs exactly one statement per transaction, not {statements}"
            );
            return Err(self.at(flag.span(), msg));
        }
        if !crate::settings::think_time_ok(file.think_time_ms) {
            return Err(self.invalid(format!(
                "think_time_ms must be a number of ms between 0 and {}",
                crate::settings::MAX_THINK_TIME_MS
            )));
        }
        Ok(Scenario {
            name,
            description: file.description.trim().to_string(),
            origin: self.origin.into(),
            txns: file.txns,
            warmup: file.warmup,
            seed: file.seed,
            think_time_ms: file.think_time_ms,
            autocommit,
            pragmas: self.pragmas(&file.pragmas)?,
            schema,
            setup,
            setup_interleaved: file.setup_interleaved,
            txn,
        })
    }

    fn check_name(&self, name: &Spanned<String>) -> Result<String, EngineError> {
        let n = name.get_ref();
        let ok = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !n.starts_with('.');
        if !ok {
            return Err(self.at(name.span(), format!("name '{n}' must be letters, digits, '-', '_' or '.' (it names the database file)")));
        }
        Ok(n.clone())
    }

    fn pragmas(
        &self,
        pragmas: &BTreeMap<String, Spanned<toml::Value>>,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let mut out = Vec::new();
        for (name, value) in pragmas {
            let text = match value.get_ref() {
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => i32::from(*b).to_string(),
                toml::Value::String(s)
                    if s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
                {
                    s.clone()
                }
                _ => {
                    return Err(self.at(
                        value.span(),
                        format!("pragma {name}: value must be an integer, boolean or a plain word"),
                    ))
                }
            };
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(self.at(value.span(), format!("'{name}' is not a pragma name")));
            }
            if let Some(why) = pragma_refusal(name) {
                let msg = format!("pragma {name} may not be set by a scenario: {why}");
                return Err(self.at(value.span(), msg));
            }
            out.push((name.clone(), text));
        }
        // page_size only takes effect before the database is written: apply it first.
        out.sort_by_key(|(name, _)| name != "page_size");
        Ok(out)
    }

    fn schema(
        &self,
        tables: &[TableFile],
        indexes: &[IndexFile],
    ) -> Result<Vec<String>, EngineError> {
        let mut sql = Vec::new();
        for table in tables {
            let name = table.name.get_ref();
            sql.push(match (&table.sql, table.columns.is_empty()) {
                (Some(s), true) => s.trim().to_string(),
                (None, false) => format!("CREATE TABLE {name} ({})", table.columns.join(", ")),
                _ => {
                    return Err(self.at(
                        table.name.span(),
                        format!(
                            "table {name}: give either `columns` or `sql`, not both or neither"
                        ),
                    ))
                }
            });
        }
        for index in indexes {
            let table = index.table.get_ref();
            if !tables
                .iter()
                .any(|t| t.name.get_ref().eq_ignore_ascii_case(table))
            {
                return Err(self.at(
                    index.table.span(),
                    format!(
                        "index {}: no table '{table}' in the schema",
                        index.name.get_ref()
                    ),
                ));
            }
            if index.columns.is_empty() {
                return Err(self.at(
                    index.name.span(),
                    format!("index {}: `columns` is empty", index.name.get_ref()),
                ));
            }
            let unique = if index.unique { "UNIQUE " } else { "" };
            sql.push(format!(
                "CREATE {unique}INDEX {} ON {table} ({})",
                index.name.get_ref(),
                index.columns.join(", ")
            ));
        }
        Ok(sql)
    }

    fn operations(
        &self,
        ops: &[OpFile],
        tables: &[String],
        setup: bool,
    ) -> Result<Vec<Operation>, EngineError> {
        let mut compiled: Vec<Operation> = Vec::new();
        for op in ops {
            let next = self.operation(op, tables, setup)?;
            self.check_same_as(op, &next, &compiled, setup)?;
            compiled.push(next);
        }
        Ok(compiled)
    }

    /// `same_as` needs an earlier operation of the transaction to generate that column.
    fn check_same_as(
        &self,
        file: &OpFile,
        op: &Operation,
        earlier: &[Operation],
        setup: bool,
    ) -> Result<(), EngineError> {
        for param in &op.params {
            if let Generator::SameAs { column } = &param.generator {
                let known = earlier
                    .iter()
                    .flat_map(|o| &o.params)
                    .any(|p| &p.column == column);
                if setup || !known {
                    let msg = format!("column {}: same_as '{column}' needs an earlier [[txn]] operation that generates column {column}", param.column);
                    return Err(self.at(file.op.span(), msg));
                }
            }
        }
        Ok(())
    }

    fn operation(
        &self,
        op: &OpFile,
        tables: &[String],
        setup: bool,
    ) -> Result<Operation, EngineError> {
        let wanted = op.op.get_ref().to_ascii_lowercase();
        let Some((_, kind)) = OpKind::NAMES.iter().find(|(n, _)| *n == wanted) else {
            let names: Vec<&str> = OpKind::NAMES.iter().map(|(n, _)| *n).collect();
            return Err(self.at(
                op.op.span(),
                format!(
                    "unknown operation '{}' (expected one of: {})",
                    op.op.get_ref(),
                    names.join(", ")
                ),
            ));
        };
        let table = op.table.get_ref().clone();
        if !tables.iter().any(|t| t.eq_ignore_ascii_case(&table)) {
            let known = if tables.is_empty() {
                "none".to_string()
            } else {
                tables.join(", ")
            };
            return Err(self.at(
                op.table.span(),
                format!("no table '{table}' in the schema (tables: {known})"),
            ));
        }
        let repeat_per_txn = match &op.repeat_per_txn {
            Some(r) if !setup => {
                return Err(self.at(r.span(), "repeat_per_txn is only allowed in [[setup]]"))
            }
            Some(r) => *r.get_ref(),
            None => 0,
        };
        // Default: once; in setup, not at all when repeat_per_txn gives the count.
        let repeat = match &op.repeat {
            Some(r) if *r.get_ref() == 0 => {
                return Err(self.at(r.span(), "repeat must be at least 1"))
            }
            Some(r) => *r.get_ref(),
            None if repeat_per_txn > 0 => 0,
            None => 1,
        };
        let (sql, params) = self.compile(*kind, op, &table)?;
        Ok(Operation {
            kind: *kind,
            table,
            sql,
            params,
            repeat,
            repeat_per_txn,
        })
    }

    fn compile(
        &self,
        kind: OpKind,
        op: &OpFile,
        table: &str,
    ) -> Result<(String, Vec<Param>), EngineError> {
        let what = format!("{} on {table}", op.op.get_ref());
        let need = |ok: bool, field: &str| -> Result<(), EngineError> {
            if ok {
                Ok(())
            } else {
                Err(self.at(op.op.span(), format!("{what}: {field}")))
            }
        };
        let mut params = Vec::new();
        let sql = match kind {
            OpKind::Insert | OpKind::Upsert => {
                need(!op.values.is_empty(), "`values` is required")?;
                need(
                    op.set.is_empty() && op.filter.is_empty(),
                    "takes `values`, not `set` or `where`",
                )?;
                let cols: Vec<&str> = op.values.keys().map(String::as_str).collect();
                self.push_params(&op.values, true, &mut params)?;
                let marks = vec!["?"; cols.len()].join(", ");
                let verb = self.insert_verb(op)?;
                let mut sql = format!("{verb} INTO {table} ({}) VALUES ({marks})", cols.join(", "));
                if kind == OpKind::Upsert {
                    need(
                        !op.key.is_empty() && op.key.iter().all(|k| op.values.contains_key(k)),
                        "`key` must list conflict columns that are also in `values`",
                    )?;
                    let updates: Vec<String> = cols
                        .iter()
                        .filter(|c| !op.key.iter().any(|k| k == *c))
                        .map(|c| format!("{c} = excluded.{c}"))
                        .collect();
                    need(
                        !updates.is_empty(),
                        "`values` must have a column outside `key` to update",
                    )?;
                    sql += &format!(
                        " ON CONFLICT ({}) DO UPDATE SET {}",
                        op.key.join(", "),
                        updates.join(", ")
                    );
                }
                sql
            }
            OpKind::Update => {
                need(!op.set.is_empty(), "`set` is required")?;
                need(
                    op.values.is_empty(),
                    "takes `set` and `where`, not `values`",
                )?;
                let sets: Vec<String> = op.set.keys().map(|c| format!("{c} = ?")).collect();
                self.push_params(&op.set, true, &mut params)?;
                format!(
                    "UPDATE {table} SET {}{}",
                    sets.join(", "),
                    self.where_clause(op, &mut params)?
                )
            }
            OpKind::Delete => {
                need(
                    op.values.is_empty() && op.set.is_empty(),
                    "takes `where` or `keep_newest`",
                )?;
                match op.keep_newest {
                    Some(n) => {
                        need(op.filter.is_empty(), "give either `where` or `keep_newest`")?;
                        format!("DELETE FROM {table} WHERE rowid <= (SELECT max(rowid) FROM {table}) - {n}")
                    }
                    None => {
                        need(
                            !op.filter.is_empty(),
                            "`where` or `keep_newest` is required (refusing to delete every row)",
                        )?;
                        format!("DELETE FROM {table}{}", self.where_clause(op, &mut params)?)
                    }
                }
            }
            OpKind::Select => {
                need(
                    op.values.is_empty() && op.set.is_empty(),
                    "takes `where` and `limit`",
                )?;
                let limit = op.limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
                format!(
                    "SELECT * FROM {table}{}{limit}",
                    self.where_clause(op, &mut params)?
                )
            }
        };
        need(
            kind == OpKind::Delete || op.keep_newest.is_none(),
            "`keep_newest` belongs to delete",
        )?;
        need(
            kind == OpKind::Select || op.limit.is_none(),
            "`limit` belongs to select",
        )?;
        need(
            kind == OpKind::Upsert || op.key.is_empty(),
            "`key` belongs to upsert",
        )?;
        Ok((sql, params))
    }

    fn insert_verb(&self, op: &OpFile) -> Result<String, EngineError> {
        const ALLOWED: [&str; 5] = ["replace", "ignore", "abort", "fail", "rollback"];
        match &op.or {
            None => Ok("INSERT".into()),
            Some(or) if ALLOWED.contains(&or.get_ref().to_ascii_lowercase().as_str()) => {
                Ok(format!("INSERT OR {}", or.get_ref().to_ascii_uppercase()))
            }
            Some(or) => Err(self.at(
                or.span(),
                format!(
                    "or = '{}': expected one of {}",
                    or.get_ref(),
                    ALLOWED.join(", ")
                ),
            )),
        }
    }

    fn where_clause(&self, op: &OpFile, params: &mut Vec<Param>) -> Result<String, EngineError> {
        if op.filter.is_empty() {
            return Ok(String::new());
        }
        let terms: Vec<String> = op.filter.keys().map(|c| format!("{c} = ?")).collect();
        self.push_params(&op.filter, false, params)?;
        Ok(format!(" WHERE {}", terms.join(" AND ")))
    }

    fn push_params(
        &self,
        gens: &BTreeMap<String, Spanned<GenFile>>,
        stores_payload: bool,
        params: &mut Vec<Param>,
    ) -> Result<(), EngineError> {
        for (column, spec) in gens {
            let generator = self.generator(column, spec)?;
            params.push(Param {
                column: column.clone(),
                generator,
                stores_payload,
            });
        }
        Ok(())
    }

    fn generator(&self, column: &str, spec: &Spanned<GenFile>) -> Result<Generator, EngineError> {
        let g = spec.get_ref();
        let err = |msg: String| self.at(spec.span(), format!("column {column}: {msg}"));
        let sized = |min: Option<i64>, max: Option<i64>| -> Result<(u64, u64), EngineError> {
            let (lo, hi) = match (g.size, min, max) {
                (Some(s), None, None) => (s, s),
                (None, Some(lo), Some(hi)) if lo >= 0 && hi >= 0 => (lo as u64, hi as u64),
                _ => {
                    return Err(err(format!(
                        "{} needs `size = N` or `min = A, max = B` (bytes, >= 0)",
                        g.kind
                    )))
                }
            };
            if lo > hi || hi > MAX_VALUE_BYTES {
                return Err(err(format!(
                    "size range {lo}..{hi} is invalid (need min <= max <= {MAX_VALUE_BYTES})"
                )));
            }
            Ok((lo, hi))
        };
        Ok(match g.kind.as_str() {
            "text" => { let (min, max) = sized(g.min, g.max)?; Generator::Text { min, max } }
            "blob" => { let (min, max) = sized(g.min, g.max)?; Generator::Blob { min, max } }
            "int" => match (g.min, g.max) {
                (Some(min), Some(max)) if min <= max => Generator::Int { min, max },
                _ => return Err(err("int needs `min` and `max` with min <= max".into())),
            },
            "seq" => Generator::Seq { start: g.start.unwrap_or(1) },
            "shuffle" => match (g.min, g.max) {
                (Some(min), Some(max)) if min <= max && max.abs_diff(min) < MAX_SHUFFLE_VALUES => {
                    Generator::Shuffle { min, max }
                }
                _ => return Err(err(format!("shuffle needs `min` and `max` with min <= max, at most {MAX_SHUFFLE_VALUES} values"))),
            },
            "null" => Generator::Null,
            "same_as" => match &g.column {
                Some(c) => Generator::SameAs { column: c.clone() },
                None => return Err(err("same_as needs `column`".into())),
            },
            "literal" => Generator::Literal(match &g.value {
                Some(toml::Value::String(s)) => Value::Text(s.clone()),
                Some(toml::Value::Integer(i)) => Value::Integer(*i),
                Some(toml::Value::Float(f)) => Value::Real(*f),
                _ => return Err(err("literal needs `value` (a string or number)".into())),
            }),
            other => return Err(err(format!("unknown value kind '{other}' (expected one of: text, blob, int, seq, shuffle, literal, null, same_as)"))),
        })
    }
}

/// Prepares every statement against the schema in a scratch in-memory database, so that
/// unknown columns and SQL errors surface when the scenario is loaded, not mid-run.
/// The schema runs confined, as in a run: what a run would refuse is refused here, before
/// it could touch anything outside the scratch database. `stop` ends it, from inside a
/// statement too.
fn check_sql(s: &Scenario, stop: &Stop) -> Result<(), EngineError> {
    let invalid = |message: String| EngineError::InvalidScenario {
        origin: s.origin.clone(),
        message,
    };
    let mut conn = rusqlite::Connection::open_in_memory().map_err(|e| invalid(e.to_string()))?;
    let confinement = Confinement::install(&mut conn)?;
    stop.install(&mut conn)?;
    let refused_or = |sql: &str, failed: String| match (stop.stopped(), confinement.take_refusal())
    {
        (true, _) => EngineError::Interrupted,
        (false, Some(reason)) => EngineError::refused(&s.origin, sql, &reason),
        (false, None) => invalid(failed),
    };
    for sql in &s.schema {
        stop.check()?;
        confinement
            .confined(|| conn.execute_batch(sql))
            .map_err(|e| {
                refused_or(
                    sql,
                    format!("schema statement failed: {e} (statement: {sql})"),
                )
            })?;
    }
    for op in s.setup.iter().chain(&s.txn) {
        stop.check()?;
        confinement
            .confined(|| conn.prepare(&op.sql).map(drop))
            .map_err(|e| refused_or(&op.sql, format!("{e} (statement: {})", op.sql)))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Value generation.

/// SplitMix64: tiny, fast and fully specified, so a seed means the same stream forever
/// (no dependence on a crate's algorithm choice across versions).
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (tiny modulo bias is irrelevant here).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.next_u64() % span,
            None => self.next_u64(),
        }
    }
}

/// One statement to run: which operation, its parameter values and its payload bytes.
#[derive(Clone, Debug)]
pub struct Statement {
    /// the operation, an index into the scenario's `txn` (or `setup`)
    pub op: usize,
    /// the values of its parameters
    pub params: Vec<Value>,
    /// the bytes of the values that store payload
    pub logical_bytes: u64,
}

/// Generates the statements of a scenario's transactions (or of its setup) in order.
pub struct Workload<'s> {
    ops: &'s [Operation],
    rng: SplitMix64,
    /// next value of each `seq` generator, indexed [op][param]
    seqs: Vec<Vec<i64>>,
    /// values left in the current round of each `shuffle` generator, indexed [op][param]
    rounds: Vec<Vec<Vec<i64>>>,
    /// the last value generated per column in the current transaction (for `same_as`)
    last: Vec<(String, Value)>,
}

const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

impl<'s> Workload<'s> {
    /// The measured (and warm-up) transactions.
    pub fn new(scenario: &'s Scenario, seed: u64) -> Self {
        Self::over(&scenario.txn, seed)
    }

    /// The setup statements, from a stream independent of the transactions'.
    pub(crate) fn setup(scenario: &'s Scenario, seed: u64) -> Self {
        Self::over(&scenario.setup, seed ^ 0x5E70_5E70_5E70_5E70)
    }

    fn over(ops: &'s [Operation], seed: u64) -> Self {
        let seqs = ops
            .iter()
            .map(|op| {
                op.params
                    .iter()
                    .map(|p| {
                        if let Generator::Seq { start } = p.generator {
                            start
                        } else {
                            0
                        }
                    })
                    .collect()
            })
            .collect();
        let rounds = ops
            .iter()
            .map(|op| vec![Vec::new(); op.params.len()])
            .collect();
        Workload {
            ops,
            rng: SplitMix64::new(seed),
            seqs,
            rounds,
            last: Vec::new(),
        }
    }

    /// The statements of the next transaction.
    pub fn next_txn(&mut self) -> Vec<Statement> {
        self.last.clear();
        let mut out = Vec::new();
        for op in 0..self.ops.len() {
            for _ in 0..self.ops[op].repeat {
                out.push(self.statement(op));
            }
        }
        out
    }

    /// The next statement of operation `op`.
    pub(crate) fn statement(&mut self, op: usize) -> Statement {
        let mut logical_bytes = 0;
        let mut params = Vec::with_capacity(self.ops[op].params.len());
        for (i, param) in self.ops[op].params.iter().enumerate() {
            let value = self.value(&param.generator, op, i);
            self.remember(&param.column, &value);
            if param.stores_payload {
                logical_bytes += payload_bytes(&value);
            }
            params.push(value);
        }
        Statement {
            op,
            params,
            logical_bytes,
        }
    }

    fn remember(&mut self, column: &str, value: &Value) {
        match self.last.iter_mut().find(|(c, _)| c == column) {
            Some(slot) => slot.1 = value.clone(),
            None => self.last.push((column.to_string(), value.clone())),
        }
    }

    fn value(&mut self, generator: &Generator, op: usize, index: usize) -> Value {
        match generator {
            // validated: an earlier operation of the transaction generated it
            Generator::SameAs { column } => self
                .last
                .iter()
                .find(|(c, _)| c == column)
                .map_or(Value::Null, |(_, v)| v.clone()),
            Generator::Text { min, max } => {
                let len = self.rng.between(*min, *max) as usize;
                let text = (0..len)
                    .map(|_| ALNUM[(self.rng.next_u64() % ALNUM.len() as u64) as usize] as char)
                    .collect();
                Value::Text(text)
            }
            Generator::Blob { min, max } => {
                let len = self.rng.between(*min, *max) as usize;
                let mut bytes = Vec::with_capacity(len + 8);
                while bytes.len() < len {
                    bytes.extend_from_slice(&self.rng.next_u64().to_le_bytes());
                }
                bytes.truncate(len);
                Value::Blob(bytes)
            }
            Generator::Int { min, max } => {
                let offset = self.rng.between(0, max.abs_diff(*min));
                Value::Integer(min.wrapping_add(offset as i64))
            }
            Generator::Seq { .. } => {
                let next = &mut self.seqs[op][index];
                *next += 1;
                Value::Integer(*next - 1)
            }
            Generator::Shuffle { min, max } => {
                let round = &mut self.rounds[op][index];
                if round.is_empty() {
                    round.extend(*min..=*max);
                }
                let pick = self.rng.between(0, round.len() as u64 - 1) as usize;
                Value::Integer(round.swap_remove(pick))
            }
            Generator::Literal(v) => v.clone(),
            Generator::Null => Value::Null,
        }
    }
}

/// Bytes of a stored value: text and blob length, 8 for numbers, 0 for NULL.
pub(crate) fn payload_bytes(v: &Value) -> u64 {
    match v {
        Value::Null => 0,
        Value::Integer(_) | Value::Real(_) => 8,
        Value::Text(t) => t.len() as u64,
        Value::Blob(b) => b.len() as u64,
    }
}
