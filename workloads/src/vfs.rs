//! The counting VFS shim: the only module with `unsafe` code.
//!
//! It also confines a run (`RunFiles`): its xOpen and xDelete refuse any named file but
//! the run's database files, their `-journal`, `-wal` and `-shm`, and the files of the
//! snapshots' directory, whatever statement asked; temporary files (xOpen without a name)
//! are SQLite's own. Every connection of a run is opened through it; with counting off
//! (`RunSettings::count_vfs` false) it only confines: xOpen hands back the real file
//! with its own io methods, so no I/O call passes through the shim.
//!
//! Like SQLite's `ext/misc/vfsstat.c`, it registers a new `sqlite3_vfs` whose xOpen
//! calls the default (unix) VFS's xOpen into the tail of a larger `sqlite3_file`
//! (`ShimFile` + the real file) and installs wrapping io methods of the same iVersion.
//! Every wrapper counts, optionally writes markers, and forwards to the real method.
//!
//! What is counted, per `FileKind` (kind from the xOpen flags; for xDelete from the
//! name suffix):
//! - xWrite / xRead: calls and bytes (for xRead the bytes read: a read past the end of a
//!   file counts what the file had); xSync: calls, and how many had SQLITE_SYNC_FULL
//!   and SQLITE_SYNC_DATAONLY; xTruncate, xDelete and (successful) xOpen: calls.
//! - shm (WAL index): xShmMap calls are counted as `shm.open_calls` (each maps one
//!   32 KiB region), xShmUnmap with deleteFlag as `shm.delete_calls`. Stores into the
//!   mapping, xShmLock and xShmBarrier do no file I/O and are not counted; the -shm
//!   file is never synced. xFetch/xUnfetch (mmap reads) are forwarded, not counted.
//!
//! Extents (`RunSettings::map_extents`): after each successful xSync, and before each
//! xTruncate and xDelete, the shim writes the file's physical extents (FIEMAP, without
//! FIEMAP_FLAG_SYNC so it never forces writeback) as an `extents` marker, so the analyzer
//! can map block ranges to files even for journals that live for one commit. The file is
//! reopened read-only by name for this (xDelete only has the name). Under a FUSE layer
//! (`RunSettings::extents_from`) the name is that of the lower file the daemon serves it
//! from: FUSE answers no FIEMAP, and the lower file is where the blocks are.
//!
//! Counters are relaxed atomics bumped with a plain load + store (no locked instruction,
//! no locks on the hot path): each registered shim serves the one connection of one run,
//! used by one thread at a time, so there is a single writer; other threads may read. The state they live in is
//! reached from `pAppData`, kept alive by the `CountingVfs` guard that unregisters the
//! VFS on drop; the engine drops the connection before the guard.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use rusqlite::ffi;

use crate::markers::{sync_full_dataonly, MarkerSink};
use crate::{EngineError, FileKind, KindCounts, VfsCounts};

// ---------------------------------------------------------------------------------------
// Safe part: shared counters and markers.

/// Single-writer increment (see the module doc): cheaper than fetch_add's locked add.
trait Bump {
    fn bump(&self, n: u64);
}

impl Bump for AtomicU64 {
    #[inline]
    fn bump(&self, n: u64) {
        self.store(self.load(Relaxed).wrapping_add(n), Relaxed);
    }
}

#[derive(Default)]
struct AtomicKindCounts {
    write_calls: AtomicU64,
    write_bytes: AtomicU64,
    read_calls: AtomicU64,
    read_bytes: AtomicU64,
    sync_calls: AtomicU64,
    sync_full: AtomicU64,
    sync_dataonly: AtomicU64,
    truncate_calls: AtomicU64,
    delete_calls: AtomicU64,
    open_calls: AtomicU64,
}

impl AtomicKindCounts {
    fn snapshot(&self) -> KindCounts {
        KindCounts {
            write_calls: self.write_calls.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            read_calls: self.read_calls.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            sync_calls: self.sync_calls.load(Relaxed),
            sync_full: self.sync_full.load(Relaxed),
            sync_dataonly: self.sync_dataonly.load(Relaxed),
            truncate_calls: self.truncate_calls.load(Relaxed),
            delete_calls: self.delete_calls.load(Relaxed),
            open_calls: self.open_calls.load(Relaxed),
        }
    }
}

/// Per-run state the shim shares with the engine: counters, the marker sink and the
/// index of the transaction in progress (-1 outside transactions).
pub(crate) struct VfsShared {
    counts: [AtomicKindCounts; 6],
    current_txn: AtomicI64,
    markers: Option<Arc<MarkerSink>>,
    marker_errors: AtomicU64,
    /// `extents` markers on: asked for and there is a sink to write them to
    map_extents: bool,
    /// where a file's extents are taken when not from the file itself (a FUSE layer)
    lower: Option<LowerDir>,
    /// the files SQLite may open (None: any, the tests' shims)
    run_files: Option<RunFiles>,
    /// why the shim last refused to open or delete a file (SQLite only sees an error code)
    refused: Mutex<Option<String>>,
}

/// The files a run's SQL may open: its database files with their `-journal`, `-wal` and
/// `-shm`, and any file directly in the snapshots' directory. Each is known by every name
/// SQLite may give it: as given, made absolute, and with its directory's symbolic links
/// resolved (SQLite's unix VFS resolves them in xFullPathname).
#[derive(Clone, Debug, Default)]
pub(crate) struct RunFiles {
    databases: Vec<Vec<u8>>,
    dirs: Vec<Vec<u8>>,
}

/// The files SQLite keeps beside a database: the rollback journal, the WAL, its index.
const COMPANIONS: [&[u8]; 3] = [b"-journal", b"-wal", b"-shm"];

