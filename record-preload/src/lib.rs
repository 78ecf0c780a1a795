//! `sqlwa record`'s preload library: loaded into an unmodified program with `LD_PRELOAD`,
//! it sees every SQLite connection the program opens and writes each statement the
//! connection runs, as run (bound values expanded), with its start time and duration.
//!
//! It defines `sqlite3_open`, `sqlite3_open_v2` and `sqlite3_open16`: the program's calls
//! reach these first (a preloaded object comes first in the symbol search), which call the
//! real functions of whatever libsqlite3 the program loaded, found at run time (`dlsym`),
//! and then register a `sqlite3_trace_v2` hook (statement, profile, close) on the new
//! connection. It also defines `sqlite3_trace_v2`, `sqlite3_trace` and `sqlite3_profile`,
//! because SQLite keeps one trace hook per connection: a program that sets its own (Python's
//! `set_trace_callback`, the shell's `.trace`) would otherwise cancel the recording; its
//! callback is kept and called from this library's.
//!
//! It also defines `sqlite3_bind_text`, `sqlite3_bind_text64` and `sqlite3_finalize`, to
//! keep a bound TEXT that holds a NUL byte whole: `sqlite3_expanded_sql` cuts it at the
//! NUL, so such a value is written as `('a'||char(0)||'b')` (expand.rs). (A text with a
//! NUL bound by `sqlite3_bind_text16` or `sqlite3_bind_value` is still written as SQLite
//! expands it.)
//!
//! Nothing is written unless `SQLWA_RECORD_DIR` names a directory: each process writes its
//! own file there, `PID.jsonl`, one JSON object per line and one `write(2)` per line on a
//! file opened `O_APPEND`, so lines of several threads never mix and a process that ends
//! abruptly (`_exit`, a crash) loses no line it has written. A child that inherits
//! `LD_PRELOAD` writes its own file. `sqlwa record` merges the files into the SQL log
//! (docs/sql-log-format.md). The lines here, per process, each with `"pid"`:
//!
//! ```text
//! {"ev":"open","pid":P,"conn":C,"t":T,"db":"/abs/app.db","sqlite_version":"3.40.1"}
//! {"ev":"sql","pid":P,"conn":C,"t":T,"seq":S,"sql":"INSERT …","trigger":false}
//! {"ev":"dur","pid":P,"conn":C,"seq":S,"dur":D}
//! {"ev":"close","pid":P,"conn":C,"t":T}
//! ```
//!
//! `t` is `CLOCK_MONOTONIC` in nanoseconds (one clock for every process), taken under the
//! process's log lock so each file's lines are in time order. `dur` is measured here from
//! the statement's start (`SQLITE_TRACE_STMT`) to its end (`SQLITE_TRACE_PROFILE`, which
//! SQLite reports at millisecond resolution only). `seq` pairs a statement with its `dur`.
//! A trigger program's start is reported by SQLite as an SQL comment, `-- TRIGGER name`
//! (vdbe.c, `OP_Init`): such a line carries that text and `"trigger":true`, and no `dur`.

mod expand;

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt::Write as _;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// `SQLITE_TRACE_STMT`: a statement starts (sqlite3.h).
const TRACE_STMT: c_uint = 0x01;
/// `SQLITE_TRACE_PROFILE`: a statement ends, with its run time.
const TRACE_PROFILE: c_uint = 0x02;
/// `SQLITE_TRACE_CLOSE`: a connection closes.
const TRACE_CLOSE: c_uint = 0x08;
/// The events this library needs on every connection.
const RECORDED: c_uint = TRACE_STMT | TRACE_PROFILE | TRACE_CLOSE;

type TraceCallback = unsafe extern "C" fn(c_uint, *mut c_void, *mut c_void, *mut c_void) -> c_int;
type LegacyTrace = unsafe extern "C" fn(*mut c_void, *const c_char);
type LegacyProfile = unsafe extern "C" fn(*mut c_void, *const c_char, u64);

