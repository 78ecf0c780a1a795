//! Confines a scenario's SQL, and a replayed log's, to the run's own database.
//!
//! Scenarios and SQL logs are shared files and sqlwa often runs as root, so the SQL they
//! bring must not open or write other files, load code, or change the settings the run
//! chose behind its back. SQLite's authorizer checks each statement as it is prepared
//! (and the statements VACUUM and the `pragma_*` table-valued functions prepare while
//! they run, VACUUM INTO's ATTACH among them): what it judges is what SQLite parsed —
//! a PRAGMA's name unquoted, whatever the spelling — never the statement's text. The
//! engine's own statements (its PRAGMA set-up, BEGIN and COMMIT, the read-backs) run
//! unconfined. Extension loading is switched off on every connection. (The VFS shim
//! refuses, besides, any file outside the run: `vfs::RunFiles`.)
//!
//! A scenario may run no PRAGMA (its `[pragmas]` table sets them). A replayed log's
//! PRAGMAs ([`Policy::Replay`]) are decided by the name SQLite parsed: one the run sets
//! (journal_mode, synchronous, the run's other settings) is ignored when it assigns
//! (SQLITE_IGNORE: SQLite makes it a statement that does nothing) and read when it
//! reads; one of [`REPLAYED_PRAGMAS`], which act on the connection's own database only,
//! is run; any other is refused.
//!
//! The statements SQLite's own virtual-table modules prepare while a scenario's statement
//! runs pass the same authorizer: their DDL and DML on their shadow tables are allowed as
//! a scenario's own would be, and so are the two read-only PRAGMAs they need
//! ([`MODULE_PRAGMAS`]), there only.

use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::ffi;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::Connection;

use crate::EngineError;

/// The authorizer installed on one connection: whether it confines right now, and why it
/// last refused a statement (SQLite itself only says "not authorized").
pub(crate) struct Confinement {
    state: Arc<State>,
}

/// The most tables, indexes, views and triggers a scenario's schema may create.
pub const MAX_SCHEMA_OBJECTS: usize = 10_000;

/// Why: SQLite re-reads its schema table after each CREATE, so each costs more than the
/// last (measured: 5 000 tables load in about a second, 120 000 in many minutes).
pub(crate) const SCHEMA_LIMIT_WHY: &str = "a scenario's schema may create at most 10000 \
    tables, indexes, views and triggers (SQLite re-reads its whole schema after each CREATE, \
    so a larger schema takes minutes to create)";

/// The PRAGMAs SQLite's modules read while a statement runs (SQLite 3.54 source): FTS5's
/// `PRAGMA <db>.data_version` (fts5_index.c, fts5IndexDataVersion: has another
/// connection written?), R*Tree's and FTS3's `PRAGMA <db>.page_size` (rtree.c getNodeSize
/// on CREATE VIRTUAL TABLE, fts3.c fts3DatabasePageSize: the node size to use).
const MODULE_PRAGMAS: [&str; 2] = ["data_version", "page_size"];

/// The PRAGMAs a replayed log may run (SQLite 3.54's documented ones that act on the
/// connection and its own database only). Left out: those that name files or
/// directories (temp_store_directory, data_store_directory, lock_proxy_file), that are
/// process-wide (soft/hard_heap_limit), that load code (activate_extensions), that let
/// SQL rewrite the schema SQLite trusts (writable_schema), and the debugging ones.
pub(crate) const REPLAYED_PRAGMAS: &[&str] = &[
    "analysis_limit",
    "application_id",
    "auto_vacuum",
    "automatic_index",
    "busy_timeout",
    "cache_size",
    "cache_spill",
    "case_sensitive_like",
    "cell_size_check",
    "checkpoint_fullfsync",
    "collation_list",
    "compile_options",
    "count_changes",
    "data_version",
    "database_list",
    "default_cache_size",
    "defer_foreign_keys",
    "empty_result_callbacks",
    "encoding",
    "foreign_key_check",
    "foreign_key_list",
    "foreign_keys",
    "freelist_count",
    "full_column_names",
    "fullfsync",
    "function_list",
    "ignore_check_constraints",
    "incremental_vacuum",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "journal_mode",
    "journal_size_limit",
    "legacy_alter_table",
    "locking_mode",
    "max_page_count",
    "mmap_size",
    "module_list",
    "optimize",
    "page_count",
    "page_size",
    "pragma_list",
    "query_only",
    "quick_check",
    "read_uncommitted",
    "recursive_triggers",
    "reverse_unordered_selects",
    "schema_version",
    "secure_delete",
    "short_column_names",
    "shrink_memory",
    "synchronous",
    "table_info",
    "table_list",
    "table_xinfo",
    "temp_store",
    "threads",
    "trusted_schema",
    "user_version",
    "wal_autocheckpoint",
    "wal_checkpoint",
];