impl RunFiles {
    /// The run's `databases` (existing files) and, when given, the snapshots' directory.
    pub fn new(databases: &[PathBuf], snapshot_dir: Option<&Path>) -> RunFiles {
        let names = |path: &Path| -> Vec<Vec<u8>> {
            let mut forms = vec![path.to_path_buf()];
            forms.extend(std::path::absolute(path).ok());
            forms.extend(std::fs::canonicalize(path).ok());
            let mut bytes: Vec<Vec<u8>> = (forms.iter())
                .map(|p| p.as_os_str().as_bytes().to_vec())
                .collect();
            bytes.sort();
            bytes.dedup();
            bytes
        };
        RunFiles {
            databases: databases.iter().flat_map(|p| names(p)).collect(),
            dirs: snapshot_dir.map(names).unwrap_or_default(),
        }
    }

    /// Whether SQLite may open or delete the file it names `name` (a full pathname).
    pub fn allows(&self, name: &[u8]) -> bool {
        let of_a_database = self.databases.iter().any(|db| {
            name.strip_prefix(db.as_slice())
                .is_some_and(|rest| rest.is_empty() || COMPANIONS.contains(&rest))
        });
        let in_a_dir = self.dirs.iter().any(|dir| {
            name.strip_prefix(dir.as_slice())
                .and_then(|rest| rest.strip_prefix(b"/"))
                .is_some_and(|file| !file.is_empty() && !file.contains(&b'/'))
        });
        of_a_database || in_a_dir
    }
}

/// The directory a FUSE layer mirrors at the run's directory: FIEMAP through the FUSE
/// mount fails, so a file of the run is mapped as the file of the same name there, which
/// holds its blocks.
#[derive(Clone, Debug)]
pub(crate) struct LowerDir {
    /// the run's directory as given and as SQLite names it (symbolic links resolved)
    upper: Vec<PathBuf>,
    lower: PathBuf,
}

impl LowerDir {
    /// Files under `upper` (an existing directory) are mapped under `lower`.
    pub fn new(upper: &Path, lower: &Path) -> LowerDir {
        let mut names = vec![upper.to_path_buf()];
        names.extend(std::fs::canonicalize(upper).ok().filter(|c| c != upper));
        LowerDir {
            upper: names,
            lower: lower.to_path_buf(),
        }
    }

    /// Where `path`'s blocks are to be found: the lower file for one under the run's
    /// directory, `path` itself for any other (a temporary file elsewhere).
    pub fn path_of(&self, path: &Path) -> PathBuf {
        (self.upper.iter())
            .find_map(|upper| path.strip_prefix(upper).ok())
            .map_or_else(|| path.to_path_buf(), |rest| self.lower.join(rest))
    }
}

impl VfsShared {
    /// Counters only: no `extents` markers (the tests').
    #[cfg(test)]
    pub fn new(markers: Option<Arc<MarkerSink>>) -> Arc<VfsShared> {
        VfsShared::with_extents(markers, false)
    }

    /// Like `new`; `map_extents` turns on the `extents` markers (see the module doc).
    pub fn with_extents(markers: Option<Arc<MarkerSink>>, map_extents: bool) -> Arc<VfsShared> {
        VfsShared::with_extents_from(markers, map_extents, None)
    }

    /// Like `with_extents`, the extents of the run's files taken from `lower` when given.
    pub fn with_extents_from(
        markers: Option<Arc<MarkerSink>>,
        map_extents: bool,
        lower: Option<LowerDir>,
    ) -> Arc<VfsShared> {
        VfsShared::confined(markers, map_extents, lower, None)
    }

    /// Like `with_extents_from`; SQLite may open only `run_files` (when given).
    pub fn confined(
        markers: Option<Arc<MarkerSink>>,
        map_extents: bool,
        lower: Option<LowerDir>,
        run_files: Option<RunFiles>,
    ) -> Arc<VfsShared> {
        Arc::new(VfsShared {
            counts: Default::default(),
            current_txn: AtomicI64::new(-1),
            map_extents: map_extents && markers.is_some(),
            markers,
            marker_errors: AtomicU64::new(0),
            lower,
            run_files,
            refused: Mutex::new(None),
        })
    }

