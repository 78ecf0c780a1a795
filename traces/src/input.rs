//! A trace file's bytes, mapped into memory: the binary reader scans the page cache in
//! place, twice, instead of copying it into buffers (the copy was 5-7% of a parse). Reading
//! the file into memory is the fallback where a file cannot be mapped.
use std::io::Read;
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
        let file = std::fs::File::open(path).map_err(|e| ParseError::io(path, e))?;
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
