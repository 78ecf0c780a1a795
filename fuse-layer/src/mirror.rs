//! The filesystem: every operation is the same call on the lower file or directory.
//!
//! fsync stays fsync and fdatasync stays fdatasync (`datasync` picks which), a write is
//! one pwrite at the same offset, a truncate an ftruncate, flush closes a duplicate of
//! the lower descriptor (as close(2) on the lower file would), release closes it.
//!
//! Threads and the trace: the lab starts the daemon under a per-run name (its comm) and
//! traces the syscalls of every thread with that name. fuser names its event-loop thread
//! "fuser-0", so each thread takes the daemon's name back before its first lower call
//! ([`adopt_name`]); a thread started later is traced as well.

use std::cell::Cell;
use std::ffi::{CString, OsStr};
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::negotiate::{self, Negotiated, Requested};
use crate::nodes::{Handle, Handles, Nodes};

/// Only this daemon changes the lower directory while it runs, so the kernel may cache
/// names and attributes; a second keeps `stat` from the shell current enough.
const TTL: Duration = Duration::from_secs(1);

static NAME: OnceLock<CString> = OnceLock::new();
thread_local!(static NAMED: Cell<bool> = const { Cell::new(false) });

/// Give the calling thread the name the daemon was started under (see the module doc).
fn adopt_name() {
    if NAMED.with(Cell::get) {
        return;
    }
    if let Some(name) = NAME.get() {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
    NAMED.with(|named| named.set(true));
}

fn own_name() -> Option<CString> {
    let comm = fs::read_to_string("/proc/self/comm").ok()?;
    CString::new(comm.trim_end_matches('\n')).ok()
}

pub struct Mirror {
    requested: Requested,
    negotiated: Negotiated,
    passthrough: bool,
    nodes: Mutex<Nodes>,
    handles: Mutex<Handles>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn errno(error: io::Error) -> Errno {
    Errno::from(error)
}

/// The configured delay of an operation (none by default): one event-loop thread sleeps,
/// so requests that arrive meanwhile wait their turn, as on a device that serves one at
/// a time.
fn pause(delay: Duration) {
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
}

fn time_of(seconds: i64, nanos: i64) -> SystemTime {
    match u64::try_from(seconds) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, nanos as u32),
        Err(_) => UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs()),
    }
}

fn kind_of(meta: &Metadata) -> FileType {
    FileType::from_std(meta.file_type()).unwrap_or(FileType::RegularFile)
}