    /// Why the shim refused a file since the last call, if it did.
    pub fn take_refusal(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Whether SQLite may `verb` ("open", "delete") the file `name` (NULL, a temporary
    /// file of SQLite's own: always); a refusal is kept for [`Self::take_refusal`].
    unsafe fn may(&self, verb: &str, name: *const c_char) -> bool {
        let Some(files) = &self.run_files else {
            return true;
        };
        if name.is_null() {
            return true;
        }
        let name = CStr::from_ptr(name).to_bytes();
        if files.allows(name) {
            return true;
        }
        let why = format!(
            "SQLite was made to {verb} the file '{}', outside the run's directory: \
             a replayed log or a scenario works on the run's own database files only",
            String::from_utf8_lossy(name)
        );
        let mut slot = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(why);
        false
    }

    /// Writes an `extents` marker for `path` (when extents mapping is on), taken from its
    /// lower file when there is a `LowerDir`. A file that does not exist (yet, or any
    /// more) gets no marker; other FIEMAP failures are written as `ranges=error:<errno>`.
    pub fn map_extents(&self, kind: FileKind, at: &str, path: &Path) {
        if !self.map_extents {
            return;
        }
        let mapped = match &self.lower {
            Some(lower) => lower.path_of(path),
            None => path.to_path_buf(),
        };
        let ranges: Result<Vec<(u64, u64)>, i32> = match file_extents(&mapped) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => Err(e.raw_os_error().unwrap_or(0)),
            Ok(r) => Ok(r.iter().map(|e| (e.sector, e.sectors)).collect()),
        };
        self.mark(|m, txn| m.extents(txn, kind, at, ranges.as_deref().map_err(|e| *e)));
    }

    unsafe fn map_extents_of_name(&self, kind: FileKind, at: &str, name: *const c_char) {
        if self.map_extents && !name.is_null() {
            let name = CStr::from_ptr(name).to_string_lossy();
            self.map_extents(kind, at, Path::new(name.as_ref()));
        }
    }

    /// The counters now; per-commit counts are the difference of two snapshots.
    pub fn snapshot(&self) -> VfsCounts {
        let mut out = VfsCounts::default();
        for kind in FileKind::ALL {
            *out.get_mut(kind) = self.counts[kind.index()].snapshot();
        }
        out
    }

    pub fn set_current_txn(&self, index: i64) {
        self.current_txn.store(index, Relaxed);
    }

    /// Marker lines the shim failed to write (it cannot report errors through SQLite).
    pub fn marker_errors(&self) -> u64 {
        self.marker_errors.load(Relaxed)
    }

    fn of(&self, kind: FileKind) -> &AtomicKindCounts {
        &self.counts[kind.index()]
    }

    fn mark(&self, write: impl FnOnce(&MarkerSink, i64) -> std::io::Result<()>) {
        if let Some(sink) = &self.markers {
            if write(sink, self.current_txn.load(Relaxed)).is_err() {
                self.marker_errors.bump(1);
            }
        }
    }
}

/// The files of the database at `db_path` that `extents` markers cover, with their kinds:
/// the database and the rollback journal, WAL and -shm files beside it.
pub(crate) fn database_files(db_path: &Path) -> [(FileKind, PathBuf); 4] {
    let with_suffix = |suffix: &str| {
        let mut name = db_path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [
        (FileKind::Db, db_path.to_path_buf()),
        (FileKind::Journal, with_suffix("-journal")),
        (FileKind::Wal, with_suffix("-wal")),
        (FileKind::Shm, with_suffix("-shm")),
    ]
}

/// Appends `extents` markers (`i=-1`, `at`) for the database at `db_path` and those of its
/// journal, WAL and -shm files that exist to the marker file `markers`. For the caller
/// that has written the files back after the run (`at=syncfs`): data still in delayed
/// allocation at the engine's `end`/`close` mapping has blocks only then.
pub fn map_database_files(markers: &Path, db_path: &Path, at: &str) -> Result<(), EngineError> {
    // `at` is one word of a space-separated marker line
    if at.is_empty() || !at.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(EngineError::InvalidSetting {
            name: "at".into(),
            value: at.into(),
            allowed: Vec::new(),
        });
    }
    let shared = VfsShared::with_extents(Some(Arc::new(MarkerSink::open(markers)?)), true);
    for (kind, path) in database_files(db_path) {
        shared.map_extents(kind, at, &path);
    }
    match shared.marker_errors() {
        0 => Ok(()),
        n => Err(EngineError::io(
            markers,
            format!("{n} extents marker lines could not be written"),
        )),
    }
}

// ---------------------------------------------------------------------------------------
// FIEMAP: a file's physical extents.

/// One physical extent of a file in 512-byte sectors of the filesystem's device. On a
/// single-device filesystem without a partition table (the lab's loop device) these are
/// device sectors; on btrfs they are btrfs *logical* addresses (see MARKERS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// the first sector
    pub sector: u64,
    /// how many sectors
    pub sectors: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

const FIEMAP_BATCH: usize = 32;

/// `struct fiemap` followed by room for `FIEMAP_BATCH` extents.
#[repr(C)]
struct FiemapRequest {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [FiemapExtent; FIEMAP_BATCH],
}

/// _IOWR('f', 11, struct fiemap): the size in the number is the 32-byte header's.
const FS_IOC_FIEMAP: rustix::ioctl::Opcode = 0xC020_660B;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// UNKNOWN (no block yet: delalloc), DELALLOC, DATA_INLINE (in the inode/metadata).
const FIEMAP_EXTENT_NO_BLOCK: u32 = 0x2 | 0x4 | 0x200;

/// The allocated extents of `path`, in file order. Extents without a block yet
/// (delayed allocation) or stored inline are left out.
pub fn file_extents(path: &Path) -> std::io::Result<Vec<Extent>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut req = FiemapRequest {
            start,
            length: u64::MAX - start,
            flags: 0,
            mapped_extents: 0,
            extent_count: FIEMAP_BATCH as u32,
            reserved: 0,
            extents: [FiemapExtent::default(); FIEMAP_BATCH],
        };
        // SAFETY: FS_IOC_FIEMAP reads the header and writes at most `extent_count`
        // extents into the array that follows it, all inside `req`.
        unsafe {
            rustix::ioctl::ioctl(
                &fd,
                rustix::ioctl::Updater::<FS_IOC_FIEMAP, FiemapRequest>::new(&mut req),
            )?;
        }
        let got = &req.extents[..(req.mapped_extents as usize).min(FIEMAP_BATCH)];
        out.extend(
            got.iter()
                .filter(|e| e.flags & FIEMAP_EXTENT_NO_BLOCK == 0)
                .map(|e| Extent {
                    sector: e.physical / 512,
                    sectors: e.length.div_ceil(512),
                }),
        );
        match got.last() {
            Some(last) if last.flags & FIEMAP_EXTENT_LAST == 0 && got.len() == FIEMAP_BATCH => {
                start = last.logical + last.length;
            }
            _ => return Ok(out),
        }
    }
}