/// What the authorizer lets a connection's SQL do.
#[derive(Clone, Debug)]
pub(crate) enum Policy {
    /// a scenario's SQL: no PRAGMA at all
    Scenario,
    /// a replayed log's: PRAGMAs by name; `run_sets` are the PRAGMAs the run's own
    /// settings set (lower case), whose assignments are ignored
    Replay { run_sets: Vec<String> },
}

/// What the authorizer did with the PRAGMAs of a statement (the strongest, when several).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PragmaSeen {
    /// run as logged
    Kept,
    /// ignored: the run sets it
    Overridden,
    /// refused
    Refused,
}

impl PragmaSeen {
    /// The word `config.replay.pragmas` lists it with.
    pub fn label(self) -> &'static str {
        match self {
            PragmaSeen::Kept => "kept",
            PragmaSeen::Overridden => "overridden",
            PragmaSeen::Refused => "refused",
        }
    }
}

struct State {
    policy: Policy,
    on: AtomicBool,
    /// the connection's handle (as an address: the hook must be Send), to see whether a
    /// statement is running while another is prepared
    db: usize,
    refusal: Mutex<Option<String>>,
    /// the PRAGMAs seen since the last [`Confinement::take_pragma`]
    pragma: Mutex<Option<PragmaSeen>>,
    /// schema objects created so far, and how many may be
    created: AtomicUsize,
    max_created: usize,
}

impl Confinement {
    /// Installs the authorizer on `conn`, which confines only inside [`Self::confined`],
    /// and switches extension loading off.
    pub(crate) fn install(conn: &mut Connection) -> Result<Self, EngineError> {
        Self::install_with(conn, Policy::Scenario, MAX_SCHEMA_OBJECTS)
    }

    /// As [`Self::install`], for a replayed log's statements ([`Policy::Replay`]).
    pub(crate) fn install_for_replay(
        conn: &mut Connection,
        run_sets: Vec<String>,
    ) -> Result<Self, EngineError> {
        Self::install_with(conn, Policy::Replay { run_sets }, MAX_SCHEMA_OBJECTS)
    }