fn attr(ino: u64, meta: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: meta.size(),
        blocks: meta.blocks(),
        atime: time_of(meta.atime(), meta.atime_nsec()),
        mtime: time_of(meta.mtime(), meta.mtime_nsec()),
        ctime: time_of(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: kind_of(meta),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: meta.blksize() as u32,
        flags: 0,
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn timespec(time: Option<TimeOrNow>) -> libc::timespec {
    let (tv_sec, tv_nsec) = match time {
        None => (0, libc::UTIME_OMIT),
        Some(TimeOrNow::Now) => (0, libc::UTIME_NOW),
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
            Err(e) => (-(e.duration().as_secs() as i64), 0),
        },
    };
    libc::timespec { tv_sec, tv_nsec }
}

/// utimensat(2) on the lower inode's path (std has no call that can leave one time unchanged).
fn set_times(path: &Path, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) -> io::Result<()> {
    let times = [timespec(atime), timespec(mtime)];
    let path = c_path(path)?;
    // SAFETY: a NUL-terminated path and an array of two timespecs, as utimensat takes.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            times.as_ptr(),
            0, // follow: the path is the /proc/self/fd link to the inode
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let path = c_path(path)?;
    // SAFETY: statvfs fills the zeroed struct it is given.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    if rc == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The lower open(2) for a FUSE open: the kernel's flags, less those it handles itself.
/// With the writeback cache the kernel reads pages it only partly writes, so a
/// write-only open becomes read-write, and it keeps the file size itself (no O_APPEND).
fn open_options(flags: i32, writeback_cache: bool) -> OpenOptions {
    let mut access = flags & libc::O_ACCMODE;
    let mut extra =
        flags & !(libc::O_ACCMODE | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY);
    if writeback_cache {
        if access == libc::O_WRONLY {
            access = libc::O_RDWR;
        }
        extra &= !libc::O_APPEND;
    }
    let mut options = OpenOptions::new();
    options
        .read(access != libc::O_WRONLY)
        .write(access != libc::O_RDONLY)
        .custom_flags(extra);
    options
}

impl Mirror {
    pub fn new(lower: &Path, requested: Requested) -> io::Result<Self> {
        let lower = lower.canonicalize()?;
        if !lower.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        if let Some(name) = own_name() {
            let _ = NAME.set(name);
        }
        // Modes come from the request with its umask applied (create, mkdir).
        // SAFETY: umask only sets the process's file mode creation mask.
        unsafe { libc::umask(0) };
        Ok(Mirror {
            requested,
            negotiated: Negotiated::default(),
            passthrough: false,
            nodes: Mutex::new(Nodes::new(&lower)),
            handles: Mutex::new(Handles::new()),
        })
    }

    pub fn negotiated(&self) -> Negotiated {
        Arc::clone(&self.negotiated)
    }

    fn writeback_cache(&self) -> bool {
        lock(&self.negotiated)
            .as_ref()
            .is_some_and(|f| f.writeback_cache)
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        adopt_name();
        lock(&self.nodes).path(ino.0).ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        adopt_name();
        lock(&self.nodes).child(parent.0, name).ok_or(Errno::ENOENT)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        adopt_name();
        lock(&self.handles).file(fh.0).ok_or(Errno::EBADF)
    }

    /// lstat the lower entry at `path` and give it an inode number (one lookup).
    fn entry(&self, path: PathBuf) -> io::Result<FileAttr> {
        let pin = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(&path)?;
        let meta = pin.metadata()?;
        let ino = lock(&self.nodes).remember(path, (meta.dev(), meta.ino()), Some(pin));
        Ok(attr(ino, &meta))
    }

    /// A path that names the lower inode even once it is deleted: /proc/self/fd/N of its
    /// pin (the lower path for the root, which has none), and the pin, kept while in use.
    fn inode_path(&self, ino: INodeNo) -> Result<(PathBuf, Option<Arc<File>>), Errno> {
        let path = self.path(ino)?;
        match lock(&self.nodes).pin(ino.0) {
            Some(pin) => Ok((
                PathBuf::from(format!("/proc/self/fd/{}", pin.as_raw_fd())),
                Some(pin),
            )),
            None => Ok((path, None)),
        }
    }

    fn metadata(&self, ino: INodeNo) -> io::Result<Metadata> {
        let (path, pin) = self
            .inode_path(ino)
            .map_err(|e| io::Error::from_raw_os_error(e.code()))?;
        match pin {
            Some(pin) => pin.metadata(),
            None => fs::symlink_metadata(path),
        }
    }

    /// A new handle for an open lower file; with passthrough, the inode's backing id
    /// (made from this file if no handle holds one yet).
    fn open_handle(
        &self,
        ino: u64,
        file: File,
        new_backing: impl FnOnce(&File) -> io::Result<fuser::BackingId>,
    ) -> io::Result<(u64, Option<Arc<fuser::BackingId>>)> {
        let mut handles = lock(&self.handles);
        let backing = match (self.passthrough, handles.backing_of(ino)) {
            (false, _) => None,
            (true, Some(shared)) => Some(shared),
            (true, None) => Some(Arc::new(new_backing(&file)?)),
        };
        let fh = handles.insert(Handle {
            file: Arc::new(file),
            ino,
            backing: backing.clone(),
        });
        Ok((fh, backing))
    }

    fn truncate(&self, path: &Path, fh: Option<FileHandle>, size: u64) -> io::Result<()> {
        match fh.and_then(|fh| lock(&self.handles).file(fh.0)) {
            Some(file) => file.set_len(size),
            None => OpenOptions::new().write(true).open(path)?.set_len(size),
        }
    }

    fn apply_setattr(
        &self,
        path: &Path,
        fh: Option<FileHandle>,
        change: &Change,
    ) -> io::Result<()> {
        if let Some(mode) = change.mode {
            fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o7777))?;
        }
        if change.uid.is_some() || change.gid.is_some() {
            std::os::unix::fs::chown(path, change.uid, change.gid)?;
        }
        if let Some(size) = change.size {
            self.truncate(path, fh, size)?;
        }
        if change.atime.is_some() || change.mtime.is_some() {
            set_times(path, change.atime, change.mtime)?;
        }
        Ok(())
    }
}