/// The file kind SQLite announces in xOpen's flags.
pub(crate) fn kind_from_open_flags(flags: c_int) -> FileKind {
    const TEMP: c_int = ffi::SQLITE_OPEN_TEMP_DB
        | ffi::SQLITE_OPEN_TEMP_JOURNAL
        | ffi::SQLITE_OPEN_SUBJOURNAL
        | ffi::SQLITE_OPEN_TRANSIENT_DB;
    if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
        FileKind::Db
    } else if flags & ffi::SQLITE_OPEN_MAIN_JOURNAL != 0 {
        FileKind::Journal
    } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
        FileKind::Wal
    } else if flags & TEMP != 0 {
        FileKind::Temp
    } else {
        FileKind::Other
    }
}

/// The file kind of a name passed to xDelete, from SQLite's suffixes.
pub(crate) fn kind_from_name(name: &str) -> FileKind {
    if name.ends_with("-journal") {
        FileKind::Journal
    } else if name.ends_with("-wal") {
        FileKind::Wal
    } else if name.ends_with("-shm") {
        FileKind::Shm
    } else {
        FileKind::Other
    }
}

// ---------------------------------------------------------------------------------------
// Registration.

/// What `pAppData` of the registered VFS points to.
struct ShimContext {
    real: *mut ffi::sqlite3_vfs,
    shared: Arc<VfsShared>,
    /// whether files are wrapped to count their calls (else only confined)
    count: bool,
}

/// A registered counting VFS; unregisters itself on drop. Every connection opened with
/// `name()` must be closed before this is dropped.
pub(crate) struct CountingVfs {
    /// from Box::into_raw: SQLite links it into its VFS list (writes pNext), so Rust
    /// holds no reference to it while registered; freed in Drop after unregistering.
    vfs: *mut ffi::sqlite3_vfs,
    name: String,
    _c_name: CString,
    _context: Box<ShimContext>,
}

impl CountingVfs {
    /// Registers a new counting shim around the default VFS under a process-unique name.
    #[cfg(test)]
    pub fn register(shared: Arc<VfsShared>) -> Result<CountingVfs, EngineError> {
        CountingVfs::register_counting(shared, true)
    }

    /// As `register`; with `count` false the shim only confines (see the module doc).
    pub fn register_counting(
        shared: Arc<VfsShared>,
        count: bool,
    ) -> Result<CountingVfs, EngineError> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "sqlwa-count-{}-{}",
            std::process::id(),
            NEXT_ID.fetch_add(1, Relaxed)
        );
        let c_name = CString::new(name.clone()).expect("no NUL in generated name");
        // SAFETY: sqlite3_vfs_find(NULL) returns the default VFS, a static owned by
        // SQLite that lives for the whole process (initialising SQLite if needed).
        let real = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
        if real.is_null() {
            return Err(EngineError::sql("sqlite3_vfs_find(NULL)", "no default VFS"));
        }
        let context = Box::new(ShimContext {
            real,
            shared,
            count,
        });
        // SAFETY: `real` is valid (above); we only read two integer fields.
        let (real_sz, max_path) = unsafe { ((*real).szOsFile, (*real).mxPathname) };
        let vfs = Box::new(ffi::sqlite3_vfs {
            iVersion: 2,
            szOsFile: std::mem::size_of::<ShimFile>() as c_int + real_sz,
            mxPathname: max_path,
            pNext: ptr::null_mut(),
            zName: c_name.as_ptr(),
            pAppData: &*context as *const ShimContext as *mut c_void,
            xOpen: Some(shim_open),
            xDelete: Some(shim_delete),
            xAccess: Some(shim_access),
            xFullPathname: Some(shim_full_pathname),
            xDlOpen: Some(shim_dl_open),
            xDlError: Some(shim_dl_error),
            xDlSym: Some(shim_dl_sym),
            xDlClose: Some(shim_dl_close),
            xRandomness: Some(shim_randomness),
            xSleep: Some(shim_sleep),
            xCurrentTime: Some(shim_current_time),
            xGetLastError: Some(shim_get_last_error),
            xCurrentTimeInt64: Some(shim_current_time_int64),
            xSetSystemCall: None,
            xGetSystemCall: None,
            xNextSystemCall: None,
        });
        let vfs = Box::into_raw(vfs);
        // SAFETY: the struct, its name and its context are heap allocations owned by the
        // returned guard, which unregisters before freeing them.
        let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
        if rc != ffi::SQLITE_OK {
            // SAFETY: not registered, so SQLite holds no pointer to it.
            drop(unsafe { Box::from_raw(vfs) });
            return Err(EngineError::sql(
                "sqlite3_vfs_register",
                format!("error code {rc}"),
            ));
        }
        Ok(CountingVfs {
            vfs,
            name,
            _c_name: c_name,
            _context: context,
        })
    }

    /// The name to pass to `Connection::open_with_flags_and_vfs`.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for CountingVfs {
    fn drop(&mut self) {
        // SAFETY: registered in `register`; no connection uses it any more (see type doc),
        // and once unregistered SQLite keeps no pointer to it.
        unsafe {
            ffi::sqlite3_vfs_unregister(self.vfs);
            drop(Box::from_raw(self.vfs));
        }
    }
}

// ---------------------------------------------------------------------------------------
// VFS methods. All of them are called by SQLite with the `sqlite3_vfs` we registered.

/// SAFETY (for all helpers below): `vfs` is our registered VFS, so pAppData is the
/// live `ShimContext` owned by its `CountingVfs`.
unsafe fn context<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a ShimContext {
    &*((*vfs).pAppData as *const ShimContext)
}

unsafe fn real_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    context(vfs).real
}

/// Our file object: SQLite allocates `szOsFile` bytes; the real VFS's file follows it.
#[repr(C)]
struct ShimFile {
    base: ffi::sqlite3_file,
    kind: FileKind,
    context: *const ShimContext,
    /// xOpen's name (NULL for temp files); SQLite keeps it valid until xClose.
    name: *const c_char,
}

