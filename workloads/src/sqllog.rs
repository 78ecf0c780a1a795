//! Reads a SQL log, format 1 (the docs' "SQL log format" page, `docs/sql-log-format.md`:
//! JSON Lines, a header line then `open`, `sql` and `close` events), one line at a time:
//! memory stays bounded by the longest line, whatever the log's length.
//!
//! [`SqlLog::load`] reads the whole log once to check it (every line JSON with the keys its
//! event needs, every statement on a connection that was opened) and to learn what a
//! replay needs before it starts: the database files, the statement count, the PRAGMAs
//! that must precede a database's first write. A replay then streams it again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::stop::Stop;
use crate::EngineError;

/// The header key (and format version) that makes a file a SQL log.
pub(crate) const HEADER_KEY: &str = "sqlwa_sql_log";
/// The one format this reader knows.
pub(crate) const FORMAT_VERSION: u64 = 1;
/// The longest line read (a statement with a large blob literal fits many times over); a
/// longer one is an error, so a file without newlines cannot exhaust memory.
pub(crate) const MAX_LINE_BYTES: u64 = 256 << 20;

/// Whether the file at `path` is a SQL log: its first line is a format-1 style header
/// (recognised by content, whatever the file's name). Reads at most the first 64 KiB.
pub fn is_sql_log(path: &Path) -> bool {
    // Only a regular file is looked into: opening a FIFO would wait for a writer, and the
    // scenario reader refuses anything else with one line.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut first = Vec::new();
    if BufReader::new(file.take(64 << 10))
        .read_until(b'\n', &mut first)
        .is_err()
    {
        return false;
    }
    let text = String::from_utf8_lossy(&first);
    text.trim_start().starts_with('{') && text.contains(&format!("\"{HEADER_KEY}\""))
}

/// The header line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    /// the format version: 1
    pub sqlwa_sql_log: u64,
    /// where the log came from: "record", "android-logcat", "sql-file"
    pub source: String,
    /// the recorded program's command line
    #[serde(default)]
    pub program: Option<Vec<String>>,
    /// the SQLite version the program ran
    #[serde(default)]
    pub sqlite_version: Option<String>,
    /// when the recording started, ns since the Unix epoch
    #[serde(default)]
    pub started_unix_ns: Option<u64>,
    /// whether events carry their time (`t`)
    pub timed: bool,
    /// whether the literals were replaced (`sqlwa record --redact`)
    #[serde(default)]
    pub redacted: bool,
}

/// One event line as written; keys the reader does not know are ignored.
#[derive(Deserialize)]
struct EventLine<'a> {
    #[serde(borrow)]
    ev: Cow<'a, str>,
    conn: Option<u64>,
    #[serde(borrow, default)]
    db: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    sql: Option<Cow<'a, str>>,
    t: Option<u64>,
    #[serde(default)]
    trigger: bool,
}

/// One event of the log, checked.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    Open {
        conn: u64,
        db: Cow<'a, str>,
    },
    Sql {
        conn: u64,
        sql: Cow<'a, str>,
        t: Option<u64>,
        trigger: bool,
    },
    Close {
        conn: u64,
    },
}

/// Streams a log's events, line by line, through one reused buffer.
pub(crate) struct LogReader {
    path: PathBuf,
    reader: BufReader<File>,
    buf: Vec<u8>,
    line: u64,
    /// the header, read when the reader is opened
    pub header: Header,
}

impl LogReader {
    /// Opens the log and reads its header (line 1).
    pub fn open(path: &Path) -> Result<LogReader, EngineError> {
        let file = File::open(path).map_err(|e| EngineError::UnreadableScenario {
            path: path.into(),
            message: e.to_string(),
        })?;
        let mut reader = LogReader {
            path: path.into(),
            reader: BufReader::with_capacity(1 << 16, file),
            buf: Vec::new(),
            line: 0,
            header: placeholder_header(),
        };
        if !reader.read_line()? {
            return Err(reader.error("the log is empty (no header line)"));
        }
        let header = reader.parse_header()?;
        reader.header = header;
        Ok(reader)
    }

    /// An error at the current line.
    pub fn error(&self, message: impl Into<String>) -> EngineError {
        EngineError::LogParse {
            path: self.path.clone(),
            line: self.line,
            message: message.into(),
        }
    }