/// The real libsqlite3 functions, from the library the program loaded.
struct Sqlite {
    open: unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int,
    open_v2: unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, *const c_char) -> c_int,
    open16: unsafe extern "C" fn(*const c_void, *mut *mut c_void) -> c_int,
    trace_v2:
        unsafe extern "C" fn(*mut c_void, c_uint, Option<TraceCallback>, *mut c_void) -> c_int,
    expanded_sql: unsafe extern "C" fn(*mut c_void) -> *mut c_char,
    sql: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    free: unsafe extern "C" fn(*mut c_void),
    db_filename: unsafe extern "C" fn(*mut c_void, *const c_char) -> *const c_char,
    libversion: unsafe extern "C" fn() -> *const c_char,
    bind_text: unsafe extern "C" fn(*mut c_void, c_int, *const c_char, c_int, *mut c_void) -> c_int,
    bind_text64:
        unsafe extern "C" fn(*mut c_void, c_int, *const c_char, u64, *mut c_void, u8) -> c_int,
    bind_parameter_index: unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int,
    finalize: unsafe extern "C" fn(*mut c_void) -> c_int,
}

/// The hooks the program itself set on a connection, called from this library's.
#[derive(Clone, Copy, Default)]
struct ProgramHooks {
    v2: Option<(c_uint, TraceCallback, usize)>,
    trace: Option<(LegacyTrace, usize)>,
    profile: Option<(LegacyProfile, usize)>,
}

/// One process's recording state, behind one lock.
struct Recorder {
    /// The process the log file belongs to: a forked child opens its own.
    pid: i32,
    fd: c_int,
    /// Statement pointer -> (seq, start) of its run in progress.
    running: HashMap<usize, (u64, u64)>,
    next_seq: u64,
    /// Connection handle -> connection number.
    conns: HashMap<usize, usize>,
    hooks: HashMap<usize, ProgramHooks>,
    warned: bool,
    /// Statement pointer -> parameter number -> a TEXT bound to it that holds a NUL
    /// byte, whole (SQLite's expansion cuts it at the NUL: see expand.rs).
    nul_texts: HashMap<usize, HashMap<i32, Vec<u8>>>,
}

/// How many statements have an entry in some process's `nul_texts`: while none has, a
/// bind or a finalize need not take the lock.
static NUL_TEXT_STATEMENTS: AtomicUsize = AtomicUsize::new(0);

static NEXT_CONN: AtomicUsize = AtomicUsize::new(1);

/// One process's recorder behind a plain pthread mutex, so that `fork(2)` can take it
/// (`pthread_atfork`, registered as this library loads): a program that forks while
/// another of its threads is recording a statement would otherwise hand its child a lock
/// held by a thread the child does not have, and the child's first statement would wait
/// for it forever. The forking thread holds the lock across the fork, so the recorder is
/// whole on both sides, and each side lets go of it after.
struct Shared {
    lock: UnsafeCell<libc::pthread_mutex_t>,
    slot: UnsafeCell<Option<Recorder>>,
}

// SAFETY: `slot` is only reached through a `Guard`, which holds `lock`.
unsafe impl Sync for Shared {}

static RECORDER: Shared = Shared {
    lock: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
    slot: UnsafeCell::new(None),
};

/// The recorder, locked for as long as this lives.
struct Guard(());

impl Deref for Guard {
    type Target = Option<Recorder>;
    fn deref(&self) -> &Option<Recorder> {
        // SAFETY: the lock is held (see `recorder`).
        unsafe { &*RECORDER.slot.get() }
    }
}

impl DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Option<Recorder> {
        // SAFETY: the lock is held, by this guard only.
        unsafe { &mut *RECORDER.slot.get() }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: locked by this thread in `recorder`.
        unsafe { libc::pthread_mutex_unlock(RECORDER.lock.get()) };
    }
}

fn recorder() -> Guard {
    // SAFETY: a valid mutex; nothing here locks it twice in one thread (the program's own
    // hooks, which may run SQL, are called after the guard is dropped).
    unsafe { libc::pthread_mutex_lock(RECORDER.lock.get()) };
    Guard(())
}

extern "C" fn before_fork() {
    // SAFETY: as in `recorder`; released by one of the two below, in each process.
    unsafe { libc::pthread_mutex_lock(RECORDER.lock.get()) };
}

extern "C" fn after_fork_in_parent() {
    // SAFETY: locked by this thread in `before_fork`.
    unsafe { libc::pthread_mutex_unlock(RECORDER.lock.get()) };
}

extern "C" fn after_fork_in_child() {
    // The child has one thread, this one; a fresh mutex owes nothing to the parent's.
    // SAFETY: no other thread exists to hold or wait on it.
    unsafe { *RECORDER.lock.get() = libc::PTHREAD_MUTEX_INITIALIZER };
}