/// The real file living right after our header (8-byte aligned: `ShimFile` is).
unsafe fn real_file(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    (file as *mut u8).add(std::mem::size_of::<ShimFile>()) as *mut ffi::sqlite3_file
}

unsafe extern "C" fn shim_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let ctx = context(vfs);
    (*file).pMethods = ptr::null();
    if !ctx.shared.may("open", name) {
        return ffi::SQLITE_PERM;
    }
    if !ctx.count {
        // the real file in our place, with its own methods: SQLite calls them directly
        return ((*ctx.real).xOpen.unwrap())(ctx.real, name, file, flags, out_flags);
    }
    let shim = file as *mut ShimFile;
    let real = real_file(file);
    (*shim).base.pMethods = ptr::null();
    (*real).pMethods = ptr::null();
    let rc = ((*ctx.real).xOpen.unwrap())(ctx.real, name, real, flags, out_flags);
    // SQLite calls xClose iff pMethods is set, even after a failed open: mirror the real file.
    if (*real).pMethods.is_null() {
        return rc;
    }
    let kind = kind_from_open_flags(flags);
    (*shim).kind = kind;
    (*shim).context = ctx;
    (*shim).name = name;
    (*shim).base.pMethods = io_methods_for((*(*real).pMethods).iVersion);
    if rc == ffi::SQLITE_OK {
        ctx.shared.of(kind).open_calls.bump(1);
    }
    rc
}

unsafe extern "C" fn shim_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    let ctx = context(vfs);
    if !ctx.shared.may("delete", name) {
        return ffi::SQLITE_IOERR_DELETE;
    }
    if !ctx.count {
        return ((*ctx.real).xDelete.unwrap())(ctx.real, name, sync_dir);
    }
    let kind = if name.is_null() {
        FileKind::Other
    } else {
        kind_from_name(&CStr::from_ptr(name).to_string_lossy())
    };
    ctx.shared.of(kind).delete_calls.bump(1);
    // the blocks it held are freed by the unlink: map them while they exist
    ctx.shared.map_extents_of_name(kind, "delete", name);
    ctx.shared.mark(|m, txn| m.op_begin("delete", txn, kind));
    let rc = ((*ctx.real).xDelete.unwrap())(ctx.real, name, sync_dir);
    ctx.shared.mark(|m, txn| m.op_end("delete", txn, kind, rc));
    rc
}

unsafe extern "C" fn shim_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    let real = real_vfs(vfs);
    ((*real).xAccess.unwrap())(real, name, flags, out)
}

unsafe extern "C" fn shim_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    let real = real_vfs(vfs);
    ((*real).xFullPathname.unwrap())(real, name, n, out)
}

unsafe extern "C" fn shim_dl_open(vfs: *mut ffi::sqlite3_vfs, name: *const c_char) -> *mut c_void {
    let real = real_vfs(vfs);
    ((*real).xDlOpen.unwrap())(real, name)
}

unsafe extern "C" fn shim_dl_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, msg: *mut c_char) {
    let real = real_vfs(vfs);
    ((*real).xDlError.unwrap())(real, n, msg)
}

type DlSym = Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)>;

unsafe extern "C" fn shim_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    handle: *mut c_void,
    sym: *const c_char,
) -> DlSym {
    let real = real_vfs(vfs);
    ((*real).xDlSym.unwrap())(real, handle, sym)
}

unsafe extern "C" fn shim_dl_close(vfs: *mut ffi::sqlite3_vfs, handle: *mut c_void) {
    let real = real_vfs(vfs);
    ((*real).xDlClose.unwrap())(real, handle)
}

unsafe extern "C" fn shim_randomness(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    let real = real_vfs(vfs);
    ((*real).xRandomness.unwrap())(real, n, out)
}

unsafe extern "C" fn shim_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    let real = real_vfs(vfs);
    ((*real).xSleep.unwrap())(real, micros)
}

unsafe extern "C" fn shim_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    let real = real_vfs(vfs);
    ((*real).xCurrentTime.unwrap())(real, out)
}

unsafe extern "C" fn shim_get_last_error(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    let real = real_vfs(vfs);
    ((*real).xGetLastError.unwrap())(real, n, out)
}

unsafe extern "C" fn shim_current_time_int64(
    vfs: *mut ffi::sqlite3_vfs,
    out: *mut ffi::sqlite3_int64,
) -> c_int {
    let real = real_vfs(vfs);
    match (*real).xCurrentTimeInt64 {
        Some(f) if (*real).iVersion >= 2 => f(real, out),
        _ => ffi::SQLITE_ERROR,
    }
}

// ---------------------------------------------------------------------------------------
// io methods. SQLite calls them only on files our xOpen set up (pMethods non-null), so
// `parts` may assume a valid ShimFile header, context and real file with real methods.

unsafe fn parts<'a>(
    file: *mut ffi::sqlite3_file,
) -> (
    &'a ShimFile,
    *mut ffi::sqlite3_file,
    &'a ffi::sqlite3_io_methods,
) {
    let shim = &*(file as *const ShimFile);
    let real = real_file(file);
    (shim, real, &*(*real).pMethods)
}

unsafe fn shared<'a>(shim: &ShimFile) -> &'a VfsShared {
    &(*shim.context).shared
}

unsafe extern "C" fn io_close(file: *mut ffi::sqlite3_file) -> c_int {
    let (_, real, m) = parts(file);
    (m.xClose.unwrap())(real)
}

unsafe extern "C" fn io_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    let (shim, real, m) = parts(file);
    let rc = (m.xRead.unwrap())(real, buf, amt, off);
    let read = match rc {
        ffi::SQLITE_OK => amt as u64,
        // Past the end (SQLite checks a journal for a next header there): the bytes the
        // file had, as the pread returned them; SQLite zero-fills the rest.
        ffi::SQLITE_IOERR_SHORT_READ => {
            let mut size: ffi::sqlite3_int64 = 0;
            if (m.xFileSize.unwrap())(real, &mut size) == ffi::SQLITE_OK {
                (size - off).clamp(0, amt as i64) as u64
            } else {
                0
            }
        }
        _ => 0,
    };
    let c = shared(shim).of(shim.kind);
    c.read_calls.bump(1);
    c.read_bytes.bump(read);
    rc
}