    /// Reads the next line into `buf` (without its newline); false at the end.
    fn read_line(&mut self) -> Result<bool, EngineError> {
        self.buf.clear();
        self.line += 1;
        let read = (&mut self.reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| self.error(format!("cannot read: {e}")))?;
        if read == 0 {
            return Ok(false);
        }
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        } else if self.buf.len() as u64 > MAX_LINE_BYTES {
            return Err(self.error(format!("line longer than {MAX_LINE_BYTES} bytes")));
        }
        Ok(true)
    }

    fn text(&self) -> Result<&str, EngineError> {
        std::str::from_utf8(&self.buf).map_err(|e| {
            self.error(format!(
                "not UTF-8 text (byte {} of the line)",
                e.valid_up_to() + 1
            ))
        })
    }

    fn parse_header(&self) -> Result<Header, EngineError> {
        let value: serde_json::Value = serde_json::from_str(self.text()?)
            .map_err(|e| self.error(format!("the header is not valid JSON: {e}")))?;
        match value.get(HEADER_KEY).and_then(|v| v.as_u64()) {
            Some(FORMAT_VERSION) => {}
            Some(other) => {
                return Err(self.error(format!(
                    "SQL log format {other}; this sqlwa reads format {FORMAT_VERSION}"
                )))
            }
            None => {
                return Err(self.error(format!(
                    "not a SQL log header (no \"{HEADER_KEY}\": {FORMAT_VERSION})"
                )))
            }
        }
        serde_json::from_value(value).map_err(|e| self.error(format!("bad header: {e}")))
    }

    /// The next event, with its line number; None at the end of the log. A line that is
    /// not JSON, or lacks a key its event needs, is an error naming the line.
    pub fn next_event(&mut self) -> Result<Option<(u64, Event<'_>)>, EngineError> {
        loop {
            if !self.read_line()? {
                return Ok(None);
            }
            // a blank line (e.g. a trailing one) carries no event
            if !self.buf.iter().all(u8::is_ascii_whitespace) {
                break;
            }
        }
        let text = self.text()?;
        let line: EventLine<'_> =
            serde_json::from_str(text).map_err(|e| self.error(format!("not a log event: {e}")))?;
        let need = |key: &str| self.error(format!("a \"{}\" event needs \"{key}\"", line.ev));
        let conn = line.conn.ok_or_else(|| need("conn"))?;
        let event = match line.ev.as_ref() {
            "open" => Event::Open {
                conn,
                db: line.db.ok_or_else(|| need("db"))?,
            },
            "sql" => Event::Sql {
                conn,
                sql: line.sql.ok_or_else(|| need("sql"))?,
                t: line.t,
                trigger: line.trigger,
            },
            "close" => Event::Close { conn },
            other => {
                return Err(self.error(format!(
                    "unknown event \"{other}\" (expected open, sql or close)"
                )))
            }
        };
        Ok(Some((self.line, event)))
    }
}

fn placeholder_header() -> Header {
    Header {
        sqlwa_sql_log: FORMAT_VERSION,
        source: String::new(),
        program: None,
        sqlite_version: None,
        started_unix_ns: None,
        timed: false,
        redacted: false,
    }
}

/// A database file the log opened.
#[derive(Clone, Debug, Serialize)]
pub struct LoggedDatabase {
    /// the path as the program named it
    pub recorded: String,
    /// the file's name in the run's directory: the recorded basename, made distinct
    pub file_name: String,
    /// PRAGMAs that must precede the database's first write to take effect (page_size,
    /// auto_vacuum), as the log set them before its first other statement on it
    #[serde(skip)]
    pub initial_pragmas: Vec<String>,
}

/// A checked SQL log: what a replay needs to know before streaming it.
#[derive(Clone, Debug)]
pub struct SqlLog {
    /// the log file
    pub path: PathBuf,
    /// the run's name for it: the file's stem
    pub name: String,
    /// its header line
    pub header: Header,
    /// `sql` events, trigger and temporary ones included
    pub statements: u64,
    /// the database files opened (temporary ones left out), in order of first open
    pub databases: Vec<LoggedDatabase>,
}

/// Connection temporary: ":memory:", "" or a `file::memory:` URI (never replayed).
pub(crate) fn is_temporary(db: &str) -> bool {
    db.is_empty()
        || db == ":memory:"
        || db.starts_with("file::memory:")
        || db.contains("mode=memory")
}

impl SqlLog {
    /// Reads and checks the whole log (streamed); `stop` can end it.
    pub fn load(path: &Path, stop: &Stop) -> Result<SqlLog, EngineError> {
        let mut reader = LogReader::open(path)?;
        let mut scan = Scan::default();
        while let Some((line, event)) = reader.next_event()? {
            if line % 4096 == 0 {
                stop.check()?;
            }
            let problem = scan.add(event);
            if let Some(message) = problem {
                return Err(reader.error(message));
            }
        }
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "replay".into());
        Ok(SqlLog {
            path: path.into(),
            name,
            header: reader.header,
            statements: scan.statements,
            databases: scan.databases,
        })
    }

    /// The index in `databases` of a recorded path (None for a temporary one).
    pub fn database_of(&self, recorded: &str) -> Option<usize> {
        self.databases.iter().position(|d| d.recorded == recorded)
    }
}

/// What the checking pass gathers.
#[derive(Default)]
struct Scan {
    statements: u64,
    databases: Vec<LoggedDatabase>,
    /// open connections: their database (None: temporary)
    conns: HashMap<u64, Option<usize>>,
    /// databases that have seen a statement other than an early PRAGMA
    written: Vec<bool>,
}