/// Run as the library loads (before the program's `main`, so before its threads): the
/// fork handlers, and the directory read once while no other thread can hold the
/// environment's lock.
extern "C" fn on_load() {
    // SAFETY: plain function pointers with the signature pthread_atfork expects.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        )
    };
    let _ = log_dir();
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

/// The directory to write into, from `SQLWA_RECORD_DIR`; None: record nothing.
fn log_dir() -> Option<&'static CStr> {
    static DIR: OnceLock<Option<CString>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("SQLWA_RECORD_DIR")?;
        CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str())).ok()
    })
    .as_deref()
}

/// `CLOCK_MONOTONIC` in nanoseconds.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A symbol of the libsqlite3 the program loaded: the next definition after this library
/// (`RTLD_NEXT`), or, when the library came in by `dlopen` without `RTLD_GLOBAL` (Python's
/// `_sqlite3` module loads it so) and is out of that search, the loaded object that defines it.
fn real_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: name is NUL-terminated; dlsym only reads it.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !next.is_null() && !is_own(next) {
        return next;
    }
    defined_elsewhere(name)
}

/// Whether an address lies in this library (so a lookup found the interposer itself).
fn is_own(addr: *mut c_void) -> bool {
    let mut own: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut found: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills the Dl_info it is given.
    unsafe {
        libc::dladdr(sqlite3_open_v2 as *const c_void, &mut own);
        libc::dladdr(addr, &mut found);
    }
    own.dli_fbase == found.dli_fbase
}

/// The first loaded object other than this library that defines `name`.
fn defined_elsewhere(name: &CStr) -> *mut c_void {
    struct Search<'a> {
        name: &'a CStr,
        found: *mut c_void,
    }
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        let search = &mut *(data as *mut Search);
        let path = (*info).dlpi_name;
        if path.is_null() || *path == 0 {
            return 0; // the main program: its handle would search the global scope
        }
        let handle = libc::dlopen(path, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return 0;
        }
        let addr = libc::dlsym(handle, search.name.as_ptr());
        libc::dlclose(handle);
        if !addr.is_null() && !is_own(addr) {
            search.found = addr;
            return 1;
        }
        0
    }
    let mut search = Search {
        name,
        found: std::ptr::null_mut(),
    };
    // SAFETY: the callback only reads the loader's entries and writes `search`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut search as *mut Search as *mut c_void) };
    search.found
}

/// The real functions, resolved at the first call (libsqlite3 is loaded by then: only code
/// linked to it calls these). None when this libsqlite3 lacks one (older than 3.14).
fn sqlite() -> Option<&'static Sqlite> {
    static REAL: OnceLock<Option<Sqlite>> = OnceLock::new();
    REAL.get_or_init(|| {
        macro_rules! get {
            ($name:literal) => {{
                let addr =
                    real_symbol(CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()).ok()?);
                if addr.is_null() {
                    return None;
                }
                // SAFETY: the symbol is the libsqlite3 function of that name, whose C
                // signature (sqlite3.h) the field's type declares.
                unsafe { as_function(addr) }
            }};
        }
        Some(Sqlite {
            open: get!("sqlite3_open"),
            open_v2: get!("sqlite3_open_v2"),
            open16: get!("sqlite3_open16"),
            trace_v2: get!("sqlite3_trace_v2"),
            expanded_sql: get!("sqlite3_expanded_sql"),
            sql: get!("sqlite3_sql"),
            free: get!("sqlite3_free"),
            db_filename: get!("sqlite3_db_filename"),
            libversion: get!("sqlite3_libversion"),
            bind_text: get!("sqlite3_bind_text"),
            bind_text64: get!("sqlite3_bind_text64"),
            bind_parameter_index: get!("sqlite3_bind_parameter_index"),
            finalize: get!("sqlite3_finalize"),
        })
    })
    .as_ref()
}