    fn install_with(
        conn: &mut Connection,
        policy: Policy,
        max_created: usize,
    ) -> Result<Self, EngineError> {
        if extension_loading(conn, Some(false)) != Some(false) {
            return Err(EngineError::sql(
                "(switching extension loading off)",
                "SQLite did not switch it off",
            ));
        }
        // SAFETY: only the address is kept; the authorizer, which reads through it, is
        // removed with the connection (sqlite3_close), so it never outlives the handle.
        let db = unsafe { conn.handle() } as usize;
        let state = Arc::new(State {
            policy,
            on: AtomicBool::new(false),
            db,
            refusal: Mutex::new(None),
            pragma: Mutex::new(None),
            created: AtomicUsize::new(0),
            max_created,
        });
        let hook = state.clone();
        conn.authorizer(Some(move |ctx: AuthContext<'_>| {
            hook.authorize(&ctx.action)
        }))
        .map_err(|e| EngineError::sql("(installing the scenario authorizer)", e))?;
        Ok(Confinement { state })
    }

    /// Runs `f` (a scenario's statement) confined.
    pub(crate) fn confined<T>(&self, f: impl FnOnce() -> T) -> T {
        *self.state.refusal.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.state.on.store(true, Ordering::SeqCst);
        let result = f();
        self.state.on.store(false, Ordering::SeqCst);
        result
    }

    /// Why the statement just run was refused, if it was.
    pub(crate) fn take_refusal(&self) -> Option<String> {
        self.state
            .refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// What was done with the PRAGMAs SQLite parsed since the last call (None: none).
    pub(crate) fn take_pragma(&self) -> Option<PragmaSeen> {
        self.state
            .pragma
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl State {
    fn authorize(&self, action: &AuthAction<'_>) -> Authorization {
        if !self.on.load(Ordering::SeqCst) {
            return Authorization::Allow;
        }
        let verdict = match &self.policy {
            Policy::Scenario if self.is_a_modules_pragma(action) => return Authorization::Allow,
            Policy::Scenario => refusal(action, "a scenario").map(Verdict::Deny),
            Policy::Replay { run_sets } => self.replay_verdict(action, run_sets),
        };
        match verdict.or_else(|| self.too_many_objects(action).map(Verdict::Deny)) {
            None => Authorization::Allow,
            Some(Verdict::Ignore) => Authorization::Ignore,
            Some(Verdict::Deny(reason)) => {
                let mut slot = self.refusal.lock().unwrap_or_else(|e| e.into_inner());
                slot.get_or_insert(reason);
                Authorization::Deny
            }
        }
    }

    /// A replayed log's statement: its PRAGMAs by name (noted for
    /// [`Confinement::take_pragma`]), VACUUM's own temporary database, the rest as a
    /// scenario's. None: allowed.
    fn replay_verdict(&self, action: &AuthAction<'_>, run_sets: &[String]) -> Option<Verdict> {
        match action {
            AuthAction::Pragma {
                pragma_name,
                pragma_value,
            } => {
                let (seen, verdict) = replay_pragma(pragma_name, pragma_value.is_some(), run_sets);
                let mut slot = self.pragma.lock().unwrap_or_else(|e| e.into_inner());
                *slot = (*slot).max(Some(seen));
                verdict
            }
            // VACUUM attaches its temporary copy by the empty name while it runs; an
            // ATTACH '' of the log's own is refused
            AuthAction::Attach { filename: "" }
                if a_statement_runs(self.db as *mut ffi::sqlite3) =>
            {
                None
            }
            AuthAction::Attach { filename: "" } => Some(Verdict::Deny(
                "ATTACH: a replayed log works in the run's database only".into(),
            )),
            _ => refusal(action, "a replayed log").map(Verdict::Deny),
        }
    }

    /// Whether `action` is a read of one of [`MODULE_PRAGMAS`] prepared while a statement
    /// runs: a module's (FTS5, R*Tree) inside the scenario's statement. A scenario's own
    /// statements are prepared one at a time, none running, so its PRAGMAs stay refused.
    fn is_a_modules_pragma(&self, action: &AuthAction<'_>) -> bool {
        let AuthAction::Pragma {
            pragma_name,
            pragma_value: None,
        } = action
        else {
            return false;
        };
        MODULE_PRAGMAS
            .iter()
            .any(|name| pragma_name.eq_ignore_ascii_case(name))
            && a_statement_runs(self.db as *mut ffi::sqlite3)
    }

    /// The refusal of a CREATE beyond `max_created` (counted as statements are prepared).
    fn too_many_objects(&self, action: &AuthAction<'_>) -> Option<String> {
        use AuthAction::*;
        let creates = matches!(
            action,
            CreateTable { .. }
                | CreateTempTable { .. }
                | CreateIndex { .. }
                | CreateTempIndex { .. }
                | CreateView { .. }
                | CreateTempView { .. }
                | CreateTrigger { .. }
                | CreateTempTrigger { .. }
                | CreateVtable { .. }
        );
        let created = self
            .created
            .fetch_add(usize::from(creates), Ordering::SeqCst);
        (creates && created >= self.max_created).then(|| SCHEMA_LIMIT_WHY.to_string())
    }
}

/// Whether a statement of connection `db` is running: stepped and not yet done or reset.
fn a_statement_runs(db: *mut ffi::sqlite3) -> bool {
    // SAFETY: `db` is the open connection whose authorizer calls this, on its own thread;
    // sqlite3_next_stmt walks its list of statements (all alive while we hold the
    // connection's mutex), and sqlite3_stmt_busy only reads each one's state.
    unsafe {
        let mut stmt = ffi::sqlite3_next_stmt(db, ptr::null_mut());
        while !stmt.is_null() {
            if ffi::sqlite3_stmt_busy(stmt) != 0 {
                return true;
            }
            stmt = ffi::sqlite3_next_stmt(db, stmt);
        }
    }
    false
}

/// What the authorizer answers to an action it does not allow.
enum Verdict {
    /// SQLITE_IGNORE: for a PRAGMA, SQLite makes the statement one that does nothing
    Ignore,
    /// SQLITE_DENY, and why
    Deny(String),
}

/// What a replayed log's PRAGMA `name` (as SQLite parsed it), assigning a value or not,
/// becomes: ignored when it assigns one the run sets, run when it is replayed, else refused.
fn replay_pragma(name: &str, assigns: bool, run_sets: &[String]) -> (PragmaSeen, Option<Verdict>) {
    let lower = name.to_ascii_lowercase();
    if run_sets.contains(&lower) {
        return match assigns {
            true => (PragmaSeen::Overridden, Some(Verdict::Ignore)),
            false => (PragmaSeen::Kept, None),
        };
    }
    let why = match pragma_refusal(&lower) {
        Some(why) => why,
        None if REPLAYED_PRAGMAS.contains(&lower.as_str()) => return (PragmaSeen::Kept, None),
        None if lower == "writable_schema" => "it lets SQL rewrite the schema SQLite trusts",
        None => "it is not one sqlwa replays (those that act on the run's own database)",
    };
    let refused = Verdict::Deny(format!("PRAGMA {name}: {why}"));
    (PragmaSeen::Refused, Some(refused))
}

/// Why `who`'s SQL ("a scenario") may not do `action`; None when it may.
fn refusal(action: &AuthAction<'_>, who: &str) -> Option<String> {
    Some(match action {
        // VACUUM of the run's database attaches a temporary one by the empty name
        AuthAction::Attach { filename: "" } => return None,
        AuthAction::Attach { filename } => format!(
            "ATTACH and VACUUM INTO would open the file '{filename}', outside the run's database"
        ),
        AuthAction::Detach { .. } => format!("DETACH: {who} works in the run's database only"),
        AuthAction::Pragma { pragma_name, .. } => format!(
            "PRAGMA {pragma_name}: a scenario's SQL may not run PRAGMAs; set them in its \
             [pragmas] table, which the engine applies and checks"
        ),
        AuthAction::Function { function_name }
            if function_name.eq_ignore_ascii_case("load_extension") =>
        {
            "load_extension(): sqlwa never loads SQLite extensions".into()
        }
        // its two-argument form installs a tokenizer from a pointer (off by default)
        AuthAction::Function { function_name }
            if function_name.eq_ignore_ascii_case("fts3_tokenizer") =>
        {
            "fts3_tokenizer(): it can install code from a pointer".into()
        }
        // e.g. ATTACH of a computed file name: the authorizer gets no name to check
        AuthAction::Unknown { code, .. } => unknown_refusal(*code, who)?,
        _ => return None,
    })
}

/// The refusal of an action the authorizer could not decode (its arguments missing).
fn unknown_refusal(code: i32, who: &str) -> Option<String> {
    let what = match code {
        ffi::SQLITE_ATTACH => "ATTACH or VACUUM INTO of a computed file name",
        ffi::SQLITE_DETACH => "DETACH",
        ffi::SQLITE_PRAGMA => "a PRAGMA",
        _ => {
            return Some(format!(
                "an action sqlwa does not recognise (authorizer code {code})"
            ))
        }
    };
    Some(format!("{what} may not be used in {who}"))
}

/// Sets SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION when `set` is given and returns the setting
/// now (None if SQLite refused the call). The SQL function load_extension() is off unless
/// a program enables it, but the C API is on by default wherever SQLite is built with
/// SQLITE_ENABLE_LOAD_EXTENSION, as the bundled SQLite is; rusqlite has no setter for it.
fn extension_loading(conn: &Connection, set: Option<bool>) -> Option<bool> {
    let mut now: c_int = -1;
    let wanted: c_int = set.map_or(-1, c_int::from);
    // SAFETY: the handle is `conn`'s, open for the whole call; this option takes an int
    // (-1: leave it) and a pointer to an int that receives the setting, and `now` outlives
    // the call.
    let rc = unsafe {
        ffi::sqlite3_db_config(
            conn.handle(),
            ffi::SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION,
            wanted,
            &mut now as *mut c_int,
        )
    };
    (rc == ffi::SQLITE_OK).then_some(now != 0)
}

/// Why a scenario's `[pragmas]` table may not set `name` (any case); None when it may.
pub(crate) fn pragma_refusal(name: &str) -> Option<&'static str> {
    const OUTSIDE: &str =
        "it points SQLite at files outside the run's directory, for the whole process";
    const PROCESS_WIDE: &str = "it is process-wide and would outlive the run";
    match name.to_ascii_lowercase().as_str() {
        "journal_mode" => Some("the run chooses it (sqlwa run --journal)"),
        "synchronous" => Some("the run chooses it (sqlwa run --sync)"),
        "temp_store_directory" | "data_store_directory" => Some(OUTSIDE),
        "soft_heap_limit" | "hard_heap_limit" => Some(PROCESS_WIDE),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_loading_is_switched_off() {
        let mut conn = Connection::open_in_memory().unwrap();
        // Not SQLite's default here: the bundled build enables the C API.
        assert_eq!(extension_loading(&conn, None), Some(true));
        // The SQL function is off by default, authorizer or not.
        let err = conn
            .query_row("SELECT load_extension('/nonexistent.so')", [], |_| Ok(()))
            .unwrap_err();
        assert!(err.to_string().contains("not authorized"), "{err}");
        Confinement::install(&mut conn).unwrap();
        assert_eq!(extension_loading(&conn, None), Some(false));
    }

    #[test]
    fn unconfined_statements_are_allowed_and_refusals_say_why() {
        let mut conn = Connection::open_in_memory().unwrap();
        let confinement = Confinement::install(&mut conn).unwrap();
        conn.execute_batch("PRAGMA cache_size = 100; BEGIN; COMMIT")
            .unwrap();
        let err = confinement
            .confined(|| conn.execute_batch("PRAGMA cache_size = 200"))
            .unwrap_err();
        assert!(err.to_string().contains("not authorized"), "{err}");
        let reason = confinement.take_refusal().unwrap();
        assert!(reason.starts_with("PRAGMA cache_size:"), "{reason}");
        assert_eq!(confinement.take_refusal(), None);
        conn.execute_batch("PRAGMA cache_size = 300").unwrap();
    }

    #[test]
    fn plain_vacuum_is_allowed() {
        let mut conn = Connection::open_in_memory().unwrap();
        let confinement = Confinement::install(&mut conn).unwrap();
        confinement
            .confined(|| conn.execute_batch("CREATE TABLE t (v); VACUUM"))
            .unwrap();
    }

    #[test]
    fn creates_beyond_the_limit_are_refused_whatever_the_statements() {
        let mut conn = Connection::open_in_memory().unwrap();
        let confinement = Confinement::install_with(&mut conn, Policy::Scenario, 3).unwrap();
        let schema =
            "CREATE TABLE a (v); CREATE INDEX ai ON a (v); CREATE VIEW av AS SELECT v FROM a";
        confinement.confined(|| conn.execute_batch(schema)).unwrap();
        let more = "CREATE TRIGGER at AFTER INSERT ON a BEGIN SELECT 1; END";
        assert!(confinement.confined(|| conn.execute_batch(more)).is_err());
        assert!(confinement
            .take_refusal()
            .unwrap()
            .contains("at most 10000"));
    }

    #[test]
    fn fts5_and_rtree_tables_work_confined_and_their_pragmas_only_inside_them() {
        let mut conn = Connection::open_in_memory().unwrap();
        let confinement = Confinement::install(&mut conn).unwrap();
        let scenario = "CREATE VIRTUAL TABLE notes USING fts5(body); \
            INSERT INTO notes VALUES ('a few words'); \
            CREATE VIRTUAL TABLE places USING rtree(id, x0, x1); \
            INSERT INTO places VALUES (1, 0, 5)";
        confinement
            .confined(|| conn.execute_batch(scenario))
            .unwrap();
        let found: i64 = confinement
            .confined(|| {
                conn.query_row(
                    "SELECT (SELECT count(*) FROM notes WHERE notes MATCH 'words') \
                     + (SELECT count(*) FROM places WHERE x0 >= 0)",
                    [],
                    |row| row.get(0),
                )
            })
            .unwrap();
        assert_eq!(found, 2);
        for own in ["PRAGMA page_size", "PRAGMA main.data_version"] {
            assert!(confinement.confined(|| conn.execute_batch(own)).is_err());
            let reason = confinement.take_refusal().unwrap();
            assert!(
                reason.starts_with(own.replace("main.", "").as_str()),
                "{reason}"
            );
        }
    }

    fn replay_connection(path: &std::path::Path) -> (Connection, Confinement) {
        let mut conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL; CREATE TABLE t (v)",
        )
        .unwrap();
        let run_sets = vec!["journal_mode".to_string(), "synchronous".to_string()];
        let confinement = Confinement::install_for_replay(&mut conn, run_sets).unwrap();
        (conn, confinement)
    }

    fn read(conn: &Connection, sql: &str) -> String {
        conn.query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0))
            .map(crate::harness::value_text)
            .unwrap()
    }

    #[test]
    fn a_replayed_pragma_is_judged_by_the_name_sqlite_parsed_whatever_its_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, confinement) = replay_connection(&dir.path().join("a.db"));
        for spelling in [
            r#"PRAGMA "synchronous"=OFF"#,
            "PRAGMA [synchronous] = 0",
            "PRAGMA `SYNCHRONOUS`('off')",
            r#"PRAGMA main."journal_mode"=OFF"#,
            "PRAGMA /* a */ main /* b */ . /* c */ journal_mode /* d */ = /* e */ 'off'",
            "PRAGMA temp.journal_mode=OFF",
        ] {
            confinement
                .confined(|| conn.execute_batch(spelling))
                .unwrap();
            let seen = confinement.take_pragma();
            assert_eq!(seen, Some(PragmaSeen::Overridden), "{spelling}");
            assert_eq!(read(&conn, "PRAGMA main.synchronous"), "2", "{spelling}");
            assert_eq!(
                read(&conn, "PRAGMA main.journal_mode"),
                "delete",
                "{spelling}"
            );
        }
        // reading them is kept, and so is a PRAGMA on the run's own database
        for kept in [
            r#"PRAGMA "journal_mode""#,
            "PRAGMA user_version = 3",
            "SELECT * FROM pragma_table_info('t')",
        ] {
            confinement.confined(|| conn.execute_batch(kept)).unwrap();
            assert_eq!(confinement.take_pragma(), Some(PragmaSeen::Kept), "{kept}");
        }
        assert_eq!(confinement.take_refusal(), None);
    }

    #[test]
    fn a_replayed_pragma_that_reaches_outside_is_refused_quoted_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, confinement) = replay_connection(&dir.path().join("a.db"));
        let outside = dir.path().display();
        for (sql, why) in [
            (
                format!(r#"PRAGMA "temp_store_directory"='{outside}'"#),
                "outside the run's directory",
            ),
            (
                format!("PRAGMA [data_store_directory]='{outside}'"),
                "outside the run's directory",
            ),
            ("PRAGMA `hard_heap_limit`=1".into(), "process-wide"),
            ("PRAGMA writable_schema=ON".into(), "rewrite the schema"),
            (
                "PRAGMA activate_extensions='x'".into(),
                "not one sqlwa replays",
            ),
            ("PRAGMA no_such_pragma".into(), "not one sqlwa replays"),
        ] {
            let err = confinement
                .confined(|| conn.execute_batch(&sql))
                .unwrap_err();
            assert!(err.to_string().contains("not authorized"), "{sql}: {err}");
            let reason = confinement.take_refusal().unwrap();
            assert!(reason.contains(why), "{sql}: {reason}");
            assert_eq!(
                confinement.take_pragma(),
                Some(PragmaSeen::Refused),
                "{sql}"
            );
        }
        // the directory SQLite would make its temporary files in is still unset (no row)
        let mut set = conn.prepare("PRAGMA temp_store_directory").unwrap();
        assert!(set.query([]).unwrap().next().unwrap().is_none());
    }

    #[test]
    fn a_replayed_log_cannot_attach_vacuum_into_or_load_code_but_may_vacuum() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, confinement) = replay_connection(&dir.path().join("a.db"));
        let escaped = dir.path().join("ESCAPED.db");
        for sql in [
            format!("ATTACH '{}' AS e", escaped.display()),
            format!("ATTACH DATABASE 'file:{}?vfs=unix' AS e", escaped.display()),
            "ATTACH '' AS e".into(),
            format!("VACUUM INTO '{}'", escaped.display()),
            format!("VACUUM main INTO '{}' || ''", escaped.display()),
            "SELECT load_extension('/nonexistent.so')".into(),
            "SELECT fts3_tokenizer('simple')".into(),
            "DETACH main".into(),
        ] {
            assert!(
                confinement.confined(|| conn.execute_batch(&sql)).is_err(),
                "{sql}"
            );
            assert!(confinement.take_refusal().is_some(), "{sql}");
        }
        assert!(!escaped.exists());
        confinement
            .confined(|| conn.execute_batch("VACUUM"))
            .unwrap();
        assert_eq!(confinement.take_refusal(), None);
    }

    #[test]
    fn computed_attach_names_are_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        let confinement = Confinement::install(&mut conn).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sql = format!("ATTACH '{}/' || 'x.db' AS e", dir.path().display());
        assert!(confinement.confined(|| conn.execute_batch(&sql)).is_err());
        assert!(confinement.take_refusal().unwrap().contains("computed"));
        assert!(!dir.path().join("x.db").exists());
    }
}
