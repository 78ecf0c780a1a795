//! SQL logs (format 1) for the replay tests: written, replayed, and the replayed
//! database read back.

use std::path::{Path, PathBuf};

use serde_json::json;
use sqlwa_workloads::{replay, EngineError, ReplayOutput, RunSettings, SqlLog, Stop};

/// Writes `app.sqllog` in `dir`: the header, then one line per event.
pub fn write_log(dir: &Path, events: &[serde_json::Value], timed: bool) -> PathBuf {
    let path = dir.join("app.sqllog");
    let header = json!({"sqlwa_sql_log": 1, "source": "record", "program": null,
        "sqlite_version": null, "started_unix_ns": null, "timed": timed, "redacted": false});
    let mut text = format!("{header}\n");
    for e in events {
        text += &format!("{e}\n");
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// An `open` event: connection `conn` opens the database the app had at `db`.
pub fn open(conn: u64, db: &str) -> serde_json::Value {
    json!({"ev": "open", "conn": conn, "db": db})
}

/// A `sql` event of connection `conn`.
pub fn sql(conn: u64, text: &str) -> serde_json::Value {
    json!({"ev": "sql", "conn": conn, "sql": text})
}

/// Replays `log` into `dir/run`, without markers, progress or stop.
pub fn run(log: &Path, settings: &RunSettings, dir: &Path) -> Result<ReplayOutput, EngineError> {
    let log = SqlLog::load(log, &Stop::never())?;
    replay(
        &log,
        settings,
        &dir.join("run"),
        None,
        &mut |_| true,
        &Stop::never(),
    )
}

/// The integer a one-row query (`SELECT count(*) …`, `PRAGMA user_version`) reads from
/// the database at `db`, opened by plain SQLite.
pub fn query_int(db: &Path, query: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(query, [], |r| r.get(0)).unwrap()
}