/// Append `text` to `line` as a JSON string (bytes that are not UTF-8 become U+FFFD).
fn push_json_string(line: &mut String, text: &[u8]) {
    line.push('"');
    for ch in String::from_utf8_lossy(text).chars() {
        match ch {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            '\t' => line.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(line, "\\u{:04x}", c as u32);
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

/// The bytes of a C string, empty for NULL.
unsafe fn c_bytes<'a>(text: *const c_char) -> &'a [u8] {
    if text.is_null() {
        b""
    } else {
        CStr::from_ptr(text).to_bytes()
    }
}

impl Recorder {
    /// The process's recorder, (re)opening its file when this is a new process (fork).
    fn for_this_process(slot: &mut Option<Recorder>) -> Option<&mut Recorder> {
        let dir = log_dir()?;
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() };
        if slot.as_ref().is_none_or(|r| r.pid != pid) {
            let inherited = slot.take();
            if let Some(old) = &inherited {
                // SAFETY: the parent's descriptor, inherited over fork; the child's own now.
                unsafe { libc::close(old.fd) };
            }
            let mut path = dir.to_bytes().to_vec();
            path.extend_from_slice(format!("/{pid}.jsonl\0").as_bytes());
            // SAFETY: path is NUL-terminated.
            let fd = unsafe {
                libc::open(
                    path.as_ptr() as *const c_char,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
                    0o600,
                )
            };
            *slot = Some(Recorder {
                pid,
                fd,
                running: HashMap::new(),
                next_seq: 1,
                // A child keeps its parent's connections (numbers and hooks) as it keeps
                // their handles; their numbers are per process in the files.
                conns: inherited
                    .as_ref()
                    .map(|r| r.conns.clone())
                    .unwrap_or_default(),
                nul_texts: inherited
                    .as_ref()
                    .map(|r| r.nul_texts.clone())
                    .unwrap_or_default(),
                hooks: inherited.map(|r| r.hooks).unwrap_or_default(),
                warned: false,
            });
        }
        slot.as_mut()
    }

    /// Write one line, whole, in one `write(2)` (retried only for what a signal cut short).
    fn write_line(&mut self, mut line: String) {
        line.push('\n');
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            // SAFETY: rest is a valid buffer of rest.len() bytes.
            let n = unsafe { libc::write(self.fd, rest.as_ptr() as *const c_void, rest.len()) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                if !self.warned {
                    self.warned = true;
                    // one write(2) to stderr: std's eprintln takes a lock of its own, which
                    // a fork in another thread could leave held in a child
                    let said = format!(
                        "sqlwa record: cannot write the SQL log: {}\n",
                        std::io::Error::last_os_error()
                    );
                    // SAFETY: said is a valid buffer of said.len() bytes.
                    unsafe { libc::write(2, said.as_ptr() as *const c_void, said.len()) };
                }
                return;
            }
            rest = &rest[n as usize..];
        }
    }

    fn head(&self, ev: &str, conn: usize) -> String {
        format!("{{\"ev\":\"{ev}\",\"pid\":{},\"conn\":{conn}", self.pid)
    }
}

/// Record an opened connection and hook it; returns SQLite's result unchanged.
unsafe fn hook_new_connection(real: &Sqlite, rc: c_int, db: *mut *mut c_void) -> c_int {
    if rc != 0 || db.is_null() || (*db).is_null() {
        return rc;
    }
    let handle = *db;
    let mut slot = recorder();
    let Some(rec) = Recorder::for_this_process(&mut slot) else {
        return rc;
    };
    let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    rec.conns.insert(handle as usize, conn);
    let mut line = rec.head("open", conn);
    let _ = write!(line, ",\"t\":{},\"db\":", now_ns());
    push_json_string(
        &mut line,
        c_bytes((real.db_filename)(handle, c"main".as_ptr())),
    );
    line.push_str(",\"sqlite_version\":");
    push_json_string(&mut line, c_bytes((real.libversion)()));
    line.push('}');
    rec.write_line(line);
    (real.trace_v2)(handle, RECORDED, Some(on_trace), conn as *mut c_void);
    rc
}

/// The trace hook on every connection: record the event, then call the program's own.
unsafe extern "C" fn on_trace(
    event: c_uint,
    ctx: *mut c_void,
    p: *mut c_void,
    x: *mut c_void,
) -> c_int {
    let Some(real) = sqlite() else { return 0 };
    let conn = ctx as usize;
    let hooks = {
        let mut slot = recorder();
        let Some(rec) = Recorder::for_this_process(&mut slot) else {
            return 0;
        };
        match event {
            TRACE_STMT => record_start(rec, real, conn, p, x as *const c_char),
            TRACE_PROFILE => record_end(rec, conn, p),
            TRACE_CLOSE => {
                let mut line = rec.head("close", conn);
                let _ = write!(line, ",\"t\":{}}}", now_ns());
                rec.write_line(line);
                rec.conns.remove(&(p as usize));
            }
            _ => {}
        }
        let hooks = rec.hooks.get(&conn).copied().unwrap_or_default();
        if event == TRACE_CLOSE {
            rec.hooks.remove(&conn);
        }
        hooks
    };
    call_program_hooks(real, &hooks, event, p, x);
    0
}

/// A statement starts: its text as run (a trigger's comment as SQLite gives it).
unsafe fn record_start(
    rec: &mut Recorder,
    real: &Sqlite,
    conn: usize,
    stmt: *mut c_void,
    text: *const c_char,
) {
    let given = c_bytes(text);
    // SQLite reports a trigger program (and a statement nested in another's run) with its
    // text as an SQL comment, "-- TRIGGER name" (sqlite3_trace_v2 docs; vdbe.c OP_Init).
    let trigger = given.starts_with(b"--");
    let seq = rec.next_seq;
    rec.next_seq += 1;
    let t = now_ns();
    let mut line = rec.head("sql", conn);
    let _ = write!(line, ",\"t\":{t},\"seq\":{seq},\"sql\":");
    if trigger {
        push_json_string(&mut line, given);
    } else {
        rec.running.insert(stmt as usize, (seq, t));
        let expanded = (real.expanded_sql)(stmt);
        if expanded.is_null() {
            // NULL when out of memory or longer than SQLITE_LIMIT_LENGTH: the text as written
            push_json_string(
                &mut line,
                if given.is_empty() {
                    c_bytes((real.sql)(stmt))
                } else {
                    given
                },
            );
            line.push_str(",\"unexpanded\":true");
        } else {
            let whole = rec.nul_texts.get(&(stmt as usize)).and_then(|texts| {
                let index_of = |name: &[u8]| {
                    CString::new(name)
                        .map_or(0, |name| (real.bind_parameter_index)(stmt, name.as_ptr()))
                };
                expand::with_whole_texts(
                    c_bytes((real.sql)(stmt)),
                    c_bytes(expanded),
                    texts,
                    index_of,
                )
            });
            push_json_string(&mut line, whole.as_deref().unwrap_or(c_bytes(expanded)));
            (real.free)(expanded as *mut c_void);
        }
    }
    let _ = write!(line, ",\"trigger\":{trigger}}}");
    rec.write_line(line);
}

/// A statement ends: its duration, paired with its start by `seq`.
fn record_end(rec: &mut Recorder, conn: usize, stmt: *mut c_void) {
    if let Some((seq, start)) = rec.running.remove(&(stmt as usize)) {
        let mut line = rec.head("dur", conn);
        let _ = write!(
            line,
            ",\"seq\":{seq},\"dur\":{}}}",
            now_ns().saturating_sub(start)
        );
        rec.write_line(line);
    }
}

/// Call what the program registered itself, with the arguments SQLite would have given it.
unsafe fn call_program_hooks(
    real: &Sqlite,
    hooks: &ProgramHooks,
    event: c_uint,
    p: *mut c_void,
    x: *mut c_void,
) {
    if let Some((mask, callback, ctx)) = hooks.v2 {
        if mask & event != 0 {
            callback(event, ctx as *mut c_void, p, x);
        }
    }
    if let (Some((callback, ctx)), TRACE_STMT) = (hooks.trace, event) {
        // sqlite3_trace's callback gets the text with bound values expanded
        let text = x as *const c_char;
        if c_bytes(text).starts_with(b"--") {
            callback(ctx as *mut c_void, text);
        } else {
            let expanded = (real.expanded_sql)(p);
            callback(
                ctx as *mut c_void,
                if expanded.is_null() { text } else { expanded },
            );
            (real.free)(expanded as *mut c_void);
        }
    }
    if let (Some((callback, ctx)), TRACE_PROFILE) = (hooks.profile, event) {
        callback(ctx as *mut c_void, (real.sql)(p), *(x as *const u64));
    }
}

/// Change the program's own hooks on a connection this library watches; false when it
/// does not watch it (then the real function is called as is).
fn set_program_hooks(db: *mut c_void, change: impl FnOnce(&mut ProgramHooks)) -> bool {
    let mut slot = recorder();
    let Some(rec) = Recorder::for_this_process(&mut slot) else {
        return false;
    };
    let Some(&conn) = rec.conns.get(&(db as usize)) else {
        return false;
    };
    change(rec.hooks.entry(conn).or_default());
    true
}

/// The program's `sqlite3_open`: the real one, then the connection is recorded.
///
/// # Safety
/// As `sqlite3_open` (sqlite3.h): `filename` a NUL-terminated string, `db` writable.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_open(filename: *const c_char, db: *mut *mut c_void) -> c_int {
    let Some(real) = sqlite() else { return 1 }; // SQLITE_ERROR: no libsqlite3 to forward to
    let rc = (real.open)(filename, db);
    hook_new_connection(real, rc, db)
}