impl Scan {
    /// Takes one event in; the problem with it, if any.
    fn add(&mut self, event: Event<'_>) -> Option<String> {
        match event {
            Event::Open { conn, db, .. } => {
                let index = (!is_temporary(&db)).then(|| self.database(&db));
                self.conns.insert(conn, index);
            }
            Event::Sql { conn, sql, .. } => {
                self.statements += 1;
                let Some(db) = self.conns.get(&conn) else {
                    return Some(format!(
                        "a statement on connection {conn}, which no \"open\" event opened"
                    ));
                };
                if let Some(db) = *db {
                    self.early_pragma(db, &sql);
                }
            }
            Event::Close { conn } => {
                if self.conns.remove(&conn).is_none() {
                    return Some(format!("\"close\" of connection {conn}, which is not open"));
                }
            }
        }
        None
    }

    fn database(&mut self, recorded: &str) -> usize {
        if let Some(i) = self.databases.iter().position(|d| d.recorded == recorded) {
            return i;
        }
        let taken: Vec<&str> = self
            .databases
            .iter()
            .map(|d| d.file_name.as_str())
            .collect();
        let file_name = distinct_file_name(recorded, &taken);
        self.databases.push(LoggedDatabase {
            recorded: recorded.into(),
            file_name,
            initial_pragmas: Vec::new(),
        });
        self.written.push(false);
        self.databases.len() - 1
    }

    /// Keeps a page_size or auto_vacuum PRAGMA seen before the database's first other
    /// statement: a replay applies it before the run's journal_mode, which would write the
    /// database's first page and fix its page size.
    fn early_pragma(&mut self, db: usize, sql: &str) {
        if self.written[db] {
            return;
        }
        match pragma_of(sql) {
            Some(p)
                if p.value.is_some() && ["page_size", "auto_vacuum"].contains(&p.name.as_str()) =>
            {
                self.databases[db].initial_pragmas.push(sql.trim().into())
            }
            Some(_) => {}
            None => self.written[db] = true,
        }
    }
}

/// The run's file name for a recorded database path: its basename (a distinct name when
/// another database of the log has the same one: `app-2.db`).
fn distinct_file_name(recorded: &str, taken: &[&str]) -> String {
    let base = Path::new(recorded)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty() && s != "." && s != "..")
        .unwrap_or_else(|| "database.db".into());
    if !taken.contains(&base.as_str()) {
        return base;
    }
    let (stem, ext) = match base.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem.to_string(), format!(".{ext}")),
        _ => (base.clone(), String::new()),
    };
    (2..)
        .map(|n| format!("{stem}-{n}{ext}"))
        .find(|name| !taken.contains(&name.as_str()))
        .unwrap_or(base)
}

/// A PRAGMA statement's name (lower case, schema prefix removed) and value, if given.
#[derive(Debug, PartialEq)]
pub(crate) struct Pragma {
    pub name: String,
    pub value: Option<String>,
}

/// The PRAGMA `sql` is, if it is one: `PRAGMA [schema.]name [= value | (value)]`.
pub(crate) fn pragma_of(sql: &str) -> Option<Pragma> {
    let text = sql.trim().trim_end_matches(';').trim();
    let head = text.get(..6)?;
    if !head.eq_ignore_ascii_case("pragma") {
        return None;
    }
    let rest = text[6..].trim_start();
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(rest.len());
    let qualified = &rest[..name_end];
    let name = qualified.rsplit('.').next()?.to_ascii_lowercase();
    let tail = rest[name_end..].trim();
    let value = match tail.strip_prefix('=') {
        Some(v) => Some(v.trim().to_string()),
        None => (tail.strip_prefix('(')).map(|v| v.trim_end_matches(')').trim().to_string()),
    };
    Some(Pragma { name, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pragmas_are_recognised_with_either_form() {
        assert_eq!(
            pragma_of("PRAGMA main.journal_mode = WAL;"),
            Some(Pragma {
                name: "journal_mode".into(),
                value: Some("WAL".into())
            })
        );
        assert_eq!(
            pragma_of("pragma page_size(8192)")
                .unwrap()
                .value
                .as_deref(),
            Some("8192")
        );
        assert_eq!(pragma_of("PRAGMA user_version").unwrap().value, None);
        assert_eq!(pragma_of("SELECT 1"), None);
        assert_eq!(pragma_of("PRAG"), None);
    }

    #[test]
    fn same_basenames_are_kept_apart() {
        assert_eq!(distinct_file_name("/a/app.db", &[]), "app.db");
        assert_eq!(distinct_file_name("/b/app.db", &["app.db"]), "app-2.db");
        assert_eq!(
            distinct_file_name("/c/app.db", &["app.db", "app-2.db"]),
            "app-3.db"
        );
        assert_eq!(distinct_file_name("/", &[]), "database.db");
    }
}