unsafe extern "C" fn io_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    let (shim, real, m) = parts(file);
    let c = shared(shim).of(shim.kind);
    c.write_calls.bump(1);
    c.write_bytes.bump(amt as u64);
    (m.xWrite.unwrap())(real, buf, amt, off)
}

unsafe extern "C" fn io_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    let (shim, real, m) = parts(file);
    let (s, kind) = (shared(shim), shim.kind);
    s.of(kind).truncate_calls.bump(1);
    s.map_extents_of_name(kind, "trunc", shim.name);
    s.mark(|mk, txn| mk.op_begin("trunc", txn, kind));
    let rc = (m.xTruncate.unwrap())(real, size);
    s.mark(|mk, txn| mk.op_end("trunc", txn, kind, rc));
    rc
}

unsafe extern "C" fn io_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let (shim, real, m) = parts(file);
    let (s, kind) = (shared(shim), shim.kind);
    let c = s.of(kind);
    let (full, dataonly) = sync_full_dataonly(flags);
    c.sync_calls.bump(1);
    c.sync_full.bump(u64::from(full));
    c.sync_dataonly.bump(u64::from(dataonly));
    s.mark(|mk, txn| mk.sync_begin(txn, kind, flags));
    let rc = (m.xSync.unwrap())(real, flags);
    s.mark(|mk, txn| mk.op_end("sync", txn, kind, rc));
    if rc == ffi::SQLITE_OK {
        // synced data has its blocks allocated (no more delalloc): they are on record now
        s.map_extents_of_name(kind, "sync", shim.name);
    }
    rc
}

unsafe extern "C" fn io_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    let (_, real, m) = parts(file);
    (m.xFileSize.unwrap())(real, size)
}

unsafe extern "C" fn io_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (_, real, m) = parts(file);
    (m.xLock.unwrap())(real, level)
}

unsafe extern "C" fn io_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (_, real, m) = parts(file);
    (m.xUnlock.unwrap())(real, level)
}

unsafe extern "C" fn io_check_reserved_lock(
    file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    let (_, real, m) = parts(file);
    (m.xCheckReservedLock.unwrap())(real, out)
}

unsafe extern "C" fn io_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    let (_, real, m) = parts(file);
    (m.xFileControl.unwrap())(real, op, arg)
}

unsafe extern "C" fn io_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let (_, real, m) = parts(file);
    (m.xSectorSize.unwrap())(real)
}

unsafe extern "C" fn io_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let (_, real, m) = parts(file);
    (m.xDeviceCharacteristics.unwrap())(real)
}

unsafe extern "C" fn io_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let (shim, real, m) = parts(file);
    shared(shim).of(FileKind::Shm).open_calls.bump(1);
    (m.xShmMap.unwrap())(real, region, size, extend, out)
}

unsafe extern "C" fn io_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    let (_, real, m) = parts(file);
    (m.xShmLock.unwrap())(real, offset, n, flags)
}

unsafe extern "C" fn io_shm_barrier(file: *mut ffi::sqlite3_file) {
    let (_, real, m) = parts(file);
    (m.xShmBarrier.unwrap())(real)
}

unsafe extern "C" fn io_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    let (shim, real, m) = parts(file);
    if delete != 0 {
        shared(shim).of(FileKind::Shm).delete_calls.bump(1);
    }
    (m.xShmUnmap.unwrap())(real, delete)
}

unsafe extern "C" fn io_fetch(
    file: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    amt: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let (_, real, m) = parts(file);
    (m.xFetch.unwrap())(real, off, amt, out)
}

unsafe extern "C" fn io_unfetch(
    file: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    let (_, real, m) = parts(file);
    (m.xUnfetch.unwrap())(real, off, p)
}

/// Our io methods with the real file's iVersion, so SQLite sees exactly the optional
/// methods (shm: v2, fetch: v3) the real file has.
const fn io_methods(version: c_int) -> ffi::sqlite3_io_methods {
    ffi::sqlite3_io_methods {
        iVersion: version,
        xClose: Some(io_close),
        xRead: Some(io_read),
        xWrite: Some(io_write),
        xTruncate: Some(io_truncate),
        xSync: Some(io_sync),
        xFileSize: Some(io_file_size),
        xLock: Some(io_lock),
        xUnlock: Some(io_unlock),
        xCheckReservedLock: Some(io_check_reserved_lock),
        xFileControl: Some(io_file_control),
        xSectorSize: Some(io_sector_size),
        xDeviceCharacteristics: Some(io_device_characteristics),
        xShmMap: if version >= 2 { Some(io_shm_map) } else { None },
        xShmLock: if version >= 2 {
            Some(io_shm_lock)
        } else {
            None
        },
        xShmBarrier: if version >= 2 {
            Some(io_shm_barrier)
        } else {
            None
        },
        xShmUnmap: if version >= 2 {
            Some(io_shm_unmap)
        } else {
            None
        },
        xFetch: if version >= 3 { Some(io_fetch) } else { None },
        xUnfetch: if version >= 3 { Some(io_unfetch) } else { None },
    }
}

static IO_METHODS_V1: ffi::sqlite3_io_methods = io_methods(1);
static IO_METHODS_V2: ffi::sqlite3_io_methods = io_methods(2);
static IO_METHODS_V3: ffi::sqlite3_io_methods = io_methods(3);