/// The program's `sqlite3_open_v2`: the real one, then the connection is recorded.
///
/// # Safety
/// As `sqlite3_open_v2` (sqlite3.h).
#[no_mangle]
pub unsafe extern "C" fn sqlite3_open_v2(
    filename: *const c_char,
    db: *mut *mut c_void,
    flags: c_int,
    vfs: *const c_char,
) -> c_int {
    let Some(real) = sqlite() else { return 1 };
    let rc = (real.open_v2)(filename, db, flags, vfs);
    hook_new_connection(real, rc, db)
}

/// The program's `sqlite3_open16`: the real one, then the connection is recorded.
///
/// # Safety
/// As `sqlite3_open16` (sqlite3.h): `filename` a NUL-terminated UTF-16 string.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_open16(filename: *const c_void, db: *mut *mut c_void) -> c_int {
    let Some(real) = sqlite() else { return 1 };
    let rc = (real.open16)(filename, db);
    hook_new_connection(real, rc, db)
}

/// The program's own `sqlite3_trace_v2`: kept and called from the recording hook (which
/// stays registered) on a recorded connection; SQLite's on any other.
///
/// # Safety
/// As `sqlite3_trace_v2` (sqlite3.h).
#[no_mangle]
pub unsafe extern "C" fn sqlite3_trace_v2(
    db: *mut c_void,
    mask: c_uint,
    callback: Option<TraceCallback>,
    ctx: *mut c_void,
) -> c_int {
    let Some(real) = sqlite() else { return 1 };
    let program = callback
        .filter(|_| mask != 0)
        .map(|cb| (mask, cb, ctx as usize));
    // Each call cancels the connection's earlier sqlite3_trace and sqlite3_trace_v2 (docs).
    let watched = set_program_hooks(db, |hooks| {
        hooks.v2 = program;
        hooks.trace = None;
    });
    if !watched {
        return (real.trace_v2)(db, mask, callback, ctx);
    }
    let extra = program.map_or(0, |(mask, _, _)| mask);
    let conn = recorder()
        .as_ref()
        .and_then(|r| r.conns.get(&(db as usize)).copied())
        .unwrap_or(0);
    (real.trace_v2)(db, RECORDED | extra, Some(on_trace), conn as *mut c_void)
}

