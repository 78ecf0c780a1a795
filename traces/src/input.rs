//! A trace file's bytes, mapped into memory: the binary reader scans the page cache in
//! place, twice, instead of copying it into buffers (the copy was 5-7% of a parse). Reading
//! the file into memory is the fallback where a file cannot be mapped.
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::ParseError;

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
        let len = file.metadata().map_err(|e| ParseError::io(path, e))?.len();
        // SAFETY: the map is read-only and lives as long as `Input`. Were the file cut
        // short by another process while mapped, reading past the new end would fault
        // (SIGBUS); tracers only ever append, and bytes appended after the map is made are
        // not read.
        let mapped = if len > 0 { unsafe { memmap2::Mmap::map(&file) }.ok() } else { None };
        let data = match mapped {
            Some(m) => {
                // Only a hint (more read-ahead); the data is the same either way.
                let _ = m.advise(memmap2::Advice::Sequential);
                Bytes::Mapped(m)
            }
            None => {
                let mut v = Vec::new();
                (&file).read_to_end(&mut v).map_err(|e| ParseError::io(path, e))?;
                Bytes::Read(v)
            }
        };
        Ok(Input { path: path.to_path_buf(), data })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Bytes::Mapped(m) => m,
            Bytes::Read(v) => v,
        }
    }
}