/// What a SETATTR asks to change.
struct Change {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
}

macro_rules! ok_or_reply {
    ($result:expr, $reply:ident) => {
        match $result {
            Ok(value) => value,
            Err(e) => return $reply.error(e.into()),
        }
    };
}

impl Filesystem for Mirror {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let facts = negotiate::init(&self.requested, config);
        self.passthrough = facts.passthrough_requested;
        *lock(&self.negotiated) = Some(facts);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let path = ok_or_reply!(self.child(parent, name), reply);
        let attr = ok_or_reply!(self.entry(path).map_err(errno), reply);
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        lock(&self.nodes).forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        adopt_name();
        let open = fh.and_then(|fh| lock(&self.handles).file(fh.0));
        let meta = match open {
            Some(file) => file.metadata(),
            None => self.metadata(ino),
        };
        let meta = ok_or_reply!(meta.map_err(errno), reply);
        reply.attr(&TTL, &attr(ino.0, &meta));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (path, _pin) = ok_or_reply!(self.inode_path(ino), reply);
        let change = Change {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        ok_or_reply!(self.apply_setattr(&path, fh, &change).map_err(errno), reply);
        let meta = ok_or_reply!(self.metadata(ino).map_err(errno), reply);
        reply.attr(&TTL, &attr(ino.0, &meta));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let path = ok_or_reply!(self.child(parent, name), reply);
        ok_or_reply!(
            fs::DirBuilder::new()
                .mode(mode & !umask)
                .create(&path)
                .map_err(errno),
            reply
        );
        let attr = ok_or_reply!(self.entry(path).map_err(errno), reply);
        reply.entry(&TTL, &attr, Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let path = ok_or_reply!(self.child(parent, name), reply);
        ok_or_reply!(fs::remove_file(path).map_err(errno), reply);
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let path = ok_or_reply!(self.child(parent, name), reply);
        ok_or_reply!(fs::remove_dir(path).map_err(errno), reply);
        reply.ok();
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL); // RENAME_EXCHANGE/NOREPLACE: nothing SQLite asks for
        }
        let from = ok_or_reply!(self.child(parent, name), reply);
        let to = ok_or_reply!(self.child(newparent, newname), reply);
        ok_or_reply!(fs::rename(&from, &to).map_err(errno), reply);
        lock(&self.nodes).moved(&from, &to);
        reply.ok();
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let path = ok_or_reply!(self.path(ino), reply);
        let file = ok_or_reply!(
            open_options(flags.0, self.writeback_cache())
                .open(&path)
                .map_err(errno),
            reply
        );
        let opened = self.open_handle(ino.0, file, |f| reply.open_backing(f));
        match ok_or_reply!(opened.map_err(errno), reply) {
            (fh, Some(backing)) => {
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &backing)
            }
            (fh, None) => reply.opened(FileHandle(fh), FopenFlags::empty()),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let path = ok_or_reply!(self.child(parent, name), reply);
        let mut options = open_options(flags, self.writeback_cache());
        options.create(true).mode(mode & !umask);
        if flags & libc::O_EXCL != 0 {
            options.create_new(true);
        }
        if flags & libc::O_TRUNC != 0 {
            options.truncate(true);
        }
        let file = ok_or_reply!(options.open(&path).map_err(errno), reply);
        let attr = ok_or_reply!(self.entry(path).map_err(errno), reply);
        let opened = self.open_handle(attr.ino.0, file, |f| reply.open_backing(f));
        match ok_or_reply!(opened.map_err(errno), reply) {
            (fh, Some(b)) => reply.created_passthrough(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
                &b,
            ),
            (fh, None) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file = ok_or_reply!(self.file(fh), reply);
        let mut buffer = vec![0; size as usize];
        let read = ok_or_reply!(file.read_at(&mut buffer, offset).map_err(errno), reply);
        reply.data(&buffer[..read]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let file = ok_or_reply!(self.file(fh), reply);
        pause(self.requested.delay_write);
        let written = ok_or_reply!(file.write_at(data, offset).map_err(errno), reply);
        reply.written(written as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let file = ok_or_reply!(self.file(fh), reply);
        // close(2) of the caller's descriptor, passed on as a close of a duplicate: the
        // lower file stays open for the handle, but the lower filesystem sees a close.
        drop(ok_or_reply!(file.try_clone().map_err(errno), reply));
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        adopt_name();
        lock(&self.handles).remove(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let file = ok_or_reply!(self.file(fh), reply);
        pause(self.requested.delay_flush);
        let synced = if datasync {
            file.sync_data()
        } else {
            file.sync_all()
        };
        ok_or_reply!(synced.map_err(errno), reply);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let path = ok_or_reply!(self.path(ino), reply);
        let dir = ok_or_reply!(File::open(path).map_err(errno), reply);
        let synced = if datasync {
            dir.sync_data()
        } else {
            dir.sync_all()
        };
        ok_or_reply!(synced.map_err(errno), reply);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let path = ok_or_reply!(self.path(ino), reply);
        let listing = ok_or_reply!(fs::read_dir(&path).map_err(errno), reply);
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".").to_os_string()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        let entries = listing.filter_map(Result::ok).filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            Some((meta.ino(), kind_of(&meta), entry.file_name()))
        });
        for (index, (entry_ino, kind, name)) in dots
            .into_iter()
            .chain(entries)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(entry_ino), index as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let path = ok_or_reply!(self.path(ino), reply);
        let st = ok_or_reply!(statvfs(&path).map_err(errno), reply);
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            st.f_bsize as u32,
            st.f_namemax as u32,
            st.f_frsize as u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_keeps_the_callers_access_and_drops_what_the_kernel_does() {
        let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC | libc::O_CREAT;
        let path = std::env::temp_dir().join(format!("sqlwa-fuse-test-{}", std::process::id()));
        fs::write(&path, b"abc").unwrap();
        let file = open_options(flags, false).open(&path).unwrap();
        assert_eq!(
            file.metadata().unwrap().len(),
            3,
            "O_TRUNC is the kernel's (setattr), not the open's"
        );
        let mut buf = [0; 1];
        assert!(
            file.read_at(&mut buf, 0).is_err(),
            "write-only stays write-only"
        );
        let cached = open_options(flags, true).open(&path).unwrap();
        assert_eq!(
            cached.read_at(&mut buf, 0).unwrap(),
            1,
            "the writeback cache reads what it writes"
        );
        fs::remove_file(path).unwrap();
    }

    #[test]
    fn times_before_the_epoch_and_unchanged_times() {
        assert_eq!(time_of(-2, 0), UNIX_EPOCH - Duration::from_secs(2));
        assert_eq!(timespec(None).tv_nsec, libc::UTIME_OMIT);
        assert_eq!(timespec(Some(TimeOrNow::Now)).tv_nsec, libc::UTIME_NOW);
    }
}