/// The program's own legacy `sqlite3_trace`: kept and called from the recording hook.
///
/// # Safety
/// As `sqlite3_trace` (sqlite3.h).
#[no_mangle]
pub unsafe extern "C" fn sqlite3_trace(
    db: *mut c_void,
    callback: Option<LegacyTrace>,
    ctx: *mut c_void,
) -> *mut c_void {
    let mut previous = 0;
    let watched = set_program_hooks(db, |hooks| {
        previous = hooks.trace.map_or(0, |(_, ctx)| ctx);
        hooks.trace = callback.map(|cb| (cb, ctx as usize));
        hooks.v2 = None;
    });
    if !watched {
        if let Some(real) = legacy::<
            unsafe extern "C" fn(*mut c_void, Option<LegacyTrace>, *mut c_void) -> *mut c_void,
        >(c"sqlite3_trace")
        {
            return real(db, callback, ctx);
        }
    }
    previous as *mut c_void
}

/// The program's own legacy `sqlite3_profile`: kept and called from the recording hook.
///
/// # Safety
/// As `sqlite3_profile` (sqlite3.h).
#[no_mangle]
pub unsafe extern "C" fn sqlite3_profile(
    db: *mut c_void,
    callback: Option<LegacyProfile>,
    ctx: *mut c_void,
) -> *mut c_void {
    let mut previous = 0;
    let watched = set_program_hooks(db, |hooks| {
        previous = hooks.profile.map_or(0, |(_, ctx)| ctx);
        hooks.profile = callback.map(|cb| (cb, ctx as usize));
    });
    if !watched {
        if let Some(real) = legacy::<
            unsafe extern "C" fn(*mut c_void, Option<LegacyProfile>, *mut c_void) -> *mut c_void,
        >(c"sqlite3_profile")
        {
            return real(db, callback, ctx);
        }
    }
    previous as *mut c_void
}