fn io_methods_for(version: c_int) -> *const ffi::sqlite3_io_methods {
    match version {
        ..=1 => &IO_METHODS_V1,
        2 => &IO_METHODS_V2,
        _ => &IO_METHODS_V3,
    }
}

#[cfg(test)]
mod lower_dir_tests {
    use super::*;

    #[test]
    fn a_file_of_the_run_is_the_lower_file_of_the_same_name_and_others_stay() {
        let lower = LowerDir {
            upper: vec![PathBuf::from("/lab/fuse"), PathBuf::from("/real/fuse")],
            lower: PathBuf::from("/lab/mnt"),
        };
        let at = |p: &str| lower.path_of(Path::new(p));
        assert_eq!(
            at("/lab/fuse/x.db-journal"),
            PathBuf::from("/lab/mnt/x.db-journal")
        );
        assert_eq!(at("/real/fuse/x.db"), PathBuf::from("/lab/mnt/x.db"));
        assert_eq!(at("/var/tmp/etilqs_1"), PathBuf::from("/var/tmp/etilqs_1"));
        assert_eq!(
            at("/lab/fusex/y"),
            PathBuf::from("/lab/fusex/y"),
            "a component, not a prefix"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};

    fn open(vfs: &CountingVfs, path: &std::path::Path) -> Connection {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        Connection::open_with_flags_and_vfs(path, flags, vfs.name()).unwrap()
    }

    #[test]
    fn kinds_from_flags_and_names() {
        assert_eq!(
            kind_from_open_flags(ffi::SQLITE_OPEN_MAIN_DB | ffi::SQLITE_OPEN_CREATE),
            FileKind::Db
        );
        assert_eq!(
            kind_from_open_flags(ffi::SQLITE_OPEN_MAIN_JOURNAL),
            FileKind::Journal
        );
        assert_eq!(kind_from_open_flags(ffi::SQLITE_OPEN_WAL), FileKind::Wal);
        assert_eq!(
            kind_from_open_flags(ffi::SQLITE_OPEN_SUBJOURNAL),
            FileKind::Temp
        );
        assert_eq!(
            kind_from_open_flags(ffi::SQLITE_OPEN_TEMP_DB),
            FileKind::Temp
        );
        assert_eq!(
            kind_from_open_flags(ffi::SQLITE_OPEN_SUPER_JOURNAL),
            FileKind::Other
        );
        assert_eq!(kind_from_name("/x/a.db-journal"), FileKind::Journal);
        assert_eq!(kind_from_name("/x/a.db-wal"), FileKind::Wal);
        assert_eq!(kind_from_name("/x/a.db-shm"), FileKind::Shm);
        assert_eq!(kind_from_name("/x/a.db"), FileKind::Other);
    }

    #[test]
    fn counts_writes_syncs_and_deletes_per_kind() {
        let dir = tempfile::tempdir().unwrap();
        let shared = VfsShared::new(None);
        let vfs = CountingVfs::register(shared.clone()).unwrap();
        let conn = open(&vfs, &dir.path().join("t.db"));
        conn.execute_batch(
            "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL; CREATE TABLE t(x)",
        )
        .unwrap();
        let before = shared.snapshot();
        conn.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let d = shared.snapshot().since(&before);
        assert_eq!(d.journal.sync_calls, 2, "{d:?}");
        assert_eq!(d.db.sync_calls, 1, "{d:?}");
        assert_eq!(d.journal.delete_calls, 1, "{d:?}");
        assert_eq!(d.journal.open_calls, 1, "{d:?}");
        assert!(
            d.db.write_calls >= 2 && d.db.write_bytes >= 2 * 4096,
            "{d:?}"
        );
        drop(conn);
    }

    #[test]
    fn wal_mode_counts_shm_maps_and_wal_frames() {
        let dir = tempfile::tempdir().unwrap();
        let shared = VfsShared::new(None);
        let vfs = CountingVfs::register(shared.clone()).unwrap();
        let conn = open(&vfs, &dir.path().join("w.db"));
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t(x)")
            .unwrap();
        conn.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let before = shared.snapshot();
        conn.execute("INSERT INTO t VALUES (2)", []).unwrap();
        let d = shared.snapshot().since(&before);
        assert_eq!(d.wal.sync_calls, 1, "{d:?}");
        assert_eq!(d.db.sync_calls + d.journal.sync_calls, 0, "{d:?}");
        assert!(shared.snapshot().shm.open_calls >= 1);
        drop(conn);
    }

    #[test]
    fn failed_open_is_reported_not_crashed() {
        let shared = VfsShared::new(None);
        let vfs = CountingVfs::register(shared.clone()).unwrap();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let result =
            Connection::open_with_flags_and_vfs("/nonexistent-dir/x.db", flags, vfs.name());
        assert!(result.is_err());
        assert_eq!(shared.snapshot().db.open_calls, 0);
    }

    #[test]
    fn temp_files_count_as_temp() {
        let dir = tempfile::tempdir().unwrap();
        let shared = VfsShared::new(None);
        let vfs = CountingVfs::register(shared.clone()).unwrap();
        let conn = open(&vfs, &dir.path().join("t.db"));
        // a temp table in a file-backed temp database, large enough to spill from cache
        conn.execute_batch(
            "PRAGMA temp_store=FILE; CREATE TEMP TABLE big(x); PRAGMA temp.cache_size=2;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000)
             INSERT INTO big SELECT randomblob(200) FROM n;",
        )
        .unwrap();
        let counts = shared.snapshot();
        assert!(
            counts.temp.open_calls >= 1 && counts.temp.write_calls > 0,
            "{counts:?}"
        );
        drop(conn);
    }

    #[test]
    fn markers_carry_the_current_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let marker_path = dir.path().join("markers");
        let sink = Arc::new(MarkerSink::open(&marker_path).unwrap());
        let shared = VfsShared::new(Some(sink));
        let vfs = CountingVfs::register(shared.clone()).unwrap();
        let conn = open(&vfs, &dir.path().join("m.db"));
        conn.execute_batch(
            "PRAGMA journal_mode=TRUNCATE; PRAGMA synchronous=NORMAL; CREATE TABLE t(x)",
        )
        .unwrap();
        shared.set_current_txn(7);
        conn.execute("INSERT INTO t VALUES (1)", []).unwrap();
        shared.set_current_txn(-1);
        drop(conn);
        let text = std::fs::read_to_string(&marker_path).unwrap();
        let in_txn: Vec<&str> = text.lines().filter(|l| l.contains(" i=7 ")).collect();
        let kinds: Vec<String> = in_txn
            .iter()
            .map(|l| l.split(' ').take(4).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            kinds,
            [
                "sqlwa sync_begin i=7 kind=journal",
                "sqlwa sync_end i=7 kind=journal",
                "sqlwa sync_begin i=7 kind=db",
                "sqlwa sync_end i=7 kind=db",
                "sqlwa trunc_begin i=7 kind=journal",
                "sqlwa trunc_end i=7 kind=journal",
            ]
        );
        assert_eq!(shared.marker_errors(), 0);
    }

