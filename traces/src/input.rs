//! A trace file's bytes, mapped into memory: the binary reader scans the page cache in
//! place, twice, instead of copying it into buffers (the copy was 5-7% of a parse). Reading
//! the file into memory is the fallback where a file cannot be mapped.
use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::ParseError;

/// The smallest page size; a released range is rounded down to a multiple of it.
const PAGE: usize = 4096;

pub struct Input {
    path: PathBuf,
    data: Bytes,
}

enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl Input {
    pub fn open(path: &Path) -> Result<Input, ParseError> {
        let file = open_regular(path)?;
        let data = match map_file(&file) {
            Some(m) => Bytes::Mapped(m),
            None => {
                let mut v = Vec::new();
                (&file)
                    .read_to_end(&mut v)
                    .map_err(|e| ParseError::io(path, e))?;
                Bytes::Read(v)
            }
        };
        Ok(Input {
            path: path.to_path_buf(),
            data,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lets the pages of the first `offset` bytes go (mapped files only): a streamed
    /// read has decoded them, and a long trace's pages would otherwise all stay resident.
    /// Read again, they come back from the page cache.
    pub fn release_before(&self, offset: usize) {
        #[cfg(unix)]
        if let Bytes::Mapped(map) = &self.data {
            let len = offset.min(map.len()) & !(PAGE - 1);
            if len > 0 {
                // SAFETY: MADV_DONTNEED on a read-only shared file mapping only drops the
                // process's page table entries: a later read of these bytes (by any
                // thread) faults the same file pages back in, so every read sees the same
                // bytes and no reference into the map is invalidated.
                let _ = unsafe {
                    map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, 0, len)
                };
            }
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Bytes::Mapped(m) => m,
            Bytes::Read(v) => v,
        }
    }
}

/// `path` opened for reading, once it is known to be a regular file (a symlink is followed):
/// a FIFO would block the open, and `/dev/zero` would be read until memory ran out. The open
/// does not wait (O_NONBLOCK, which changes nothing for a regular file) in case a FIFO took
/// the name after the check, and what was opened is checked again.
pub(crate) fn open_regular(path: &Path) -> Result<File, ParseError> {
    let refuse = |meta: std::io::Result<Metadata>| match meta {
        Ok(m) if m.is_file() => Ok(()),
        // A directory keeps its errno, so callers see the IsADirectoryError they always have.
        Ok(m) if m.is_dir() => Err(std::io::Error::from_raw_os_error(libc::EISDIR)),
        Ok(m) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "is {}, not a regular file (sqlwa reads only regular files)",
                file_kind(&m)
            ),
        )),
        Err(e) => Err(e),
    };
    let opened = refuse(std::fs::metadata(path))
        .and_then(|()| {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
        })
        .and_then(|file| refuse(file.metadata()).map(|()| file));
    opened.map_err(|e| ParseError::io(path, e))
}

fn file_kind(meta: &Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// A regular, non-empty file mapped read-only and advised for sequential reading; `None`
/// where it cannot be mapped (a pipe, a tracefs file that reports no size, a failed map).
pub(crate) fn map_file(file: &std::fs::File) -> Option<memmap2::Mmap> {
    let regular = file.metadata().is_ok_and(|m| m.is_file() && m.len() > 0);
    // SAFETY: the map is read-only and lives as long as its holder. Were the file cut short
    // by another process while mapped, reading past the new end would fault (SIGBUS);
    // tracers only ever append, and bytes appended after the map is made are not read.
    let map = regular
        .then(|| unsafe { memmap2::Mmap::map(file) }.ok())
        .flatten()?;
    // Only a hint (more read-ahead); the data is the same either way.
    let _ = map.advise(memmap2::Advice::Sequential);
    Some(map)
}