/// A symbol's address as the function pointer type `F` (the caller vouches for the type).
unsafe fn as_function<F: Copy>(addr: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    std::mem::transmute_copy::<*mut c_void, F>(&addr)
}

/// A deprecated function of the real libsqlite3 (absent where SQLITE_OMIT_DEPRECATED).
unsafe fn legacy<F: Copy>(name: &CStr) -> Option<F> {
    let addr = real_symbol(name);
    (!addr.is_null()).then(|| as_function(addr))
}

/// The bytes of a TEXT the program binds, when they hold a NUL within the length it gave
/// (SQLite keeps such a text whole; its expansion does not).
unsafe fn text_with_nul(text: *const c_char, len: Option<usize>) -> Option<Vec<u8>> {
    let len = len.filter(|&n| n > 0 && !text.is_null())?;
    let bytes = std::slice::from_raw_parts(text as *const u8, len);
    bytes.contains(&0).then(|| bytes.to_vec())
}

/// After a bind to parameter `i` of `stmt`: remember a text with a NUL, forget what was
/// remembered for the parameter otherwise.
fn note_bound(stmt: *mut c_void, i: c_int, nul_text: Option<Vec<u8>>) {
    if nul_text.is_none() && NUL_TEXT_STATEMENTS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut slot = recorder();
    let Some(rec) = Recorder::for_this_process(&mut slot) else {
        return;
    };
    match nul_text {
        Some(text) => {
            let texts = rec.nul_texts.entry(stmt as usize).or_insert_with(|| {
                NUL_TEXT_STATEMENTS.fetch_add(1, Ordering::Relaxed);
                HashMap::new()
            });
            texts.insert(i, text);
        }
        None => {
            if let Some(texts) = rec.nul_texts.get_mut(&(stmt as usize)) {
                texts.remove(&i);
                if texts.is_empty() {
                    rec.nul_texts.remove(&(stmt as usize));
                    NUL_TEXT_STATEMENTS.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The program's `sqlite3_bind_text`: the real one; a text with a NUL is remembered.
///
/// # Safety
/// As `sqlite3_bind_text` (sqlite3.h); `destructor` is passed on as given.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_bind_text(
    stmt: *mut c_void,
    i: c_int,
    text: *const c_char,
    len: c_int,
    destructor: *mut c_void,
) -> c_int {
    let Some(real) = sqlite() else { return 1 };
    // copied first: SQLite may call the destructor on `text` before it returns
    let nul_text = text_with_nul(text, usize::try_from(len).ok());
    let rc = (real.bind_text)(stmt, i, text, len, destructor);
    if rc == 0 && log_dir().is_some() {
        note_bound(stmt, i, nul_text);
    }
    rc
}

/// The program's `sqlite3_bind_text64`: as [`sqlite3_bind_text`], for UTF-8 texts.
///
/// # Safety
/// As `sqlite3_bind_text64` (sqlite3.h).
#[no_mangle]
pub unsafe extern "C" fn sqlite3_bind_text64(
    stmt: *mut c_void,
    i: c_int,
    text: *const c_char,
    len: u64,
    destructor: *mut c_void,
    encoding: u8,
) -> c_int {
    let Some(real) = sqlite() else { return 1 };
    const SQLITE_UTF8: u8 = 1;
    let utf8 = encoding == SQLITE_UTF8;
    let nul_text = if utf8 {
        text_with_nul(text, usize::try_from(len).ok())
    } else {
        None
    };
    let rc = (real.bind_text64)(stmt, i, text, len, destructor, encoding);
    if rc == 0 && log_dir().is_some() {
        note_bound(stmt, i, nul_text);
    }
    rc
}

/// The program's `sqlite3_finalize`: what was remembered of the statement is forgotten
/// (its address may be a new statement's next).
///
/// # Safety
/// As `sqlite3_finalize` (sqlite3.h).
#[no_mangle]
pub unsafe extern "C" fn sqlite3_finalize(stmt: *mut c_void) -> c_int {
    let Some(real) = sqlite() else { return 1 };
    if NUL_TEXT_STATEMENTS.load(Ordering::Relaxed) > 0 {
        let mut slot = recorder();
        if let Some(rec) = Recorder::for_this_process(&mut slot) {
            if rec.nul_texts.remove(&(stmt as usize)).is_some() {
                NUL_TEXT_STATEMENTS.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    (real.finalize)(stmt)
}