    #[test]
    fn run_files_are_the_databases_their_journals_and_the_snapshots_only() {
        let dir = tempfile::tempdir().unwrap();
        let (db, snaps) = (dir.path().join("run/a.db"), dir.path().join("snaps"));
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        std::fs::create_dir(&snaps).unwrap();
        std::fs::write(&db, b"").unwrap();
        // the directory as SQLite names it: through a symbolic link, resolved
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(db.parent().unwrap(), &link).unwrap();
        let files = RunFiles::new(&[link.join("a.db")], Some(&snaps));
        let real = std::fs::canonicalize(&db).unwrap();
        let allows = |p: &Path| files.allows(p.as_os_str().as_bytes());
        let with = |p: &Path, s: &str| PathBuf::from(format!("{}{s}", p.display()));
        for ok in [
            &real,
            &link.join("a.db"),
            &with(&real, "-journal"),
            &with(&real, "-wal"),
        ] {
            assert!(allows(ok), "{ok:?}");
        }
        assert!(allows(&with(&real, "-shm")) && allows(&snaps.join("txn-3.db")));
        for refused in [
            with(&real, "-journalx"),
            with(&real, "x"),
            real.parent().unwrap().join("b.db"),
            real.parent().unwrap().join("summary.json"),
            dir.path().join("a.db"),
            snaps.join("sub/x.db"),
            snaps.clone(),
            PathBuf::from("/etc/passwd"),
        ] {
            assert!(!allows(&refused), "{refused:?}");
        }
    }

    /// A shim confined to `db`, counting or not, and a connection on `db` through it
    /// whose SQL is not confined otherwise (no authorizer).
    fn confined(db: &Path, count: bool) -> (Arc<VfsShared>, CountingVfs, Connection) {
        std::fs::write(db, b"").unwrap();
        let files = RunFiles::new(&[db.to_path_buf()], None);
        let shared = VfsShared::confined(None, false, None, Some(files));
        let vfs = CountingVfs::register_counting(shared.clone(), count).unwrap();
        let conn = open(&vfs, db);
        (shared, vfs, conn)
    }

    #[test]
    fn the_shim_refuses_any_file_outside_the_run_counting_or_not() {
        for count in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (shared, _vfs, conn) = confined(&dir.path().join("a.db"), count);
            conn.execute_batch(
                "PRAGMA journal_mode=DELETE; CREATE TABLE t (v); INSERT INTO t VALUES (1)",
            )
            .unwrap();
            let victim = dir.path().join("victim.db");
            rusqlite::Connection::open(&victim)
                .unwrap()
                .execute_batch("CREATE TABLE secrets (s); INSERT INTO secrets VALUES ('x')")
                .unwrap();
            let before = std::fs::read(&victim).unwrap();
            let escaped = dir.path().join("ESCAPED.db");
            for sql in [
                format!("ATTACH '{}' AS e", victim.display()),
                format!("VACUUM INTO '{}'", escaped.display()),
            ] {
                let err = conn.execute_batch(&sql).unwrap_err();
                let why = shared
                    .take_refusal()
                    .unwrap_or_else(|| panic!("{sql}: {err}"));
                assert!(why.contains("outside the run's directory"), "{why}");
            }
            assert_eq!(std::fs::read(&victim).unwrap(), before);
            assert!(!escaped.exists() && !dir.path().join("ESCAPED.db-journal").exists());
            // SQLite's own temporary files (no name) stay allowed, and the database works
            conn.execute_batch(
                "PRAGMA temp_store=FILE; CREATE TEMP TABLE big(x); PRAGMA temp.cache_size=2;
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000)
                 INSERT INTO big SELECT randomblob(200) FROM n; VACUUM",
            )
            .unwrap();
            assert_eq!(shared.take_refusal(), None);
            let counted = shared.snapshot();
            assert_eq!(
                counted.db.write_calls > 0 && counted.temp.open_calls > 0,
                count,
                "{counted:?}"
            );
        }
    }

    #[test]
    fn two_shims_coexist_and_unregister() {
        let a = CountingVfs::register(VfsShared::new(None)).unwrap();
        let b = CountingVfs::register(VfsShared::new(None)).unwrap();
        assert_ne!(a.name(), b.name());
        let name = CString::new(a.name()).unwrap();
        drop(a);
        // SAFETY: lookup by name only.
        assert!(unsafe { ffi::sqlite3_vfs_find(name.as_ptr()) }.is_null());
        drop(b);
    }
}
